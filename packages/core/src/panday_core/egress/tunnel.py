# Over 500 lines: one connection's state machine (request, connect, relay, close) and its timers.
"""The relay core of the egress proxy: one client connection, its upstream, the bytes between.

A protocol front-end (`fronts`) reads the client's request and says what it wants:
credentials checked (`Connection.authenticate`), then a host and port
(`Connection.request`). From there this module does the same for every protocol: the
allowlist, the checked addresses (`names`), the connection to the address it checked, the
relay, the timers and the audit events. A refusal is a neutral `Refusal` (a kind, a
reason); the front-end answers it in its own protocol's words. A front whose protocol has
message boundaries inside the tunnel (plain HTTP: one request, one response) installs a
`Framing` hook when the tunnel opens; the core knows nothing of any protocol's framing.

The relay is built on `asyncio.BufferedProtocol` rather than streams, so bytes go from
``recv_into`` straight to the peer transport. Read buffers come from a `BufferPool`; a
side keeps its buffer while the peer transport takes what it reads at once (the common
case: no per-read pool traffic), and gives it back whenever it reaches end of file or
closes, or its peer stops taking bytes: an idle or half-closed tunnel holds no buffer at
all. Since Python 3.12 a transport may keep a view of a buffer it could not send at once
instead of copying it, so such a buffer is lent until the peer transport reports it has
drained, and reading pauses meanwhile (the flow control). The write-buffer high mark is
`ProxyLimits.write_buffer_bytes`; below it a transport that could not send everything at
once keeps reading into a fresh buffer.

Once one direction has ended (end of file) and the other has carried nothing for
`ProxyLimits.half_closed_timeout`, the tunnel is closed: an upstream that keeps its half
open does not hold two descriptors until the idle timeout.

Each connection holds its descriptors in the process's `DescriptorBudget` (the client's
own from accept, one for its upstream, four per spliced direction) and gives them back
when they close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from typing import TYPE_CHECKING, Literal, Protocol, cast

from panday_core.egress import splicing
from panday_core.egress.audit import AuditEvent, ClientProtocol, Verdict
from panday_core.egress.buffers import BufferPool
from panday_core.egress.ends import End, Framing, Upstream
from panday_core.egress.refusal import Refusal, RefusalKind

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from panday_core.egress.limits import DescriptorBudget, ProxyLimits
    from panday_core.egress.names import CheckedNames
    from panday_core.egress.rules import EgressRules

    Connector = Callable[[Callable[[], asyncio.BaseProtocol], str, int], Awaitable[object]]
    """Opens a connection to (IP literal, port) with the given protocol factory."""

_log = logging.getLogger("panday_core.egress")

__all__ = ["BufferPool", "Connection", "Framing", "Refusal", "RefusalKind", "Upstream"]


class Origin(Protocol):
    """Where a connection came from, as the proxy's admission counts it
    (`admission.Source`): its name, and its connections that have not presented
    credentials yet."""

    key: str
    pending: dict[Connection, None]


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
    def front(self, first: int) -> FrontEnd: ...
    def spawn(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None]: ...
    def promote(self, conn: Connection, sock: socket.socket) -> None: ...
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

    def opened(self, conn: Connection, detail: object) -> tuple[bytes, bytes]:
        """(to the client, to the upstream) once the upstream is connected; `detail` is
        what the front passed to `conn.request`. A front whose protocol frames messages
        inside the tunnel installs its hook here (`conn.frame`)."""
        ...


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
        "framing",
        "front",
        "grant",
        "heard",
        "host",
        "kind",
        "limits",
        "parked",
        "pending",
        "port",
        "proxy",
        "reason",
        "released",
        "reported",
        "slot",
        "source",
        "started",
        "state",
        "t0",
        "task",
        "timer",
        "up",
        "user",
        "verdict",
    )

    def __init__(self, proxy: ProxyCore, source: Origin) -> None:
        super().__init__(self, proxy.pool, client=True)
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
        self.slot: str | None = None
        """The command whose slot it holds (granted by `admission`; None: none)."""
        self.heard = False
        """The client has sent at least one byte."""
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
        self.task: asyncio.Task[None] | None = None
        self.evicted = False
        self.timer: asyncio.TimerHandle | None = None
        self.reported = False
        self.pending = b""
        self.parked: socket.socket | None = None
        """Its socket while it waits, transport-less, for its first byte (`park`)."""
        self.framing: Framing | None = None

    # ------------------------------------------------------------------ life cycle
    @property
    def relaying(self) -> bool:
        return self.state == _RELAY

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        if self.evicted:  # made room for another before its transport was even up
            self.transport.abort()
            return
        left = self.limits.head_timeout - (time.monotonic() - self.t0)  # from accept
        self.timer = self.proxy.loop.call_later(max(left, 0.0), self._head_expired)

    # ------------------------------------------------------------------ parked, idle
    def park(self, sock: socket.socket) -> None:
        """Hold a connection that has sent nothing yet without a transport: its socket is
        watched for its first byte (then `promote`) or its end, whichever comes first,
        within the head timeout. A client that connects and leaves costs a descriptor and
        two system calls, not a transport, a task and a timer."""
        self.parked = sock
        loop = self.proxy.loop
        loop.add_reader(sock.fileno(), self._stirred)
        self.timer = loop.call_later(self.limits.head_timeout, self._parked_expired)

    def _unpark(self) -> socket.socket | None:
        sock, self.parked = self.parked, None
        if sock is not None:
            with contextlib.suppress(ValueError, OSError):
                self.proxy.loop.remove_reader(sock.fileno())
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        return sock

    def _stirred(self) -> None:
        """A parked connection became readable: its first byte, or its end."""
        sock = self.parked
        if sock is None:
            return
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        self._unpark()
        if first:
            self.heard = True
            self.proxy.promote(self, sock)
            return
        sock.close()
        self.reason = "client closed before sending anything"
        self._parked_done()

    def _parked_expired(self) -> None:
        self.timer = None
        sock = self._unpark()
        if sock is not None:
            sock.close()
        self.verdict, self.reason = (
            "refused",
            (f"request not complete within {self.limits.head_timeout:g} s"),
        )
        self._parked_done()

    def _parked_done(self) -> None:
        self.lost = True
        self.state = _DONE
        self.maybe_finish()

    def close_parked(self) -> None:
        """Close a parked connection (the proxy is closing, or it makes room)."""
        sock = self._unpark()
        if sock is not None:
            sock.close()
            self._parked_done()

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002 - the reason is recorded already
        self.lost = True
        self.release()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        task = self.task
        if task is not None and self.establishing:
            # Nobody waits for this tunnel any more: stop resolving (and connecting) for it.
            self.reason = "the client went away while the proxy was connecting"
            task.cancel()
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
        note = self.framing.note() if self.framing is not None else None
        if note:
            self.reason += f"; {note}"
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
        half = self.eof or up.eof
        idle = self.limits.half_closed_timeout if half else self.limits.idle_timeout
        idle = min(idle, self.limits.idle_timeout)
        quiet = time.monotonic() - max(self.last, up.last)
        if quiet >= idle:
            what = "after one side closed its half" if half else "without traffic"
            self.cut(f"closed after {idle:g} s {what}")
            return
        self.timer = self.proxy.loop.call_later(idle - quiet, self._idle_check)

    def half_closed(self) -> None:
        """One side sent end of file: the other gets `half_closed_timeout` of silence."""
        if self.state != _RELAY:
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer = None
        self._idle_check()

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
        if self.parked is not None:
            self.close_parked()
        elif self.transport is not None and not self.lost:
            self.transport.abort()

    # ------------------------------------------------------------------ reading a request
    def buffer_updated(self, nbytes: int) -> None:
        if self.state == _RELAY:
            self.relay(nbytes)
            return
        buf = self.buf
        if buf is None:
            return
        data = bytes(buf[:nbytes])
        self.buf = None
        self.pool.put(buf)
        if self.state != _HEAD:
            # Establishing: what the client sends meanwhile waits (reading goes on, so a
            # client that gives up is noticed, until a head's worth is waiting).
            self.pending += data
            if len(self.pending) > self.limits.max_head_bytes and self.transport is not None:
                self.transport.pause_reading()
            return
        self.heard = True
        try:
            if self.front is None:
                self.front = self.proxy.front(data[0])
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
        # Establishing: a half-close (a request, then end of file, then the answer is
        # read) is passed on once the tunnel is up. A client that is gone for good resets
        # the connection, or is noticed by its deadline.
        return self.state == _ESTABLISHING

    def authenticate(self, creds: tuple[str, str] | None) -> bool:
        """Check the credentials the client presented; True when valid and a slot of its
        command's was granted (raises `Refusal` "busy" when none is free)."""
        granted = self.proxy.grant_of(creds)
        if granted is None:
            return False
        self.grant, self.command_id = granted
        self.proxy.authenticated(self)  # may raise Refusal("busy"): then no slot is held
        self.user = self.command_id or "session"
        return True

    def request(self, host: str, port: int, leftover: bytes, detail: object = None) -> None:
        """The client asks for `host`:`port`; `leftover` came after its request, `detail`
        is the front's own (handed back to `FrontEnd.opened`)."""
        transport = self.transport
        assert transport is not None  # noqa: S101 - set in connection_made
        self.host, self.port = host, port
        if self.user is None:  # whatever the front-end: no credentials, no connection
            raise Refusal("credentials", "missing proxy credentials")
        self.pending = leftover  # waits here until the tunnel is up
        self.state = _ESTABLISHING
        self.establishing = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.task = self.proxy.spawn(self._establish(host, port, detail))

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

    async def _establish(self, host: str, port: int, detail: object) -> None:
        try:
            await self._connect(host, port, detail)
        except Refusal as refusal:
            self.refuse(refusal)
        except Exception:  # noqa: BLE001 - a bug must cost this connection, never the proxy
            _log.exception("egress proxy: internal error while connecting")
            self.refuse(Refusal("internal", "internal error while connecting"))
        finally:
            self.establishing = False
            self.task = None
            if self.lost and self.up is not None and self.up.transport is not None:
                self.up.transport.close()
            self.maybe_finish()

    async def _connect(self, host: str, port: int, detail: object) -> None:
        proxy = self.proxy
        allowed, reason = proxy.rules.check_host(host, port)
        if not allowed:
            raise Refusal("policy", reason)
        loop = proxy.loop
        deadline = loop.time() + self.limits.connect_timeout
        addresses = proxy.names.literal(host)
        if addresses is None:
            addresses = await proxy.names.addresses(host, port, deadline, who=self.user or "")
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
                self._begin_relay(made, reason, detail)
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
        finally:
            if made.transport is None and made.holds_fd:  # never connected (or cancelled)
                made.holds_fd = False
                self.descriptors.give()
        if made.transport is not None:
            return made, failure
        return None, failure

    def _begin_relay(self, up: Upstream, reason: str, detail: object) -> None:
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
        self.out, up.out = upstream, client
        to_client, to_upstream = self.front.opened(self, detail)
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
        if self.eof:  # the client half-closed while the tunnel was being made
            if upstream.can_write_eof():
                upstream.write_eof()
            self.half_closed()
        elif not upstream.get_write_buffer_size() and not self.held:
            client.resume_reading()

    # ------------------------------------------------------------------ a front's framing
    def frame(self, framing: Framing) -> None:
        """Pass the tunnel's bytes through `framing` (a front calls this from `opened`)."""
        self.framing = framing

    def framing_step(self) -> None:
        """After bytes went through the framing: stop what must stop."""
        framing = self.framing
        if framing is None:
            return
        if framing.finished():
            self.state = _DONE
            # The exchange is complete: close (flushing it) rather than let the
            # connection carry a second one nobody checked.
            for end in (self, self.up):
                if end is not None and end.transport is not None and not end.lost:
                    end.transport.close()
        elif framing.client_done() and not self.held:
            self.held = True
            if self.transport is not None:
                self.transport.pause_reading()

    # ------------------------------------------------------------------ spliced directions
    def try_splice(self, src: End) -> None:
        """Hand `src` → its peer to splice(2), if the descriptor budget allows."""
        dst = src.peer
        if (
            dst is None
            or self.framing is not None
            or src.splice is not None
            or src.eof
            or not splicing.AVAILABLE
            or not self.descriptors.take(splicing.DESCRIPTORS)
        ):
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
