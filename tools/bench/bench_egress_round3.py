"""Egress proxy, round three (issue 26): panday beside a minimal asyncio relay, in one run.

    uv run python tools/bench/bench_egress_round3.py [--quick] [--results PATH] [--only PHASE]

The reference is the smallest relay asyncio allows: a ``BufferedProtocol`` per side with
one 1 MiB buffer, a CONNECT head in and ``200`` out, then each read written to the other
side (this script with ``--serve-relay``; no policy, no bounds, no audit). The proxy is the
standalone ``python -m panday_core.egress``. Both run in processes of their own, the
client and the upstream in others (`bench_egress` provides them). Measured side by side,
rounds alternating, the 1-minute load average printed beside every figure:

* throughput: 256 MiB over one tunnel; panday / reference (budget >= 0.95), panday's relay
  CPU s/GiB (budget <= 0.36), and each one's ratio to direct loopback TCP;
* new-tunnel latency: a 1 KiB request and answer on a new tunnel; panday's p50 / the
  reference's p50, both as added over direct (budget <= 1.1);
* churn: one process without credentials connecting and closing as fast as it can on the
  proxy's TCP listener, while an authenticated client makes new-tunnel requests; their
  p99 (budget <= 100 ms);
* the caller's descriptors: a process whose soft and hard ``RLIMIT_NOFILE`` are both
  20,000 opens a T2 Linux session with an allowlist; a jailed command holds 3,000
  connections without credentials through its relay; the caller's ``session.run`` (curl
  through the proxy) must work and its new descriptors must stay below 1,024 (run when
  the tier runs here).

Results are merged into the results file under ``egress_round3``; exit status 1 when a
budget is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_egress as base

_direct = base._direct  # noqa: SLF001  # pyright: ignore[reportPrivateUsage] - the shared bench's helper
_exchange = base._exchange  # noqa: SLF001  # pyright: ignore[reportPrivateUsage] - the shared bench's helper
_load = base._load  # noqa: SLF001  # pyright: ignore[reportPrivateUsage] - the shared bench's helper
_pct = base._pct  # noqa: SLF001  # pyright: ignore[reportPrivateUsage] - the shared bench's helper
_raise_nofile = base._raise_nofile  # noqa: SLF001  # pyright: ignore[reportPrivateUsage] - the shared bench's helper
_timed = base._timed  # noqa: SLF001  # pyright: ignore[reportPrivateUsage] - the shared bench's helper
_upstream = base._upstream  # noqa: SLF001  # pyright: ignore[reportPrivateUsage] - the shared bench's helper

MIB = 1024 * 1024
BUDGET_VS_REFERENCE = 0.95
BUDGET_CPU_S_PER_GIB = 0.36
BUDGET_P50_VS_REFERENCE = 1.1
BUDGET_CHURN_P99_MS = 100.0
FLOOR_HELD = 3000
FLOOR_LIMIT = 20000
SELECT_LIMIT = 1024
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RESULTS = ROOT / "benchmarks" / "results.json"


# --------------------------------------------------------------------- reference relay


class _Side(asyncio.BufferedProtocol):
    """One side of the reference relay: each read is written to the peer's transport."""

    def __init__(self) -> None:
        self.buf = bytearray(MIB)
        self.view = memoryview(self.buf)
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        del sizehint
        return self.view

    def buffer_updated(self, nbytes: int) -> None:
        assert self.peer is not None  # noqa: S101 - set before reading starts
        out = self.peer.transport
        assert out is not None  # noqa: S101 - connected
        out.write(self.view[:nbytes])
        if out.get_write_buffer_size():  # Python 3.12+ may keep a view of the buffer
            self.buf = bytearray(MIB)
            self.view = memoryview(self.buf)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def eof_received(self) -> bool:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        del exc
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Client(_Side):
    """The client side: reads the CONNECT head first, then relays."""

    def __init__(self) -> None:
        super().__init__()
        self.head = b""
        self.relaying = False

    def buffer_updated(self, nbytes: int) -> None:
        if self.relaying:
            super().buffer_updated(nbytes)
            return
        self.head += bytes(self.view[:nbytes])
        if b"\r\n\r\n" in self.head:
            assert self.transport is not None  # noqa: S101 - connected
            self.transport.pause_reading()
            asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        assert self.transport is not None  # noqa: S101 - connected
        host, _, port = self.head.split()[1].decode().rpartition(":")
        up = _Side()
        up.peer, self.peer = self, up
        await asyncio.get_running_loop().create_connection(lambda: up, host, int(port))
        self.relaying = True
        self.transport.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.transport.resume_reading()


