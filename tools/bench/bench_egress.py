"""Egress proxy benchmark: the proxy side by side with direct loopback TCP, in one run.

    uv run python tools/bench/bench_egress.py [--quick] [--results PATH]

Three processes, so that no measurement shares an event loop with what it measures: this
script (the client), an upstream server (this script with ``--serve-upstream``) and the
standalone proxy (``python -m panday_core.egress``; a fresh one for each phase that
measures its memory). Measured:

* throughput: 256 MiB downloaded over one connection, direct vs through a CONNECT tunnel;
  rounds alternate direct and proxied, and the median of the per-round ratios is reported
  with the load average before and after (on a shared two-core machine the ratio follows
  the load). The same rounds also go through a reference relay (this script with
  ``--serve-relay``: two blocking threads copying 1 MiB at a time, no policy, no bounds),
  the cheapest relay in a third process there is, so the figures show what any relay
  costs on this machine beside what the proxy costs over it. The CPU seconds each process
  spent per GiB are recorded too (they do not depend on the load as the rates do);
* added latency: a 1 KiB request and 1 KiB answer on a new connection (plus the CONNECT
  for the proxied case), p50/p99 over many requests, and inside an already open tunnel;
* a burst: 1,000 tunnels opened at once and held, errors and the proxy's resident set;
* 1,000 tunnels half-closed by their clients (the upstream keeps its side open) and then
  closed all at once: the proxy's resident set while they are half-closed, and its peak
  (``VmHWM``) over the whole phase;
* a name: 1,000 tunnels opened at once to one name the proxy has not resolved yet (the
  proxy's table resolver, ``--resolve-delay``, holds a lookup thread 20 ms per lookup, as
  a real lookup would; no real DNS is asked) against the same burst to an IP literal;
  rounds alternate, each name round uses a name not resolved before;
* a flood: 3,000 idle connections without credentials held against the proxy, and new
  tunnels with credentials made meanwhile: their latency, and errors;
* through a T2 Linux jail (when the tier runs here): a client inside a jail of a session
  with ``net.allow``, through the jail's relay and the session's proxy (on its loop thread
  in this process), against the same client outside any jail connecting directly; the
  same 256 MiB download and new-connection latency. The client is the host's
  /usr/bin/python3 on both sides (the jail shows /usr), timing itself, so the jail's
  start-up is not counted; that start-up (a jailed /bin/true with the relay in front,
  against one without) is measured on its own.

Budgets (issues 5 and 14): added new-tunnel p50 <= 0.5 ms, the 1,000-tunnel burst without errors at
<= 40 MiB RSS, 1,000 half-closed tunnels <= 64 MiB RSS (peak included), the burst to one
name within 1.2x the burst to an IP literal, and no error or request slower than a second
under the flood. Results are merged into the results file under the key ``egress``; the
exit status is 1 when a budget is missed.

Throughput is recorded here (ratio to direct, and to the threaded reference relay) but no
longer judged: issue 26 replaced the old ">= 0.7x direct" with a budget against the
minimal asyncio relay, judged by `bench_egress_round3`. With three busy processes on two
cores no relay reaches 0.7x direct here (the references measured 0.45-0.6x), so that
budget judged the machine rather than the proxy.
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
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Callable

Measured = tuple[dict[str, object], bool]

MIB = 1024 * 1024
BUDGET_P50_MS = 0.5
BUDGET_BURST_MIB = 40.0
BUDGET_HALF_CLOSED_MIB = 64.0
BUDGET_NAME_RATIO = 1.2
BUDGET_FLOOD_MAX_MS = 1000.0
RESOLVE_DELAY_S = 0.02
FLOOD = 3000
TUNNELS = 1000
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


class _HalfOpenUpstream(_Upstream):
    """Keeps its side open when the client half-closes (a half-closed tunnel)."""

    def eof_received(self) -> bool:
        return True


def _serve_relay() -> None:
    """The reference relay: a CONNECT head in, ``200`` out, then each direction copied by a
    blocking thread through one reused 1 MiB buffer (``recv_into`` and ``sendall``). It
    checks nothing and bounds nothing; it only prices the hop through a third process."""

    def pump(src: socket.socket, dst: socket.socket) -> None:
        view = memoryview(bytearray(MIB))
        try:
            while n := src.recv_into(view):
                dst.sendall(view[:n])
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def serve(client: socket.socket) -> None:
        with client:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                data = client.recv(4096)
                if not data:
                    return
                head += data
            host, _, port = head.split()[1].decode().rpartition(":")
            with socket.create_connection((host, int(port))) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
                back.start()
                pump(client, upstream)
                back.join()

    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    # The line the standalone proxy prints, so `Proxy` drives both alike.
    print(f"export HTTP_PROXY=http://ref:ref@127.0.0.1:{listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client,), daemon=True).start()


async def _serve_upstream(*, half_open: bool) -> None:
    loop = asyncio.get_running_loop()
    factory = _HalfOpenUpstream if half_open else _Upstream
    server = await loop.create_server(factory, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()


# ----------------------------------------------------------------------------- client


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


NAMES = [f"n{i}.bench.test" for i in range(16)]
"""Names the proxy resolves from its table, each lookup taking `RESOLVE_DELAY_S`."""


class Proxy:
    """The standalone proxy allowing `ports` on 127.0.0.1 (or whatever `argv` starts, if
    it prints the same ``export HTTP_PROXY=`` line: the reference relay)."""

    def __init__(self, ports: list[int], argv: list[str] | None = None) -> None:
        if argv is None:
            argv = [sys.executable, "-m", "panday_core.egress", "--allow", "127.0.0.1"]
            argv += ["--allow", "*.bench.test", "--resolve-delay", str(RESOLVE_DELAY_S)]
            for name in NAMES:
                argv += ["--resolve", f"{name}=127.0.0.1"]
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

    def rss_mb(self, field: str = "VmRSS") -> float:
        """The proxy's resident set (or `field`, e.g. ``VmHWM``, its peak), in MiB."""
        with open(f"/proc/{self.proc.pid}/status") as fh:  # noqa: PTH123 - Linux only
            for line in fh:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def head(self, host: str, port: int) -> bytes:
        return (
            f"CONNECT {host}:{port} HTTP/1.1\r\nProxy-Authorization: Basic ".encode()
            + self.auth
            + b"\r\n\r\n"
        )

    def tunnel(self, port: int) -> socket.socket:
        sock = socket.create_connection(self.addr)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(self.head("127.0.0.1", port))
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


