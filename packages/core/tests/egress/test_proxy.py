"""The egress proxy over real loopback sockets: what passes, what is refused, and why."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from panday_core.egress import ProxyLimits

if TYPE_CHECKING:
    from conftest import Env, ProxyHandle, UpstreamServer

ALLOWED = "allowed.test"


def _allowed_proxy(env: Env) -> tuple[ProxyHandle, int]:
    """A proxy allowing `allowed.test`, which the resolver maps to an upstream on 127.0.0.1.

    The proxy refuses loopback answers unless the IP literal is allowlisted, so this
    positive-control world lists 127.0.0.1 as well: it is the "public" address here.
    """
    up = env.upstream("up")
    handle = env.proxy(
        allow=[ALLOWED, "127.0.0.1"], ports=[up.port], table={ALLOWED: ["127.0.0.1"]}
    )
    return handle, up.port


def test_plain_http_to_an_allowed_host_is_forwarded(env: Env) -> None:
    handle, port = _allowed_proxy(env)
    status, _, body = env.http(handle, f"http://{ALLOWED}:{port}/x?y=1")
    assert status == 200
    assert body == b"hello from up\n"
    (event,) = env.wait_events(handle, 1)
    assert event.verdict == "allowed"
    assert event.protocol == "http"
    assert event.host == ALLOWED
    assert event.port == port
    assert event.address == "127.0.0.1"
    assert event.bytes_down > 0
    assert event.session_id == "test-session"


def test_connect_to_an_allowed_host_tunnels(env: Env) -> None:
    handle, port = _allowed_proxy(env)
    status, _, sock, _ = env.connect(handle, f"{ALLOWED}:{port}")
    assert status == 200
    assert sock is not None
    status, _, body = env.in_tunnel(sock, ALLOWED)
    assert (status, body) == (200, b"hello from up\n")
    (event,) = env.wait_events(handle, 1)
    assert (event.verdict, event.protocol) == ("allowed", "http-connect")


def test_socks5_to_an_allowed_host_tunnels(env: Env) -> None:
    handle, port = _allowed_proxy(env)
    code, sock = env.socks(handle, ALLOWED, port)
    assert code == 0
    assert sock is not None
    status, _, body = env.in_tunnel(sock, ALLOWED)
    assert (status, body) == (200, b"hello from up\n")
    (event,) = env.wait_events(handle, 1)
    assert (event.verdict, event.protocol) == ("allowed", "socks5")


# ------------------------------------------------------------------------- refusals


def _canary_world(
    env: Env, audit_jsonl: str | None = None
) -> tuple[ProxyHandle, int, UpstreamServer]:
    """`allowed.test` → the upstream; `other.test` → a canary. Both resolve to 127.0.0.1,
    which is allowlisted, so only the name check can stop a request to `other.test`."""
    up = env.upstream("up")
    handle = env.proxy(
        allow=[ALLOWED, "127.0.0.1"],
        ports=[up.port],
        table={ALLOWED: ["127.0.0.1"], "other.test": ["127.0.0.1"]},
        audit_jsonl=audit_jsonl,
    )
    return handle, up.port, up


def test_a_host_not_in_the_allowlist_is_refused_with_its_reason(env: Env) -> None:
    handle, port, up = _canary_world(env)
    status, _, _ = env.http(handle, f"http://{ALLOWED}:{port}/")
    env.expect(status == 200, "the allowed host is reachable through this proxy")
    before = up.connections

    status, headers, body = env.http(handle, f"http://other.test:{port}/")
    assert status == 403
    assert headers["x-panday-refused"] == "other.test is not in net.allow"
    assert b"other.test is not in net.allow" in body

    status, headers, sock, _ = env.connect(handle, f"other.test:{port}")
    assert (status, sock) == (403, None)
    assert "not in net.allow" in headers["x-panday-refused"]

    code, sock = env.socks(handle, "other.test", port)
    assert (code, sock) == (2, None)  # "connection not allowed by ruleset"

    assert up.connections == before
    events = env.wait_events(handle, 4)
    refused = [e for e in events if e.verdict == "refused"]
    assert len(refused) == 3
    assert {e.protocol for e in refused} == {"http", "http-connect", "socks5"}
    assert all(
        e.host == "other.test" and e.reason == "other.test is not in net.allow" for e in refused
    )


def test_deny_wins_and_a_wildcard_never_covers_the_apex(env: Env) -> None:
    up = env.upstream("up")
    table = {n: ["127.0.0.1"] for n in ("a.allowed.test", "bad.allowed.test", "allowed.test")}
    handle = env.proxy(
        allow=["*.allowed.test", "127.0.0.1"],
        deny=["bad.allowed.test"],
        ports=[up.port],
        table=table,
    )
    status, _, _ = env.http(handle, f"http://a.allowed.test:{up.port}/")
    env.expect(status == 200, "a subdomain covered by the wildcard is reachable")
    status, headers, _ = env.http(handle, f"http://bad.allowed.test:{up.port}/")
    assert status == 403
    assert (
        headers["x-panday-refused"] == "bad.allowed.test is denied by net.deny 'bad.allowed.test'"
    )
    status, headers, _ = env.http(handle, f"http://allowed.test:{up.port}/")
    assert status == 403
    assert headers["x-panday-refused"] == "allowed.test is not in net.allow"
    assert up.connections == 1


def test_a_port_outside_net_ports_is_refused(env: Env) -> None:
    handle, port, up = _canary_world(env)
    other = env.upstream("other-port")
    status, _, _ = env.http(handle, f"http://{ALLOWED}:{port}/")
    env.expect(status == 200, "the allowed port is reachable")
    status, headers, _ = env.http(handle, f"http://{ALLOWED}:{other.port}/")
    assert status == 403
    assert headers["x-panday-refused"] == f"port {other.port} is not in net.ports [{port}]"
    assert other.connections == 0
    assert up.connections == 1


def test_an_ip_literal_is_refused_unless_allowlisted(env: Env) -> None:
    up = env.upstream("up")
    table = {ALLOWED: ["127.0.0.1"]}
    # Control: with the literal allowlisted, the same requests reach the upstream.
    control = env.proxy(allow=["127.0.0.1"], ports=[up.port], table=table)
    status, _, _ = env.http(control, f"http://127.0.0.1:{up.port}/")
    env.expect(status == 200, "an allowlisted literal is reachable over HTTP")
    code, sock = env.socks(control, "127.0.0.1", up.port)
    env.expect(
        code == 0 and sock is not None, "an allowlisted literal is reachable over SOCKS5 (IPv4)"
    )
    if sock is not None:
        sock.close()
    reached = up.connections

    handle = env.proxy(allow=[ALLOWED], ports=[up.port], table=table)
    status, headers, _ = env.http(handle, f"http://127.0.0.1:{up.port}/")
    assert status == 403
    assert headers["x-panday-refused"] == "127.0.0.1 is not in net.allow"
    status, _, _, _ = env.connect(handle, f"127.0.0.1:{up.port}")
    assert status == 403
    code, _ = env.socks(handle, "127.0.0.1", up.port)
    assert code == 2
    assert up.connections == reached
    assert handle.connector.attempts == []


def test_ipv6_listener_connect_and_socks5_ipv6_address_type(env: Env) -> None:
    up = env.upstream("up6", host="::1")
    handle = env.proxy(allow=["::1"], ports=[up.port], listen="::1")
    status, _, sock, _ = env.connect(handle, f"[::1]:{up.port}")
    assert status == 200
    assert sock is not None
    assert env.in_tunnel(sock, "[::1]")[0] == 200
    code, sock = env.socks(handle, "::1", up.port)
    assert code == 0
    assert sock is not None
    assert env.in_tunnel(sock, "[::1]")[0] == 200
    status, headers, _, _ = env.connect(handle, f"[::2]:{up.port}")
    assert status == 403
    assert headers["x-panday-refused"] == "::2 is not in net.allow"


# ------------------------------------------------------------------- resolved addresses


def test_an_allowed_name_resolving_to_loopback_is_refused(env: Env) -> None:
    up = env.upstream("local-service")
    table = {"evil.test": ["127.0.0.1"]}
    control = env.proxy(allow=["evil.test", "127.0.0.1"], ports=[up.port], table=table)
    status, _, _ = env.http(control, f"http://evil.test:{up.port}/")
    env.expect(
        status == 200 and up.connections == 1,
        "the loopback service is reachable when 127.0.0.1 is allowlisted",
    )

    handle = env.proxy(allow=["evil.test"], ports=[up.port], table=table)
    status, headers, _ = env.http(handle, f"http://evil.test:{up.port}/")
    assert status == 403
    assert headers["x-panday-refused"].startswith(
        "evil.test resolves to 127.0.0.1 is a loopback address"
    )
    code, _ = env.socks(handle, "evil.test", up.port)
    assert code == 2
    status, _, _, _ = env.connect(handle, f"evil.test:{up.port}")
    assert status == 403
    assert up.connections == 1
    assert handle.connector.attempts == []
    (first, *_) = env.wait_events(handle, 3)
    assert first.address == "127.0.0.1"
    assert first.verdict == "refused"


def test_an_allowed_name_resolving_to_private_or_metadata_space_is_refused(env: Env) -> None:
    # These addresses are never contacted: the tests' connector records where the proxy
    # would connect and refuses anything off loopback.
    cases = {
        "private.test": ("10.0.0.1", "is a private address"),
        "metadata.test": ("169.254.169.254", "is a cloud metadata address"),
        "cgnat.test": ("100.64.0.1", "is in the shared (CGNAT) address space"),
        "mapped.test": ("::ffff:127.0.0.1", "is IPv4-mapped for 127.0.0.1 is a loopback address"),
        "v6meta.test": ("fd00:ec2::254", "is a cloud metadata address"),
        "linklocal.test": ("fe80::1", "is a link-local address"),
        "any.test": ("0.0.0.0", "is the unspecified address"),  # noqa: S104 - a resolver answer
        "multicast.test": ("224.0.0.1", "is a multicast address"),
    }
    table = {name: [addr] for name, (addr, _) in cases.items()}
    # Control: with the literal allowlisted the proxy does try the address (recorded only).
    control = env.proxy(allow=["metadata.test", "169.254.169.254"], ports=[80], table=table)
    status, _, _ = env.http(control, "http://metadata.test/")
    env.expect(
        control.connector.attempts == [("169.254.169.254", 80)] and status == 502,
        "with the metadata literal allowlisted the proxy goes there",
    )

    handle = env.proxy(allow=list(cases), ports=[80], table=table)
    for name, (_addr, words) in cases.items():
        status, headers, _ = env.http(handle, f"http://{name}/")
        assert status == 403, name
        assert words in headers["x-panday-refused"], (name, headers)
    assert handle.connector.attempts == []


def test_a_mixed_answer_is_refused_whole(env: Env) -> None:
    up = env.upstream("up")
    table = {"mixed.test": ["127.0.0.1", "10.0.0.1"]}
    handle = env.proxy(allow=["mixed.test", "127.0.0.1"], ports=[up.port], table=table)
    status, headers, _ = env.http(handle, f"http://mixed.test:{up.port}/")
    assert status == 403
    assert "10.0.0.1 is a private address" in headers["x-panday-refused"]
    assert handle.connector.attempts == []


def test_a_rebinding_resolver_never_reaches_the_private_address(env: Env) -> None:
    """First answer "public" (127.0.0.1, allowlisted here), every later one private
    (127.0.0.2, a canary). A proxy that resolved again before connecting would hit it."""
    up = env.upstream("public")
    canary = env.upstream("private-canary", host="127.0.0.2", port=up.port)
    answers = iter([["127.0.0.1"]])

    def rebinding() -> list[str]:
        return next(answers, ["127.0.0.2"])

    limits = ProxyLimits(dns_cache_seconds=0.0, connect_timeout=3.0)
    handle = env.proxy(
        allow=["rebind.test", "127.0.0.1"],
        ports=[up.port],
        table={"rebind.test": rebinding},
        limits=limits,
    )
    status, _, body = env.http(handle, f"http://rebind.test:{up.port}/")
    env.expect(
        status == 200 and body == b"hello from public\n", "the first (public) answer is reachable"
    )
    for _ in range(3):
        status, headers, _ = env.http(handle, f"http://rebind.test:{up.port}/")
        assert status == 403
        assert "127.0.0.2 is a loopback address" in headers["x-panday-refused"]
        code, _ = env.socks(handle, "rebind.test", up.port)
        assert code == 2
    assert canary.connections == 0
    assert ("127.0.0.2", up.port) not in handle.connector.attempts


def test_a_checked_answer_is_pinned_for_the_cache_lifetime(env: Env) -> None:
    up = env.upstream("public")
    canary = env.upstream("private-canary", host="127.0.0.2", port=up.port)
    answers = iter([["127.0.0.1"]])
    table = {"rebind.test": lambda: next(answers, ["127.0.0.2"])}
    handle = env.proxy(
        allow=["rebind.test", "127.0.0.1"],
        ports=[up.port],
        table=table,
        limits=ProxyLimits(dns_cache_seconds=60.0),
    )
    for _ in range(3):
        status, _, body = env.http(handle, f"http://rebind.test:{up.port}/")
        assert (status, body) == (200, b"hello from public\n")
    assert handle.resolver.lookups == ["rebind.test"]
    assert canary.connections == 0


# --------------------------------------------------------------------------- credentials


def test_missing_or_wrong_credentials_are_refused(env: Env) -> None:
    handle, port, up = _canary_world(env)
    status, _, _ = env.http(handle, f"http://{ALLOWED}:{port}/")
    env.expect(status == 200, "the right credentials pass")
    code, sock = env.socks(handle, ALLOWED, port)
    env.expect(code == 0 and sock is not None, "the right SOCKS credentials pass")
    if sock is not None:
        sock.close()
    reached = up.connections

    user, password = handle.creds
    wrong = (user, password[:-1] + ("0" if password[-1] != "0" else "1"))
    status, headers, _ = env.http(handle, f"http://{ALLOWED}:{port}/", auth=None)
    assert status == 407
    assert headers["proxy-authenticate"] == 'Basic realm="panday"'
    assert headers["x-panday-refused"] == "missing proxy credentials"
    status, headers, _ = env.http(handle, f"http://{ALLOWED}:{port}/", auth=handle.basic(wrong))
    assert status == 407
    assert headers["x-panday-refused"] == "wrong proxy credentials"
    status, _, _, _ = env.connect(handle, f"{ALLOWED}:{port}", auth=b"Basic !!!")
    assert status == 407
    status, _, _, _ = env.connect(handle, f"{ALLOWED}:{port}", auth=b"Bearer " + password.encode())
    assert status == 407
    assert env.socks(handle, ALLOWED, port, creds=None) == (None, None)
    assert env.socks(handle, ALLOWED, port, creds=wrong) == (None, None)
    assert env.socks(handle, ALLOWED, port, creds=("cmd-1", password)) == (None, None)

    # Credentials of another proxy (another session) do not open this one.
    other = env.proxy(allow=[ALLOWED], ports=[port])
    status, _, _ = env.http(handle, f"http://{ALLOWED}:{port}/", auth=handle.basic(other.creds))
    assert status == 407
    assert up.connections == reached


def test_command_credentials_put_the_command_id_in_the_audit_event(env: Env) -> None:
    handle, port, _ = _canary_world(env)
    creds = handle.proxy.credentials("cmd-7")
    status, _, _ = env.http(handle, f"http://{ALLOWED}:{port}/", auth=handle.basic(creds))
    assert status == 200
    code, sock = env.socks(handle, ALLOWED, port, creds=creds)
    assert code == 0
    assert sock is not None
    sock.close()
    events = env.wait_events(handle, 2)
    assert [e.command_id for e in events] == ["cmd-7", "cmd-7"]


def test_credentials_never_reach_the_upstream(env: Env) -> None:
    handle, port, up = _canary_world(env)
    extra = (
        b"Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Secret\r\n"
        b"X-Secret: s\r\nX-Kept: k\r\n"
    )
    status, _, _ = env.http(handle, f"http://{ALLOWED}:{port}/p", extra=extra)
    assert status == 200
    (request,) = up.requests
    lower = request.lower()
    _, password = handle.creds
    assert password.encode() not in request
    assert b"proxy-authorization" not in lower
    assert b"proxy-connection" not in lower
    assert b"x-secret" not in lower
    assert b"x-kept: k\r\n" in lower
    assert request.startswith(b"GET /p HTTP/1.1\r\nHost: " + f"{ALLOWED}:{port}".encode() + b"\r\n")
    assert request.endswith(b"Connection: close\r\n\r\n")


# ------------------------------------------------------------------------ upstream faults


def test_upstream_failures_are_reported_not_hidden(env: Env) -> None:
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    handle = env.proxy(
        allow=[ALLOWED, "nowhere.test", "127.0.0.1"], ports=[port], table={ALLOWED: ["127.0.0.1"]}
    )
    status, headers, _ = env.http(handle, f"http://{ALLOWED}:{port}/")
    assert status == 502
    assert headers["x-panday-refused"] == f"127.0.0.1 port {port} refused the connection"
    status, headers, _ = env.http(handle, f"http://nowhere.test:{port}/")
    assert status == 502
    assert headers["x-panday-refused"] == "cannot resolve nowhere.test: no such host"
    code, _ = env.socks(handle, ALLOWED, port)
    assert code == 5
    events = env.wait_events(handle, 3)
    assert [e.verdict for e in events] == ["failed"] * 3


# ------------------------------------------------------------------------- tunnels


def test_a_tunnel_carries_pipelined_bytes_and_half_closes(env: Env) -> None:
    echo = env.upstream("echo", echo=True)
    handle = env.proxy(allow=["127.0.0.1"], ports=[echo.port])
    sock = env.open_conn(handle.host, handle.port)
    payload = bytes(range(256)) * 4096  # 1 MiB, sent right behind the CONNECT head
    head = (
        f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\nProxy-Authorization: ".encode()
        + handle.basic()
        + b"\r\n\r\n"
    )
    sock.sendall(head + payload[:1000])
    got = env.recv_exact(sock, len(b"HTTP/1.1 200 Connection established\r\n\r\n"))
    assert got == b"HTTP/1.1 200 Connection established\r\n\r\n"
    sock.sendall(payload[1000:])
    sock.shutdown(socket.SHUT_WR)
    echoed = env.recv_all(sock, 4 << 20)
    sock.close()
    assert echoed == payload
    (event,) = env.wait_events(handle, 1)
    assert event.bytes_up == event.bytes_down == len(payload)
    assert event.duration_ms > 0


def test_unix_socket_listener(env: Env, tmp_path: object) -> None:
    import pathlib  # noqa: PLC0415

    path = str(pathlib.Path(str(tmp_path)) / "egress.sock")
    handle, port, _ = _canary_world(env)
    env.lt.call(handle.proxy.start_unix(path))
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(
            f"GET http://{ALLOWED}:{port}/ HTTP/1.1\r\nProxy-Authorization: ".encode()
            + handle.basic()
            + b"\r\n\r\n"
        )
        status, _, body = env.parse_response(env.recv_all(sock))
    assert (status, body) == (200, b"hello from up\n")


def test_audit_events_go_to_a_jsonl_file(env: Env, tmp_path: object) -> None:
    import json  # noqa: PLC0415
    import pathlib  # noqa: PLC0415

    log = pathlib.Path(str(tmp_path)) / "audit.jsonl"
    handle, port, _ = _canary_world(env, audit_jsonl=str(log))
    env.http(handle, f"http://{ALLOWED}:{port}/")
    env.http(handle, f"http://other.test:{port}/")
    env.wait_events(handle, 2)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(d["phase"], d["verdict"], d["host"]) for d in lines] == [
        ("open", "allowed", ALLOWED),
        ("close", "allowed", ALLOWED),
        ("close", "refused", "other.test"),
    ]
    assert set(lines[0]) == {
        "time", "session_id", "command_id", "protocol", "host", "port", "address",
        "verdict", "reason", "phase", "bytes_up", "bytes_down", "duration_ms", "count",
    }  # fmt: skip
