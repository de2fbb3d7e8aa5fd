"""Malformed input, fuzzed: it never forwards anything and never takes the proxy down.

Every example goes over a real socket to a running proxy whose allowlist covers a canary
upstream. Inputs are random bytes and mutations of a valid, authenticated request (so the
fuzzer gets past the credentials check and reaches the parser's deeper paths). The oracle
is the proxy's own strict parser plus the credentials check: whenever they reject an
input, the canary must see no connection. After all examples a valid request must still
pass, showing that the proxy survived.

Default: a few hundred examples per protocol. ``PANDAY_FUZZ=nightly`` selects the nightly
profile: 10,000 examples per protocol.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, TypeVar, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from panday_core.egress import ProxyLimits, socks5
from panday_core.egress.http_head import HttpRefusal, head_end, parse_head

if TYPE_CHECKING:
    from collections.abc import Callable

    from conftest import Env, ProxyHandle, UpstreamServer

    Make = Callable[[ProxyHandle, int], bytes]
    """Builds one input for a running proxy (the credentials are only known then)."""

C = TypeVar("C")
NIGHTLY = os.environ.get("PANDAY_FUZZ") == "nightly"
EXAMPLES = 10_000 if NIGHTLY else 300
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
ALLOWED = "allowed.test"
LIMITS = ProxyLimits(head_timeout=2.0, connect_timeout=2.0, idle_timeout=5.0, max_head_bytes=4096)

# A mutation: (operation, position as a fraction of the input, bytes).
_OPS = st.tuples(
    st.sampled_from(["truncate", "insert", "delete", "replace", "duplicate"]),
    st.floats(0.0, 1.0),
    st.binary(min_size=0, max_size=16)
    | st.sampled_from(
        [b"\r\n", b"\n", b"\r", b"\x00", b" ", b":", b"\r\n\r\n", b"\x05", b"\xff", b"[", b"@"]
    ),
)
MUTATIONS = st.lists(_OPS, min_size=1, max_size=4)


def _mostly(valid: object, *others: object) -> st.SearchStrategy[object]:
    """Half the time the valid choice, otherwise one of the others: structured inputs then
    stay close enough to valid to reach the deeper checks, one defect at a time."""
    return st.one_of(st.just(valid), st.sampled_from(others))


# Structured SOCKS5 handshakes: valid messages with one field defective (or several), so
# the fuzzer also tries skipped steps, e.g. a greeting without username/password followed
# straight by a request. Auth "follow" sends credentials only if the greeting offered them.
_SOCKS_VALID: dict[str, object] = {
    "greeting": (2,),
    "auth": "follow",
    "cmd": 1,
    "atyp": 3,
    "host": b"allowed.test",
    "port": "canary",
    "tail": True,
}
_SOCKS_BAD: dict[str, tuple[object, ...]] = {
    "greeting": ((0,), (0, 1), (1, 3), (), (0x80, 0xFF), (2, 0), (0, 2, 2)),
    "auth": ("none", "wrong", "empty", "valid"),
    "cmd": (2, 3, 0),
    "atyp": (1, 4, 5),
    "host": (b"other.test", b"", b"*.test", b"\x7f\x00\x00\x01", b"\xff"),
    "port": (0, 80),
    "tail": (False,),
}  # fmt: skip
SOCKS_STRUCTURED = st.one_of(
    *(
        st.sampled_from(bad).map(lambda v, k=key: {**_SOCKS_VALID, k: v})
        for key, bad in _SOCKS_BAD.items()
    ),
    st.fixed_dictionaries({k: _mostly(_SOCKS_VALID[k], *bad) for k, bad in _SOCKS_BAD.items()}),
)

# Structured HTTP heads: request line and headers drawn from valid and invalid variants.
HTTP_STRUCTURED = st.tuples(
    _mostly("GET", "CONNECT", "POST", "G T", ""),
    _mostly("absolute", "authority", "origin", "https", "userinfo", "v6"),
    _mostly("HTTP/1.1", "HTTP/1.0", "HTTP/2", "http/1.1"),
    _mostly("valid", "none", "wrong", "twice", "garbage"),
    st.lists(
        st.sampled_from([
            "Content-Length: 5", "Content-Length: 1", "Transfer-Encoding: chunked",
            "Transfer-Encoding: gzip", " folded", "Bad Name: x", "X: \x00", "Connection: close",
            "Proxy-Connection: keep-alive", "Host: evil.test",
        ]),
        max_size=3,
    ),
)  # fmt: skip
_NO_OPS_MOSTLY = st.one_of(st.just([]), st.lists(st.tuples(
    st.sampled_from(["truncate", "insert", "delete", "replace", "duplicate"]),
    st.floats(0.0, 1.0),
    st.binary(max_size=8),
), max_size=2))  # fmt: skip


def mutate(data: bytes, ops: list[tuple[str, float, bytes]]) -> bytes:
    for op, where, blob in ops:
        i = int(where * len(data))
        if op == "truncate":
            data = data[:i]
        elif op == "insert":
            data = data[:i] + blob + data[i:]
        elif op == "delete":
            data = data[:i] + data[i + max(len(blob), 1) :]
        elif op == "replace":
            data = data[:i] + blob + data[i + len(blob) :]
        else:
            data = data[:i] + data[i : i + len(blob) + 8] + data[i:]
    return data


def _send(handle: ProxyHandle, data: bytes) -> bytes:
    sock = socket.create_connection((handle.host, handle.port), timeout=10)
    sock.settimeout(10)
    with sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
        return out


def http_accepts(handle: ProxyHandle, data: bytes) -> bool:
    """Would the proxy's own parser and credentials check let this request through?"""
    if not data or data[0] == socks5.VERSION:
        return socks_accepts(handle, data)
    try:
        end = head_end(data, max_head=LIMITS.max_head_bytes, max_line=LIMITS.max_request_line)
        if end is None:
            return False
        req = parse_head(data[:end], max_headers=LIMITS.max_headers)
    except HttpRefusal:
        return False
    return handle.proxy.check_credentials(req.credentials)[0]