def _load() -> float:
    return round(os.getloadavg()[0], 2)


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user and system) process `pid` has used so far."""
    with open(f"/proc/{pid}/stat") as fh:  # noqa: PTH123 - Linux only
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _timed(
    sock: socket.socket, size: int, buf: bytearray, upstream: int, relay: int | None
) -> tuple[float, tuple[float, float, float]]:
    """(bytes per second, CPU seconds of the upstream, this client and the relay)."""
    before = (_cpu_s(upstream), time.process_time(), _cpu_s(relay) if relay else 0.0)
    rate = _download(sock, size, buf)
    after = (_cpu_s(upstream), time.process_time(), _cpu_s(relay) if relay else 0.0)
    spent = tuple(b - a for a, b in zip(before, after, strict=True))
    return rate, (spent[0], spent[1], spent[2])


def _cpu_per_gib(rows: list[tuple[float, float, float]], size: int) -> dict[str, float]:
    gib = size / (1 << 30)
    upstream, client, relay = (statistics.median(col) / gib for col in zip(*rows, strict=True))
    return {"upstream": round(upstream, 3), "client": round(client, 3), "relay": round(relay, 3)}


def throughput(
    proxy: Proxy, reference: Proxy, upstream: int, port: int, *, size: int, rounds: int
) -> tuple[dict[str, object], bool]:
    load_before = _load()
    buf = bytearray(1 * MIB)
    rates: dict[str, list[float]] = {"direct": [], "proxy": [], "reference": []}
    cpu: dict[str, list[tuple[float, float, float]]] = {k: [] for k in rates}
    for i in range(rounds):
        rate, spent = _timed(_direct(port), size, buf, upstream, None)
        rates["direct"].append(rate)
        cpu["direct"].append(spent)
        # Direct first in every round; the two relays take turns at going next.
        relays = [("proxy", proxy), ("reference", reference)]
        for name, relay in relays if i % 2 == 0 else relays[::-1]:
            rate, spent = _timed(relay.tunnel(port), size, buf, upstream, relay.proc.pid)
            rates[name].append(rate)
            cpu[name].append(spent)
    direct, proxied, ref = rates["direct"], rates["proxy"], rates["reference"]
    d, p, r = (statistics.median(v) for v in (direct, proxied, ref))
    # The median of the per-round ratios is robust to the machine getting busier or
    # quieter during the run.
    paired = [b / a for a, b in zip(direct, proxied, strict=True)]
    ref_paired = [b / a for a, b in zip(direct, ref, strict=True)]
    over_ref = [b / a for a, b in zip(ref, proxied, strict=True)]
    ratio = statistics.median(paired)
    return {
        "bytes": size,
        "rounds": rounds,
        "direct_MBps": round(d / MIB, 1),
        "proxy_MBps": round(p / MIB, 1),
        "ratio": round(ratio, 3),
        "ratio_of_medians": round(p / d, 3),
        "round_ratios": [round(r, 3) for r in paired],
        "reference_MBps": round(r / MIB, 1),
        "reference_ratio": round(statistics.median(ref_paired), 3),
        "reference_round_ratios": [round(r, 3) for r in ref_paired],
        "proxy_vs_reference": round(statistics.median(over_ref), 3),
        "cpu_s_per_GiB": {name: _cpu_per_gib(rows, size) for name, rows in cpu.items()},
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": _load(),
    }, True


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


async def _burst(
    proxy: Proxy, host: str, port: int, count: int, hold: asyncio.Event | None = None
) -> tuple[float, int, list[asyncio.StreamWriter]]:
    """`count` tunnels to `host`:`port` opened at once, each exchanging 1 KiB: (seconds until
    the last exchange, errors, the writers, still open)."""
    head = proxy.head(host, port)
    errors = 0
    writers: list[asyncio.StreamWriter] = []

    async def one() -> None:
        nonlocal errors
        try:
            reader, writer = await asyncio.open_connection(*proxy.addr)
            writers.append(writer)
            writer.write(head)
            line = await reader.readuntil(b"\r\n\r\n")
            if not line.startswith(b"HTTP/1.1 200"):
                errors += 1
                return
            writer.write(bytes(SMALL))
            await reader.readexactly(SMALL)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            errors += 1

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    took = time.perf_counter() - start
    if hold is not None:
        await hold.wait()
    return took, errors, writers


async def _close_all(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.close()
    await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)


def burst(proxy: Proxy, port: int, tunnels: int) -> tuple[dict[str, object], bool]:
    """`tunnels` opened at once and held: errors and the proxy's resident set."""
    idle = proxy.rss_mb()

    async def run() -> tuple[float, float, int]:
        took, errors, writers = await _burst(proxy, "127.0.0.1", port, tunnels)
        rss = proxy.rss_mb()
        await _close_all(writers)
        return rss, took, errors

    rss, opened, errors = asyncio.run(run())
    return {
        "tunnels": tunnels,
        "errors": errors,
        "open_all_s": round(opened, 3),
        "idle_rss_MiB": round(idle, 1),
        "rss_MiB": round(rss, 1),
        "per_tunnel_KiB": round((rss - idle) * 1024 / tunnels, 1),
        "budget_rss_MiB": BUDGET_BURST_MIB,
    }, rss <= BUDGET_BURST_MIB and errors == 0


