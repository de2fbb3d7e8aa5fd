"""The egress proxy, round three (issue 26): each hole reproduced, then shown closed.

1. descriptors the caller can always use: the proxy's numbered above select()'s range
   even when the soft and hard limits are equal;
2. slots granted and released in one place: a refusal as busy frees nothing;
3. fair admission on a TCP listener: no grace, idle connections thinned first, a share
   kept for clients that authenticate;
4. name lookups fair between commands, bounded per command, abandoned ones cancelled;
5. audit output through a bounded sink that never blocks the loop;
6. the low items: SOCKS5 early data, local-use NAT64, HTTP/1.0 with Transfer-Encoding,
   half-closed tunnels.

Real sockets on 127.0.0.1 only; names from table (or gated) resolvers; the connector
refuses anything off loopback. Nothing waits on a timing threshold: every wait is a
bounded poll for a state the proxy reaches.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest

from panday_core.egress import AuditEvent, EgressProxy, ProxyLimits
from panday_core.egress.listeners import first_look
from panday_core.egress.testing import LoopbackOnly
from panday_core.policy import NetPolicy

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from conftest import Env, ProxyHandle

ALLOWED = "allowed.test"


def _poll(done: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Bounded wait for `done()` (a state, never a duration being judged)."""
    for _ in range(int(timeout / 0.01)):
        if done():
            return True
        time.sleep(0.01)
    return done()


# ------------------------------------------------------------------ 1. the caller's select()

FLOOR_PROBE = r"""
import fcntl, json, os, resource, select, socket, sys, time
limit, count = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))  # soft = hard (root, Docker)
out = {}
# Positive control: descriptors that pile up below 1,024 push a new one past select()'s
# range, and select() then fails (so the check below can see the failure).
held = [socket.socket() for _ in range(1100)]
fd = os.open("/dev/null", os.O_RDONLY)
out["control_fd"] = fd
try:
    select.select([fd], [], [], 0)
    out["control_select"] = "ok"
except ValueError as exc:
    out["control_select"] = str(exc)
os.close(fd)
for s in held:
    s.close()

from panday_core.egress import ProxySettings, ProxyThread
from panday_core.egress.testing import LoopbackOnly
from panday_core.policy import NetPolicy
thread = ProxyThread(NetPolicy(allow=("allowed.test",), ports=(443,)),
                     settings=ProxySettings(connector=LoopbackOnly()))
port = thread.start_loopback()
clients = []
for _ in range(count):  # no credentials, never a byte: held; numbered high, out of the way
    s = socket.create_connection(("127.0.0.1", port))
    moved = fcntl.fcntl(s.fileno(), fcntl.F_DUPFD_CLOEXEC, limit - 2 * count - 64)
    s.close()
    clients.append(moved)
end = time.monotonic() + 30
while len(thread.proxy.clients) < min(count, 1000) and time.monotonic() < end:
    time.sleep(0.02)
out["held"] = len(thread.proxy.clients)
out["floor"] = thread.proxy.descriptors.floor
fd = os.open("/dev/null", os.O_RDONLY)
out["fd"] = fd
try:
    select.select([fd], [], [], 0)
    out["select"] = "ok"
except ValueError as exc:
    out["select"] = str(exc)
os.close(fd)
for c in clients:
    os.close(c)
thread.close()
print(json.dumps(out), flush=True)
"""