async def _serve_relay() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Client, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"export HTTP_PROXY=http://ref:ref@127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


def _reference() -> base.Proxy:
    return base.Proxy([], [sys.executable, __file__, "--serve-relay"])


# ------------------------------------------------------------------------------ phases


def throughput(
    upstream: subprocess.Popen[str], port: int, *, size: int, rounds: int
) -> dict[str, object]:
    proxy, ref = base.Proxy([port]), _reference()
    try:
        load = _load()
        buf = bytearray(MIB)
        rates: dict[str, list[float]] = {"direct": [], "panday": [], "reference": []}
        cpu: dict[str, list[float]] = {"panday": [], "reference": []}
        for i in range(rounds):
            rate, _ = _timed(_direct(port), size, buf, upstream.pid, None)
            rates["direct"].append(rate)
            pair = [("panday", proxy), ("reference", ref)]
            for name, relay in pair if i % 2 == 0 else pair[::-1]:
                rate, spent = _timed(relay.tunnel(port), size, buf, upstream.pid, relay.proc.pid)
                rates[name].append(rate)
                cpu[name].append(spent[2] / (size / (1 << 30)))
        over = [p / r for p, r in zip(rates["panday"], rates["reference"], strict=True)]
        direct = statistics.median(rates["direct"])
        return {
            "bytes": size,
            "rounds": rounds,
            "panday_vs_reference": round(statistics.median(over), 3),
            "round_ratios": [round(x, 3) for x in over],
            "panday_ratio_to_direct": round(statistics.median(rates["panday"]) / direct, 3),
            "reference_ratio_to_direct": round(statistics.median(rates["reference"]) / direct, 3),
            "direct_MBps": round(direct / MIB, 1),
            "relay_cpu_s_per_GiB": {k: round(statistics.median(v), 3) for k, v in cpu.items()},
            "loadavg_1m_before": load,
            "loadavg_1m_after": _load(),
            "budget_vs_reference": BUDGET_VS_REFERENCE,
            "budget_cpu_s_per_GiB": BUDGET_CPU_S_PER_GIB,
        }
    finally:
        proxy.stop()
        ref.stop()


def latency(port: int, count: int) -> dict[str, object]:
    proxy, ref = base.Proxy([port]), _reference()
    try:
        load = _load()
        times: dict[str, list[float]] = {"direct": [], "panday": [], "reference": []}
        for i in range(count):
            order = [("panday", proxy), ("reference", ref)]
            start = time.perf_counter()
            with _direct(port) as sock:
                _exchange(sock)
            times["direct"].append((time.perf_counter() - start) * 1000)
            for name, relay in order if i % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                with relay.tunnel(port) as sock:
                    _exchange(sock)
                times[name].append((time.perf_counter() - start) * 1000)
        p50 = {k: statistics.median(v) for k, v in times.items()}
        added = {k: p50[k] - p50["direct"] for k in ("panday", "reference")}
        return {
            "requests": count,
            "p50_ms": {k: round(v, 3) for k, v in p50.items()},
            "added_p50_ms": {k: round(v, 3) for k, v in added.items()},
            "panday_vs_reference_p50": round(p50["panday"] / p50["reference"], 3),
            "panday_vs_reference_added_p50": round(
                added["panday"] / max(added["reference"], 1e-6), 3
            ),
            "loadavg_1m_before": load,
            "loadavg_1m_after": _load(),
            "budget_vs_reference": BUDGET_P50_VS_REFERENCE,
        }
    finally:
        proxy.stop()
        ref.stop()


