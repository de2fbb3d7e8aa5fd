"""The relay core of the egress proxy: one client connection, its upstream, the bytes between.

A protocol front-end (`http_front`, `socks_front`) reads the client's request and says
what it wants: credentials checked (`Connection.authenticate`), then a host and port
(`Connection.request`). From there this module does the same for every protocol: the
allowlist, the checked addresses (`names`), the connection to the address it checked, the
relay, the timers and the audit events. A refusal is a neutral `Refusal` (a kind, a
reason); the front-end answers it in its own protocol's words.

The relay is built on `asyncio.BufferedProtocol` rather than streams, so bytes go from
``recv_into`` straight to the peer transport. Read buffers come from a `BufferPool` and go
back to it as soon as the peer transport has sent them, and whenever a side reaches end of
file or closes (asyncio asks for a buffer before it learns that a read returned nothing):
an idle or half-closed tunnel holds no buffer at all. Large buffers are handed out only
while their total stays within `ProxyLimits.buffer_budget_bytes`; beyond it reads use small
ones, so a thousand clients that stop reading cost a few MiB, not a GiB. Since Python 3.12
a transport may keep a view of a buffer it could not send at once instead of copying it,
so a buffer is not reused until the peer transport reports it has drained (write-buffer
limits of zero make that signal exact); until then the reading side is paused, which is
also the flow control.

Each connection holds its descriptors in the process's `DescriptorBudget` (the client's
own from accept, one for its upstream, four per spliced direction) and gives them back
when they close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Literal, Protocol, cast

from panday_core.egress import splicing
from panday_core.egress.audit import AuditEvent, ClientProtocol, Verdict
from panday_core.egress.framing import MORE, Body, FramingError, Response

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from panday_core.egress.http_head import HttpRequest
    from panday_core.egress.limits import DescriptorBudget, ProxyLimits
    from panday_core.egress.names import CheckedNames
    from panday_core.egress.rules import EgressRules

    Connector = Callable[[Callable[[], asyncio.BaseProtocol], str, int], Awaitable[object]]
    """Opens a connection to (IP literal, port) with the given protocol factory."""

_log = logging.getLogger("panday_core.egress")

RefusalKind = Literal[
    "malformed",
    "credentials",
    "policy",
    "busy",
    "too-slow",
    "unresolvable",
    "unreachable",
    "connection-refused",
    "timeout",
    "internal",
]
_FAILED: frozenset[str] = frozenset(
    {"unresolvable", "unreachable", "connection-refused", "timeout", "internal"}
)
SMALL_KEEP = 256
"""Free small read buffers kept for reuse."""


class Refusal(Exception):  # noqa: N818 - a refusal, not a failure of the proxy
    """A request the proxy does not serve, in neutral terms.

    `kind` says what went wrong, and each front-end maps it to its protocol's answer (HTTP
    status, SOCKS reply code). `status` overrides the HTTP status for parse errors that
    have their own (414, 431). The audit verdict is ``failed`` when the request was
    admitted but could not be carried out, ``refused`` otherwise.
    """

    def __init__(
        self,
        kind: RefusalKind,
        reason: str,
        *,
        address: str | None = None,
        status: int | None = None,
    ) -> None:
        self.kind: RefusalKind = kind
        self.reason = reason
        self.address = address
        self.status = status
        self.verdict: Verdict = "failed" if kind in _FAILED else "refused"
        super().__init__(reason)

    def copy(self) -> Refusal:
        """A fresh exception with the same content (one outcome, raised by many waiters)."""
        return Refusal(self.kind, self.reason, address=self.address, status=self.status)


class BufferPool:
    """Read buffers: large ones within a byte budget (reused), small ones beyond it."""

    __slots__ = ("_free", "_keep", "_small_free", "budget", "large", "out", "small")

    def __init__(self, limits: ProxyLimits) -> None:
        self.large = limits.chunk_bytes
        self.small = min(limits.small_chunk_bytes, limits.chunk_bytes)
        self.budget = limits.buffer_budget_bytes
        self._keep = limits.pooled_buffers
        self._free: list[bytearray] = []
        self._small_free: list[bytearray] = []
        self.out = 0
        """Bytes of large buffers handed out and not yet returned."""

    def get(self) -> bytearray:
        if self.out + self.large <= self.budget:
            self.out += self.large
            return self._free.pop() if self._free else bytearray(self.large)
        return self._small_free.pop() if self._small_free else bytearray(self.small)

    def put(self, buf: bytearray) -> None:
        """Return `buf` for reuse (nothing may refer to it any more)."""
        if len(buf) == self.large:
            self.out -= self.large
            if len(self._free) < self._keep:
                self._free.append(buf)
        elif len(self._small_free) < SMALL_KEEP:
            self._small_free.append(buf)

    def forget(self, buf: bytearray) -> None:
        """`buf` may still be referenced (by a closing transport): count it returned, but
        never reuse it."""
        if len(buf) == self.large:
            self.out -= self.large


class Source:
    """Where connections come from: the proxy's own listeners, or one jail (its relay).

    `pending` holds its connections that have not presented valid credentials yet, oldest
    first; at `limit` the oldest is closed to admit a new one.
    """

    __slots__ = ("key", "limit", "pending")

    def __init__(self, key: str, limit: int) -> None:
        self.key = key
        self.limit = limit
        self.pending: dict[Connection, None] = {}


class ProxyCore(Protocol):
    """What a connection needs of its proxy (`server.EgressProxy`)."""

    session_id: str
    rules: EgressRules
    limits: ProxyLimits
    pool: BufferPool
    names: CheckedNames
    connector: Connector
    descriptors: DescriptorBudget

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    def grant_of(self, creds: tuple[str, str] | None) -> tuple[int, str | None] | None: ...
    def authenticated(self, conn: Connection) -> None: ...
    def spawn(self, coro: Coroutine[object, object, None]) -> None: ...
    def finished(self, conn: Connection, event: AuditEvent) -> None: ...
    def opened(self, event: AuditEvent) -> None: ...


class FrontEnd(Protocol):
    """A client protocol: reads the request, answers in the protocol's words."""

    kind: ClientProtocol

    def feed(self, conn: Connection, data: bytes) -> None:
        """`data` arrived before the request was complete: parse it, and call
        `conn.authenticate` and `conn.request` when the time comes. Raises `Refusal`."""
        ...

    def answer(self, refusal: Refusal) -> bytes | None:
        """What to send the client before closing, for `refusal` (None: nothing)."""
        ...

    def opened(self, conn: Connection, request: HttpRequest | None) -> tuple[bytes, bytes]:
        """(to the client, to the upstream) once the upstream is connected."""
        ...