def socks_accepts(handle: ProxyHandle, data: bytes) -> bool:
    try:
        greeting = socks5.parse_greeting(data)
        if greeting is None or socks5.METHOD_USERPASS not in greeting[1]:
            return False
        data = data[greeting[0] :]
        auth = socks5.parse_userpass(data)
        if auth is None or not handle.proxy.check_credentials((auth[1], auth[2]))[0]:
            return False
        return socks5.parse_request(data[auth[0] :]) is not None
    except socks5.SocksRefusal:
        return False


def _valid_http(handle: ProxyHandle, port: int) -> bytes:
    return (
        f"GET http://{ALLOWED}:{port}/path?q=1 HTTP/1.1\r\nHost: {ALLOWED}\r\n".encode()
        + b"Proxy-Authorization: " + handle.basic()
        + b"\r\nAccept: */*\r\nContent-Length: 0\r\n\r\n"
    )  # fmt: skip


def _valid_socks(handle: ProxyHandle, port: int) -> bytes:
    user, password = handle.creds
    host = ALLOWED.encode()
    return (
        b"\x05\x02\x00\x02"
        + bytes((1, len(user))) + user.encode() + bytes((len(password),)) + password.encode()
        + bytes((5, 1, 0, 3, len(host))) + host + port.to_bytes(2, "big")
    )  # fmt: skip


def _structured_socks(handle: ProxyHandle, port: int, case: dict[str, object]) -> bytes:
    greeting, host, cmd, atyp = case["greeting"], case["host"], case["cmd"], case["atyp"]
    assert isinstance(greeting, tuple)
    assert isinstance(host, bytes)
    assert isinstance(cmd, int)
    assert isinstance(atyp, int)
    methods = cast("tuple[int, ...]", greeting)
    user, password = handle.creds
    creds = {"valid": (user, password), "wrong": (user, "x" * len(password)), "empty": ("", "")}
    auth = case["auth"]
    if auth == "follow":
        auth = "valid" if 2 in methods else "none"
    out = bytes((5, len(methods), *methods))
    if isinstance(auth, str) and auth in creds:
        u, pw = creds[auth]
        out += bytes((1, len(u))) + u.encode() + bytes((len(pw),)) + pw.encode()
    the_port = port if case["port"] == "canary" else int(str(case["port"]))
    addr = bytes((len(host),)) + host if atyp == 3 else host
    out += bytes((5, cmd, 0, atyp)) + addr + the_port.to_bytes(2, "big")
    return out + (b"GET / HTTP/1.1\r\n\r\n" if case["tail"] else b"")


