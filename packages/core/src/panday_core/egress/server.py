"""The egress proxy: one per session, on loopback (or a unix socket), authenticated.

Each client connection carries exactly one request: an HTTP ``CONNECT``, an absolute-form
plain-HTTP request, or a SOCKS5 ``CONNECT`` (the first byte tells which). The proxy checks
the session credentials, then the host against `net.deny` / `net.allow` / `net.ports`,
resolves the name itself, refuses any answer that points at loopback, private, link-local,
metadata or otherwise non-public space (unless that exact IP literal is allowlisted), and
connects to the address it checked, never re-resolving. Then it relays bytes both ways
until either side closes, and reports one `AuditEvent`.

Performance notes (see docs/egress.md for the figures): the relay is built on
`asyncio.BufferedProtocol` rather than streams, so bytes go from ``recv_into`` straight to
the peer transport. Read buffers come from a small shared pool and return to it as soon as
the peer transport has sent them: an idle tunnel holds no buffer at all, which keeps a
thousand open tunnels within a few dozen MiB. Since Python 3.12 a transport may keep a view
of a buffer it could not send at once instead of copying it, so a buffer is not reused
until the peer transport reports it has drained (write-buffer limits of zero make that
signal exact); until then the reading side is paused, which is also the flow control.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import hmac
import logging
import secrets
import time
from typing import TYPE_CHECKING, Self, TypeAlias, cast

import msgspec

from panday_core.egress import socks5, splicing
from panday_core.egress.audit import AuditEvent, ClientProtocol, JsonlAuditLog, Verdict
from panday_core.egress.http_head import (
    HttpRefusal,
    HttpRequest,
    forward_head,
    head_end,
    parse_head,
    response,
)
from panday_core.egress.resolver import ResolveError, Resolver, SystemResolver
from panday_core.egress.rules import EgressRules, parse_address

if TYPE_CHECKING:
    import socket
    from collections.abc import Awaitable, Callable, Coroutine, Sequence

    from panday_core.egress.addresses import IPAddress
    from panday_core.egress.handoff import HandoffListener
    from panday_core.policy import NetPolicy

    Connector: TypeAlias = Callable[
        [Callable[[], asyncio.BaseProtocol], str, int], Awaitable[object]
    ]
    """Opens a connection to (IP literal, port) with the given protocol factory."""

_log = logging.getLogger("panday_core.egress")

SESSION_USER = "session"
"""The username of session-level credentials (no particular command)."""
_USER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_MAX_USER = 64
_NO_IPV6 = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT})
"""Errors that mean this host has no IPv6 loopback to listen on (so nobody else can)."""


class ProxyLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on what one client may make the proxy hold or wait for."""

    max_head_bytes: int = 32 * 1024
    """Largest HTTP request head (request line and headers) accepted."""
    max_request_line: int = 8 * 1024
    max_headers: int = 100
    max_connections: int = 4096
    """Client connections open at once for the session; more are closed on accept."""
    head_timeout: float = 10.0
    """Seconds a client has to finish its request (HTTP head or SOCKS handshake)."""
    connect_timeout: float = 10.0
    """Seconds for resolving and connecting to the upstream, together."""
    idle_timeout: float = 300.0
    """Seconds a tunnel may carry no bytes in either direction before it is closed."""
    dns_cache_seconds: float = 5.0
    """How long a checked DNS answer is reused (pinned) for later requests to the name."""
    dns_cache_entries: int = 1024
    backlog: int = 4096
    chunk_bytes: int = 256 * 1024
    """Size of the relay's read buffers."""
    write_buffer_bytes: int = 0
    """Bytes a transport may hold unsent before the other side stops reading."""
    pooled_buffers: int = 64
    """Free read buffers kept for reuse; beyond this they are released."""
    splice_after: int | None = 1024 * 1024
    """Bytes one direction of a tunnel relays through buffers before it switches to
    ``splice(2)`` (Linux; see `splicing`); None never switches."""


