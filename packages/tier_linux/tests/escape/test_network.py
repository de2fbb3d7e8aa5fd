"""Escape probes: reaching the host's network from inside.

Every target is a listener this test runs on the host's loopback (127.0.0.1, ::1) or a
unix socket it binds; nothing else is ever contacted. Proves: no route out of the jail's
own network namespace (TCP, UDP, IPv4, IPv6), no host abstract unix socket (those live in
the network namespace), no host path socket outside the visible paths, and, beneath the
namespace, a filter that allows only AF_UNIX sockets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from conftest import Escape, Listener  # the suite's fixture types


def _connect(family: str, address: object) -> str:
    return f"""
s = None
try:
    s = socket.socket(socket.{family}, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect({address!r})
except OSError as exc:
    blocked(err(exc))
finally:
    if s is not None:
        s.close()
ok("connected")
"""


def _unreachable(esc: Escape, server: Listener, family: str) -> None:
    """Connecting works from outside (control); from inside it fails, unseen by the host."""
    code = _connect(family, server.address)
    esc.control(esc.outside(code))
    server.settle()
    accepted = server.accepted
    esc.must_block(esc.inside(code))
    server.settle()
    assert server.accepted == accepted, "the host listener saw a connection from the jail"


@pytest.mark.parametrize("kind", ["tcp4", "tcp6"])
def test_tcp_to_a_host_loopback_listener(
    esc: Escape, listen: Callable[[str], Listener], kind: str
) -> None:
    server = listen(kind)
    _unreachable(esc, server, "AF_INET" if kind == "tcp4" else "AF_INET6")


@pytest.mark.parametrize("kind", ["udp4", "udp6"])
def test_udp_to_a_host_loopback_listener(
    esc: Escape, listen: Callable[[str], Listener], kind: str
) -> None:
    server = listen(kind)
    family = "AF_INET" if kind == "udp4" else "AF_INET6"
    code = f"""
s = None
try:
    s = socket.socket(socket.{family}, socket.SOCK_DGRAM)
    for _ in range(3):
        s.sendto(b"escaped", {server.address!r})
except OSError as exc:
    blocked(err(exc))
finally:
    if s is not None:
        s.close()
ok("sent")  # sending proves nothing by itself; the listener below is the judge
"""
    outside = esc.outside(code)
    server.settle()
    esc.control(outside)
    if not server.received:
        pytest.fail("inconclusive: control failed: the host listener received nothing from outside")
    server.received.clear()
    inside = esc.inside(code)
    server.settle()
    assert not server.received, (
        f"ESCAPE: the host listener received {server.received!r} from the jail"
    )
    esc.held()
    # The filter refuses the socket itself; the namespace would swallow the datagram.
    esc.must_block(inside)


@pytest.mark.parametrize("kind", ["abstract", "path"])
def test_a_host_unix_socket(esc: Escape, listen: Callable[[str], Listener], kind: str) -> None:
    _unreachable(esc, listen(kind), "AF_UNIX")


def test_only_unix_sockets_can_be_created(esc: Escape) -> None:
    code = esc.families_probe(
        ("AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET", "AF_VSOCK", "AF_ALG", "AF_BLUETOOTH")
    )
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code))
    unix = """
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    a, b = socket.socketpair()
except OSError as exc:
    blocked(err(exc))
ok("unix sockets work")
"""
    # The filter is a deny-list of families, not of sockets: unix sockets still work.
    esc.control(esc.inside(unix))


def test_the_jail_has_only_a_loopback_interface(esc: Escape) -> None:
    code = """
lines = open("/proc/net/dev").read().splitlines()[2:]
names = [line.split(":", 1)[0].strip() for line in lines]
if any(n != "lo" for n in names):
    ok(",".join(names))
blocked(",".join(names))
"""
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code))