def half_closed(proxy: Proxy, port: int, tunnels: int) -> tuple[dict[str, object], bool]:
    """`tunnels` half-closed by their clients (the upstream keeps its side open), then
    closed at once: the resident set meanwhile, and the peak over the phase."""

    async def run() -> tuple[float, int]:
        took, errors, writers = await _burst(proxy, "127.0.0.1", port, tunnels)
        del took
        for writer in writers:
            if writer.can_write_eof():
                writer.write_eof()
        await asyncio.sleep(1.0)
        rss = proxy.rss_mb()
        await _close_all(writers)
        await asyncio.sleep(1.0)
        return rss, errors

    rss, errors = asyncio.run(run())
    peak = proxy.rss_mb("VmHWM")
    return {
        "tunnels": tunnels,
        "errors": errors,
        "rss_half_closed_MiB": round(rss, 1),
        "peak_rss_MiB": round(peak, 1),
        "budget_rss_MiB": BUDGET_HALF_CLOSED_MIB,
    }, max(rss, peak) <= BUDGET_HALF_CLOSED_MIB and errors == 0


def name_vs_literal(
    proxy: Proxy, port: int, tunnels: int, rounds: int
) -> tuple[dict[str, object], bool]:
    """`tunnels` at once to a name not resolved before vs to an IP literal."""
    names = iter(NAMES)
    literal: list[float] = []
    named: list[float] = []
    errors = 0
    for _ in range(rounds):
        for host, times in (("127.0.0.1", literal), (next(names), named)):

            async def run(host: str = host) -> tuple[float, int]:
                took, errs, writers = await _burst(proxy, host, port, tunnels)
                await _close_all(writers)
                return took, errs

            took, errs = asyncio.run(run())
            times.append(took)
            errors += errs
            time.sleep(0.5)  # let the proxy finish closing before the next burst
    ratio = statistics.median(named) / statistics.median(literal)
    return {
        "tunnels": tunnels,
        "rounds": rounds,
        "resolve_delay_ms": RESOLVE_DELAY_S * 1000,
        "literal_s": [round(t, 3) for t in literal],
        "name_s": [round(t, 3) for t in named],
        "ratio": round(ratio, 3),
        "errors": errors,
        "budget_ratio": BUDGET_NAME_RATIO,
    }, ratio <= BUDGET_NAME_RATIO and errors == 0


