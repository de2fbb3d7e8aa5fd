"""Strict parsing of the HTTP request heads the egress proxy reads from a client.

The proxy reads one head per client connection: a ``CONNECT host:port`` (a tunnel) or an
absolute-form request (``GET http://host/path HTTP/1.1``, forwarded as plain HTTP with
``Connection: close``; `panday_core.egress.framing` then keeps the connection to that one
request). Everything the proxy does not need to understand is refused rather than guessed
at: bare LF or CR, folded header lines, invalid header names, framing that two parsers
could read differently (``Transfer-Encoding`` with ``Content-Length``, conflicting
lengths), userinfo or fragments in the target, schemes other than ``http``. A refusal
carries the status code and a reason; the proxy answers it and closes the connection
without forwarding anything.

`HeadReader` checks a head while it arrives, line by line, so a head that can no longer
become valid (a bare LF, a bad method, a wrong version) is answered at once instead of
holding its connection until the head timeout.
"""

from __future__ import annotations

import base64
import binascii

from panday_core.egress.rules import normalize_host

TOKEN_BYTES = frozenset(
    b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
"""The bytes of an HTTP token (a method, a header name)."""
_TOKEN = TOKEN_BYTES
_VISIBLE = frozenset(range(0x21, 0x7F))
# Field values: visible ASCII, space, tab and obs-text; never CR, LF, NUL or other controls.
_FIELD_VALUE = frozenset([0x09, *range(0x20, 0x7F), *range(0x80, 0x100)])
_VERSIONS = (b"HTTP/1.1", b"HTTP/1.0")
_MAX_PORT_DIGITS = 5
_MAX_PORT = 65535

# Headers that describe the client-proxy hop, not the request: never forwarded. The
# credentials above all must not reach the upstream.
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authorization", b"proxy-connection", b"te", b"upgrade"}
)
_FRAMING = frozenset({b"content-length", b"transfer-encoding"})


class HttpRefusal(Exception):  # noqa: N818 - it is a refusal, answered with `status`
    """The head cannot be accepted; answer `status` with `reason` and close."""

    def __init__(self, status: int, reason: str) -> None:
        self.status = status
        self.reason = reason
        super().__init__(f"{status} {reason}")


class HttpRequest:
    """A parsed, validated request head."""

    __slots__ = (
        "body_length",
        "credentials",
        "headers",
        "host",
        "method",
        "path",
        "port",
        "version",
    )

    def __init__(
        self,
        *,
        method: str,
        host: str,
        port: int,
        path: str | None,
        version: str,
        headers: list[tuple[bytes, bytes]],
        credentials: tuple[str, str] | None,
        body_length: int | None = 0,
    ) -> None:
        self.method = method
        self.host = host
        self.port = port
        self.path = path
        """The origin-form target for a forwarded request; None for CONNECT."""
        self.version = version
        self.headers = headers
        self.credentials = credentials
        self.body_length = body_length
        """Bytes of body after the head; None for a chunked body."""

    @property
    def is_connect(self) -> bool:
        return self.path is None


def head_end(buf: bytes | bytearray, *, max_head: int, max_line: int) -> int | None:
    """The length of the head (through the blank line) in `buf`, None if more is needed.

    Raises `HttpRefusal` once `buf` can no longer become an acceptable head.
    """
    end = buf.find(b"\r\n\r\n", 0, max_head + 4)
    if end >= 0:
        line_end = buf.find(b"\r\n", 0, end + 2)
        if line_end > max_line:
            raise HttpRefusal(414, f"request line longer than {max_line} bytes")
        return end + 4
    line_end = buf.find(b"\r\n")
    if (line_end < 0 and len(buf) > max_line) or line_end > max_line:
        raise HttpRefusal(414, f"request line longer than {max_line} bytes")
    if len(buf) > max_head:
        raise HttpRefusal(431, f"request head larger than {max_head} bytes")
    return None


def _port(text: bytes, what: str) -> int:
    if not text or len(text) > _MAX_PORT_DIGITS or not text.isdigit():
        raise HttpRefusal(400, f"{what}: invalid port")
    port = int(text)
    if not 1 <= port <= _MAX_PORT:
        raise HttpRefusal(400, f"{what}: port out of range")
    return port


