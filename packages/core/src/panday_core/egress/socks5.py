"""Strict parsing of the SOCKS5 handshake (RFC 1928, with RFC 1929 username/password).

Only what the egress proxy serves is accepted: version 5, the username/password method
(the password is the session token), the CONNECT command, and IPv4, domain and IPv6
address types. Each parser takes the bytes received so far and returns None when more are
needed, or the parsed message and how many bytes it used; a message that cannot be
accepted raises `SocksRefusal` with the reply code to send before closing.
"""

from __future__ import annotations

import ipaddress

from panday_core.egress.rules import normalize_host

VERSION = 5
AUTH_VERSION = 1
METHOD_USERPASS = 2
NO_ACCEPTABLE_METHOD = 0xFF
CMD_CONNECT = 1
ATYP_IPV4 = 1
ATYP_DOMAIN = 3
ATYP_IPV6 = 4

# Reply codes (RFC 1928 §6).
SUCCEEDED = 0
GENERAL_FAILURE = 1
NOT_ALLOWED = 2
NETWORK_UNREACHABLE = 3
HOST_UNREACHABLE = 4
CONNECTION_REFUSED = 5
TTL_EXPIRED = 6
COMMAND_NOT_SUPPORTED = 7
ADDRESS_TYPE_NOT_SUPPORTED = 8

# The longest handshake a client can send before its request is complete: greeting,
# username/password sub-negotiation and a request with a 255-byte domain.
MAX_GREETING = 2 + 255
MAX_USERPASS = 3 + 255 + 255
MAX_REQUEST = 4 + 1 + 255 + 2
MAX_HANDSHAKE = MAX_GREETING + MAX_USERPASS + MAX_REQUEST
MAX_MESSAGE = (MAX_GREETING, MAX_USERPASS, MAX_REQUEST)
"""The longest message of each stage (greeting, username/password, request): an
incomplete one longer than this cannot become valid. Bytes after a complete request are
early tunnel data, not handshake."""


class SocksRefusal(Exception):  # noqa: N818 - it is a refusal, answered with `reply`
    """Answer `reply` (a reply code; None: the greeting itself was unacceptable) and close."""

    def __init__(self, reply: int | None, reason: str) -> None:
        self.reply = reply
        self.reason = reason
        super().__init__(reason)


def parse_greeting(buf: bytes | bytearray) -> tuple[int, bytes] | None:
    """(bytes used, offered methods) or None if incomplete."""
    if len(buf) < 2:  # noqa: PLR2004 - version, count
        return None
    if buf[0] != VERSION:
        raise SocksRefusal(None, f"not SOCKS5 (version byte {buf[0]})")
    count = buf[1]
    if count == 0:
        raise SocksRefusal(None, "SOCKS5 greeting offers no methods")
    if len(buf) < 2 + count:
        return None
    return 2 + count, bytes(buf[2 : 2 + count])


def parse_userpass(buf: bytes | bytearray) -> tuple[int, str, str] | None:
    """(bytes used, username, password) or None if incomplete (RFC 1929)."""
    if len(buf) < 2:  # noqa: PLR2004 - version, username length
        return None
    if buf[0] != AUTH_VERSION:
        raise SocksRefusal(None, f"bad username/password version {buf[0]}")
    ulen = buf[1]
    if len(buf) < 2 + ulen + 1:
        return None
    plen = buf[2 + ulen]
    end = 3 + ulen + plen
    if len(buf) < end:
        return None
    try:
        user = bytes(buf[2 : 2 + ulen]).decode("ascii")
        password = bytes(buf[3 + ulen : end]).decode("ascii")
    except UnicodeDecodeError:
        user, password = "", ""
    return end, user, password


def parse_request(buf: bytes | bytearray) -> tuple[int, str, int] | None:
    """(bytes used, normalised host, port) or None if incomplete."""
    if len(buf) < 5:  # noqa: PLR2004 - header plus the first address byte
        return None
    if buf[0] != VERSION:
        raise SocksRefusal(GENERAL_FAILURE, f"bad request version {buf[0]}")
    if buf[1] != CMD_CONNECT:
        raise SocksRefusal(COMMAND_NOT_SUPPORTED, f"SOCKS command {buf[1]} is not supported")
    if buf[2] != 0:
        raise SocksRefusal(GENERAL_FAILURE, "reserved byte is not zero")
    atyp = buf[3]
    span = _address_span(buf)
    if span is None:
        return None
    start, end = span
    raw = bytes(buf[start:end])
    if atyp == ATYP_DOMAIN:
        try:
            host = normalize_host(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise SocksRefusal(GENERAL_FAILURE, "invalid domain name") from None
    else:
        host = str(ipaddress.ip_address(raw))
    port = int.from_bytes(buf[end : end + 2], "big")
    if port == 0:
        raise SocksRefusal(GENERAL_FAILURE, "port 0")
    return end + 2, host, port


def _address_span(buf: bytes | bytearray) -> tuple[int, int] | None:
    """Where the address of a request starts and ends; None until the port has arrived."""
    atyp = buf[3]
    if atyp == ATYP_IPV4:
        start, end = 4, 8
    elif atyp == ATYP_IPV6:
        start, end = 4, 20
    elif atyp == ATYP_DOMAIN:
        if buf[4] == 0:
            raise SocksRefusal(GENERAL_FAILURE, "empty domain name")
        start, end = 5, 5 + buf[4]
    else:
        raise SocksRefusal(ADDRESS_TYPE_NOT_SUPPORTED, f"address type {atyp} is not supported")
    return None if len(buf) < end + 2 else (start, end)


def reply(code: int, bound: tuple[str, int] | None = None) -> bytes:
    """A SOCKS5 reply with the bound address (zeros when unknown)."""
    addr, port = bound or ("0.0.0.0", 0)  # noqa: S104 - a reply field, not a bind
    packed = ipaddress.ip_address(addr).packed
    atyp = ATYP_IPV4 if len(packed) == 4 else ATYP_IPV6  # noqa: PLR2004 - IPv4 is 4 bytes
    return bytes((VERSION, code, 0, atyp)) + packed + port.to_bytes(2, "big")