class End(asyncio.BufferedProtocol):
    """One side of a tunnel: what it reads is written to its peer's transport."""

    __slots__ = (
        "buf",
        "conn",
        "count",
        "eof",
        "held",
        "last",
        "lent",
        "lost",
        "peer",
        "pool",
        "scan",
        "splice",
        "transport",
    )

    def __init__(self, conn: Connection, pool: BufferPool) -> None:
        self.conn = conn
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.peer: End | None = None
        self.buf: bytearray | None = None
        self.lent: list[bytearray] | None = None
        self.eof = False
        self.lost = False
        self.held = False
        """Reading stopped for good (plain HTTP: nothing more is forwarded this way)."""
        self.count = 0
        self.last = 0.0
        self.splice: splicing.Direction | None = None
        self.scan: Callable[[memoryview], int] | None = None
        """Plain HTTP: how many of the bytes read belong to the one request (or response)."""

    def get_buffer(self, sizehint: int) -> bytearray:  # noqa: ARG002 - fixed-size buffers
        buf = self.buf
        if buf is None:
            buf = self.buf = self.pool.get()
        return buf

    def buffer_updated(self, nbytes: int) -> None:
        self.relay(nbytes)

    def relay(self, nbytes: int) -> None:
        buf = self.buf
        peer = self.peer
        if buf is None or peer is None or peer.transport is None:
            return
        self.buf = None
        out = peer.transport
        self.forward(memoryview(buf)[:nbytes])
        if out.get_write_buffer_size():
            # The peer transport may hold a view of `buf` until it drains; see module doc.
            if self.lent is None:
                self.lent = [buf]
            else:
                self.lent.append(buf)
            return
        self.pool.put(buf)
        conn = self.conn
        after = conn.limits.splice_after
        if (
            after is not None
            and self.count >= after
            and self.scan is None
            and self.splice is None
            and splicing.AVAILABLE
            and not self.eof
        ):
            conn.try_splice(self, peer)

    def forward(self, view: memoryview) -> None:
        """Write what `view` holds to the peer (through the plain-HTTP scan, if any)."""
        peer = self.peer
        if peer is None or peer.transport is None:
            return
        self.last = time.monotonic()
        scan = self.scan
        if scan is None:
            self.count += len(view)
            peer.transport.write(view)
            return
        try:
            keep = scan(view)
        except FramingError as exc:
            if exc.offset:
                self.count += exc.offset
                peer.transport.write(view[: exc.offset])
            self.conn.cut(f"malformed request body: {exc.reason}")
            return
        if keep:
            self.count += keep
            peer.transport.write(view[:keep])
        plain = self.conn.plain
        if plain is not None and self is self.conn:
            checked = plain.request.take_checked()  # trailer lines, passed on once checked
            if checked:
                self.count += len(checked)
                peer.transport.write(checked)
        self.conn.framing_step()

    def pause_writing(self) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.pause_reading()

    def resume_writing(self) -> None:
        peer = self.peer
        if peer is None:
            return
        if peer.lent:
            pool = self.pool
            for buf in peer.lent:
                pool.put(buf)
            peer.lent = None
        if (
            peer.transport is not None
            and not peer.eof
            and not peer.held
            and peer.splice is None
            and self.conn.relaying
        ):
            peer.transport.resume_reading()

    def return_buffer(self) -> None:
        """Give back the buffer asyncio asked for but never filled (end of file, close)."""
        if self.buf is not None:
            self.pool.put(self.buf)
            self.buf = None

    def eof_received(self) -> bool:
        self.eof = True
        self.return_buffer()
        peer = self.peer
        if peer is None or peer.transport is None or peer.eof or peer.lost:
            return False
        if peer.transport.can_write_eof():
            peer.transport.write_eof()  # half-close: the other direction keeps flowing
            return True
        return False

    def release(self) -> None:
        self.return_buffer()
        if self.lent:
            for buf in self.lent:  # possibly still referenced by a closing transport
                self.pool.forget(buf)
            self.lent = None
        if self.splice is not None:
            self.splice.stop()
            self.splice = None
            self.conn.descriptors.give(splicing.DESCRIPTORS)


