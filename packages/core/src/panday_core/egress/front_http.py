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

from panday_core.egress.http_head import (
    HeadReader,
    HttpRefusal,
    HttpRequest,
    forward_head,
    parse_head,
    response,
)
from panday_core.egress.tunnel import Refusal

if TYPE_CHECKING:
    from panday_core.egress.audit import ClientProtocol
    from panday_core.egress.tunnel import Connection, RefusalKind

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

    def opened(self, conn: Connection, request: HttpRequest | None) -> tuple[bytes, bytes]:  # noqa: ARG002 - the protocol's signature
        assert request is not None  # noqa: S101 - an HTTP request made the tunnel
        if request.is_connect:
            return response(200), b""
        return b"", forward_head(request)
