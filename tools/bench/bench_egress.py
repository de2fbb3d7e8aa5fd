"""Egress proxy benchmark: the proxy side by side with direct loopback TCP, in one run.

    uv run python tools/bench/bench_egress.py [--quick] [--results PATH]

Three processes, so that no measurement shares an event loop with what it measures: this
script (the client), an upstream server (this script with ``--serve-upstream``) and the
standalone proxy (``python -m panday_core.egress``). Measured:

* throughput: 256 MiB downloaded over one connection, direct vs through a CONNECT tunnel;
  rounds alternate direct and proxied, and the ratio of the medians is reported;
* added latency: a 1 KiB request and 1 KiB answer on a new connection (plus the CONNECT
  for the proxied case), p50/p99 over many requests, and inside an already open tunnel;
* memory: the proxy's resident set size with 1,000 tunnels open at once (Linux /proc);
* through a T2 Linux jail (when the tier runs here): a client inside a jail of a session
  with ``net.allow``, through the jail's relay and the session's proxy (on its loop thread
  in this process), against the same client outside any jail connecting directly; the
  same 256 MiB download and new-connection latency. The client is the host's
  /usr/bin/python3 on both sides (the jail shows /usr), timing itself, so the jail's
  start-up is not counted; that start-up (a jailed /bin/true with the relay in front,
  against one without) is measured on its own.

Budgets (issue 5): throughput >= 0.7x direct, p50 added latency <= 1 ms, RSS <= 100 MB at
1,000 tunnels; the figures through the jail are recorded beside them. Results are merged
into the results file under the key ``egress``; the exit status is 1 when a budget is
missed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import queue
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import cast

MIB = 1024 * 1024
BUDGET_THROUGHPUT = 0.7
BUDGET_P50_MS = 1.0
BUDGET_RSS_MB = 100.0
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RESULTS = ROOT / "benchmarks" / "results.json"
SMALL = 1024

# --------------------------------------------------------------------------- upstream


class _Upstream(asyncio.Protocol):
    """``N\\n`` → N bytes then close (throughput); any other bytes → 1 KiB answer per
    1 KiB request (latency)."""

    chunk = bytes(1 * MIB)

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.remaining = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None  # noqa: S101 - set in connection_made
        self.buf += data
        if self.buf.startswith(b"N"):
            if b"\n" not in self.buf:
                return
            self.remaining = int(self.buf[1 : self.buf.index(b"\n")])
            self.buf.clear()
            self._pump()
            return
        while len(self.buf) >= SMALL:
            del self.buf[:SMALL]
            self.transport.write(bytes(SMALL))

    def _pump(self) -> None:
        assert self.transport is not None  # noqa: S101 - set in connection_made
        while self.remaining > 0 and not self.transport.is_closing():
            n = min(self.remaining, len(self.chunk))
            self.transport.write(memoryview(self.chunk)[:n])
            self.remaining -= n
            if self.transport.get_write_buffer_size() > 4 * MIB:
                return
        if self.remaining == 0:
            self.transport.close()

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        # Not re-entrantly: closing from inside resume_writing makes Python 3.11 report the
        # connection lost twice.
        if self.remaining:
            asyncio.get_running_loop().call_soon(self._pump)


async def _serve_upstream() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Upstream, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()


# ----------------------------------------------------------------------------- client


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class Proxy:
    def __init__(self, ports: list[int]) -> None:
        argv = [sys.executable, "-m", "panday_core.egress", "--allow", "127.0.0.1"]
        for port in ports:
            argv += ["--port", str(port)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        found: queue.Queue[str] = queue.Queue()
        # Audit lines keep coming on the proxy's stdout: drain them so the pipe never blocks.
        threading.Thread(target=self._drain, args=(found,), daemon=True).start()
        try:
            url = found.get(timeout=30)
        except queue.Empty:
            raise SystemExit("egress bench: the proxy did not start") from None
        creds, _, where = url.removeprefix("http://").rpartition("@")
        host, _, port = where.rpartition(":")
        self.addr = (host, int(port))
        self.auth = base64.b64encode(creds.encode())

    def _drain(self, found: queue.Queue[str]) -> None:
        assert self.proc.stdout is not None  # noqa: S101 - piped
        for line in self.proc.stdout:
            if line.startswith("export HTTP_PROXY="):
                found.put(line.split("=", 1)[1].strip())

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as fh:  # noqa: PTH123 - Linux only
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def tunnel(self, port: int) -> socket.socket:
        sock = socket.create_connection(self.addr)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic ".encode()
            + self.auth
            + b"\r\n\r\n"
        )
        head = b""
        while not head.endswith(b"\r\n\r\n"):  # nothing follows the answer until we send
            data = sock.recv(4096)
            if not data:
                raise SystemExit(f"egress bench: tunnel refused: {head!r}")
            head += data
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"egress bench: tunnel refused: {head!r}")
        return sock

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _direct(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _download(sock: socket.socket, size: int, buf: bytearray) -> float:
    with sock:
        start = time.perf_counter()
        sock.sendall(f"N{size}\n".encode())
        got = 0
        view = memoryview(buf)
        while got < size:
            n = sock.recv_into(view)
            if not n:
                raise SystemExit(f"egress bench: short download ({got} of {size})")
            got += n
        return size / (time.perf_counter() - start)


def _exchange(sock: socket.socket) -> None:
    sock.sendall(bytes(SMALL))
    got = 0
    while got < SMALL:
        data = sock.recv(SMALL - got)
        if not data:
            raise SystemExit("egress bench: short answer")
        got += len(data)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def throughput(proxy: Proxy, port: int, size: int, rounds: int) -> tuple[dict[str, object], bool]:
    buf = bytearray(1 * MIB)
    direct: list[float] = []
    proxied: list[float] = []
    for _ in range(rounds):
        direct.append(_download(_direct(port), size, buf))
        proxied.append(_download(proxy.tunnel(port), size, buf))
    d, p = statistics.median(direct), statistics.median(proxied)
    # Rounds alternate direct and proxied; the median of the per-round ratios is robust to
    # the machine getting busier or quieter during the run.
    paired = [b / a for a, b in zip(direct, proxied, strict=True)]
    ratio = statistics.median(paired)
    return {
        "bytes": size,
        "rounds": rounds,
        "direct_MBps": round(d / MIB, 1),
        "proxy_MBps": round(p / MIB, 1),
        "ratio": round(ratio, 3),
        "ratio_of_medians": round(p / d, 3),
        "round_ratios": [round(r, 3) for r in paired],
        "budget_ratio": BUDGET_THROUGHPUT,
    }, ratio >= BUDGET_THROUGHPUT


def latency(proxy: Proxy, port: int, count: int) -> tuple[dict[str, object], bool]:
    direct: list[float] = []
    proxied: list[float] = []
    for _ in range(count):  # alternate, so drift hits both sides alike
        start = time.perf_counter()
        with _direct(port) as sock:
            _exchange(sock)
        direct.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        with proxy.tunnel(port) as sock:
            _exchange(sock)
        proxied.append((time.perf_counter() - start) * 1000)
    inner_direct: list[float] = []
    inner_proxy: list[float] = []
    with _direct(port) as dsock, proxy.tunnel(port) as psock:
        for _ in range(count):
            start = time.perf_counter()
            _exchange(dsock)
            inner_direct.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            _exchange(psock)
            inner_proxy.append((time.perf_counter() - start) * 1000)
    return {
        "requests": count,
        "new_connection_ms": {
            "direct_p50": round(_pct(direct, 0.5), 3),
            "direct_p99": round(_pct(direct, 0.99), 3),
            "proxy_p50": round(_pct(proxied, 0.5), 3),
            "proxy_p99": round(_pct(proxied, 0.99), 3),
            "added_p50": round(_pct(proxied, 0.5) - _pct(direct, 0.5), 3),
            "added_p99": round(_pct(proxied, 0.99) - _pct(direct, 0.99), 3),
        },
        "in_tunnel_ms": {
            "direct_p50": round(_pct(inner_direct, 0.5), 3),
            "proxy_p50": round(_pct(inner_proxy, 0.5), 3),
            "added_p50": round(_pct(inner_proxy, 0.5) - _pct(inner_direct, 0.5), 3),
        },
        "budget_added_p50_ms": BUDGET_P50_MS,
    }, _pct(proxied, 0.5) - _pct(direct, 0.5) <= BUDGET_P50_MS


def memory(proxy: Proxy, port: int, tunnels: int) -> tuple[dict[str, object], bool]:
    idle = proxy.rss_mb()

    async def hold() -> tuple[float, float, int]:
        head = (
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic ".encode()
            + proxy.auth
            + b"\r\n\r\n"
        )
        start = time.perf_counter()
        errors = 0
        writers: list[asyncio.StreamWriter] = []

        async def one() -> None:
            nonlocal errors
            try:
                reader, writer = await asyncio.open_connection(*proxy.addr)
                writers.append(writer)
                writer.write(head)
                line = await reader.readuntil(b"\r\n\r\n")
                writer.write(bytes(SMALL))
                await reader.readexactly(SMALL)
                if not line.startswith(b"HTTP/1.1 200"):
                    errors += 1
            except (OSError, asyncio.IncompleteReadError):
                errors += 1

        await asyncio.gather(*(one() for _ in range(tunnels)))
        opened = time.perf_counter() - start
        rss = proxy.rss_mb()
        for writer in writers:
            writer.close()
        await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)
        return rss, opened, errors

    rss, opened, errors = asyncio.run(hold())
    return {
        "tunnels": tunnels,
        "errors": errors,
        "open_all_s": round(opened, 3),
        "idle_rss_MB": round(idle, 1),
        "rss_MB": round(rss, 1),
        "per_tunnel_KiB": round((rss - idle) * 1024 / tunnels, 1),
        "budget_rss_MB": BUDGET_RSS_MB,
    }, rss <= BUDGET_RSS_MB and errors == 0


# The client of the through-the-jail measurement: the same program outside (direct) and
# inside the jail (through the relay at $HTTP_PROXY). It prints one JSON value.
JAIL_CLIENT = r"""
import base64, json, os, socket, sys, time, urllib.parse
mode, how, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def conn():
    if how == "direct":
        s = socket.create_connection(("127.0.0.1", port))
    else:
        u = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
        s = socket.create_connection((u.hostname, u.port))
        auth = base64.b64encode(f"{u.username}:{u.password}".encode())
        head = b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nProxy-Authorization: Basic %s\r\n\r\n"
        s.sendall(head % (port, auth))
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s
if mode == "tp":
    buf = memoryview(bytearray(1 << 20))
    with conn() as s:
        start = time.perf_counter()
        s.sendall(b"N%d\n" % n)
        got = 0
        while got < n:
            k = s.recv_into(buf)
            assert k, "short download"
            got += k
        print(json.dumps(n / (time.perf_counter() - start)))
else:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        with conn() as s:
            s.sendall(bytes(1024))
            got = 0
            while got < 1024:
                got += len(s.recv(1024 - got))
        out.append((time.perf_counter() - start) * 1000)
    print(json.dumps(out))
"""
SYSTEM_PY = "/usr/bin/python3"


def through_jail(port: int, size: int, rounds: int, count: int) -> dict[str, object] | str:
    """The same client outside (direct) and inside a T2 Linux jail (through the relay)."""
    try:
        from panday_core.policy import FsPolicy, NetPolicy, SandboxPolicy  # noqa: PLC0415
        from panday_tier_linux.probe import unavailable_reason  # noqa: PLC0415
        from panday_tier_linux.session import open_session  # noqa: PLC0415
    except ImportError:
        return "not measured: T2 Linux is not installed"
    reason = unavailable_reason()
    if reason is not None:
        return f"not measured: {reason}"
    import tempfile  # noqa: PLC0415

    def outside(*args: str) -> object:
        done = subprocess.run(
            [SYSTEM_PY, "-I", "-c", JAIL_CLIENT, *args], capture_output=True, check=True
        )
        return json.loads(done.stdout)

    with tempfile.TemporaryDirectory() as ws:
        net = NetPolicy(allow=("127.0.0.1",), ports=(port,))
        with open_session(SandboxPolicy(fs=FsPolicy(workspace=ws), net=net)) as session:

            def inside(*args: str) -> object:
                result = session.run([SYSTEM_PY, "-I", "-c", JAIL_CLIENT, *args])
                if result.exit_code != 0:
                    raise SystemExit(f"egress bench: jailed client failed: {result.stderr!r}")
                return json.loads(result.stdout)

            direct: list[float] = []
            jailed: list[float] = []
            for _ in range(rounds):
                direct.append(cast("float", outside("tp", "direct", str(port), str(size))))
                jailed.append(cast("float", inside("tp", "proxy", str(port), str(size))))
            lat_direct: list[float] = []
            lat_jailed: list[float] = []
            for _ in range(3):
                lat_direct += cast("list[float]", outside("lat", "direct", str(port), str(count)))
                lat_jailed += cast("list[float]", inside("lat", "proxy", str(port), str(count)))
            with open_session(SandboxPolicy(fs=FsPolicy(workspace=ws))) as plain:
                start_plain: list[float] = []
                start_relay: list[float] = []
                for _ in range(40):  # alternate, so drift hits both alike
                    for session_, times in ((plain, start_plain), (session, start_relay)):
                        began = time.perf_counter()
                        session_.run(["/bin/true"])
                        times.append((time.perf_counter() - began) * 1000)
    paired = [b / a for a, b in zip(direct, jailed, strict=True)]
    return {
        "client": SYSTEM_PY,
        "throughput": {
            "bytes": size,
            "rounds": rounds,
            "direct_MBps": round(statistics.median(direct) / MIB, 1),
            "jail_MBps": round(statistics.median(jailed) / MIB, 1),
            "ratio": round(statistics.median(paired), 3),
            "round_ratios": [round(r, 3) for r in paired],
        },
        "new_connection_ms": {
            "requests": len(lat_direct),
            "direct_p50": round(_pct(lat_direct, 0.5), 3),
            "jail_p50": round(_pct(lat_jailed, 0.5), 3),
            "added_p50": round(_pct(lat_jailed, 0.5) - _pct(lat_direct, 0.5), 3),
            "direct_p99": round(_pct(lat_direct, 0.99), 3),
            "jail_p99": round(_pct(lat_jailed, 0.99), 3),
        },
        "command_start_ms": {
            "without_net_p50": round(_pct(start_plain, 0.5), 3),
            "with_relay_p50": round(_pct(start_relay, 0.5), 3),
            "added_p50": round(_pct(start_relay, 0.5) - _pct(start_plain, 0.5), 3),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="Egress proxy benchmark (see the module doc).")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    args = parser.parse_args()
    if args.serve_upstream:
        asyncio.run(_serve_upstream())
        return 0
    if not sys.platform.startswith("linux"):
        print("egress bench: RSS is read from /proc; run it on Linux")
        return 1
    _raise_nofile()
    load = os.getloadavg()[0]
    size = (32 if args.quick else 256) * MIB
    upstream = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert upstream.stdout is not None  # noqa: S101 - piped
    port = int(upstream.stdout.readline())
    proxy = Proxy([port])
    try:
        tp, tp_ok = throughput(proxy, port, size, 3 if args.quick else 5)
        lat, lat_ok = latency(proxy, port, 200 if args.quick else 1000)
        mem, mem_ok = memory(proxy, port, 1000)
        proxy.stop()
        jail = through_jail(port, size, 3 if args.quick else 5, 100 if args.quick else 300)
    finally:
        proxy.stop()
        upstream.terminate()
        upstream.wait(10)
    checks = {"throughput_ratio": tp_ok, "added_p50_latency": lat_ok, "rss_at_1000_tunnels": mem_ok}
    result: dict[str, object] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "throughput": tp,
        "latency": lat,
        "memory": mem,
        "through_jail": jail,
        "loadavg_1m_at_start": round(load, 2),
        "budgets_met": checks,
    }
    path: Path = args.results
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = cast("dict[str, object]", json.loads(path.read_text())) if path.exists() else {}
    doc["egress"] = result
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