class _Pool:
    """Reusable read buffers (malloc churn on large chunks halves throughput otherwise)."""

    __slots__ = ("_free", "_keep", "size")

    def __init__(self, size: int, keep: int) -> None:
        self.size = size
        self._keep = keep
        self._free: list[bytearray] = []

    def get(self) -> bytearray:
        return self._free.pop() if self._free else bytearray(self.size)

    def put(self, buf: bytearray) -> None:
        if len(self._free) < self._keep:
            self._free.append(buf)


class _Refused(Exception):  # noqa: N818 - a refusal, not a failure of the proxy
    def __init__(
        self, verdict: Verdict, reason: str, http: int, socks: int, address: str | None = None
    ) -> None:
        self.verdict: Verdict = verdict
        self.reason = reason
        self.http = http
        self.socks = socks
        self.address = address
        super().__init__(reason)


class _End(asyncio.BufferedProtocol):
    """One side of a tunnel: what it reads is written to its peer's transport."""

    def __init__(self, proxy: EgressProxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.peer: _End | None = None
        self.buf: bytearray | None = None
        self.lent: list[bytearray] = []
        self.eof: bool = False
        self.lost: bool = False
        self.count: int = 0
        self.last: float = time.monotonic()
        self.splice: splicing.Direction | None = None

    def tunnel(self) -> _Client:
        raise NotImplementedError

    def get_buffer(self, sizehint: int) -> bytearray:  # noqa: ARG002 - fixed-size buffers
        buf = self.buf
        if buf is None:
            buf = self.buf = self.proxy.pool.get()
        return buf

    def relay(self, nbytes: int) -> None:
        buf = self.buf
        peer = self.peer
        if buf is None or peer is None or peer.transport is None:
            return
        self.count += nbytes
        self.last = time.monotonic()
        out = peer.transport
        out.write(memoryview(buf)[:nbytes])
        self.buf = None
        if out.get_write_buffer_size():
            # The peer transport may hold a view of `buf` until it drains; see module doc.
            self.lent.append(buf)
            return
        self.proxy.pool.put(buf)
        after = self.proxy.limits.splice_after
        if after is not None and self.count >= after and splicing.AVAILABLE:
            # Bulk traffic: the kernel moves it from here on (nothing is unsent, so the
            # order of bytes is kept).
            direction = splicing.Direction(self.proxy.loop, self.tunnel(), self, peer)
            if direction.start():
                self.splice = direction

    def buffer_updated(self, nbytes: int) -> None:
        self.relay(nbytes)

    def pause_writing(self) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.pause_reading()

    def resume_writing(self) -> None:
        peer = self.peer
        if peer is None:
            return
        if peer.lent:
            pool = self.proxy.pool
            for buf in peer.lent:
                pool.put(buf)
            peer.lent.clear()
        if peer.transport is not None and not peer.eof and peer.splice is None:
            peer.transport.resume_reading()

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is None or peer.transport is None or peer.eof:
            return False
        if peer.transport.can_write_eof():
            peer.transport.write_eof()  # half-close: the other direction keeps flowing
            return True
        return False

    def release(self) -> None:
        if self.buf is not None:
            self.proxy.pool.put(self.buf)
            self.buf = None
        self.lent = []  # possibly still referenced by a closing transport: never reused
        if self.splice is not None:
            self.splice.stop()
            self.splice = None


class _Upstream(_End):
    def __init__(self, client: _Client) -> None:
        super().__init__(client.proxy)
        self.client = client

    def tunnel(self) -> _Client:
        return self.client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.release()
        self.client.side_lost(self, exc)


_HEAD, _ESTABLISHING, _RELAY, _DONE = range(4)
_SOCKS_GREETING, _SOCKS_AUTH, _SOCKS_REQUEST = range(3)


class _Client(_End):
    """The client side: reads one request, then becomes one end of the tunnel."""

    def __init__(self, proxy: EgressProxy) -> None:
        super().__init__(proxy)
        self.state = _HEAD
        self.head = bytearray()
        self.kind: ClientProtocol = "unknown"
        self.socks_stage = _SOCKS_GREETING
        self.command_id: str | None = None
        self.host: str | None = None
        self.port: int | None = None
        self.address: str | None = None
        self.verdict: Verdict = "refused"
        self.reason = "connection closed before a complete request"
        self.started = time.time()
        self.t0 = time.monotonic()
        self.up: _Upstream | None = None
        self.establishing = False
        self.timer: asyncio.TimerHandle | None = None
        self.reported = False

    def tunnel(self) -> _Client:
        return self

    # ------------------------------------------------------------------ spliced directions
    def direction_done(self, src: object) -> None:
        """A spliced direction delivered everything up to its end of file: pass the end on
        (half-close), or close the tunnel when the other direction has ended too."""
        src_end, dst = (self, self.up) if src is self else (self.up, self)
        if dst is None or dst.transport is None or dst.lost:
            return
        if dst.eof or not dst.transport.can_write_eof():
            if src_end is not None and src_end.transport is not None:
                src_end.transport.close()
            return
        dst.transport.write_eof()

    def direction_failed(self, exc: OSError) -> None:  # noqa: ARG002 - either way the tunnel ends
        for end in (self, self.up):
            if end is not None and end.transport is not None and not end.lost:
                end.transport.abort()

    # ------------------------------------------------------------------ life cycle
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        proxy = self.proxy
        proxy.clients.add(self)
        if len(proxy.clients) > proxy.limits.max_connections:
            self.reason = f"connection limit ({proxy.limits.max_connections}) reached"
            self.state = _DONE
            self.transport.abort()
            return
        self.timer = proxy.loop.call_later(proxy.limits.head_timeout, self._head_expired)

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002 - the reason is recorded already
        self.lost = True
        self.release()
        if self.timer is not None:
            self.timer.cancel()
        up = self.up
        if up is not None and up.transport is not None and not up.lost:
            up.transport.close()
        self.maybe_finish()

    def side_lost(self, side: _Upstream, exc: Exception | None) -> None:  # noqa: ARG002 - one side
        if self.transport is not None and not self.lost:
            if exc is not None:
                self.transport.abort()
            else:
                self.transport.close()  # flushes what the upstream sent before closing
        self.maybe_finish()

    def maybe_finish(self) -> None:
        if self.reported or not self.lost or self.establishing:
            return
        if self.up is not None and not self.up.lost:
            return
        self.reported = True
        self.state = _DONE
        self.proxy.clients.discard(self)
        up = self.up
        self.proxy.emit(
            AuditEvent(
                time=self.started,
                session_id=self.proxy.session_id,
                command_id=self.command_id,
                protocol=self.kind,
                host=self.host,
                port=self.port,
                address=self.address,
                verdict=self.verdict,
                reason=self.reason,
                bytes_up=self.count,
                bytes_down=up.count if up is not None else 0,
                duration_ms=round((time.monotonic() - self.t0) * 1000.0, 3),
            )
        )

    def _head_expired(self) -> None:
        self.timer = None
        if self.state != _HEAD or self.transport is None:
            return
        secs = self.proxy.limits.head_timeout
        reason = f"request not complete within {secs:g} s"
        if self.kind == "socks5":
            self.refuse("refused", reason, socks=None)
        else:
            self.refuse("refused", reason, http=408)

    def _idle_check(self) -> None:
        self.timer = None
        up = self.up
        if self.state != _RELAY or up is None or self.transport is None:
            return
        idle = self.proxy.limits.idle_timeout
        quiet = time.monotonic() - max(self.last, up.last)
        if quiet >= idle:
            self.reason += f"; closed after {idle:g} s without traffic"
            if not self.lost:
                self.transport.abort()
            if up.transport is not None and not up.lost:
                up.transport.abort()
            return
        self.timer = self.proxy.loop.call_later(idle - quiet, self._idle_check)

    # ------------------------------------------------------------------ reading
    def buffer_updated(self, nbytes: int) -> None:
        if self.state == _RELAY:
            self.relay(nbytes)
            return
        buf = self.buf
        if buf is None:
            return
        self.head += memoryview(buf)[:nbytes]
        self.buf = None
        self.proxy.pool.put(buf)
        if self.state != _HEAD:
            return  # reading is paused while establishing; anything racing in waits in head
        try:
            self._advance()
        except Exception:  # noqa: BLE001 - a bug must cost this connection, never the proxy
            _log.exception("egress proxy: internal error while reading a request")
            self.refuse("refused", "internal error while reading the request", http=400)

    def eof_received(self) -> bool:
        if self.state == _RELAY:
            return super().eof_received()
        self.eof = True
        if self.state == _HEAD:
            self.reason = "client closed before completing its request"
        return False

    def _advance(self) -> None:
        if self.kind == "unknown":
            self.kind = "socks5" if self.head[0] == socks5.VERSION else "http"
        if self.kind == "socks5":
            self._advance_socks()
        else:
            self._advance_http()

    def _advance_http(self) -> None:
        limits = self.proxy.limits
        try:
            end = head_end(
                self.head, max_head=limits.max_head_bytes, max_line=limits.max_request_line
            )
            if end is None:
                return
            req = parse_head(bytes(self.head[:end]), max_headers=limits.max_headers)
        except HttpRefusal as exc:
            self.refuse("refused", f"malformed request: {exc.reason}", http=exc.status)
            return
        leftover = bytes(self.head[end:])
        self.kind = "http-connect" if req.is_connect else "http"
        self.host, self.port = req.host, req.port
        ok, self.command_id = self.proxy.check_credentials(req.credentials)
        if not ok:
            why = "wrong" if req.credentials is not None else "missing"
            self.refuse("refused", f"{why} proxy credentials", http=407)
            return
        self._start(req.host, req.port, leftover, req)

    def _advance_socks(self) -> None:
        while self.state == _HEAD:
            if len(self.head) > socks5.MAX_HANDSHAKE:
                self.refuse("refused", "SOCKS5 handshake too long", socks=None)
                return
            try:
                if not self._socks_step():
                    return
            except socks5.SocksRefusal as exc:
                code = exc.reply if self.socks_stage == _SOCKS_REQUEST else None
                self.refuse("refused", f"malformed request: {exc.reason}", socks=code)
                return

    def _socks_step(self) -> bool:  # noqa: PLR0911 - one return per handshake outcome
        transport = self.transport
        assert transport is not None  # noqa: S101 - set in connection_made
        if self.socks_stage == _SOCKS_GREETING:
            greeting = socks5.parse_greeting(self.head)
            if greeting is None:
                return False
            used, methods = greeting
            del self.head[:used]
            if socks5.METHOD_USERPASS not in methods:
                transport.write(bytes((socks5.VERSION, socks5.NO_ACCEPTABLE_METHOD)))
                self.refuse(
                    "refused", "missing proxy credentials (no username/password method offered)"
                )
                return False
            transport.write(bytes((socks5.VERSION, socks5.METHOD_USERPASS)))
            self.socks_stage = _SOCKS_AUTH
            return True
        if self.socks_stage == _SOCKS_AUTH:
            auth = socks5.parse_userpass(self.head)
            if auth is None:
                return False
            used, user, password = auth
            del self.head[:used]
            ok, self.command_id = self.proxy.check_credentials((user, password))
            transport.write(bytes((socks5.AUTH_VERSION, 0 if ok else 1)))
            if not ok:
                self.refuse("refused", "wrong proxy credentials")
                return False
            self.socks_stage = _SOCKS_REQUEST
            return True
        request = socks5.parse_request(self.head)
        if request is None:
            return False
        used, host, port = request
        leftover = bytes(self.head[used:])
        self.host, self.port = host, port
        self._start(host, port, leftover, None)
        return False

    # ------------------------------------------------------------------ answering
    def refuse(
        self,
        verdict: Verdict,
        reason: str,
        *,
        http: int | None = None,
        socks: int | None = None,
    ) -> None:
        """Answer the client (a response for HTTP, a reply for SOCKS) and close."""
        self.verdict, self.reason = verdict, reason
        self.state = _DONE
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.kind == "socks5":
            if socks is not None:
                transport.write(socks5.reply(socks))
        elif http is not None:
            transport.write(response(http, reason))
        transport.close()

    def _start(self, host: str, port: int, leftover: bytes, req: HttpRequest | None) -> None:
        transport = self.transport
        assert transport is not None  # noqa: S101 - set in connection_made
        transport.pause_reading()
        # Bytes the client sent after its request wait here until the tunnel is up.
        self.head = bytearray(leftover)
        self.state = _ESTABLISHING
        self.establishing = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.proxy.spawn(self._establish(host, port, req))

    async def _establish(self, host: str, port: int, req: HttpRequest | None) -> None:
        try:
            await self._connect(host, port, req)
        except _Refused as exc:
            if exc.address is not None:
                self.address = exc.address
            self.refuse(exc.verdict, exc.reason, http=exc.http, socks=exc.socks)
        except Exception:  # noqa: BLE001 - a bug must cost this connection, never the proxy
            _log.exception("egress proxy: internal error while connecting")
            self.refuse(
                "failed", "internal error while connecting", http=502, socks=socks5.GENERAL_FAILURE
            )
        finally:
            self.establishing = False
            if self.lost and self.up is not None and self.up.transport is not None:
                self.up.transport.close()
            self.maybe_finish()

    async def _connect(self, host: str, port: int, req: HttpRequest | None) -> None:
        proxy = self.proxy
        allowed, reason = proxy.rules.check_host(host, port)
        if not allowed:
            raise _Refused("refused", reason, 403, socks5.NOT_ALLOWED)
        loop = proxy.loop
        deadline = loop.time() + proxy.limits.connect_timeout
        addresses = await proxy.checked_addresses(host, port, deadline)
        up: _Upstream | None = None
        failure = _Refused(
            "failed", f"cannot connect to {host}:{port}", 502, socks5.HOST_UNREACHABLE
        )
        for addr in addresses:
            self.address = str(addr)
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            made = _Upstream(self)
            try:
                async with asyncio.timeout(remaining):
                    # The host is the checked address itself: nothing resolves the name again.
                    await proxy.connector(lambda: made, str(addr), port)  # noqa: B023 - awaited in this iteration
                up = made
                break
            except TimeoutError:
                failure = _Refused(
                    "failed", f"connecting to {addr} port {port} timed out", 504, socks5.TTL_EXPIRED
                )
            except ConnectionRefusedError:
                failure = _Refused(
                    "failed",
                    f"{addr} port {port} refused the connection",
                    502,
                    socks5.CONNECTION_REFUSED,
                )
            except OSError as exc:
                failure = _Refused(
                    "failed",
                    f"cannot connect to {addr} port {port}: {exc.strerror or exc}",
                    502,
                    socks5.HOST_UNREACHABLE,
                )
        if up is None or up.transport is None:
            if loop.time() >= deadline:
                failure = _Refused(
                    "failed", f"connecting to {host}:{port} timed out", 504, socks5.TTL_EXPIRED
                )
            raise failure
        self._begin_relay(up, reason, req)

    def _begin_relay(self, up: _Upstream, reason: str, req: HttpRequest | None) -> None:
        self.up = up
        client, upstream = self.transport, up.transport
        assert client is not None  # noqa: S101 - set in connection_made
        assert upstream is not None  # noqa: S101 - set by create_connection
        if self.lost:
            self.reason = "the client went away while the proxy was connecting"
            upstream.close()
            return
        self.verdict, self.reason = "allowed", reason
        self.peer, up.peer = up, self
        if req is not None and not req.is_connect:
            upstream.write(forward_head(req))
        elif req is not None:
            client.write(response(200))
        else:
            client.write(socks5.reply(socks5.SUCCEEDED, _bound(upstream)))
        leftover = bytes(self.head)
        self.head = bytearray()
        if leftover:
            self.count += len(leftover)
            upstream.write(leftover)
        # Zero limits: pause/resume mark "holding data" / "fully drained" exactly.
        high = self.proxy.limits.write_buffer_bytes
        client.set_write_buffer_limits(high=high, low=0)
        upstream.set_write_buffer_limits(high=high, low=0)
        self.state = _RELAY
        self.last = up.last = time.monotonic()
        self.timer = self.proxy.loop.call_later(self.proxy.limits.idle_timeout, self._idle_check)
        if not client.get_write_buffer_size():
            client.resume_reading()


async def _create_connection(
    factory: Callable[[], asyncio.BaseProtocol], host: str, port: int
) -> object:
    return await asyncio.get_running_loop().create_connection(factory, host=host, port=port)


def _bound(transport: asyncio.Transport) -> tuple[str, int] | None:
    name = transport.get_extra_info("sockname")
    if isinstance(name, tuple):
        parts = cast("tuple[object, ...]", name)
        if len(parts) >= 2 and isinstance(parts[1], int):  # noqa: PLR2004 - (host, port, ...)
            return str(parts[0]), parts[1]
    return None


class EgressProxy:
    """One session's egress proxy. Use ``async with`` or `start` / `close`.

    `net` is the session's network policy; `resolver` turns names into addresses (the
    host's resolver by default; tests pass a `StaticResolver`); `audit` receives every
    `AuditEvent`, and `audit_jsonl` appends them to a file. `secret` derives the
    credentials (random per proxy unless given). `connector` opens the upstream connection
    to an already checked IP literal (``loop.create_connection`` by default); tests pass one
    that records where the proxy would connect and refuses anything off loopback, so that
    no test ever sends a packet elsewhere, even with a guard removed.
    """

    def __init__(
        self,
        net: NetPolicy,
        *,
        session_id: str | None = None,
        resolver: Resolver | None = None,
        audit: Callable[[AuditEvent], None] | None = None,
        audit_jsonl: str | None = None,
        limits: ProxyLimits | None = None,
        secret: bytes | None = None,
        connector: Connector | None = None,
    ) -> None:
        self.rules = EgressRules(net)
        self.session_id = session_id or secrets.token_hex(8)
        self.resolver: Resolver = resolver or SystemResolver()
        self.limits = limits or ProxyLimits()
        self.pool = _Pool(self.limits.chunk_bytes, self.limits.pooled_buffers)
        self.clients: set[_Client] = set()
        self._audit = audit
        self.connector: Connector = connector or _create_connection
        self._jsonl = JsonlAuditLog(audit_jsonl) if audit_jsonl else None
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._answers: dict[str, tuple[float, tuple[IPAddress, ...]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.tcp_address: tuple[str, int] | None = None
        self.unix_path: str | None = None
        self.handoff_path: str | None = None
        self._handoffs: list[HandoffListener] = []

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # ------------------------------------------------------------------ credentials
    def credentials(self, command_id: str | None = None) -> tuple[str, str]:
        """(username, password) a client presents: the command id (or ``session``) and a
        token derived from this proxy's secret, so the command id in the audit log is
        authenticated rather than claimed."""
        user = SESSION_USER if command_id is None else command_id
        if command_id == SESSION_USER or not _valid_user(user):
            raise ValueError(
                f"command id {command_id!r} must be 1-{_MAX_USER} characters of "
                f"[A-Za-z0-9._-] and not {SESSION_USER!r}"
            )
        return user, self._token(user)

    def _token(self, user: str) -> str:
        return hmac.new(
            self._secret, b"panday-egress\0" + user.encode("ascii"), hashlib.sha256
        ).hexdigest()[:40]

    def check_credentials(self, creds: tuple[str, str] | None) -> tuple[bool, str | None]:
        """(valid, command id) for credentials a client presented; constant-time compare."""
        if creds is None:
            return False, None
        user, password = creds
        if not _valid_user(user):
            return False, None
        ok = hmac.compare_digest(
            self._token(user).encode("ascii"), password.encode("utf-8", "replace")
        )
        if not ok:
            return False, None
        return True, None if user == SESSION_USER else user

    def url(
        self,
        command_id: str | None = None,
        *,
        scheme: str = "http",
        address: tuple[str, int] | None = None,
    ) -> str:
        """The proxy URL with credentials (``http`` or ``socks5h``) for the TCP listener, or
        for `address` (where a relay in front of the proxy listens)."""
        where = address or self.tcp_address
        if where is None:
            raise RuntimeError("the proxy has no TCP listener; call start() first")
        user, password = self.credentials(command_id)
        host, port = where
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{user}:{password}@{shown}:{port}"

    # ------------------------------------------------------------------ serving
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen on TCP (loopback by default) and return the bound (host, port)."""
        self._loop = asyncio.get_running_loop()
        server = await self._loop.create_server(
            lambda: _Client(self), host, port, backlog=self.limits.backlog, reuse_address=True
        )
        self._servers.append(server)
        name = server.sockets[0].getsockname()
        self.tcp_address = (str(name[0]), int(name[1]))
        return self.tcp_address

    async def start_unix(self, path: str) -> str:
        """Listen on a unix socket (the Linux bridge's way into a jail without network)."""
        self._loop = asyncio.get_running_loop()
        server = await self._loop.create_unix_server(
            lambda: _Client(self), path, backlog=self.limits.backlog
        )
        self._servers.append(server)
        self.unix_path = path
        return path

    async def start_loopback(self, port: int = 0, *, attempts: int = 32) -> int:
        """Listen on 127.0.0.1 *and* ::1 at one port, and return it.

        For a jail that can only name loopback as a whole (Seatbelt's ``localhost`` covers
        both addresses): holding the port on both means no other process can listen on the
        one the proxy would otherwise leave free. A host without IPv6 loopback has no ::1 for
        anyone to listen on, so then 127.0.0.1 alone is enough. With `port` 0 a port free on
        both is searched for (`attempts` tries).
        """
        self._loop = loop = asyncio.get_running_loop()
        for _ in range(attempts if port == 0 else 1):
            v4 = await loop.create_server(
                lambda: _Client(self), "127.0.0.1", port, backlog=self.limits.backlog
            )
            chosen = int(v4.sockets[0].getsockname()[1])
            try:
                v6 = await loop.create_server(
                    lambda: _Client(self), "::1", chosen, backlog=self.limits.backlog
                )
            except OSError as exc:
                if exc.errno in _NO_IPV6:
                    v6 = None
                else:
                    v4.close()
                    if port != 0:
                        raise
                    continue  # someone holds this port on ::1: try another
            self._servers.extend(s for s in (v4, v6) if s is not None)
            self.tcp_address = ("127.0.0.1", chosen)
            return chosen
        raise OSError(errno.EADDRINUSE, "no port is free on both 127.0.0.1 and ::1")

    async def start_handoff(self, path: str) -> str:
        """Receive connected client sockets over a unix socket at `path` (the Linux bridge:
        see `panday_core.egress.handoff`)."""
        from panday_core.egress.handoff import HandoffListener  # noqa: PLC0415 - Linux bridge only

        self._loop = asyncio.get_running_loop()
        listener = HandoffListener(self, path)
        listener.start()
        self._handoffs.append(listener)
        self.handoff_path = path
        return path

    async def adopt(self, sock: socket.socket) -> None:
        """Serve `sock`, a connected TCP socket some relay accepted, as a client."""
        try:
            await self.loop.connect_accepted_socket(lambda: _Client(self), sock)
        except (OSError, RuntimeError):
            sock.close()

    async def close(self) -> None:
        """Stop listening and cut every open connection."""
        for listener in self._handoffs:
            listener.close()
        self._handoffs.clear()
        for server in self._servers:
            server.close()
        for client in list(self.clients):
            for end in (client, client.up):
                # Never touch a transport that is gone: Python 3.11 would report its loss twice.
                if end is not None and end.transport is not None and not end.lost:
                    end.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()
        await asyncio.sleep(0)  # let connection_lost callbacks run and report
        if self._jsonl is not None:
            self._jsonl.close()

    async def __aenter__(self) -> Self:
        if not self._servers:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def spawn(self, coro: Coroutine[object, object, None]) -> None:
        # asyncio keeps only weak references to tasks: hold them until done.
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def emit(self, event: AuditEvent) -> None:
        for sink in (self._jsonl, self._audit):  # the durable log first
            if sink is None:
                continue
            try:
                sink(event)
            except Exception:  # noqa: BLE001 - an audit consumer's bug must not take the proxy down
                _log.exception("egress proxy: audit sink failed")

    # ------------------------------------------------------------------ resolving
    async def _resolve(self, host: str, port: int, budget: float) -> Sequence[str]:
        try:
            async with asyncio.timeout(max(budget, 0.0)):
                return await self.resolver.resolve(host, port)
        except TimeoutError:
            reason = f"resolving {host} timed out"
            raise _Refused("failed", reason, 504, socks5.TTL_EXPIRED) from None
        except ResolveError as exc:
            raise _Refused("failed", str(exc), 502, socks5.HOST_UNREACHABLE) from None

    async def checked_addresses(self, host: str, port: int, deadline: float) -> Sequence[IPAddress]:
        """The addresses `host` may be reached at, every one checked; raises `_Refused`.

        A literal is checked as itself. A name is resolved once; if any address in the
        answer is refused the whole request is refused (a mixed answer is how rebinding
        attacks look). Passing answers are pinned for `dns_cache_seconds`.
        """
        literal = parse_address(host)
        if literal is not None:
            problem = self.rules.check_address(host, literal)
            if problem is not None:
                raise _Refused("refused", problem, 403, socks5.NOT_ALLOWED, str(literal))
            return (literal,)
        now = self.loop.time()
        cached = self._answers.get(host)
        if cached is not None and cached[0] > now:
            return cached[1]
        answer = await self._resolve(host, port, deadline - now)
        addresses: list[IPAddress] = []
        for text in answer:
            addr = parse_address(str(text))
            if addr is None:
                raise _Refused(
                    "failed",
                    f"resolver gave a non-address for {host}",
                    502,
                    socks5.HOST_UNREACHABLE,
                )
            problem = self.rules.check_address(host, addr)
            if problem is not None:
                raise _Refused("refused", problem, 403, socks5.NOT_ALLOWED, str(addr))
            addresses.append(addr)
        if not addresses:
            raise _Refused(
                "failed", f"cannot resolve {host}: no addresses", 502, socks5.HOST_UNREACHABLE
            )
        pinned = tuple(addresses)
        if self.limits.dns_cache_seconds > 0:
            if len(self._answers) >= self.limits.dns_cache_entries:
                self._answers.clear()
            self._answers[host] = (now + self.limits.dns_cache_seconds, pinned)
        return pinned


def _valid_user(user: str) -> bool:
    return 0 < len(user) <= _MAX_USER and set(user) <= _USER_CHARS