def flood(proxy: Proxy, port: int, idle: int, requests: int) -> tuple[dict[str, object], bool]:
    """New tunnels with credentials while `idle` connections without them are held."""

    def sample() -> tuple[list[float], int]:
        times: list[float] = []
        errors = 0
        for _ in range(requests):
            start = time.perf_counter()
            try:
                with proxy.tunnel(port) as sock:
                    sock.settimeout(5)
                    _exchange(sock)
            except (OSError, SystemExit):
                errors += 1
                continue
            times.append((time.perf_counter() - start) * 1000)
        return times, errors

    quiet, quiet_errors = sample()
    held: list[socket.socket] = []
    try:
        for _ in range(idle):
            sock = socket.socket()
            sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
            sock.connect_ex(proxy.addr)
            held.append(sock)
        time.sleep(1.5)
        under, under_errors = sample()
        rss = proxy.rss_mb()
    finally:
        for sock in held:
            sock.close()
    worst = max(under) if under else float("inf")
    return {
        "idle_connections": idle,
        "requests": requests,
        "quiet_p50_ms": round(_pct(quiet, 0.5), 3) if quiet else None,
        "flood_p50_ms": round(_pct(under, 0.5), 3) if under else None,
        "flood_max_ms": round(worst, 3),
        "errors": quiet_errors + under_errors,
        "rss_MiB": round(rss, 1),
        "budget_max_ms": BUDGET_FLOOD_MAX_MS,
    }, worst <= BUDGET_FLOOD_MAX_MS and not under_errors


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


def _upstream(*, half_open: bool = False) -> tuple[subprocess.Popen[str], int]:
    argv = [sys.executable, __file__, "--serve-upstream"]
    if half_open:
        argv.append("--half-open")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None  # noqa: S101 - piped
    return proc, int(proc.stdout.readline())


