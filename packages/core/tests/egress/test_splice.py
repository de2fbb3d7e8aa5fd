"""Bulk tunnel traffic moved by splice(2): every byte arrives, in order, counted, and every
descriptor is released. Each test runs with the switch right away, after the default
threshold, and never (the buffered relay), so both paths carry the same traffic."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, cast

import pytest

from panday_core.egress import ProxyLimits, splicing

if TYPE_CHECKING:
    from conftest import Env, ProxyHandle

MIB = 1 << 20
HOST = "bulk.test"
linux_only = pytest.mark.skipif(not splicing.AVAILABLE, reason="splice(2) is Linux-only")
MODES = [
    pytest.param(0, id="spliced-at-once", marks=linux_only),
    pytest.param(MIB, id="spliced-after-1MiB", marks=linux_only),
    pytest.param(None, id="buffered"),
]


class Source(asyncio.Protocol):
    """``N\\n`` -> N pseudo-random bytes, then close; anything else is echoed."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.echo = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.echo:
            self.transport.write(data)
            return
        self.head += data
        if not self.head.startswith(b"N"):
            self.echo = True
            self.transport.write(self.head)
            return
        if b"\n" in self.head:
            size = int(self.head[1 : self.head.index(b"\n")])
            self.transport.write(payload(size))
            self.transport.close()


def payload(size: int) -> bytes:
    return (hashlib.sha256(b"panday").digest() * (size // 32 + 1))[:size]


def _open_fds() -> int:
    if not sys.platform.startswith("linux"):
        return 0
    return len(os.listdir(f"/proc/{os.getpid()}/fd"))  # noqa: PTH208 - a count of names


class _Server:
    """The upstream, closed with the test's world (Env closes what it lists)."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.get_running_loop().create_server(Source, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


def _source(env: Env) -> int:
    server = _Server()
    port = env.lt.call(server.start())
    env.servers.append(server)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType] - closed the same way
    return port


def _world(env: Env, after: int | None, idle: float = 300.0) -> tuple[ProxyHandle, int]:
    port = _source(env)
    limits = ProxyLimits(
        connect_timeout=3.0, head_timeout=5.0, idle_timeout=idle, splice_after=after
    )
    handle = env.proxy(
        allow=[HOST, "127.0.0.1"], ports=[port], table={HOST: ["127.0.0.1"]}, limits=limits
    )
    return handle, port


def _tunnel(env: Env, handle: ProxyHandle, port: int) -> socket.socket:
    status, _, sock, rest = env.connect(handle, f"{HOST}:{port}")
    assert status == 200
    assert sock is not None
    assert rest == b""
    return sock


def _spliced(handle: ProxyHandle) -> bool:
    return any(
        end is not None and end.splice is not None
        for client in handle.proxy.clients
        for end in (client, client.up)
    )


@pytest.mark.parametrize("after", MODES)
def test_a_download_arrives_whole_and_counted(env: Env, after: int | None) -> None:
    handle, port = _world(env, after)
    size = 16 * MIB + 12345
    before = _open_fds()
    with _tunnel(env, handle, port) as sock:
        sock.sendall(f"N{size}\n".encode())
        got = env.recv_all(sock, limit=size + 1)
    assert len(got) == size
    assert got == payload(size)
    (event,) = env.wait_events(handle, 1)
    assert (event.verdict, event.bytes_down) == ("allowed", size)
    time.sleep(0.1)
    assert _open_fds() <= before, "a spliced direction kept a descriptor"


@pytest.mark.parametrize("after", MODES)
def test_both_directions_and_a_half_close(env: Env, after: int | None) -> None:
    handle, port = _world(env, after)
    data = os.urandom(6 * MIB)
    with _tunnel(env, handle, port) as sock:
        received = bytearray()

        def read_all() -> None:
            while chunk := sock.recv(1 << 16):
                received.extend(chunk)

        reader = threading.Thread(target=read_all, daemon=True)
        reader.start()
        sock.sendall(b"E" + data)
        if after == 0:
            assert _spliced(handle), "the tunnel did not switch to splice"
        sock.shutdown(socket.SHUT_WR)  # the end travels to the upstream, which then closes
        reader.join(30)
        assert not reader.is_alive()
    assert bytes(received) == b"E" + data
    (event,) = env.wait_events(handle, 1)
    assert event.bytes_up == event.bytes_down == len(data) + 1


@pytest.mark.parametrize("after", MODES)
def test_an_idle_spliced_tunnel_is_closed(env: Env, after: int | None) -> None:
    handle, port = _world(env, after, idle=0.5)
    with _tunnel(env, handle, port) as sock:
        sock.sendall(b"E" + bytes(2 * MIB))
        got = 0
        while got < 2 * MIB + 1:
            got += len(sock.recv(1 << 16))
        start = time.monotonic()
        assert env.recv_all(sock) == b""
        assert time.monotonic() - start < 10
    (event,) = env.wait_events(handle, 1)
    assert "without traffic" in event.reason