class Upstream(End):
    """The upstream side of a tunnel."""

    __slots__ = ("holds_fd",)

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn, conn.pool)
        self.holds_fd = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.release()
        if self.holds_fd:
            self.holds_fd = False
            self.conn.descriptors.give()
        self.conn.side_lost(exc)


_HEAD, _ESTABLISHING, _RELAY, _DONE = range(4)


class Connection(End):
    """The client side of one request: a front-end reads it, then it is one end of the
    tunnel. `source` is where it came from (for the unauthenticated budget)."""

    __slots__ = (
        "address",
        "command_id",
        "descriptors",
        "establishing",
        "evicted",
        "fd_held",
        "front",
        "grant",
        "host",
        "kind",
        "limits",
        "not_forwarded",
        "pending",
        "plain",
        "port",
        "proxy",
        "reason",
        "released",
        "reported",
        "source",
        "started",
        "state",
        "t0",
        "timer",
        "up",
        "user",
        "verdict",
    )

    def __init__(self, proxy: ProxyCore, source: Source) -> None:
        super().__init__(self, proxy.pool)
        self.proxy = proxy
        self.limits = proxy.limits
        self.descriptors = proxy.descriptors
        self.source = source
        self.state = _HEAD
        self.front: FrontEnd | None = None
        self.kind: ClientProtocol = "unknown"
        self.user: str | None = None
        """Whose valid credentials this connection presented (None: not yet)."""
        self.command_id: str | None = None
        self.grant = 0
        """Which issue of the credentials it presented (revocation cuts by it)."""
        self.fd_held = False
        """Its own descriptor is counted in the budget."""
        self.released = False
        """The proxy's accounting no longer counts it."""
        self.host: str | None = None
        self.port: int | None = None
        self.address: str | None = None
        self.verdict: Verdict = "refused"
        self.reason = "connection closed before a complete request"
        self.started = time.time()
        self.t0 = time.monotonic()
        self.up: Upstream | None = None
        self.establishing = False
        self.evicted = False
        self.timer: asyncio.TimerHandle | None = None
        self.reported = False
        self.pending = b""
        self.plain: PlainHttp | None = None
        self.not_forwarded = 0

    # ------------------------------------------------------------------ life cycle
    @property
    def relaying(self) -> bool:
        return self.state == _RELAY

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        if self.evicted:  # made room for another before its transport was even up
            self.transport.abort()
            return
        self.timer = self.proxy.loop.call_later(self.limits.head_timeout, self._head_expired)

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002 - the reason is recorded already
        self.lost = True
        self.release()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        up = self.up
        if up is not None and up.transport is not None and not up.lost:
            up.transport.close()
        self.maybe_finish()

    def side_lost(self, exc: Exception | None) -> None:
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
        if self.not_forwarded:
            self.reason += (
                f"; {self.not_forwarded} bytes the client sent after its request were not "
                "forwarded (one request per connection)"
            )
        self.proxy.finished(self, self.event("close"))

    def event(self, phase: Literal["open", "close"]) -> AuditEvent:
        up = self.up
        return AuditEvent(
            time=self.started,
            session_id=self.proxy.session_id,
            command_id=self.command_id,
            protocol=self.kind,
            host=self.host,
            port=self.port,
            address=self.address,
            verdict=self.verdict,
            reason=self.reason,
            phase=phase,
            bytes_up=self.count,
            bytes_down=up.count if up is not None else 0,
            duration_ms=round((time.monotonic() - self.t0) * 1000.0, 3),
        )

    def _head_expired(self) -> None:
        self.timer = None
        if self.state != _HEAD or self.transport is None:
            return
        secs = self.limits.head_timeout
        self.refuse(Refusal("too-slow", f"request not complete within {secs:g} s"))

    def _idle_check(self) -> None:
        self.timer = None
        up = self.up
        if self.state != _RELAY or up is None or self.transport is None:
            return
        idle = self.limits.idle_timeout
        quiet = time.monotonic() - max(self.last, up.last)
        if quiet >= idle:
            self.cut(f"closed after {idle:g} s without traffic")
            return
        self.timer = self.proxy.loop.call_later(idle - quiet, self._idle_check)

    def cut(self, why: str) -> None:
        """End the tunnel now (both sides), recording `why` beside the reason."""
        self.reason += f"; {why}"
        for end in (self, self.up):
            if end is not None and end.transport is not None and not end.lost:
                end.transport.abort()

    def evict(self, why: str) -> None:
        """Close an unauthenticated connection to make room (reported in aggregate)."""
        self.evicted = True
        self.reason = why
        self.state = _DONE
        if self.transport is not None and not self.lost:
            self.transport.abort()

    # ------------------------------------------------------------------ reading a request
    def buffer_updated(self, nbytes: int) -> None:
        if self.state == _RELAY:
            self.relay(nbytes)
            return
        buf = self.buf
        if buf is None:
            return
        data = bytes(memoryview(buf)[:nbytes])
        self.buf = None
        self.pool.put(buf)
        if self.state != _HEAD:
            self.pending += data  # reading is paused while establishing; what raced in waits
            return
        try:
            if self.front is None:
                from panday_core.egress.fronts import choose  # noqa: PLC0415 - no import cycle

                self.front = choose(data[0])
                self.kind = self.front.kind
            self.front.feed(self, data)
        except Refusal as refusal:
            self.refuse(refusal)
        except Exception:  # noqa: BLE001 - a bug must cost this connection, never the proxy
            _log.exception("egress proxy: internal error while reading a request")
            self.refuse(Refusal("malformed", "internal error while reading the request"))

    def eof_received(self) -> bool:
        if self.state == _RELAY:
            return super().eof_received()
        self.eof = True
        self.return_buffer()
        if self.state == _HEAD:
            self.reason = "client closed before completing its request"
        return False

    def authenticate(self, creds: tuple[str, str] | None) -> bool:
        """Check the credentials the client presented; True when valid (and admitted)."""
        granted = self.proxy.grant_of(creds)
        if granted is None:
            return False
        self.grant, self.command_id = granted
        self.user = self.command_id or "session"
        self.proxy.authenticated(self)  # may raise Refusal("busy")
        return True

    def request(
        self, host: str, port: int, leftover: bytes, http: HttpRequest | None = None
    ) -> None:
        """The client asks for `host`:`port`; `leftover` came after its request."""
        transport = self.transport
        assert transport is not None  # noqa: S101 - set in connection_made
        self.host, self.port = host, port
        if self.user is None:  # whatever the front-end: no credentials, no connection
            raise Refusal("credentials", "missing proxy credentials")
        transport.pause_reading()
        self.pending = leftover  # waits here until the tunnel is up
        self.state = _ESTABLISHING
        self.establishing = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.proxy.spawn(self._establish(host, port, http))

    # ------------------------------------------------------------------ answering
    def refuse(self, refusal: Refusal) -> None:
        """Answer the client in its protocol's words, and close."""
        self.verdict, self.reason = refusal.verdict, refusal.reason
        if refusal.address is not None:
            self.address = refusal.address
        self.state = _DONE
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        answer = self.front.answer(refusal) if self.front is not None else None
        if answer:
            transport.write(answer)
        transport.close()

    async def _establish(self, host: str, port: int, http: HttpRequest | None) -> None:
        try:
            await self._connect(host, port, http)
        except Refusal as refusal:
            self.refuse(refusal)
        except Exception:  # noqa: BLE001 - a bug must cost this connection, never the proxy
            _log.exception("egress proxy: internal error while connecting")
            self.refuse(Refusal("internal", "internal error while connecting"))
        finally:
            self.establishing = False
            if self.lost and self.up is not None and self.up.transport is not None:
                self.up.transport.close()
            self.maybe_finish()

    async def _connect(self, host: str, port: int, http: HttpRequest | None) -> None:
        proxy = self.proxy
        allowed, reason = proxy.rules.check_host(host, port)
        if not allowed:
            raise Refusal("policy", reason)
        loop = proxy.loop
        deadline = loop.time() + self.limits.connect_timeout
        literal = proxy.names.literal(host)
        addresses = literal or await proxy.names.addresses(host, port, deadline)
        failure = Refusal("unreachable", f"cannot connect to {host}:{port}")
        for addr in addresses:
            self.address = str(addr)
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if self.lost:
                self.reason = "the client went away while the proxy was connecting"
                return
            made, failure = await self._attempt(str(addr), port, remaining, failure)
            if made is not None:
                self._begin_relay(made, reason, http)
                return
        if loop.time() >= deadline and failure.kind == "unreachable":
            failure = Refusal("timeout", f"connecting to {host}:{port} timed out")
        raise failure

    async def _attempt(
        self, addr: str, port: int, remaining: float, failure: Refusal
    ) -> tuple[Upstream | None, Refusal]:
        """One connection to a checked address: (the upstream, or None and why not)."""
        if not self.descriptors.take():
            raise Refusal("busy", "the proxy has no descriptor left for an upstream connection")
        made = Upstream(self)
        try:
            async with asyncio.timeout(remaining):
                # The host is the checked address itself: nothing resolves the name again.
                await self.proxy.connector(lambda: made, addr, port)
        except TimeoutError:
            failure = Refusal("timeout", f"connecting to {addr} port {port} timed out")
        except ConnectionRefusedError:
            failure = Refusal("connection-refused", f"{addr} port {port} refused the connection")
        except OSError as exc:
            failure = Refusal(
                "unreachable", f"cannot connect to {addr} port {port}: {exc.strerror or exc}"
            )
        if made.transport is not None:
            return made, failure
        if made.holds_fd:  # never connected: its descriptor is no longer held
            made.holds_fd = False
            self.descriptors.give()
        return None, failure

    def _begin_relay(self, up: Upstream, reason: str, http: HttpRequest | None) -> None:
        self.up = up
        client, upstream = self.transport, up.transport
        assert client is not None  # noqa: S101 - set in connection_made
        assert upstream is not None  # noqa: S101 - set by the connector
        if self.lost:
            self.reason = "the client went away while the proxy was connecting"
            upstream.close()
            return
        assert self.front is not None  # noqa: S101 - a front-end made the request
        self.verdict, self.reason = "allowed", reason
        self.peer, up.peer = up, self
        to_client, to_upstream = self.front.opened(self, http)
        if http is not None and not http.is_connect:
            plain = self.plain = PlainHttp(self, http)
            self.scan, up.scan = plain.request_scan, plain.response_scan
        # Zero limits: pause/resume mark "holding data" / "fully drained" exactly.
        high = self.limits.write_buffer_bytes
        client.set_write_buffer_limits(high=high, low=0)
        upstream.set_write_buffer_limits(high=high, low=0)
        self.state = _RELAY
        self.last = up.last = time.monotonic()
        self.proxy.opened(self.event("open"))
        if to_client:
            client.write(to_client)
        if to_upstream:
            upstream.write(to_upstream)
        leftover, self.pending = self.pending, b""
        if leftover:
            self.forward(memoryview(leftover))
        if self.state != _RELAY:
            return
        self.timer = self.proxy.loop.call_later(self.limits.idle_timeout, self._idle_check)
        if not upstream.get_write_buffer_size() and not self.held:
            client.resume_reading()

    # ------------------------------------------------------------------ plain HTTP
    def framing_step(self) -> None:
        """After bytes went through the plain-HTTP scan: stop what must stop."""
        plain = self.plain
        if plain is None:
            return
        if plain.response.done:
            self.state = _DONE
            # The one response is complete: close (flushing it) rather than let the
            # connection carry a second request nobody checked.
            for end in (self, self.up):
                if end is not None and end.transport is not None and not end.lost:
                    end.transport.close()
        elif plain.request.done and self.not_forwarded and not self.held:
            self.held = True
            if self.transport is not None:
                self.transport.pause_reading()

    # ------------------------------------------------------------------ spliced directions
    def try_splice(self, src: End, dst: End) -> None:
        """Hand `src` → `dst` to splice(2), if the descriptor budget allows."""
        if not self.descriptors.take(splicing.DESCRIPTORS):
            return
        direction = splicing.Direction(self.proxy.loop, self, src, dst, lift=self.descriptors.lift)
        if direction.start():
            src.splice = direction
        else:
            self.descriptors.give(splicing.DESCRIPTORS)

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


class PlainHttp:
    """One plain-HTTP request and its response, as they pass (see `framing`)."""

    __slots__ = ("conn", "request", "response")

    def __init__(self, conn: Connection, http: HttpRequest) -> None:
        self.conn = conn
        self.request = Body(http.body_length, strict=True)
        self.response = Response(
            head_request=http.method == "HEAD", max_head=conn.limits.max_response_head_bytes
        )

    def request_scan(self, view: memoryview) -> int:
        request = self.request
        if request.done:
            self.conn.not_forwarded += len(view)
            return 0
        end = request.scan(view)
        if end != MORE:
            self.conn.not_forwarded += len(view) - end
        return request.raw

    def response_scan(self, view: memoryview) -> int:
        if self.response.done:
            return 0
        end = self.response.scan(view)
        return len(view) if end == MORE else end
