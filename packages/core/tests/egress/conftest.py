"""Fixtures for the egress proxy tests: a proxy and loopback upstreams on a background loop.

Everything listens on 127.0.0.1 or ::1 only. Names are answered by a `StaticResolver`, so
no test ever asks real DNS. Clients in the tests are plain blocking sockets (and curl), so
they exercise the proxy exactly as a jailed tool would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import socket
import threading
from typing import TYPE_CHECKING, TypeVar, cast

import pytest

from panday_core.egress import AuditEvent, EgressProxy, ProxyLimits, StaticResolver
from panday_core.egress.testing import LoopbackOnly
from panday_core.policy import NetPolicy

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
    from ssl import SSLContext

IO_TIMEOUT = 10.0
T = TypeVar("T")


class LoopThread:
    """An event loop in a daemon thread; `call` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[object, object, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Upstream(asyncio.Protocol):
    """A loopback server: answers one HTTP request with its own name, or echoes bytes."""

    def __init__(self, server: UpstreamServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        self.server.connections += 1
        self.server.peers.append(transport.get_extra_info("peername"))

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.server.echo:
            self.transport.write(data)
            return
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[: end + 4])
        self.server.requests.append(head)
        body = f"hello from {self.server.name}\n".encode()
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )
        self.transport.close()


class UpstreamServer:
    def __init__(self, name: str, *, echo: bool = False) -> None:
        self.name = name
        self.echo = echo
        self.connections = 0
        self.peers: list[object] = []
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int = 0, tls: SSLContext | None = None) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Upstream(self), host, port, backlog=4096, ssl=tls)
        self.server = server
        self.port = int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


class ProxyHandle:
    """A running proxy plus what the tests read from it."""

    def __init__(
        self,
        proxy: EgressProxy,
        events: list[AuditEvent],
        resolver: StaticResolver,
        connector: LoopbackOnly,
    ) -> None:
        self.connector = connector
        self.proxy = proxy
        self.events = events
        self.resolver = resolver
        assert proxy.tcp_address is not None
        self.host, self.port = proxy.tcp_address

    @property
    def creds(self) -> tuple[str, str]:
        return self.proxy.credentials()

    def basic(self, creds: tuple[str, str] | None = None) -> bytes:
        user, password = creds or self.creds
        return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


# ---------------------------------------------------------------------- blocking clients


