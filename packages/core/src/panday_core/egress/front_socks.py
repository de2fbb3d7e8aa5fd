"""The SOCKS5 front-end (RFC 1928 with RFC 1929 username/password).

Greeting, then the username/password sub-negotiation (the password is the credentials'
token), then one ``CONNECT`` request; the host and port go to the relay core like any
other request. The success reply names ``0.0.0.0:0`` as the bound address: the proxy's
own outbound address is none of the client's business. Refusals are answered with the
reply code for their kind (RFC 1928 §6); a greeting or authentication that fails gets the
sub-negotiation's own answer and the connection is closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.egress import socks5
from panday_core.egress.refusal import Refusal

if TYPE_CHECKING:
    from panday_core.egress.audit import ClientProtocol
    from panday_core.egress.refusal import RefusalKind
    from panday_core.egress.tunnel import Connection

REPLY: dict[RefusalKind, int | None] = {
    "malformed": socks5.GENERAL_FAILURE,
    "credentials": None,
    "policy": socks5.NOT_ALLOWED,
    "busy": socks5.GENERAL_FAILURE,
    "too-slow": None,
    "unresolvable": socks5.HOST_UNREACHABLE,
    "unreachable": socks5.HOST_UNREACHABLE,
    "connection-refused": socks5.CONNECTION_REFUSED,
    "timeout": socks5.TTL_EXPIRED,
    "internal": socks5.GENERAL_FAILURE,
}
"""The reply code answering each kind of refusal once the request stage is reached (None:
the connection is closed without a reply)."""

_GREETING, _AUTH, _REQUEST = range(3)


class SocksFront:
    """Reads one SOCKS5 handshake from a client (see the module doc)."""

    __slots__ = ("buf", "kind", "parse_reply", "stage", "written")

    def __init__(self) -> None:
        self.kind: ClientProtocol = "socks5"
        self.buf = bytearray()
        self.stage = _GREETING
        self.written: bytes = b""
        """What the sub-negotiation answered before a refusal (sent ahead of it)."""
        self.parse_reply: int | None = None
        """The reply code of a malformed request (set only when it was malformed)."""

    def feed(self, conn: Connection, data: bytes) -> None:
        self.buf += data
        while self.stage != _REQUEST or self.buf:
            try:
                if not self._step(conn):
                    if len(self.buf) > socks5.MAX_MESSAGE[self.stage]:
                        # Incomplete, yet longer than any message of this stage can be
                        # (bytes after a complete request are early tunnel data: not this).
                        raise Refusal("malformed", "SOCKS5 handshake too long")
                    return
            except socks5.SocksRefusal as exc:
                if self.stage == _REQUEST and exc.reply is not None:
                    self.parse_reply = exc.reply
                else:
                    self.written = b""
                    self.parse_reply = -1  # no reply before the request stage
                raise Refusal("malformed", f"malformed request: {exc.reason}") from None

    def _step(self, conn: Connection) -> bool:
        """One stage of the handshake; False when more bytes are needed (or it is done)."""
        transport = conn.transport
        assert transport is not None  # noqa: S101 - set in connection_made
        if self.stage == _GREETING:
            greeting = socks5.parse_greeting(self.buf)
            if greeting is None:
                return False
            used, methods = greeting
            del self.buf[:used]
            if socks5.METHOD_USERPASS not in methods:
                self.written = bytes((socks5.VERSION, socks5.NO_ACCEPTABLE_METHOD))
                raise Refusal(
                    "credentials", "missing proxy credentials (no username/password method offered)"
                )
            transport.write(bytes((socks5.VERSION, socks5.METHOD_USERPASS)))
            self.stage = _AUTH
            return True
        if self.stage == _AUTH:
            auth = socks5.parse_userpass(self.buf)
            if auth is None:
                return False
            used, user, password = auth
            del self.buf[:used]
            if not conn.authenticate((user, password)):
                self.written = bytes((socks5.AUTH_VERSION, 1))
                raise Refusal("credentials", "wrong proxy credentials")
            transport.write(bytes((socks5.AUTH_VERSION, 0)))
            self.stage = _REQUEST
            return True
        request = socks5.parse_request(self.buf)
        if request is None:
            return False
        used, host, port = request
        leftover = bytes(self.buf[used:])
        self.buf = bytearray()
        conn.request(host, port, leftover)
        return False

    def answer(self, refusal: Refusal) -> bytes | None:
        if self.written:
            return self.written
        if self.parse_reply is not None:  # a parse error: its own code, or none (-1)
            return socks5.reply(self.parse_reply) if self.parse_reply >= 0 else None
        if self.stage != _REQUEST:
            return None  # before the request stage SOCKS has no words for a refusal
        code = REPLY[refusal.kind]
        return None if code is None else socks5.reply(code)

    def opened(self, conn: Connection, detail: object) -> tuple[bytes, bytes]:  # noqa: ARG002 - the protocol's signature
        return socks5.reply(socks5.SUCCEEDED), b""
