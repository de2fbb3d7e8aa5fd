"""The HTTP front-end: ``CONNECT`` tunnels and absolute-form plain-HTTP requests.

It reads the request head with `HeadReader` (refused at the first line that cannot become
valid), checks the ``Proxy-Authorization`` credentials, and hands the host and port to
the relay core. Once the upstream is connected it answers ``200 Connection established``
to a ``CONNECT``, or forwards a plain-HTTP request's head in origin form (credentials and
every other hop-by-hop header removed, ``Connection: close``); the relay core then keeps
that connection to the one request (`panday_core.egress.framing`). Refusals are answered
with a status code and the reason, in the ``X-Panday-Refused`` header and the body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.egress.framing import MORE, Body, FramingError, Response
from panday_core.egress.http_head import (
    HeadReader,
    HttpRefusal,
    HttpRequest,
    forward_head,
    parse_head,
    response,
)
from panday_core.egress.refusal import Refusal

if TYPE_CHECKING:
    from panday_core.egress.audit import ClientProtocol
    from panday_core.egress.refusal import RefusalKind
    from panday_core.egress.tunnel import Connection

STATUS: dict[RefusalKind, int] = {
    "malformed": 400,
    "credentials": 407,
    "policy": 403,
    "busy": 503,
    "too-slow": 408,
    "unresolvable": 502,
    "unreachable": 502,
    "connection-refused": 502,
    "timeout": 504,
    "internal": 502,
}
"""The HTTP status answering each kind of refusal."""


class HttpFront:
    """Reads one HTTP request head from a client (see the module doc)."""

    __slots__ = ("kind", "reader")

    def __init__(self) -> None:
        self.kind: ClientProtocol = "http"
        self.reader: HeadReader | None = None

    def feed(self, conn: Connection, data: bytes) -> None:
        reader = self.reader
        if reader is None:
            limits = conn.limits
            reader = self.reader = HeadReader(
                max_head=limits.max_head_bytes,
                max_line=limits.max_request_line,
                max_headers=limits.max_headers,
            )
        try:
            end = reader.feed(data)
            if end is None:
                return
            head = bytes(reader.buf)
            req = parse_head(head[:end], max_headers=conn.limits.max_headers)
        except HttpRefusal as exc:
            raise Refusal(
                "malformed", f"malformed request: {exc.reason}", status=exc.status
            ) from None
        self.reader = None
        self.kind = conn.kind = "http-connect" if req.is_connect else "http"
        conn.host, conn.port = req.host, req.port
        if not conn.authenticate(req.credentials):
            why = "wrong" if req.credentials is not None else "missing"
            raise Refusal("credentials", f"{why} proxy credentials")
        conn.request(req.host, req.port, head[end:], req)

    def answer(self, refusal: Refusal) -> bytes | None:
        return response(refusal.status or STATUS[refusal.kind], refusal.reason)

    def opened(self, conn: Connection, detail: object) -> tuple[bytes, bytes]:
        assert isinstance(detail, HttpRequest)  # noqa: S101 - an HTTP request made the tunnel
        if detail.is_connect:
            return response(200), b""
        conn.frame(PlainHttp(detail, conn.limits.max_response_head_bytes))
        return b"", forward_head(detail)


class PlainHttp:
    """One plain-HTTP request and its response, as they pass (see `framing`): the relay
    core's `Framing` hook for a plain-HTTP connection."""

    __slots__ = ("not_forwarded", "request", "response")

    def __init__(self, http: HttpRequest, max_head: int) -> None:
        self.request = Body(http.body_length, strict=True)
        self.response = Response(head_request=http.method == "HEAD", max_head=max_head)
        self.not_forwarded = 0
        """Bytes the client sent after its request (never forwarded)."""

    def client_bytes(self, view: memoryview) -> tuple[int, bytes, str | None]:
        request = self.request
        if request.done:
            self.not_forwarded += len(view)
            return 0, b"", None
        try:
            end = request.scan(view)
        except FramingError as exc:
            return exc.offset, b"", f"malformed request body: {exc.reason}"
        if end != MORE:
            self.not_forwarded += len(view) - end
        return request.raw, request.take_checked(), None  # trailer lines, once checked

    def upstream_bytes(self, view: memoryview) -> tuple[int, str | None]:
        if self.response.done:
            return 0, None
        try:
            end = self.response.scan(view)
        except FramingError as exc:
            return exc.offset, f"malformed response: {exc.reason}"
        return (len(view) if end == MORE else end), None

    def finished(self) -> bool:
        return self.response.done

    def client_done(self) -> bool:
        return self.request.done and self.not_forwarded > 0

    def note(self) -> str | None:
        if not self.not_forwarded:
            return None
        return (
            f"{self.not_forwarded} bytes the client sent after its request were not "
            "forwarded (one request per connection)"
        )
