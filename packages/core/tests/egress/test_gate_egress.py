"""Gates round three (issue 28): the proxy's own accounting, checked against what happens.

* One command cannot take every slot by default: refused as busy at its share while the
  proxy still has room, another command gets through (kills "egress: the default
  per-command share is every slot").
* A spliced tunnel's descriptors are charged to the descriptor budget as the process really
  holds them, counted in /proc/self/fd (kills "egress: take(count) charges one descriptor").

Real sockets on 127.0.0.1; every wait is a bounded poll for a state the proxy reaches.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest

from panday_core.egress import ProxyLimits, splicing

if TYPE_CHECKING:
    import socket

    from conftest import Env, ProxyHandle


def test_one_command_cannot_take_every_slot_by_default(env: Env) -> None:
    echo = env.upstream("echo", echo=True)
    total = 300  # above the smallest default share, so the share is what refuses
    handle = env.proxy(
        allow=["127.0.0.1"],
        ports=[echo.port],
        limits=ProxyLimits(connect_timeout=5.0, head_timeout=10.0, max_connections=total),
    )
    greedy = handle.basic(handle.proxy.credentials("greedy"))
    other = handle.basic(handle.proxy.credentials("other"))
    target = f"127.0.0.1:{echo.port}"
    held: list[socket.socket] = []
    try:
        refused = False
        for _ in range(total):
            status, _, sock, _ = env.connect(handle, target, auth=greedy)
            if sock is None:
                assert status == 503, status  # refused as busy, not broken
                refused = True
                break
            held.append(sock)
        assert refused, f"one command held all {len(held)} of {total} slots"
        assert 0 < len(held) < total
        # The proxy had room: another command still gets a tunnel.
        status, _, sock, _ = env.connect(handle, target, auth=other)
        assert status == 200, "another command was shut out by one command's tunnels"
        assert sock is not None
        held.append(sock)
    finally:
        for sock in held:
            sock.close()


def _open_fds() -> int:
    return len(os.listdir(f"/proc/{os.getpid()}/fd"))  # noqa: PTH208 - a count of names


def _spliced(handle: ProxyHandle) -> int:
    return sum(
        1
        for client in handle.proxy.clients
        for end in (client, client.up)
        if end is not None and end.splice is not None
    )


@pytest.mark.skipif(not splicing.AVAILABLE, reason="splice(2) is Linux-only")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")
def test_a_spliced_tunnel_is_charged_the_descriptors_it_holds(env: Env) -> None:
    echo = env.upstream("echo", echo=True)
    handle = env.proxy(
        allow=["127.0.0.1"],
        ports=[echo.port],
        limits=ProxyLimits(connect_timeout=5.0, head_timeout=10.0, splice_after=0),
    )
    budget = handle.proxy.descriptors
    env.settle(lambda: not handle.proxy.clients)
    used, fds = budget.used, _open_fds()
    status, _, sock, _ = env.connect(handle, f"127.0.0.1:{echo.port}")
    assert status == 200
    assert sock is not None
    with sock:
        sock.sendall(b"x" * 65536)
        got = 0
        while got < 65536:
            got += len(sock.recv(65536))
        env.settle(lambda: _spliced(handle) == 2)
        assert _spliced(handle) == 2, "inconclusive: the tunnel never spliced both ways"
        charged = budget.used - used
        # The process's new descriptors, less the two that are not the proxy's: this test's
        # own socket and the echo upstream's accepted one.
        real = _open_fds() - fds - 2
        assert charged >= real, f"the budget was charged {charged} for {real} descriptors"
    env.settle(lambda: not handle.proxy.clients)
    env.settle(lambda: budget.used == used)
    assert budget.used == used, "descriptors were not given back as they were taken"