def _with_reference(run: Callable[[Proxy], Measured]) -> Measured:
    """`run` with the reference relay (see `_serve_relay`) up."""
    reference = Proxy([], argv=[sys.executable, __file__, "--serve-relay"])
    try:
        return run(reference)
    finally:
        reference.stop()


def _phase(name: str, ports: list[int], run: Callable[[Proxy], Measured]) -> Measured:
    """One phase on a proxy process of its own (so its memory figures are its own)."""
    print(f"egress bench: {name} (load {_load()})", flush=True)
    proxy = Proxy(ports)
    try:
        return run(proxy)
    finally:
        proxy.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description="Egress proxy benchmark (see the module doc).")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--half-open", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-relay", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    args = parser.parse_args()
    if args.serve_upstream:
        asyncio.run(_serve_upstream(half_open=args.half_open))
        return 0
    if args.serve_relay:
        _serve_relay()
        return 0
    if not sys.platform.startswith("linux"):
        print("egress bench: RSS is read from /proc; run it on Linux")
        return 1
    _raise_nofile()
    load = _load()
    size = (32 if args.quick else 256) * MIB
    upstream, port = _upstream()
    half_upstream, half_port = _upstream(half_open=True)
    rounds = 3 if args.quick else 5
    try:
        tp, tp_ok = _phase(
            "throughput",
            [port],
            lambda p: _with_reference(
                lambda ref: throughput(p, ref, upstream.pid, port, size=size, rounds=rounds)
            ),
        )
        lat, lat_ok = _phase(
            "new tunnels", [port], lambda p: latency(p, port, 200 if args.quick else 1000)
        )
        mem, mem_ok = _phase("burst", [port], lambda p: burst(p, port, TUNNELS))
        half, half_ok = _phase(
            "half-closed", [half_port], lambda p: half_closed(p, half_port, TUNNELS)
        )
        name, name_ok = _phase(
            "one name", [port], lambda p: name_vs_literal(p, port, TUNNELS, 3 if args.quick else 5)
        )
        flooded, flood_ok = _phase(
            "flood", [port], lambda p: flood(p, port, FLOOD, 50 if args.quick else 200)
        )
        jail = through_jail(port, size, rounds, 100 if args.quick else 300)
    finally:
        for proc in (upstream, half_upstream):
            proc.terminate()
            proc.wait(10)
    checks = {
        "added_p50_latency": lat_ok,
        "burst_1000_tunnels": mem_ok,
        "half_closed_1000_tunnels": half_ok,
        "one_name_vs_literal": name_ok,
        "flood_without_credentials": flood_ok,
    }
    result: dict[str, object] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "throughput": tp,
        "latency": lat,
        "memory": mem,
        "half_closed": half,
        "one_name": name,
        "flood": flooded,
        "through_jail": jail,
        "loadavg_1m_at_start": load,
        "loadavg_1m_at_end": _load(),
        "budgets_met": checks,
    }
    path: Path = args.results
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = cast("dict[str, object]", json.loads(path.read_text())) if path.exists() else {}
    doc["egress"] = result
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(json.dumps(result, indent=2, sort_keys=True))
    del tp_ok  # recorded, judged against the asyncio reference by bench_egress_round3
    print(
        f"egress bench: throughput {tp['ratio']}x direct at load {tp['loadavg_1m_before']} "
        f"(recorded; the reference relay {tp['reference_ratio']}x, the proxy "
        f"{tp['proxy_vs_reference']}x of it); new tunnel "
        f"+{cast('dict[str, object]', lat['new_connection_ms'])['added_p50']} ms p50; burst "
        f"{mem['rss_MiB']} MiB, {mem['errors']} errors; half-closed "
        f"{half['rss_half_closed_MiB']} MiB (peak {half['peak_rss_MiB']}); one name "
        f"{name['ratio']}x the literal; flood max {flooded['flood_max_ms']} ms"
    )
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