def recv_all(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        chunks.append(data)
        size += len(data)
    return b"".join(chunks)


def open_conn(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=IO_TIMEOUT)
    sock.settimeout(IO_TIMEOUT)
    return sock


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines or not lines[0].startswith("HTTP/1."):
        return 0, {}, raw
    status = int(lines[0].split(" ")[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def http_via_proxy(
    handle: ProxyHandle, url: str, *, auth: bytes | bool | None = True, extra: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """A plain-HTTP request in absolute form through the proxy; returns the response."""
    auth_line = b""
    if auth is True:
        auth_line = b"Proxy-Authorization: " + handle.basic() + b"\r\n"
    elif isinstance(auth, bytes):
        auth_line = b"Proxy-Authorization: " + auth + b"\r\n"
    host = url.split("/")[2].encode()
    with open_conn(handle.host, handle.port) as sock:
        sock.sendall(
            b"GET "
            + url.encode()
            + b" HTTP/1.1\r\nHost: "
            + host
            + b"\r\n"
            + auth_line
            + extra
            + b"\r\n"
        )
        return parse_response(recv_all(sock))


def connect_via_proxy(
    handle: ProxyHandle, authority: str, *, auth: bytes | bool | None = True
) -> tuple[int, dict[str, str], socket.socket | None, bytes]:
    """An HTTP CONNECT; returns (status, headers, the tunnel socket if 200, body)."""
    auth_line = b""
    if auth is True:
        auth_line = b"Proxy-Authorization: " + handle.basic() + b"\r\n"
    elif isinstance(auth, bytes):
        auth_line = b"Proxy-Authorization: " + auth + b"\r\n"
    sock = open_conn(handle.host, handle.port)
    sock.sendall(
        b"CONNECT "
        + authority.encode()
        + b" HTTP/1.1\r\nHost: "
        + authority.encode()
        + b"\r\n"
        + auth_line
        + b"\r\n"
    )
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(4096)
        if not data:
            break
        head += data
    status, headers, rest = parse_response(head)
    if status == 200:
        return status, headers, sock, rest
    rest += recv_all(sock)
    sock.close()
    return status, headers, None, rest


def socks_request(host: str, port: int) -> bytes:
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raw = host.encode()
        return bytes((5, 1, 0, 3, len(raw))) + raw + port.to_bytes(2, "big")
    atyp = 1 if addr.version == 4 else 4
    return bytes((5, 1, 0, atyp)) + addr.packed + port.to_bytes(2, "big")


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        data = sock.recv(n - len(out))
        if not data:
            break
        out += data
    return out


def socks_via_proxy(
    handle: ProxyHandle, host: str, port: int, *, creds: tuple[str, str] | bool | None = True
) -> tuple[int | None, socket.socket | None]:
    """A SOCKS5 CONNECT; returns (reply code or None if refused earlier, tunnel socket)."""
    sock = open_conn(handle.host, handle.port)
    if creds is None:
        sock.sendall(b"\x05\x01\x00")  # offers only "no authentication"
        answer = recv_exact(sock, 2)
        sock.close()
        assert answer in (b"\x05\xff", b""), answer
        return None, None
    user, password = handle.creds if isinstance(creds, bool) else creds
    sock.sendall(b"\x05\x01\x02")
    assert recv_exact(sock, 2) == b"\x05\x02"
    sock.sendall(
        bytes((1, len(user))) + user.encode() + bytes((len(password),)) + password.encode()
    )
    status = recv_exact(sock, 2)
    if status != b"\x01\x00":
        sock.close()
        return None, None
    sock.sendall(socks_request(host, port))
    reply = recv_exact(sock, 4)
    if len(reply) < 4:
        sock.close()
        return None, None
    rest = recv_exact(sock, 4 + 2 if reply[3] == 1 else 16 + 2)
    assert len(rest) in (6, 18)
    if reply[1] != 0:
        sock.close()
        return reply[1], None
    return 0, sock


def http_in_tunnel(sock: socket.socket, host: str) -> tuple[int, dict[str, str], bytes]:
    with sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
        return parse_response(recv_all(sock))


def closed(events: list[AuditEvent]) -> list[AuditEvent]:
    """The ``close`` events: one per connection (allowed tunnels also have an ``open``)."""
    return [e for e in list(events) if e.phase == "close"]


def expect(condition: bool, message: str) -> None:
    """A positive control: when it does not hold, the test is inconclusive and FAILS."""
    if not condition:
        pytest.fail(f"inconclusive: control failed: {message}")


class Env:
    """Per-test world: one loop thread, upstreams, proxies."""

    # The blocking clients, reachable through the fixture (test modules cannot import
    # conftest at run time under --import-mode=importlib).
    http = staticmethod(http_via_proxy)
    connect = staticmethod(connect_via_proxy)
    socks = staticmethod(socks_via_proxy)
    in_tunnel = staticmethod(http_in_tunnel)
    open_conn = staticmethod(open_conn)
    recv_all = staticmethod(recv_all)
    recv_exact = staticmethod(recv_exact)
    socks_request = staticmethod(socks_request)
    parse_response = staticmethod(parse_response)
    expect = staticmethod(expect)

    def __init__(self) -> None:
        self.lt = LoopThread()
        self.proxies: list[EgressProxy] = []
        self.servers: list[UpstreamServer] = []

    def upstream(
        self,
        name: str,
        host: str = "127.0.0.1",
        *,
        echo: bool = False,
        port: int = 0,
        tls: SSLContext | None = None,
    ) -> UpstreamServer:
        server = UpstreamServer(name, echo=echo)
        self.lt.call(server.start(host, port, tls))
        self.servers.append(server)
        return server

    def proxy(
        self,
        *,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        ports: Iterable[int] = (80, 443),
        table: Mapping[str, Iterable[str] | Callable[[], Iterable[str]]] | None = None,
        limits: ProxyLimits | None = None,
        listen: str = "127.0.0.1",
        audit_jsonl: str | None = None,
    ) -> ProxyHandle:
        events: list[AuditEvent] = []
        resolver = StaticResolver(table)
        connector = LoopbackOnly()
        net = NetPolicy(allow=tuple(allow), deny=tuple(deny), ports=tuple(ports))
        proxy = EgressProxy(
            net,
            session_id="test-session",
            resolver=resolver,
            audit=events.append,
            audit_jsonl=audit_jsonl,
            limits=limits or ProxyLimits(connect_timeout=3.0, head_timeout=5.0),
            connector=connector,
        )
        self.lt.call(proxy.start(listen, 0))
        self.proxies.append(proxy)
        return ProxyHandle(proxy, events, resolver, connector)

    def wait_events(
        self, handle: ProxyHandle, count: int, timeout: float = 5.0
    ) -> list[AuditEvent]:
        """The ``close`` events (one per connection) once `count` have arrived; events are
        reported when a connection ends, so give the loop time to get there."""
        self.settle(lambda: len(closed(handle.events)) >= count, timeout)
        return closed(handle.events)

    def settle(self, done: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait (on the proxy's loop, so its callbacks run) until `done()` holds."""

        async def wait() -> None:
            for _ in range(int(timeout / 0.01)):
                if done():
                    return
                await asyncio.sleep(0.01)

        self.lt.call(wait(), timeout + 5)

    def close(self) -> None:
        async def shutdown() -> None:
            for proxy in self.proxies:
                await proxy.close()
            for server in self.servers:
                await server.close()

        with contextlib.suppress(Exception):
            self.lt.call(shutdown(), 15)
        self.lt.stop()


@pytest.fixture
def env() -> Iterator[Env]:
    world = Env()
    try:
        yield world
    finally:
        world.close()
