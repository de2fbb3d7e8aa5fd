"""Connections handed to the proxy as sockets (the Linux bridge), the proxy's own loop
thread, and the two-address loopback listener (the macOS bridge). Loopback only."""

from __future__ import annotations

import base64
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_core.egress import ProxyLimits, ProxySettings, ProxyThread, StaticResolver
from panday_core.egress.handoff import MESSAGE
from panday_core.egress.testing import LoopbackOnly
from panday_core.policy import NetPolicy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from conftest import Env

    from panday_core.egress import AuditEvent

ALLOWED = "allowed.test"


class Handoff:
    """A session proxy on its own thread, serving a handoff socket, and a client for it."""

    def __init__(self, path: str, net: NetPolicy, table: dict[str, list[str]]) -> None:
        self.events: list[AuditEvent] = []
        self.connector = LoopbackOnly()
        settings = ProxySettings(
            resolver=StaticResolver(table),
            audit=self.events.append,
            connector=self.connector,
            limits=ProxyLimits(connect_timeout=3.0, head_timeout=5.0),
        )
        self.thread = ProxyThread(net, session_id="handoff-test", settings=settings)
        self.path = self.thread.start_handoff(path)
        self.relay = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.relay.connect(self.path)

    def send(self, *fds: int, message: bytes = MESSAGE) -> None:
        rights = b"".join(fd.to_bytes(4, "little", signed=True) for fd in fds)
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)] if fds else []
        self.relay.sendmsg([message], ancillary)

    def tcp_pair(self) -> tuple[socket.socket, socket.socket]:
        """(our end, the end we hand over): a connected loopback TCP pair."""
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            ours = socket.create_connection(listener.getsockname(), timeout=10)
            theirs, _ = listener.accept()
        ours.settimeout(10)
        return ours, theirs

    def handed(self) -> socket.socket:
        ours, theirs = self.tcp_pair()
        self.send(theirs.fileno())
        theirs.close()
        return ours

    def basic(self, command_id: str | None = None) -> bytes:
        user, token = self.thread.credentials(command_id)
        return base64.b64encode(f"{user}:{token}".encode())

    def closed(self) -> list[AuditEvent]:
        return [e for e in list(self.events) if e.phase == "close"]

    def wait_events(self, count: int, timeout: float = 5.0) -> list[AuditEvent]:
        """The close events (one per connection), once `count` have arrived."""
        deadline = time.monotonic() + timeout
        while len(self.closed()) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.closed()

    def close(self) -> None:
        self.relay.close()
        self.thread.close()


@pytest.fixture
def handoff(env: Env, tmp_path: Path) -> Iterator[tuple[Handoff, int]]:
    up = env.upstream("up")
    world = Handoff(
        str(tmp_path / "h.sock"),
        NetPolicy(allow=(ALLOWED, "127.0.0.1"), ports=(up.port,)),
        {ALLOWED: ["127.0.0.1"]},
    )
    try:
        yield world, up.port
    finally:
        world.close()


def _get(env: Env, sock: socket.socket, host: str, port: int, auth: bytes | None) -> bytes:
    line = f"GET http://{host}:{port}/ HTTP/1.1\r\nHost: {host}\r\n".encode()
    if auth is not None:
        line += b"Proxy-Authorization: Basic " + auth + b"\r\n"
    with sock:
        sock.sendall(line + b"\r\n")
        return env.recv_all(sock)


def test_a_handed_over_socket_is_served_like_any_client(
    env: Env, handoff: tuple[Handoff, int]
) -> None:
    world, port = handoff
    answer = _get(env, world.handed(), ALLOWED, port, world.basic("cmd-1"))
    status, _, body = env.parse_response(answer)
    assert (status, body) == (200, b"hello from up\n")
    answer = _get(env, world.handed(), "other.test", port, world.basic("cmd-2"))
    status, headers, _ = env.parse_response(answer)
    assert status == 403
    assert headers["x-panday-refused"] == "other.test is not in net.allow"
    first, second = world.wait_events(2)
    assert (first.verdict, first.command_id, first.address) == ("allowed", "cmd-1", "127.0.0.1")
    assert (second.verdict, second.command_id) == ("refused", "cmd-2")


def test_a_handed_over_socket_still_needs_the_credentials(
    env: Env, handoff: tuple[Handoff, int]
) -> None:
    world, port = handoff
    status, _, _ = env.parse_response(_get(env, world.handed(), ALLOWED, port, world.basic()))
    env.expect(status == 200, "the same request with the credentials passes")
    for auth in (None, base64.b64encode(b"session:" + b"0" * 40)):
        status, _, _ = env.parse_response(_get(env, world.handed(), ALLOWED, port, auth))
        assert status == 407


def _pipe() -> tuple[int, list[int]]:
    r, w = os.pipe()
    return r, [w]


def _unix_stream() -> tuple[int, list[int]]:
    a, b = socket.socketpair()
    return a.detach(), [b.detach()]


