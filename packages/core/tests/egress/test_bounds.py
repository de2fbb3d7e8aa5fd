"""Bounds: what a client cannot make the proxy hold or wait for, and load it must carry."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest

from panday_core.egress import ProxyLimits

if TYPE_CHECKING:
    import pathlib

    from conftest import Env

ALLOWED = "allowed.test"


def test_a_header_bomb_is_cut_off_without_forwarding(env: Env) -> None:
    up = env.upstream("up")
    limits = ProxyLimits(max_head_bytes=8192)
    handle = env.proxy(
        allow=[ALLOWED, "127.0.0.1"], ports=[up.port], table={ALLOWED: ["127.0.0.1"]}, limits=limits
    )
    status, _, _ = env.http(
        handle, f"http://{ALLOWED}:{up.port}/", extra=b"X-Pad: " + b"a" * 4000 + b"\r\n"
    )
    env.expect(status == 200, "a head within the bound is forwarded")

    sock = env.open_conn(handle.host, handle.port)
    start = (
        f"GET http://{ALLOWED}:{up.port}/ HTTP/1.1\r\nProxy-Authorization: ".encode()
        + handle.basic()
        + b"\r\n"
    )
    sent = 0
    try:
        sock.sendall(start)
        bomb = b"X-Bomb: " + b"b" * 1000 + b"\r\n"
        for _ in range(1000):  # up to ~1 MB; the proxy must stop reading long before
            sock.sendall(bomb)
            sent += len(bomb)
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = env.recv_all(sock)
    sock.close()
    status, headers, _ = env.parse_response(answer)
    assert status == 431 or answer == b""
    if status:
        assert (
            headers["x-panday-refused"] == "malformed request: request head larger than 8192 bytes"
        )
    assert up.connections == 1
    (_, event) = env.wait_events(handle, 2)
    assert event.verdict == "refused"
    assert "larger than 8192" in event.reason


def test_a_header_line_that_never_ends_is_cut_off_at_the_bound(env: Env) -> None:
    """One header line with no end, longer than the head bound: the bound is judged on what
    has arrived, not only on complete lines (a proxy that waited for the line's end would
    keep reading it). Control: the same line within the bound, ended, is forwarded."""
    up = env.upstream("up")
    limits = ProxyLimits(max_head_bytes=8192)
    handle = env.proxy(
        allow=[ALLOWED, "127.0.0.1"], ports=[up.port], table={ALLOWED: ["127.0.0.1"]}, limits=limits
    )
    status, _, _ = env.http(
        handle, f"http://{ALLOWED}:{up.port}/", extra=b"X-Long: " + b"a" * 4000 + b"\r\n"
    )
    env.expect(status == 200, "a head within the bound is forwarded")
    sock = env.open_conn(handle.host, handle.port)
    try:
        sock.sendall(
            f"GET http://{ALLOWED}:{up.port}/ HTTP/1.1\r\nProxy-Authorization: ".encode()
            + handle.basic()
            + b"\r\nX-Endless: "
            + b"c" * 20_000  # no CRLF: the line never ends
        )
        answer = env.recv_all(sock)
    finally:
        sock.close()
    status, headers, _ = env.parse_response(answer)
    assert status == 431, answer[:200]
    assert "larger than 8192" in headers["x-panday-refused"]
    assert up.connections == 1  # only the control reached the upstream


def test_an_overlong_request_line_is_refused(env: Env) -> None:
    up = env.upstream("up")
    handle = env.proxy(
        allow=[ALLOWED],
        ports=[up.port],
        table={ALLOWED: ["127.0.0.1"]},
        limits=ProxyLimits(max_request_line=256),
    )
    with env.open_conn(handle.host, handle.port) as sock:
        sock.sendall(f"GET http://{ALLOWED}:{up.port}/{'a' * 300} HTTP/1.1\r\n".encode())
        status, _, _ = env.parse_response(env.recv_all(sock))
    assert status == 414
    assert up.connections == 0


def test_slowloris_is_cut_off_by_the_head_timeout(env: Env) -> None:
    up = env.upstream("up")
    limits = ProxyLimits(head_timeout=0.5)
    handle = env.proxy(
        allow=[ALLOWED, "127.0.0.1"], ports=[up.port], table={ALLOWED: ["127.0.0.1"]}, limits=limits
    )
    request = (
        f"GET http://{ALLOWED}:{up.port}/ HTTP/1.1\r\nProxy-Authorization: ".encode()
        + handle.basic()
        + b"\r\n\r\n"
    )
    with env.open_conn(handle.host, handle.port) as sock:
        sock.sendall(request)
        status, _, _ = env.parse_response(env.recv_all(sock))
    env.expect(status == 200, "the same request sent at once is forwarded")

    closed_after = None
    with env.open_conn(handle.host, handle.port) as sock:
        start = time.monotonic()
        try:
            for i in range(len(request) - 1):  # a byte every 50 ms: ~8 s if never cut off
                sock.sendall(request[i : i + 1])
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = env.recv_all(sock)
        closed_after = time.monotonic() - start
    status, headers, _ = env.parse_response(answer)
    assert status == 408
    assert headers["x-panday-refused"] == "request not complete within 0.5 s"
    assert closed_after < 5.0
    assert up.connections == 1

    # SOCKS5: a greeting that never finishes is cut off as well.
    with env.open_conn(handle.host, handle.port) as sock:
        sock.sendall(b"\x05")
        start = time.monotonic()
        assert env.recv_all(sock) == b""
        assert time.monotonic() - start < 5.0


def test_an_idle_tunnel_is_closed(env: Env) -> None:
    echo = env.upstream("echo", echo=True)
    handle = env.proxy(allow=["127.0.0.1"], ports=[echo.port], limits=ProxyLimits(idle_timeout=0.4))
    status, _, sock, _ = env.connect(handle, f"127.0.0.1:{echo.port}")
    assert status == 200
    assert sock is not None
    with sock:
        for _ in range(4):  # traffic keeps it open past the idle timeout
            sock.sendall(b"ping")
            env.expect(env.recv_exact(sock, 4) == b"ping", "the tunnel carries traffic")
            time.sleep(0.2)
        start = time.monotonic()
        assert env.recv_all(sock) == b""
        assert time.monotonic() - start < 3.0
    (event,) = env.wait_events(handle, 1)
    assert event.reason.endswith("closed after 0.4 s without traffic")


def test_connections_beyond_the_limit_are_closed_on_accept(env: Env) -> None:
    echo = env.upstream("echo", echo=True)
    handle = env.proxy(
        allow=["127.0.0.1"],
        ports=[echo.port],
        limits=ProxyLimits(max_connections=3, head_timeout=5.0),
    )
    tunnels: list[socket.socket] = []
    try:
        for _ in range(2):
            status, _, sock, _ = env.connect(handle, f"127.0.0.1:{echo.port}")
            env.expect(status == 200 and sock is not None, "tunnels within the limit open")
            assert sock is not None
            tunnels.append(sock)
        # An idle connection without credentials takes the third slot, until someone
        # needs it: the proxy is full, so the newcomer closes it rather than being refused.
        idle = env.open_conn(handle.host, handle.port)
        env.settle(lambda: len(handle.proxy.clients) == 3)
        status, _, sock, _ = env.connect(handle, f"127.0.0.1:{echo.port}")
        assert status == 200
        assert sock is not None
        tunnels.append(sock)
        assert env.recv_all(idle) == b""
        idle.close()
        # Three tunnels with credentials hold every slot: nothing can be closed for a
        # newcomer, so it is closed on accept.
        extra = env.open_conn(handle.host, handle.port)
        extra.sendall(b"CONNECT 127.0.0.1:80 HTTP/1.1\r\n\r\n")
        assert env.recv_all(extra) == b""
        extra.close()
        env.settle(lambda: any("connection limit (3) reached" in e.reason for e in handle.events))
        reasons = [e.reason for e in env.wait_events(handle, 2)]
        assert any(r.startswith("closed without credentials to make room") for r in reasons)
        assert "closed on accept: connection limit (3) reached" in reasons
        for sock in tunnels:  # the tunnels never noticed
            sock.sendall(b"ping")
            assert env.recv_exact(sock, 4) == b"ping"
    finally:
        for sock in tunnels:
            sock.close()


def _enough_descriptors(needed: int) -> None:
    """Client, proxy and upstream share this process: about four descriptors per tunnel."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.fail(f"RLIMIT_NOFILE hard limit {hard} < {needed}: raise it to run this test")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def test_a_thousand_concurrent_tunnels_with_no_errors(env: Env) -> None:
    _enough_descriptors(4096 + 512)
    echo = env.upstream("echo", echo=True)
    handle = env.proxy(allow=["127.0.0.1"], ports=[echo.port])
    head = (
        f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\nProxy-Authorization: ".encode()
        + handle.basic()
        + b"\r\n\r\n"
    )
    count = 1000

    async def main() -> tuple[int, list[str]]:
        errors: list[str] = []
        opened = asyncio.Event()
        ready = 0
        conns: list[asyncio.StreamWriter] = []

        async def one(i: int) -> None:
            nonlocal ready
            try:
                reader, writer = await asyncio.open_connection(handle.host, handle.port)
                conns.append(writer)
                writer.write(head)
                line = await reader.readuntil(b"\r\n\r\n")
                if not line.startswith(b"HTTP/1.1 200"):
                    errors.append(f"{i}: {line[:40]!r}")
                    return
                msg = f"tunnel {i}\n".encode()
                writer.write(msg)
                if await reader.readexactly(len(msg)) != msg:
                    errors.append(f"{i}: wrong echo")
                ready += 1
                if ready == count:
                    opened.set()
                await opened.wait()  # hold every tunnel open until all are up
                writer.write(msg)
                if await reader.readexactly(len(msg)) != msg:
                    errors.append(f"{i}: wrong echo while all open")
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                errors.append(f"{i}: {exc!r}")
                opened.set()

        async with asyncio.timeout(60):
            await asyncio.gather(*(one(i) for i in range(count)))
        live = len(handle.proxy.clients)
        for writer in conns:
            writer.close()
        return live, errors

    live, errors = asyncio.run(main())
    assert errors == []
    assert live == count
    events = env.wait_events(handle, count, timeout=20)
    assert len(events) == count
    assert all(e.verdict == "allowed" for e in events)


