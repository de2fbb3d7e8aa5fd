"""Pure parts of the egress proxy: address classes, rules, request parsers."""

from __future__ import annotations

import base64
import ipaddress

import pytest

from panday_core.egress import socks5
from panday_core.egress.addresses import address_refusal
from panday_core.egress.framing import MORE, Body, FramingError, Response
from panday_core.egress.http_head import (
    HeadReader,
    HttpRefusal,
    forward_head,
    head_end,
    parse_head,
    response,
)
from panday_core.egress.rules import EgressRules, normalize_host
from panday_core.policy import NetPolicy

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("fd12::1", "private"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("100.64.0.1", "CGNAT"),
    ("100.127.255.254", "CGNAT"),
    ("224.0.0.251", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),  # noqa: S104 - an address under test
    ("::", "unspecified"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("192.0.0.8", "reserved"),
    ("169.254.169.254", "metadata"),
    ("169.254.170.2", "metadata"),
    ("168.63.129.16", "metadata"),
    ("100.100.100.200", "metadata"),
    ("192.0.0.192", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("::ffff:10.1.2.3", "IPv4-mapped"),
    ("::ffff:169.254.169.254", "metadata"),
    ("2002:a00:1::", "6to4"),
    ("64:ff9b::7f00:1", "NAT64"),
    ("::a00:1", "IPv4-compatible"),
    ("2001:db8::1", "private"),
    ("192.0.2.1", "private"),
    ("198.18.0.1", "private"),
    # Python's ipaddress calls these global; they are not routable on the internet.
    ("fec0::1", "site-local"),
    ("feff::1", "site-local"),
    ("3fff::1", "documentation"),
    ("3fff:fff::1", "documentation"),
    ("192.88.99.1", "6to4 relay anycast"),
    ("5f00::1", "reserved"),
    ("4000::1", "reserved"),
    ("::ffff:192.88.99.1", "6to4 relay anycast"),
]


@pytest.mark.parametrize(("addr", "word"), REFUSED)
def test_non_public_addresses_are_refused(addr: str, word: str) -> None:
    reason = address_refusal(ipaddress.ip_address(addr))
    assert reason is not None
    assert word in reason


def test_a_site_local_address_is_named_as_such() -> None:
    # Python's ipaddress calls fec0::/10 global, so this refusal is ours alone; its text is
    # what a user sees in the proxy's 403.
    assert address_refusal(ipaddress.ip_address("fec0::1")) == (
        "fec0::1 is a site-local address (not globally routable)"
    )


@pytest.mark.parametrize(
    ("addr", "reason"),
    [
        ("::ffff:10.1.2.3", "is IPv4-mapped for 10.1.2.3 is a private address"),
        ("2002:a00:1::", "is 6to4 for 10.0.0.1 is a private address"),
        ("64:ff9b::7f00:1", "is NAT64 for 127.0.0.1 is a loopback address"),
    ],
)
def test_an_embedded_ipv4_address_is_named_with_its_embedding(addr: str, reason: str) -> None:
    # The refusal names how the IPv4 address is embedded (str() of an IPv4-mapped address
    # differs across Python versions, hence the address as Python prints it).
    ip = ipaddress.ip_address(addr)
    assert address_refusal(ip) == f"{ip} {reason}"


class _UnclassifiedV6(ipaddress.IPv6Address):
    """An IPv6 address as an `ipaddress` whose tables miss its range would see it.

    Python 3.11's tables happen to call every address outside 2000::/3 (but site-local)
    reserved, private, link-local or multicast, so the 2000::/3 rule is never the one that
    refuses there; a later `ipaddress` may reclassify a range. This stand-in clears every
    classification, so only the address's value can get it refused.
    """

    @property
    def is_unspecified(self) -> bool:
        return False

    @property
    def is_loopback(self) -> bool:
        return False

    @property
    def is_link_local(self) -> bool:
        return False

    @property
    def is_multicast(self) -> bool:
        return False

    @property
    def is_reserved(self) -> bool:
        return False

    @property
    def is_private(self) -> bool:
        return False

    @property
    def is_global(self) -> bool:
        return True


def test_outside_2000_3_is_refused_whatever_ipaddress_calls_it() -> None:
    # Positive control: a global unicast address passes through the same stand-in.
    assert address_refusal(_UnclassifiedV6("2606:4700::1111")) is None
    assert address_refusal(_UnclassifiedV6("4000::1")) == (
        "4000::1 is outside the global unicast space 2000::/3 (not globally routable)"
    )
    assert address_refusal(_UnclassifiedV6("fe00::1")) == (
        "fe00::1 is outside the global unicast space 2000::/3 (not globally routable)"
    )
    assert address_refusal(_UnclassifiedV6("fec0::1")) == (
        "fec0::1 is a site-local address (not globally routable)"
    )


@pytest.mark.parametrize(
    "addr", ["93.184.216.34", "1.1.1.1", "2606:4700::1111", "::ffff:1.1.1.1", "64:ff9b::101:101"]
)
def test_public_addresses_pass(addr: str) -> None:
    assert address_refusal(ipaddress.ip_address(addr)) is None


def test_an_allowlisted_literal_lifts_the_address_check_and_deny_wins() -> None:
    rules = EgressRules(NetPolicy(allow=("a.test", "10.0.0.1"), deny=("10.0.0.2",)))
    assert rules.check_address("a.test", ipaddress.ip_address("10.0.0.1")) is None
    assert "private" in (rules.check_address("a.test", ipaddress.ip_address("10.0.0.3")) or "")
    assert "net.deny" in (rules.check_address("a.test", ipaddress.ip_address("10.0.0.2")) or "")


def test_host_rules() -> None:
    rules = EgressRules(
        NetPolicy(allow=("*.example.com", "api.test"), deny=("bad.example.com",), ports=(443,))
    )
    assert rules.check_host("a.example.com", 443)[0]
    assert rules.check_host("a.b.example.com", 443)[0]
    assert rules.check_host("api.test", 443) == (
        True,
        "api.test is allowed by net.allow 'api.test'",
    )
    assert rules.check_host("example.com", 443) == (False, "example.com is not in net.allow")
    assert rules.check_host("bad.example.com", 443)[1].startswith("bad.example.com is denied")
    assert rules.check_host("api.test", 80) == (False, "port 80 is not in net.ports [443]")
    empty = EgressRules(NetPolicy())
    assert empty.check_host("api.test", 443) == (
        False,
        "api.test is not allowed: net.allow is empty (no network)",
    )


@pytest.mark.parametrize(
    ("raw", "host"),
    [
        ("API.test", "api.test"),
        ("api.test.", "api.test"),
        ("::FFFF:1.2.3.4", "::ffff:102:304"),
        ("1.2.3.4", "1.2.3.4"),
    ],
)
def test_normalize_host(raw: str, host: str) -> None:
    assert normalize_host(raw) == host


@pytest.mark.parametrize(
    "raw", ["*.example.com", "", ".", "a..b", "a.test..", "exa mple.com", "ex@mple.com", "é.test"]
)
def test_normalize_host_refuses_non_hosts(raw: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        normalize_host(raw)


# ------------------------------------------------------------------------------ HTTP


def _auth(user: str = "session", password: str = "pw") -> bytes:  # noqa: S107 - test value
    return (
        b"Proxy-Authorization: Basic " + base64.b64encode(f"{user}:{password}".encode()) + b"\r\n"
    )


def test_parse_connect_and_absolute_form() -> None:
    req = parse_head(b"CONNECT Api.Test:443 HTTP/1.1\r\nHost: x\r\n" + _auth() + b"\r\n")
    assert (req.method, req.host, req.port, req.path, req.credentials) == (
        "CONNECT",
        "api.test",
        443,
        None,
        ("session", "pw"),
    )
    req = parse_head(b"POST http://[::1]:8080?x HTTP/1.0\r\nContent-Length: 3\r\n\r\n")
    assert (req.host, req.port, req.path, req.version, req.credentials) == (
        "::1",
        8080,
        "/?x",
        "HTTP/1.0",
        None,
    )
    req = parse_head(b"GET HTTP://a.test HTTP/1.1\r\n\r\n")
    assert (req.host, req.port, req.path) == ("a.test", 80, "/")


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # origin form: not a proxy request
        (b"GET https://a.test/ HTTP/1.1\r\n\r\n", 400),
        (b"GET http://user@a.test/ HTTP/1.1\r\n\r\n", 400),
        (b"GET http://a.test/#f HTTP/1.1\r\n\r\n", 400),
        (b"GET http://a.test:0/ HTTP/1.1\r\n\r\n", 400),
        (b"GET http://a.test:99999/ HTTP/1.1\r\n\r\n", 400),
        (b"GET http://a.test:+80/ HTTP/1.1\r\n\r\n", 400),
        (b"GET http://*.test/ HTTP/1.1\r\n\r\n", 400),
        (b"GET http://[a.test]/ HTTP/1.1\r\n\r\n", 400),
        (b"GET http://::1/ HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT a.test HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT a.test:443 HTTP/2.0\r\n\r\n", 400),
        (b"CONNECT  a.test:443 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT a.test:443 HTTP/1.1\r\nX: a\nY: b\r\n\r\n", 400),
        (b"CONNECT a.test:443 HTTP/1.1\r\n folded\r\n\r\n", 400),
        (b"CONNECT a.test:443 HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
        (b"CONNECT a.test:443 HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400),
        (b"CONNECT a.test:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 400),
        (b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (
            (
                b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            ),
            400,
        ),
        (b"POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400),
        (b"POST http://a.test/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"CONNECT a.test:443 HTTP/1.1\r\n" + _auth() + _auth() + b"\r\n", 400),
    ],
)
def test_malformed_heads_are_refused(head: bytes, status: int) -> None:
    with pytest.raises(HttpRefusal) as info:
        parse_head(head)
    assert info.value.status == status


def test_head_bounds() -> None:
    assert head_end(b"CONNECT a:1 HTTP/1.1\r\n\r\nrest", max_head=100, max_line=50) == 24
    assert head_end(b"CONNECT a:1 HTTP/1.1\r\n", max_head=100, max_line=50) is None
    with pytest.raises(HttpRefusal, match="431"):
        head_end(b"CONNECT a:1 HTTP/1.1\r\n" + b"X: y\r\n" * 30, max_head=100, max_line=50)
    with pytest.raises(HttpRefusal, match="414"):
        head_end(b"GET http://a/" + b"x" * 60, max_head=1000, max_line=50)


def _reader() -> HeadReader:
    return HeadReader(max_head=1000, max_line=100, max_headers=5)


@pytest.mark.parametrize(
    "head",
    [
        b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n" + _auth() + b"\r\n",
        b"GET http://a.test/x?y HTTP/1.0\r\nAccept: */*\r\n\r\n",
        b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\n\r\n",
    ],
)
def test_a_valid_head_passes_the_reader_a_byte_at_a_time(head: bytes) -> None:
    for step in (1, 7, len(head)):
        reader = _reader()
        ends = [reader.feed(head[i : i + step]) for i in range(0, len(head), step)]
        assert ends[-1] == len(head)
        assert all(end is None for end in ends[:-1])
        parse_head(bytes(reader.buf[: len(head)]))


@pytest.mark.parametrize(
    ("prefix", "status"),
    [
        (b"GET http://a.test/ HTTP/1.1\n", 400),  # bare LF: never valid, whatever follows
        (b"GET http://a.test/ HTTP/1.1\r\nX: y\n", 400),
        (b"GET http://a.test/ HTTP/1.1\rX", 400),  # bare CR
        (b"GET http://a.test/\x00", 400),
        (b"G(T", 400),
        (b" GET", 400),
        (b"GET  ", 400),
        (b"GET http://a.test/ HTTP/2", 400),
        (b"GET http://a.test/ HTTP/1.1 ", 400),
        (b"GET http://a.test/\x7f", 400),
        (b"GET http://a.test/ HTTP/1.1\r\nBad Name: x\r\n", 400),
        (b"GET http://a.test/ HTTP/1.1\r\n folded\r\n", 400),
        (b"GET http://a.test/" + b"x" * 100, 414),
        (b"GET http://a.test/ HTTP/1.1\r\n" + b"X: y\r\n" * 6, 431),
    ],
)
def test_the_reader_refuses_a_head_as_soon_as_it_cannot_become_valid(
    prefix: bytes, status: int
) -> None:
    reader = _reader()

    def byte_by_byte() -> None:
        for i in range(len(prefix)):
            reader.feed(prefix[i : i + 1])

    with pytest.raises(HttpRefusal) as info:
        byte_by_byte()
    assert info.value.status == status
    # The same bytes at once are refused the same way, and parse_head agrees.
    with pytest.raises(HttpRefusal):
        _reader().feed(prefix)


def test_the_reader_leaves_what_follows_the_head_alone() -> None:
    reader = _reader()
    head = b"CONNECT a.test:443 HTTP/1.1\r\n\r\n"
    assert reader.feed(head + b"\x00\r\x16 TLS bytes") == len(head)


# ------------------------------------------------------------------------- framing


def _scan_all(body: Body, data: bytes, step: int) -> int:
    for i in range(0, len(data), step):
        end = body.scan(data[i : i + step])
        if end != MORE:
            return i + end
    return MORE


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_a_body_ends_where_its_framing_says(step: int) -> None:
    assert _scan_all(Body(5, strict=True), b"helloGET /next", step) == 5
    assert Body(0, strict=True).done
    chunked = b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n"
    body = Body(None, strict=True)
    assert _scan_all(body, chunked + b"GET /next", step) == len(chunked)
    assert body.done
    assert _scan_all(Body(None, strict=True), b"5\r\nhel", step) == MORE


@pytest.mark.parametrize(
    "data",
    [
        b"5\r\nhelloX\r\n",
        b"zz\r\n",
        b"5\nhello",
        b"0\r\nProxy-Authorization: Basic eDp5\r\n\r\n",
        b"1" * 20 + b"\r\n",
    ],
)
def test_broken_chunked_framing_is_an_error(data: bytes) -> None:
    with pytest.raises(FramingError):
        _scan_all(Body(None, strict=True), data, 1)


def test_trailer_lines_are_held_until_checked() -> None:
    body = Body(None, strict=True)
    data = b"3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n"
    assert body.scan(data) == len(data)
    assert data[: body.raw] == b"3\r\nabc\r\n0\r\n"
    assert body.take_checked() == b"X-Sum: 1\r\n\r\n"


@pytest.mark.parametrize(
    ("response", "head_request"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", False),
        (b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\nEXTRA", False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nEXTRA", True),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxEXTRA",
            False,
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\nEXTRA", False),
        (b"HTTP/1.1 200 OK\r\n\r\nuntil the upstream closes", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: x\r\n\r\nbody", False),
    ],
)
def test_a_response_ends_where_its_framing_says(response: bytes, head_request: bool) -> None:
    """The response ends right before ``EXTRA``; without it, when the upstream closes."""
    end = response.index(b"EXTRA") if b"EXTRA" in response else MORE
    for step in (1, 5, len(response)):
        tracker = Response(head_request=head_request, max_head=1000)
        got = MORE
        for i in range(0, len(response), step):
            found = tracker.scan(response[i : i + step])
            if found != MORE:
                got = i + found
                break
        assert got == end, step


def test_bad_credentials_parse_as_none() -> None:
    for value in (b"Basic !!!", b"Bearer abc", b"Basic " + base64.b64encode(b"nocolon")):
        req = parse_head(
            b"CONNECT a.test:443 HTTP/1.1\r\nProxy-Authorization: " + value + b"\r\n\r\n"
        )
        assert req.credentials is None


def test_forward_head_drops_hop_by_hop_and_pins_host() -> None:
    req = parse_head(
        b"POST http://a.test:8080/p HTTP/1.1\r\nHost: evil.test\r\n" + _auth()
        + b"Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\n"
        + b"TE: trailers\r\nUpgrade: h2c\r\n"
        + b"Content-Length: 2\r\nX-End: e\r\n\r\n"
    )  # fmt: skip
    assert forward_head(req) == (
        b"POST /p HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 2\r\nX-End: e\r\n"
        b"Connection: close\r\n\r\n"
    )


def test_refusal_reasons_cannot_inject_headers() -> None:
    raw = response(403, "bad\r\nSet-Cookie: x=1")
    head = raw.split(b"\r\n\r\n")[0]
    assert b"\r\nSet-Cookie" not in head
    assert b"X-Panday-Refused: bad??Set-Cookie: x=1" in head


# ----------------------------------------------------------------------------- SOCKS5


def test_socks5_parsers() -> None:
    assert socks5.parse_greeting(b"\x05") is None
    assert socks5.parse_greeting(b"\x05\x02\x00\x02") == (4, b"\x00\x02")
    assert socks5.parse_userpass(b"\x01\x01u\x02pw") == (6, "u", "pw")
    assert socks5.parse_userpass(b"\x01\x01u\x02p") is None
    assert socks5.parse_request(b"\x05\x01\x00\x03\x06a.test\x01\xbb") == (13, "a.test", 443)
    assert socks5.parse_request(b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50") == (
        10,
        "127.0.0.1",
        80,
    )
    assert socks5.parse_request(b"\x05\x01\x00\x04" + bytes(15) + b"\x01\x00\x50") == (
        22,
        "::1",
        80,
    )
    assert socks5.parse_request(b"\x05\x01\x00\x03\x06a.te") is None


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x05\x02\x00\x03\x06a.test\x01\xbb", socks5.COMMAND_NOT_SUPPORTED),  # BIND
        (b"\x05\x03\x00\x03\x06a.test\x01\xbb", socks5.COMMAND_NOT_SUPPORTED),  # UDP ASSOCIATE
        (b"\x05\x01\x00\x05\x06a.test\x01\xbb", socks5.ADDRESS_TYPE_NOT_SUPPORTED),
        (b"\x05\x01\x01\x03\x06a.test\x01\xbb", socks5.GENERAL_FAILURE),
        (b"\x04\x01\x00\x03\x06a.test\x01\xbb", socks5.GENERAL_FAILURE),
        (b"\x05\x01\x00\x03\x00\x01\xbb", socks5.GENERAL_FAILURE),
        (b"\x05\x01\x00\x03\x06*.test\x01\xbb", socks5.GENERAL_FAILURE),
        (b"\x05\x01\x00\x03\x06a.test\x00\x00", socks5.GENERAL_FAILURE),
    ],
)
def test_socks5_refusals(data: bytes, code: int) -> None:
    with pytest.raises(socks5.SocksRefusal) as info:
        socks5.parse_request(data)
    assert info.value.reply == code


def test_socks5_greeting_refusals() -> None:
    for data in (b"\x04\x01\x00", b"\x05\x00"):
        with pytest.raises(socks5.SocksRefusal):
            socks5.parse_greeting(data)
    with pytest.raises(socks5.SocksRefusal):
        socks5.parse_userpass(b"\x02\x01u\x01p")


def test_importing_panday_core_does_not_load_the_proxy() -> None:
    """The CLI's start-up path must not pay for asyncio and the proxy."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = (
        "import sys, panday_core, panday_core.policy, panday_core.capabilities; "
        "print(sorted(m for m in sys.modules "
        "if m == 'asyncio' or m.startswith('panday_core.egress')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_proxy_environment_names_every_convention() -> None:
    from panday_core.egress.standalone import proxy_environment  # noqa: PLC0415

    env = proxy_environment("http://u:t@127.0.0.1:1", "socks5h://u:t@127.0.0.1:1")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        assert env[name] == env[name.lower()]
    assert env["ALL_PROXY"].startswith("socks5h://")
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    assert env["npm_config_https_proxy"] == env["HTTPS_PROXY"]
