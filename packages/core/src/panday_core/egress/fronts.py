"""The client protocols (fronts) and which one reads a client's request: its first byte tells.

A front reads one request (`tunnel.FrontEnd.feed`: the relay core says what it needs of a
front), hands the core the credentials and the host and port, and answers a `Refusal` in
its own protocol's words; the core is the same
for every protocol. Adding a protocol is a module with its front and one row in `FRONTS`
(and its name in `audit.ClientProtocol`).

``0x05`` is SOCKS5; a token character starts an HTTP request line; ``0x04`` is SOCKS4,
which the proxy does not speak (no credentials, no IPv6): it gets SOCKS4's own "request
rejected" at once. Anything else cannot become a request either and is answered ``400``
at once, instead of holding its connection until the head timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.egress import socks5
from panday_core.egress.front_http import HttpFront
from panday_core.egress.front_socks import SocksFront
from panday_core.egress.http_head import TOKEN_BYTES, response
from panday_core.egress.refusal import Refusal

if TYPE_CHECKING:
    from collections.abc import Callable

    from panday_core.egress.audit import ClientProtocol
    from panday_core.egress.tunnel import Connection, FrontEnd


SOCKS4_VERSION = 4
SOCKS4_REJECTED = bytes((0, 0x5B, 0, 0, 0, 0, 0, 0))
"""A SOCKS4 reply: request rejected or failed."""


class _Refuser:
    """A first byte no front-end can serve: refused at once."""

    __slots__ = ("answer_bytes", "kind", "reason")

    def __init__(self, reason: str, answer: bytes | None) -> None:
        self.kind: ClientProtocol = "unknown"
        self.reason = reason
        self.answer_bytes = answer

    def feed(self, conn: Connection, data: bytes) -> None:  # noqa: ARG002 - the protocol's signature
        raise Refusal("malformed", self.reason)

    def answer(self, refusal: Refusal) -> bytes | None:
        if self.answer_bytes is not None:
            return self.answer_bytes
        return response(refusal.status or 400, refusal.reason)

    def opened(self, conn: Connection, detail: object) -> tuple[bytes, bytes]:  # noqa: ARG002 - never opened
        raise AssertionError


FRONTS: tuple[tuple[Callable[[int], bool], Callable[[], FrontEnd]], ...] = (
    (lambda first: first == socks5.VERSION, SocksFront),
    (lambda first: first in TOKEN_BYTES, HttpFront),
)
"""(does this first byte start the protocol, its front), tried in order."""


def choose(first: int) -> FrontEnd:
    """The front-end for a connection whose first byte is `first`."""
    for starts, front in FRONTS:
        if starts(first):
            return front()
    if first == SOCKS4_VERSION:
        return _Refuser(
            "malformed request: SOCKS4 is not supported; use SOCKS5 (socks5h://)", SOCKS4_REJECTED
        )
    return _Refuser(
        f"malformed request: first byte 0x{first:02x} starts neither an HTTP request nor "
        "a SOCKS5 greeting",
        None,
    )