def _host(text: bytes, what: str) -> str:
    try:
        return normalize_host(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise HttpRefusal(400, f"{what}: invalid host") from None


def parse_authority(authority: bytes, default_port: int | None, what: str) -> tuple[str, int]:
    """``host[:port]`` or ``[v6]:port`` → (normalised host, port)."""
    if b"@" in authority:
        raise HttpRefusal(400, f"{what}: user info in the target is not accepted")
    if authority.startswith(b"["):
        close = authority.find(b"]")
        if close < 0:
            raise HttpRefusal(400, f"{what}: unterminated IPv6 literal")
        host_text, rest = authority[1:close], authority[close + 1 :]
        host = _host(host_text, what)
        if ":" not in host:
            raise HttpRefusal(400, f"{what}: brackets hold only IPv6 literals")
    else:
        host_text, colon, port_text = authority.partition(b":")
        rest = colon + port_text
        host = _host(host_text, what)
    if not rest:
        if default_port is None:
            raise HttpRefusal(400, f"{what}: a port is required")
        return host, default_port
    if not rest.startswith(b":"):
        raise HttpRefusal(400, f"{what}: invalid authority")
    return host, _port(rest[1:], what)


def _split_absolute(target: bytes) -> tuple[str, int, str]:
    scheme, sep, rest = target.partition(b"://")
    if not sep or scheme.lower() != b"http":
        raise HttpRefusal(
            400, "not a proxy request: expected CONNECT host:port or an absolute http:// URL"
        )
    if b"#" in rest:
        raise HttpRefusal(400, "request target contains a fragment")
    cut = len(rest)
    for stop in (b"/", b"?"):
        i = rest.find(stop)
        if 0 <= i < cut:
            cut = i
    host, port = parse_authority(rest[:cut], 80, "request target")
    path = rest[cut:].decode("ascii")
    if not path.startswith("/"):
        path = "/" + path
    return host, port, path


def _credentials(value: bytes) -> tuple[str, str] | None:
    scheme, _, encoded = value.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None


def header_line(line: bytes) -> tuple[bytes, bytes]:
    """One header field line (without its CRLF) as (name, value), or `HttpRefusal`."""
    name, colon, value = line.partition(b":")
    if not colon or not name:
        raise HttpRefusal(400, "malformed header line")
    if name[0] in b" \t":
        raise HttpRefusal(400, "folded header lines are not accepted")
    if not set(name) <= _TOKEN:
        raise HttpRefusal(400, "invalid header name")
    value = value.strip(b" \t")
    if not set(value) <= _FIELD_VALUE:
        raise HttpRefusal(400, "invalid character in a header value")
    return name, value


def _headers(lines: list[bytes], max_headers: int) -> list[tuple[bytes, bytes]]:
    if len(lines) > max_headers:
        raise HttpRefusal(431, f"more than {max_headers} header fields")
    return [header_line(line) for line in lines]


def request_line(line: bytes) -> tuple[bytes, bytes, bytes]:
    """The request line (without its CRLF) as (method, target, version), or `HttpRefusal`."""
    parts = line.split(b" ")
    if len(parts) != 3:  # noqa: PLR2004 - method, target, version
        raise HttpRefusal(400, "malformed request line")
    method, target, version = parts
    if not method or not set(method) <= _TOKEN:
        raise HttpRefusal(400, "invalid method")
    if version not in _VERSIONS:
        raise HttpRefusal(400, "unsupported HTTP version (HTTP/1.1 or HTTP/1.0 only)")
    if not target or not set(target) <= _VISIBLE:
        raise HttpRefusal(400, "invalid request target")
    return method, target, version


class HeadReader:
    """Collects one request head, refusing it as soon as it cannot become valid.

    `feed` returns the head's length (through the blank line) once it is complete, else
    None; it raises `HttpRefusal` at the first line that breaks the rules, for a bare CR,
    LF or NUL anywhere, and when a bound is exceeded. Every byte is looked at a bounded
    number of times, so a client sending one byte at a time costs no more than one that
    sends the head at once.
    """

    __slots__ = (
        "buf",
        "field",
        "field_len",
        "lines",
        "max_head",
        "max_headers",
        "max_line",
        "pos",
        "seen",
        "version",
    )

    def __init__(self, *, max_head: int, max_line: int, max_headers: int) -> None:
        self.buf = bytearray()
        self.pos = 0
        """Where the first line not yet complete starts."""
        self.seen = 0
        """Bytes of the incomplete request line already checked."""
        self.field = 0
        """Which part of the request line is arriving: method, target, version."""
        self.field_len = 0
        self.version = bytearray()
        self.lines = 0
        self.max_head = max_head
        self.max_line = max_line
        self.max_headers = max_headers

    def feed(self, data: bytes | bytearray | memoryview) -> int | None:
        buf = self.buf
        before = len(buf)
        buf += data
        while True:
            end = buf.find(b"\n", max(self.pos, before))
            if end < 0:
                break
            if end == self.pos or buf[end - 1] != 0x0D:  # noqa: PLR2004 - CR
                raise HttpRefusal(400, "bare CR, LF or NUL in the request head")
            if end >= self.max_head:  # the size bound first, whatever the read's size
                raise HttpRefusal(431, f"request head larger than {self.max_head} bytes")
            line = bytes(buf[self.pos : end - 1])
            self.pos = end + 1
            if self._line_ends_head(line):
                return self.pos
        # The incomplete last line: any CR but a final one is bare (a CRLF would have ended
        # the line above).
        if (
            buf.find(b"\r", max(self.pos, before - 1), len(buf) - 1) >= 0
            or buf.find(b"\x00", max(self.pos, before)) >= 0
        ):
            raise HttpRefusal(400, "bare CR, LF or NUL in the request head")
        if self.lines == 0:
            if len(buf) - self.pos > self.max_line:
                raise HttpRefusal(414, f"request line longer than {self.max_line} bytes")
            self._request_line_so_far()
        if len(buf) > self.max_head:
            raise HttpRefusal(431, f"request head larger than {self.max_head} bytes")
        return None

    def _line_ends_head(self, line: bytes) -> bool:
        """Check one complete line; True for the blank line that ends the head."""
        if b"\r" in line or b"\x00" in line:
            raise HttpRefusal(400, "bare CR, LF or NUL in the request head")
        if self.lines == 0:
            if len(line) > self.max_line:
                raise HttpRefusal(414, f"request line longer than {self.max_line} bytes")
            request_line(line)
        elif not line:
            return True
        else:
            if self.lines > self.max_headers:
                raise HttpRefusal(431, f"more than {self.max_headers} header fields")
            header_line(line)
        self.lines += 1
        return False

    def _request_line_so_far(self) -> None:
        """Check the new bytes of an incomplete request line (method SP target SP version)."""
        buf = self.buf
        for i in range(self.pos + self.seen, len(buf)):
            byte = buf[i]
            if byte == 0x0D:  # noqa: PLR2004 - the CR of the CRLF still to come
                continue
            if byte == 0x20:  # noqa: PLR2004 - SP
                if self.field_len == 0 or self.field == 2:  # noqa: PLR2004 - the version
                    raise HttpRefusal(400, "malformed request line")
                self.field += 1
                self.field_len = 0
                continue
            self.field_len += 1
            if self.field == 0 and byte not in _TOKEN:
                raise HttpRefusal(400, "invalid method")
            if self.field == 1 and byte not in _VISIBLE:
                raise HttpRefusal(400, "invalid request target")
            if self.field == 2:  # noqa: PLR2004 - the version
                self.version.append(byte)
                if not any(v.startswith(self.version) for v in _VERSIONS):
                    raise HttpRefusal(400, "unsupported HTTP version (HTTP/1.1 or HTTP/1.0 only)")
        self.seen = len(buf) - self.pos


def _check_framing(
    headers: list[tuple[bytes, bytes]], *, connect: bool, version: bytes = b"HTTP/1.1"
) -> None:
    lengths = {v for n, v in headers if n.lower() == b"content-length"}
    encodings = [v for n, v in headers if n.lower() == b"transfer-encoding"]
    if encodings and version == b"HTTP/1.0":
        # RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing
        # (an HTTP/1.0 upstream would read the chunks as the body's own bytes).
        raise HttpRefusal(400, "Transfer-Encoding in an HTTP/1.0 request (faulty framing)")
    if any(not v.isdigit() or len(v) > 18 for v in lengths) or len(lengths) > 1:  # noqa: PLR2004 - 10**18 bytes is beyond any body
        raise HttpRefusal(400, "invalid or conflicting Content-Length")
    if encodings and (lengths or len(encodings) > 1 or encodings[0].lower() != b"chunked"):
        raise HttpRefusal(400, "ambiguous message framing (Transfer-Encoding)")
    if connect and (encodings or any(int(v) for v in lengths)):
        raise HttpRefusal(400, "CONNECT carries no body")


def parse_head(head: bytes, *, max_headers: int = 100) -> HttpRequest:
    """Parse a complete head (as delimited by `HeadReader` or `head_end`) or raise
    `HttpRefusal`."""
    if not head.endswith(b"\r\n\r\n"):
        raise HttpRefusal(400, "incomplete request head")
    lines = head[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line or b"\x00" in line for line in lines):
        raise HttpRefusal(400, "bare CR, LF or NUL in the request head")
    method, target, version = request_line(lines[0])
    headers = _headers(lines[1:], max_headers)
    connect = method == b"CONNECT"
    if connect:
        host, port = parse_authority(target, None, "CONNECT target")
        path = None
    else:
        host, port, path = _split_absolute(target)
    _check_framing(headers, connect=connect, version=version)
    auth = [v for n, v in headers if n.lower() == b"proxy-authorization"]
    if len(auth) > 1:
        raise HttpRefusal(400, "more than one Proxy-Authorization header")
    chunked = any(n.lower() == b"transfer-encoding" for n, _ in headers)
    lengths = [int(v) for n, v in headers if n.lower() == b"content-length"]
    return HttpRequest(
        body_length=None if chunked else (lengths[0] if lengths else 0),
        method=method.decode("ascii"),
        host=host,
        port=port,
        path=path,
        version=version.decode("ascii"),
        headers=headers,
        credentials=_credentials(auth[0]) if auth else None,
    )


def forward_head(req: HttpRequest) -> bytes:
    """The head sent upstream for a plain-HTTP request: origin-form target, the checked
    host in ``Host``, hop-by-hop headers (credentials included) removed, and
    ``Connection: close`` so the upstream ends the exchange after one response."""
    listed: set[bytes] = set()
    for name, value in req.headers:
        if name.lower() == b"connection":
            listed.update(t.strip().lower() for t in value.split(b","))
    drop = (_HOP_BY_HOP | listed | {b"host"}) - _FRAMING
    host = f"[{req.host}]" if ":" in req.host else req.host
    authority = host if req.port == 80 else f"{host}:{req.port}"  # noqa: PLR2004 - http's default port
    out = [f"{req.method} {req.path} {req.version}\r\nHost: {authority}\r\n".encode("ascii")]
    out.extend(
        name + b": " + value + b"\r\n" for name, value in req.headers if name.lower() not in drop
    )
    out.append(b"Connection: close\r\n\r\n")
    return b"".join(out)


_PHRASES = {
    200: "Connection established",
    400: "Bad Request",
    403: "Forbidden",
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}

REASON_HEADER = "X-Panday-Refused"
_MAX_REASON = 400


def safe_reason(reason: str) -> str:
    """A reason fit for a header line: printable ASCII, bounded length."""
    text = "".join(c if " " <= c <= "~" else "?" for c in reason)
    return text[:_MAX_REASON]


def response(status: int, reason: str = "") -> bytes:
    """A complete response the proxy itself gives (never forwarded content)."""
    phrase = _PHRASES.get(status, "Error")
    if status == 200:  # noqa: PLR2004 - the CONNECT success line
        return b"HTTP/1.1 200 Connection established\r\n\r\n"
    text = safe_reason(reason)
    body = f"panday egress proxy: {status} {phrase}: {text}\n".encode("ascii")
    lines = [f"HTTP/1.1 {status} {phrase}", f"{REASON_HEADER}: {text}"]
    if status == 407:  # noqa: PLR2004 - ask for the session credentials
        lines.append('Proxy-Authenticate: Basic realm="panday"')
    lines += ["Content-Type: text/plain; charset=us-ascii", f"Content-Length: {len(body)}"]
    lines += ["Connection: close", "", ""]
    return "\r\n".join(lines).encode("ascii") + body