def _listening_tcp() -> tuple[int, list[int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock.detach(), []


@pytest.mark.parametrize("make", [_pipe, _unix_stream, _listening_tcp])
def test_anything_but_a_connected_tcp_socket_is_closed_unserved(
    env: Env, handoff: tuple[Handoff, int], make: Callable[[], tuple[int, list[int]]]
) -> None:
    world, port = handoff
    fd, keep = make()
    try:
        world.send(fd)
        os.close(fd)
        (event,) = world.wait_events(1)
        assert event.verdict == "refused"
        assert "handed over" in event.reason
        # The proxy goes on serving the relay connection that sent it.
        status, _, _ = env.parse_response(_get(env, world.handed(), ALLOWED, port, world.basic()))
        assert status == 200
    finally:
        for other in keep:
            os.close(other)


def test_extra_descriptors_in_one_message_are_all_closed(
    env: Env, handoff: tuple[Handoff, int]
) -> None:
    world, _ = handoff
    ours_a, theirs_a = world.tcp_pair()
    ours_b, theirs_b = world.tcp_pair()
    with ours_a, ours_b, theirs_a, theirs_b:
        world.send(theirs_a.fileno(), theirs_b.fileno())
        theirs_a.close()
        theirs_b.close()
        (event,) = world.wait_events(1)
        assert "malformed handoff message (2 descriptors)" in event.reason
        # Both handed ends were closed by the proxy: our ends read end-of-file.
        assert env.recv_all(ours_a) == b""
        assert env.recv_all(ours_b) == b""


def test_a_closed_proxy_refuses_the_next_handoff(handoff: tuple[Handoff, int]) -> None:
    world, _ = handoff
    ours = world.handed()
    ours.close()
    assert world.thread.alive
    world.thread.close()
    assert not world.thread.alive
    assert not Path(world.path).exists()
    ours, theirs = world.tcp_pair()
    with ours, theirs, pytest.raises((BrokenPipeError, ConnectionResetError)):
        world.send(theirs.fileno())  # the proxy closed the relay's connection on its way out
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as fresh,
        pytest.raises((FileNotFoundError, ConnectionRefusedError)),
    ):
        fresh.connect(world.path)


def test_a_stopped_loop_closes_the_proxy_on_its_way_out(handoff: tuple[Handoff, int]) -> None:
    """However the proxy's loop ends, a relay learns it at once (no silent backlog)."""
    world, _ = handoff
    loop = world.thread._loop  # pyright: ignore[reportPrivateUsage] - killing it is the test
    loop.call_soon_threadsafe(loop.stop)
    deadline = time.monotonic() + 5
    while world.thread.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not world.thread.alive
    world.relay.settimeout(5)
    assert world.relay.recv(1) == b""  # the proxy closed the relay's connection


def test_the_loopback_pair_holds_one_port_on_both_addresses(env: Env) -> None:
    thread = ProxyThread(NetPolicy(allow=("example.com",)), session_id="pair")
    try:
        port = thread.start_loopback()
        assert thread.proxy.tcp_address == ("127.0.0.1", port)
        for host, family in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
            with socket.socket(family) as other, pytest.raises(OSError, match="in use"):
                other.bind((host, port))
        with env.open_conn("::1", port) as sock:
            sock.sendall(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
            status, _, _ = env.parse_response(env.recv_all(sock))
        assert status == 407
    finally:
        thread.close()


def test_a_port_someone_holds_on_ipv6_loopback_is_never_shared(env: Env) -> None:
    """The profile names both addresses: a port another process holds on ::1 is refused."""
    squatter = socket.socket(socket.AF_INET6)
    squatter.bind(("::1", 0))
    squatter.listen(1)
    port = int(squatter.getsockname()[1])
    proxy = env.proxy(allow=["example.com"])
    try:
        with pytest.raises(OSError, match="in use"):
            env.lt.call(proxy.proxy.start_loopback(port))
    finally:
        squatter.close()


def test_one_jail_holds_a_few_relay_connections_at_most(handoff: tuple[Handoff, int]) -> None:
    """Every process of a jail can reach the socket; this process is one jail here (its pid
    namespace): it holds `max_relays_per_jail` connections (the fixture's included)."""
    world, _ = handoff
    extra = [socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(6)]
    try:
        for sock in extra:
            sock.connect(world.path)
        time.sleep(0.3)
        alive = 0
        for sock in extra:
            sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
            try:
                closed = sock.recv(1) == b""
            except BlockingIOError:
                closed = False
            alive += not closed
        assert alive == 3  # with the fixture's own connection: four
        world.wait_events(0)
        assert any("relay connection refused" in e.reason for e in world.events)
        # The fixture's connection still serves.
        ours = world.handed()
        ours.sendall(b"GET http://x.test/ HTTP/1.1\r\n\r\n")
        assert ours.recv(12) == b"HTTP/1.1 407"
        ours.close()
    finally:
        for sock in extra:
            sock.close()