def test_with_soft_equal_to_hard_the_callers_descriptors_stay_in_selects_range() -> None:
    """soft = hard (the limit cannot be raised): 1,000 idle connections held by the proxy
    must not push the caller's next descriptor past 1,024, where select() fails."""
    proc = subprocess.run(
        [sys.executable, "-c", FLOOR_PROBE, "8192", "1000"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["control_fd"] < 1024 or out["control_select"] == "ok" or out["held"] < 1000:
        pytest.fail(f"inconclusive: control failed: {out}")
    assert out["fd"] < 1024, out
    assert out["select"] == "ok", out


def test_the_descriptor_floor_holds_when_soft_equals_hard() -> None:
    from panday_core.egress.limits import SELECT_LIMIT, derive_budget  # noqa: PLC0415

    raised = derive_budget(1024, 20000, 30)  # control: the raise made room (the old case)
    assert raised.floor == 1024
    assert raised.caller == 1024
    stuck = derive_budget(20000, 20000, 30)  # soft = hard
    assert stuck.floor == SELECT_LIMIT
    assert stuck.caller >= SELECT_LIMIT
    assert stuck.total == 20000 - stuck.caller - 16
    small = derive_budget(1024, 1024, 30)  # nothing above 1,024 exists: nothing to lift
    assert small.floor == 0


# ------------------------------------------------------------------ 2. slot accounting


def test_refusals_as_busy_never_free_a_slot(env: Env) -> None:
    """Requests and refusals alternate from one command: each refusal holds nothing and
    gives back nothing, so the command never holds more than its limit."""
    echo = env.upstream("echo", echo=True)
    handle = env.proxy(
        allow=["127.0.0.1"], ports=[echo.port], limits=ProxyLimits(max_per_command=2)
    )
    greedy = handle.basic(handle.proxy.credentials("greedy"))
    held: list[socket.socket] = []
    target = f"127.0.0.1:{echo.port}"
    try:
        for _ in range(2):
            status, _, sock, _ = env.connect(handle, target, auth=greedy)
            env.expect(status == 200 and sock is not None, "a command's first tunnels open")
            assert sock is not None
            held.append(sock)
        for _ in range(6):  # refused, its connection closed: nothing may come back
            status, _, sock, _ = env.connect(handle, target, auth=greedy)
            assert (status, sock) == (503, None)
            env.settle(lambda: len(handle.proxy.clients) == 2)
            assert handle.proxy.admission.per_command == {"greedy": 2}
        # Positive control: a slot that really ends comes back, and only that one.
        held.pop().close()
        env.settle(lambda: len(handle.proxy.clients) == 1)
        assert handle.proxy.admission.per_command == {"greedy": 1}
        status, _, sock, _ = env.connect(handle, target, auth=greedy)
        assert status == 200
        assert sock is not None
        held.append(sock)
        status, _, sock, _ = env.connect(handle, target, auth=greedy)
        assert (status, sock) == (503, None)
    finally:
        for sock in held:
            sock.close()


# ------------------------------------------------------------------ 3. fair admission


def _idle(handle: ProxyHandle, count: int) -> list[socket.socket]:
    return [socket.create_connection((handle.host, handle.port), timeout=10) for _ in range(count)]


def _closed_by_proxy(sock: socket.socket) -> bool:
    sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)  # noqa: FBT003 - the socket API's own flag


def test_a_churner_thins_its_own_idle_connections_not_a_client_that_spoke(env: Env) -> None:
    """No grace: beyond a source's budget the oldest connection that has sent nothing is
    closed at once; a client that has sent (part of) its request is not."""
    echo = env.upstream("echo", echo=True)
    handle = env.proxy(
        allow=["127.0.0.1"], ports=[echo.port], limits=ProxyLimits(max_unauthenticated=4)
    )
    crowd = _idle(handle, 4)
    env.settle(lambda: len(handle.proxy.clients) == 4)
    honest = env.open_conn(handle.host, handle.port)
    head = f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n".encode()
    honest.sendall(head)  # part of its request: it has spoken, it is not authenticated yet
    env.settle(lambda: any(c.heard for c in handle.proxy.clients))
    crowd += _idle(handle, 12)
    env.settle(lambda: sum(_closed_by_proxy(s) for s in crowd) >= 12, timeout=10)
    # Control: the crowd beyond the budget was closed at once, oldest first.
    env.expect(sum(_closed_by_proxy(s) for s in crowd) >= 12, "idle connections were thinned")
    honest.sendall(b"Proxy-Authorization: " + handle.basic() + b"\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        data = honest.recv(4096)
        if not data:
            break
        answer += data
    honest.close()
    for s in crowd:
        s.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer


def test_a_crowd_without_credentials_never_takes_the_reserved_share(env: Env) -> None:
    echo = env.upstream("echo", echo=True)
    limits = ProxyLimits(max_connections=8, max_unauthenticated=100)
    handle = env.proxy(allow=["127.0.0.1"], ports=[echo.port], limits=limits)
    crowd = _idle(handle, 20)
    try:
        env.settle(lambda: sum(_closed_by_proxy(s) for s in crowd) >= 14)
        waiting = sum(len(s.pending) for s in handle.proxy.admission.sources())
        env.expect(waiting > 0, "the crowd holds connections")
        assert waiting <= 8 - 8 // 4
        status, _, sock, _ = env.connect(handle, f"127.0.0.1:{echo.port}")
        assert status == 200
        assert sock is not None
        sock.close()
    finally:
        for s in crowd:
            s.close()


def _accepted(
    listener: socket.socket, client: Callable[[socket.socket], None] | None
) -> socket.socket:
    """The server end of a new loopback connection, once what `client` did to its end
    (None: nothing) has reached it."""
    import selectors  # noqa: PLC0415 - only this helper waits on one socket

    peer = socket.create_connection(listener.getsockname(), timeout=10)
    server, _ = listener.accept()
    server.setblocking(False)  # noqa: FBT003 - the socket API's own flag
    if client is None:
        _kept.append(peer)
        return server
    client(peer)
    with selectors.DefaultSelector() as sel:
        sel.register(server, selectors.EVENT_READ)
        arrived = bool(sel.select(timeout=10))
    if not arrived:
        server.close()
        pytest.fail("inconclusive: the client's act never reached the server end")
    return server


_kept: list[socket.socket] = []


def test_first_look_tells_a_closed_client_from_an_idle_one() -> None:
    """A client that closed without sending (its end of file, as a churner's connections
    arrive) is gone, not idle: served as idle it cost a connection, a duplicated
    descriptor, a watch and a timer before the proxy noticed."""
    listener = socket.create_server(("127.0.0.1", 0))

    def speak(peer: socket.socket) -> None:
        peer.sendall(b"C")
        _kept.append(peer)

    def reset(peer: socket.socket) -> None:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()

    try:
        idle, spoke = _accepted(listener, None), _accepted(listener, speak)
        closed, was_reset = _accepted(listener, lambda p: p.close()), _accepted(listener, reset)
        # Controls: a live client that sent nothing is idle; one that spoke is not.
        assert first_look(idle) is True
        assert first_look(spoke) is False
        assert first_look(closed) is None, "closed without a byte: gone"
        assert first_look(was_reset) is None
        for sock in (idle, spoke, closed, was_reset):
            sock.close()
    finally:
        while _kept:
            _kept.pop().close()
        listener.close()


def test_a_connection_gone_before_it_is_accepted_costs_nothing(env: Env) -> None:
    handle = env.proxy(allow=["127.0.0.1"], ports=[80])
    for _ in range(200):  # connect and close at once: how a churner's connections look
        socket.create_connection((handle.host, handle.port), timeout=10).close()
    # Control: the proxy still serves (every churned connection was accepted and handled).
    status, _, _ = env.http(handle, "http://127.0.0.1:9/")
    env.expect(status in (403, 502), "the proxy answers after the churn")
    env.settle(lambda: not handle.proxy.clients)
    assert not handle.proxy.clients


# ------------------------------------------------------------------ 4. name lookups


class GatedResolver:
    """Each lookup waits until the test opens its name's gate; records the start order."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, host: str) -> asyncio.Event:
        return self.gates.setdefault(host, asyncio.Event())

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        del port
        self.started.append(host)
        await self.gate(host).wait()
        return ["127.0.0.1"]


def _gated_proxy(env: Env, resolver: GatedResolver, port: int, limits: ProxyLimits) -> EgressProxy:
    proxy = EgressProxy(
        NetPolicy(allow=("*.names.test", "127.0.0.1"), ports=(port,)),
        session_id="lookups",
        resolver=resolver,
        limits=limits,
        connector=LoopbackOnly(),
    )
    env.lt.call(proxy.start("127.0.0.1", 0))
    env.proxies.append(proxy)
    return proxy


def _ask(proxy: EgressProxy, host: str, port: int, creds: tuple[str, str]) -> socket.socket:
    import base64  # noqa: PLC0415

    assert proxy.tcp_address is not None
    sock = socket.create_connection(proxy.tcp_address, timeout=10)
    auth = base64.b64encode(f"{creds[0]}:{creds[1]}".encode())
    sock.sendall(
        f"CONNECT {host}:{port} HTTP/1.1\r\nProxy-Authorization: Basic ".encode()
        + auth
        + b"\r\n\r\n"
    )
    return sock


def _status(sock: socket.socket) -> int:
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(4096)
        if not data:
            break
        head += data
    sock.close()
    return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0


def test_one_commands_lookups_cannot_queue_ahead_of_anothers(env: Env) -> None:
    echo = env.upstream("echo", echo=True)
    resolver = GatedResolver()
    limits = ProxyLimits(max_lookups=1, max_lookups_per_command=3, connect_timeout=30)
    proxy = _gated_proxy(env, resolver, echo.port, limits)
    a, b = proxy.credentials("flood"), proxy.credentials("quiet")
    socks: list[socket.socket] = []
    for i in range(3):
        # One at a time, each read by the proxy before the next is sent: three requests
        # sent at once may be read in any order, and a0 must be the one that starts.
        socks.append(_ask(proxy, f"a{i}.names.test", echo.port, a))
        assert _poll(lambda n=i + 1: sum(1 for c in proxy.clients if c.user) == n)
    assert _poll(lambda: resolver.started == ["a0.names.test"])
    assert _poll(lambda: len(proxy.clients) == 3)
    quiet = _ask(proxy, "b0.names.test", echo.port, b)
    assert _poll(lambda: sum(1 for c in proxy.clients if c.user) == 4)

    # Beyond its budget of names a command is refused at once, as busy.
    extra = _ask(proxy, "a9.names.test", echo.port, a)
    assert _status(extra) == 503

    def open_gate(host: str) -> None:
        env.lt.loop.call_soon_threadsafe(resolver.gate(host).set)

    open_gate("a0.names.test")
    assert _poll(lambda: len(resolver.started) >= 2)
    # The next lookup is the other command's, not the flood's next name.
    assert resolver.started[:2] == ["a0.names.test", "b0.names.test"]
    open_gate("b0.names.test")
    assert _status(quiet) == 200  # control: the quiet command's request is served
    # A client that gives up (resets its connection): its lookup, not started yet, is
    # cancelled and never starts.
    socks[2].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    socks[2].close()
    assert _poll(lambda: proxy.names.abandoned >= 1)
    open_gate("a1.names.test")
    assert _status(socks[1]) == 200  # control: a lookup still waited for runs
    assert _poll(lambda: len(proxy.clients) <= 1)
    assert "a2.names.test" not in resolver.started
    socks[0].close()


# ------------------------------------------------------------------ 5. the audit sink


def test_a_stalled_audit_reader_never_freezes_the_proxy(env: Env) -> None:
    from panday_core.egress.sink import AuditSink  # noqa: PLC0415

    stall = threading.Event()
    seen: list[AuditEvent] = []

    def reader(event: AuditEvent) -> None:
        seen.append(event)
        stall.wait(15)  # a pipe nobody reads

    handle = env.proxy(allow=[ALLOWED], ports=[80])
    handle.proxy.sink = AuditSink([reader], session_id="stalled", capacity=8)
    creds = handle.basic(handle.proxy.credentials("cmd"))
    for i in range(40):  # refused by policy: one audit event each (not throttled)
        status, _, _ = env.http(handle, "http://denied.test/", auth=creds)
        if i == 0:  # control: the reader got the first event, and stalls on it
            env.expect(_poll(lambda: len(seen) >= 1), "the reader was called")
        assert status == 403, f"request {i} unanswered while the audit reader stalls"
    stall.set()

    def delivered() -> int:  # events, and the drops their summary stands for
        return sum(e.count if e.reason.startswith("audit output stalled") else 1 for e in seen)

    assert _poll(lambda: delivered() >= 40)  # the loop hands events over in batches
    assert handle.proxy.sink.flush(10)
    drops = [e for e in seen if e.reason.startswith("audit output stalled")]
    # Reported, with counts that account for every event: one report per stall is the
    # design, but the assertion stays on what must hold whatever the thread scheduling
    # (once in a few runs two reports were seen; the verdict must not depend on that).
    assert drops, "events were dropped silently"
    assert sum(e.count for e in drops) == handle.proxy.sink.dropped_total > 0
    assert len(seen) - len(drops) + sum(e.count for e in drops) == 40


def test_panday_proxy_keeps_serving_when_nobody_reads_its_output(env: Env) -> None:
    """The standalone proxy's stdout is a pipe nobody reads (a full pipe blocks a
    writer): requests are still answered, well beyond what the pipe holds."""
    upstream = env.upstream("up")
    proc = subprocess.Popen(
        [sys.executable, "-m", "panday_core.egress", "--allow", "127.0.0.1",
         "--port", str(upstream.port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = ""
        while not url:
            line = proc.stdout.readline().decode()
            if line.startswith("export HTTP_PROXY="):
                url = line.split("=", 1)[1].strip()
        creds, _, where = url.removeprefix("http://").rpartition("@")
        host, _, port = where.rpartition(":")
        import base64  # noqa: PLC0415

        auth = b"Basic " + base64.b64encode(creds.encode())
        answered = 0
        for _ in range(1500):  # ~350 bytes of audit each: far beyond a 64 KiB pipe
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(
                    b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nProxy-Authorization: " + auth + b"\r\n\r\n"
                )
                if sock.recv(12).startswith(b"HTTP/1.1 "):
                    answered += 1
        assert answered == 1500
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


# ------------------------------------------------------------------ 6. the low items


def test_socks5_early_tunnel_data_is_not_counted_as_handshake(env: Env) -> None:
    echo = env.upstream("echo", echo=True)
    handle = env.proxy(allow=["127.0.0.1"], ports=[echo.port])
    user, password = handle.creds
    greeting = b"\x05\x01\x02"
    auth = bytes((1, len(user))) + user.encode() + bytes((len(password),)) + password.encode()
    request = env.socks_request("127.0.0.1", echo.port)
    payload = bytes(range(256)) * 8  # 2,048 bytes of early data in the same write
    for early in (b"x", payload):  # control first: a byte of early data
        with env.open_conn(handle.host, handle.port) as sock:
            sock.sendall(greeting + auth + request + early)
            answer = env.recv_exact(sock, 2 + 2 + 10)
            assert answer[:4] == b"\x05\x02\x01\x00"
            assert answer[4:6] == b"\x05\x00", answer
            assert env.recv_exact(sock, len(early)) == early


def test_the_local_use_nat64_prefix_is_refused_whatever_it_embeds() -> None:
    from panday_core.egress.addresses import address_refusal  # noqa: PLC0415
    from panday_core.egress.rules import parse_address  # noqa: PLC0415

    def judge(text: str) -> str | None:
        addr = parse_address(text)
        assert addr is not None
        return address_refusal(addr)

    # Control: the well-known prefix is judged by what it embeds.
    assert judge("64:ff9b::808:808") is None
    assert judge("64:ff9b::a9fe:a9fe") is not None
    # 169.254.169.254 in the /48 layout (RFC 6052), with 8.8.8.8 in the last 32 bits.
    refused = judge("64:ff9b:1:a9fe:a9:fe00:808:808")
    assert refused is not None
    assert "local-use NAT64" in refused


def test_an_http10_request_with_transfer_encoding_is_refused(env: Env) -> None:
    up = env.upstream("up")
    handle = env.proxy(allow=["127.0.0.1"], ports=[up.port])
    auth = b"Proxy-Authorization: " + handle.basic() + b"\r\n"
    body = b"5\r\nhello\r\n0\r\n\r\n"
    target = f"http://127.0.0.1:{up.port}/".encode()
    for version, expected in ((b"HTTP/1.1", 200), (b"HTTP/1.0", 400)):  # control first
        head = b"POST %s %s\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n" % (
            target,
            version,
        )
        with env.open_conn(handle.host, handle.port) as sock:
            sock.sendall(head + auth + b"\r\n" + body)
            status, headers, _ = env.parse_response(env.recv_all(sock))
        assert status == expected, (version, headers)
    assert len(up.requests) == 1
    assert up.requests[0].startswith(b"POST / HTTP/1.1")


class _HalfOpen(asyncio.Protocol):
    """Echoes, and keeps its own half open when the client half-closes."""

    opened: list[asyncio.BaseTransport] = []  # noqa: RUF012 - the test closes them all

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.opened.append(transport)

    def data_received(self, data: bytes) -> None:
        assert isinstance(self.transport, asyncio.Transport)
        self.transport.write(data)

    def eof_received(self) -> bool:
        return True


def test_a_half_closed_tunnel_is_closed_after_its_own_timeout(env: Env) -> None:
    servers: list[asyncio.Server] = []

    async def serve() -> int:
        server = await asyncio.get_running_loop().create_server(_HalfOpen, "127.0.0.1", 0)
        servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def stop() -> None:
        for server in servers:
            server.close()
        for transport in _HalfOpen.opened:
            transport.close()  # it half-closed: it never reads the proxy's reset

    port = env.lt.call(serve())
    try:
        _half_closed(env, port)
    finally:
        env.lt.call(stop())


def _half_closed(env: Env, port: int) -> None:
    limits = ProxyLimits(half_closed_timeout=0.2, idle_timeout=300.0)
    handle = env.proxy(allow=["127.0.0.1"], ports=[port], limits=limits)
    status, _, sock, _ = env.connect(handle, f"127.0.0.1:{port}")
    assert status == 200
    assert sock is not None
    with sock:
        sock.sendall(b"ping")
        env.expect(env.recv_exact(sock, 4) == b"ping", "the tunnel carries bytes")
        sock.shutdown(socket.SHUT_WR)
        assert env.recv_all(sock) == b""  # the proxy closed it (not the 300 s idle timeout)
    events = env.wait_events(handle, 1)
    assert "after one side closed its half" in events[-1].reason