CHURNER = r"""
import signal, socket, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
start = time.monotonic()
end = start + seconds
made = 0
while not stop and time.monotonic() < end:
    try:
        s = socket.create_connection((host, port), timeout=1)
        s.close()
        made += 1
    except OSError:
        pass
print(made / (time.monotonic() - start), flush=True)
"""


def churn(port: int, count: int) -> dict[str, object]:
    proxy = base.Proxy([port])
    try:
        load = _load()
        host, pport = proxy.addr
        quiet: list[float] = []
        for _ in range(min(50, count)):
            start = time.perf_counter()
            with proxy.tunnel(port) as sock:
                _exchange(sock)
            quiet.append((time.perf_counter() - start) * 1000)
        seconds = 60.0
        churner = subprocess.Popen(
            [sys.executable, "-c", CHURNER, host, str(pport), str(seconds)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            time.sleep(0.5)  # the churn is under way
            timed: list[float] = []
            errors = 0
            started = time.monotonic()
            for _ in range(count):
                start = time.perf_counter()
                try:
                    with proxy.tunnel(port) as sock:
                        _exchange(sock)
                except (OSError, SystemExit):
                    errors += 1
                timed.append((time.perf_counter() - start) * 1000)
            during = time.monotonic() - started
        finally:
            churner.terminate()
            out, _ = churner.communicate(timeout=30)
        rate = float(out.strip() or 0) if out else 0.0
        return {
            "requests": count,
            "errors": errors,
            "quiet_p99_ms": round(_pct(quiet, 0.99), 3),
            "p50_ms": round(_pct(timed, 0.5), 3),
            "p99_ms": round(_pct(timed, 0.99), 3),
            "max_ms": round(max(timed), 3),
            "churn_per_s": round(rate),
            "measured_s": round(during, 2),
            "loadavg_1m_before": load,
            "loadavg_1m_after": _load(),
            "budget_p99_ms": BUDGET_CHURN_P99_MS,
        }
    finally:
        proxy.stop()


FLOOR_CALLER = r"""
import json, os, resource, select, subprocess, sys, threading, time
limit, held, ws = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
from panday_core.egress import ProxySettings, StaticResolver
from panday_core.egress.testing import HttpUpstream, LoopbackOnly
from panday_core.policy import FsPolicy, NetPolicy, SandboxPolicy
from panday_tier_linux.session import open_session
upstream = HttpUpstream()
port = upstream.port
settings = ProxySettings(resolver=StaticResolver({"allowed.test": ["127.0.0.1"]}),
                         connector=LoopbackOnly(), audit=lambda e: None)
policy = SandboxPolicy(fs=FsPolicy(workspace=ws),
                       net=NetPolicy(allow=("allowed.test", "127.0.0.1"), ports=(port,)))
probe = '''
import os, socket, time
socks = []
for _ in range(%d):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", 3128))
    socks.append(s)
open("ready", "w").write(str(len(socks)))
end = time.monotonic() + 120
while not os.path.exists("go") and time.monotonic() < end:
    time.sleep(0.05)
''' % held
curl = ["/usr/bin/curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
        f"http://allowed.test:{port}/"]
out = {}
ready, go = os.path.join(ws, "ready"), os.path.join(ws, "go")
with open_session(policy, egress=settings) as session:
    worker = threading.Thread(target=lambda: session.run(["/usr/bin/python3", "-I", "-c", probe],
                                                          timeout_ms=180_000), daemon=True)
    worker.start()
    end = time.monotonic() + 120
    while not os.path.exists(ready) and time.monotonic() < end:
        time.sleep(0.05)
    time.sleep(1.0)
    out["held"] = open(ready).read() if os.path.exists(ready) else None
    out["proxy_fds"] = sum(1 for _ in os.listdir("/proc/self/fd"))
    start = time.perf_counter()
    try:
        out["status"] = session.run(curl).stdout.decode()
    except Exception as exc:
        out["status"] = repr(exc)
    out["run_ms"] = round((time.perf_counter() - start) * 1000, 1)
    fd = os.open("/dev/null", os.O_RDONLY)
    out["new_fd"] = fd
    try:
        select.select([fd], [], [], 0)
        out["select"] = "ok"
    except ValueError as exc:
        out["select"] = str(exc)
    os.close(fd)
    open(go, "w").close()
    worker.join(60)
print(json.dumps(out), flush=True)
"""


def floor(workspace: Path) -> dict[str, object]:
    import resource  # noqa: PLC0415 - POSIX only

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard < FLOOR_LIMIT and os.geteuid() != 0:
        return {"skipped": f"hard RLIMIT_NOFILE {hard} < {FLOOR_LIMIT}"}
    load = _load()
    proc = subprocess.run(
        [sys.executable, "-c", FLOOR_CALLER, str(FLOOR_LIMIT), str(FLOOR_HELD), str(workspace)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr[-1500:], "loadavg_1m_before": load}
    out = cast("dict[str, object]", json.loads(lines[-1]))
    out.update(limit=FLOOR_LIMIT, loadavg_1m_before=load, loadavg_1m_after=_load())
    return out


def _tier_runs() -> bool:
    try:
        from panday_tier_linux.probe import unavailable_reason  # noqa: PLC0415 - Linux only
    except ImportError:
        return False
    return unavailable_reason() is None


def judged(entry: dict[str, object]) -> dict[str, bool]:
    """Each budget of the phases that ran: met or not."""
    met: dict[str, bool] = {}
    row = cast("dict[str, object] | None", entry.get("throughput"))
    if row is not None:
        cpu = cast("dict[str, float]", row["relay_cpu_s_per_GiB"])["panday"]
        met["throughput_vs_reference"] = (
            cast("float", row["panday_vs_reference"]) >= BUDGET_VS_REFERENCE
        )
        met["relay_cpu_per_gib"] = cpu <= BUDGET_CPU_S_PER_GIB
    row = cast("dict[str, object] | None", entry.get("latency"))
    if row is not None:
        met["new_tunnel_p50_vs_reference"] = (
            cast("float", row["panday_vs_reference_p50"]) <= BUDGET_P50_VS_REFERENCE
        )
    row = cast("dict[str, object] | None", entry.get("churn"))
    if row is not None:
        met["churn_p99"] = (
            cast("float", row["p99_ms"]) <= BUDGET_CHURN_P99_MS and row["errors"] == 0
        )
    row = cast("dict[str, object] | None", entry.get("floor"))
    if row is not None:
        met["caller_descriptors"] = (
            row.get("status") == "200" and cast("int", row.get("new_fd", 1 << 30)) < SELECT_LIMIT
        )
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description="egress proxy, round three")
    parser.add_argument("--serve-relay", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    args = parser.parse_args()
    if args.serve_relay:
        asyncio.run(_serve_relay())
        return 0
    _raise_nofile()
    phases = args.only or ["throughput", "latency", "churn", "floor"]
    upstream, port = _upstream()
    entry: dict[str, object] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    try:
        if "throughput" in phases:
            size = (64 if args.quick else 256) * MIB
            row = throughput(upstream, port, size=size, rounds=3 if args.quick else 5)
            entry["throughput"] = row
            print(f"egress3: throughput {json.dumps(row)}", flush=True)
        if "latency" in phases:
            row = latency(port, 200 if args.quick else 1000)
            entry["latency"] = row
            print(f"egress3: latency {json.dumps(row)}", flush=True)
        if "churn" in phases:
            row = churn(port, 200 if args.quick else 500)
            entry["churn"] = row
            print(f"egress3: churn {json.dumps(row)}", flush=True)
        if "floor" in phases and _tier_runs():
            import tempfile  # noqa: PLC0415

            with tempfile.TemporaryDirectory(prefix="panday-bench-") as ws:
                row = floor(Path(ws))
            entry["floor"] = row
            print(f"egress3: floor {json.dumps(row)}", flush=True)
    finally:
        upstream.terminate()
        upstream.wait(10)
    # One row per budget in RUN-REPORT.md (tools/report.py reads `budgets_met`).
    met = entry["budgets_met"] = judged(entry)
    ok = all(met.values())
    entry["within_budget"] = ok
    results: dict[str, object] = (
        json.loads(args.results.read_text()) if args.results.exists() else {}
    )
    results["egress_round3"] = entry
    args.results.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"egress3: within budget: {ok}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