def _banner(proc: subprocess.Popen[str]) -> list[str]:
    """The standalone proxy's first lines, up to the last ``export``."""
    assert proc.stdout is not None
    lines: list[str] = []
    timer = threading.Timer(30, proc.kill)  # bound the wait for the banner
    timer.start()
    try:
        while not any(line.startswith("export NO_PROXY=") for line in lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
    finally:
        timer.cancel()
    return lines


def test_a_killed_proxy_leaves_no_route(env: Env, tmp_path: pathlib.Path) -> None:
    """The standalone proxy (what `panday proxy` runs) in its own process: it serves, it is
    killed, and the next connection through its address fails."""
    up = env.upstream("up")
    audit = tmp_path / "audit.jsonl"
    argv = [
        sys.executable, "-m", "panday_core.egress",
        "--allow", ALLOWED, "--allow", "127.0.0.1", "--port", str(up.port),
        "--resolve", f"{ALLOWED}=127.0.0.1", "--audit-jsonl", str(audit),
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = _banner(proc)
        env.expect(
            any(line.startswith("export HTTP_PROXY=http://session:") for line in lines),
            f"banner: {lines}",
        )
        url = (
            next(line for line in lines if line.startswith("export HTTP_PROXY="))
            .split("=", 1)[1]
            .strip()
        )
        creds, _, where = url.removeprefix("http://").rpartition("@")
        host, _, port = where.rpartition(":")
        user, _, password = creds.partition(":")
        import base64  # noqa: PLC0415

        auth = b"Basic " + base64.b64encode(f"{user}:{password}".encode())
        request = (
            f"GET http://{ALLOWED}:{up.port}/ HTTP/1.1\r\nProxy-Authorization: ".encode()
            + auth
            + b"\r\n\r\n"
        )
        with env.open_conn(host, int(port)) as sock:
            sock.sendall(request)
            status, _, _ = env.parse_response(env.recv_all(sock))
        env.expect(status == 200, "the standalone proxy forwards an allowed request")
        event_line = proc.stdout.readline()
        assert '"verdict":"allowed"' in event_line
        assert '"verdict":"allowed"' in audit.read_text()

        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        try:
            with env.open_conn(host, int(port)) as sock:
                sock.sendall(request)
                answer = env.recv_all(sock)
        except ConnectionRefusedError:
            answer = None
        assert answer is None or answer == b""
        assert up.connections == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_the_standalone_proxy_stops_cleanly_on_sigterm_and_rejects_bad_input() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "panday_core.egress", "--allow", "https://x.test"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        (
            "error: net.allow[0]: 'https://x.test' is a URL; "
            "write only the host name (e.g. 'api.github.com')"
        )
    ]
    proc2 = subprocess.Popen(
        [sys.executable, "-m", "panday_core.egress", "--allow", "x.test"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc2.stdout is not None
        assert proc2.stdout.readline().startswith("# panday egress proxy, session ")
        proc2.send_signal(signal.SIGTERM)
        assert proc2.wait(20) == 0
    finally:
        if proc2.poll() is None:
            proc2.kill()
            proc2.wait(10)
        for stream in (proc2.stdout, proc2.stderr):
            if stream is not None:
                stream.close()
    assert socket  # imported for open_conn users above