def _structured_http(handle: ProxyHandle, port: int, case: tuple[object, ...]) -> bytes:
    method, form, version, auth, headers = case
    assert isinstance(form, str)
    assert isinstance(auth, str)
    assert isinstance(headers, list)
    target = {
        "absolute": f"http://{ALLOWED}:{port}/x",
        "authority": f"{ALLOWED}:{port}",
        "origin": "/x",
        "https": f"https://{ALLOWED}:{port}/",
        "userinfo": f"http://u@{ALLOWED}:{port}/",
        "v6": f"http://[::1]:{port}/",
    }[form]
    user, password = handle.creds
    lines = [f"{method} {target} {version}"]
    good = "Proxy-Authorization: " + handle.basic().decode()
    lines += {
        "valid": [good],
        "none": [],
        "wrong": ["Proxy-Authorization: " + handle.basic((user, "y" * len(password))).decode()],
        "twice": [good, good],
        "garbage": ["Proxy-Authorization: Basic !!"],
    }[auth]
    lines += headers
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _check(handle: ProxyHandle, canary: UpstreamServer, data: bytes) -> None:
    before = canary.connections
    answer = _send(handle, data)
    if not http_accepts(handle, data):
        assert canary.connections == before, (data, answer)
        assert b"hello from canary" not in answer


def _liveness(env: Env, handle: ProxyHandle, port: int) -> None:
    status, _, body = env.parse_response(_send(handle, _valid_http(handle, port)))
    assert (status, body) == (200, b"hello from canary\n")


def _setup(env: Env) -> tuple[ProxyHandle, UpstreamServer]:
    canary = env.upstream("canary")
    handle = env.proxy(
        allow=[ALLOWED, "127.0.0.1"],
        ports=[canary.port],
        table={ALLOWED: ["127.0.0.1"]},
        limits=LIMITS,
    )
    # Positive control: the unmutated requests are forwarded.
    _liveness(env, handle, canary.port)
    before = canary.connections
    answer = _send(handle, _valid_socks(handle, canary.port) + b"GET / HTTP/1.1\r\n\r\n")
    env.expect(
        canary.connections == before + 1 and b"hello from canary" in answer,
        "valid SOCKS5 request forwarded",
    )
    return handle, canary


def _raw(raw: bytes) -> Make:
    def make(_handle: ProxyHandle, _port: int) -> bytes:
        return raw

    return make


def _mutated(build: Make, ops: list[tuple[str, float, bytes]]) -> Make:
    def make(handle: ProxyHandle, port: int) -> bytes:
        return mutate(build(handle, port), ops)

    return make


def _structured(build: Callable[[ProxyHandle, int, C], bytes], case: C) -> Make:
    def make(handle: ProxyHandle, port: int) -> bytes:
        return build(handle, port, case)

    return make


def _fuzz(
    env: Env, *, valid: Make, structured: st.SearchStrategy[Make], raw_size: int, socks: bool
) -> None:
    handle, canary = _setup(env)
    inputs = st.one_of(
        st.binary(max_size=raw_size).map(_raw),
        MUTATIONS.map(lambda ops: _mutated(valid, ops)),
        st.tuples(structured, _NO_OPS_MOSTLY).map(lambda t: _mutated(t[0], t[1])),
    )

    @FUZZ
    @given(inputs)
    def run(make: Make) -> None:
        data = make(handle, canary.port)
        # Each test is about one parser: keep the first byte on its side of the switch.
        if socks and data[:1] != b"\x05":
            data = b"\x05" + data
        elif not socks and data[:1] == b"\x05":
            data = b"G" + data[1:]
        _check(handle, canary, data)

    run()
    _liveness(env, handle, canary.port)


@pytest.mark.timeout(3600 if NIGHTLY else 120)
def test_fuzzed_http_never_forwards_and_never_kills_the_proxy(env: Env) -> None:
    structured = HTTP_STRUCTURED.map(lambda c: _structured(_structured_http, c))
    _fuzz(env, valid=_valid_http, structured=structured, raw_size=1024, socks=False)


@pytest.mark.timeout(3600 if NIGHTLY else 120)
def test_fuzzed_socks5_never_forwards_and_never_kills_the_proxy(env: Env) -> None:
    structured = SOCKS_STRUCTURED.map(lambda c: _structured(_structured_socks, c))
    _fuzz(env, valid=_valid_socks, structured=structured, raw_size=600, socks=True)
