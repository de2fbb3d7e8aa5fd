"""The two ends of a tunnel: each reads into a pooled buffer and writes to the other.

`End` is one side of the buffered relay (`asyncio.BufferedProtocol`): what it reads goes
to its peer's transport, through the tunnel's `Framing` hook when a front installed one;
`Upstream` is the side the proxy connected. The client side is `tunnel.Connection`, an
`End` that first reads a request; an end knows its tunnel only as the `Tunnel` it needs.
Buffer handling and flow control are described in `tunnel`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol, cast

from panday_core.egress import splicing

if TYPE_CHECKING:
    from panday_core.egress.buffers import BufferPool
    from panday_core.egress.limits import DescriptorBudget, ProxyLimits


class Framing(Protocol):
    """A front's hook on the bytes of an open tunnel, for a protocol whose messages have
    boundaries the proxy must keep (plain HTTP: one request per decision)."""

    def client_bytes(self, view: memoryview) -> tuple[int, bytes, str | None]:
        """For bytes from the client: (how many of `view` to forward as they are, checked
        bytes to forward after them, why to cut the tunnel or None)."""
        ...

    def upstream_bytes(self, view: memoryview) -> tuple[int, str | None]:
        """For bytes from the upstream: (how many to forward, why to cut or None)."""
        ...

    def finished(self) -> bool:
        """The exchange is complete: close both sides (flushing what was forwarded)."""
        ...

    def client_done(self) -> bool:
        """Nothing more from the client will be forwarded: stop reading it."""
        ...

    def note(self) -> str | None:
        """What to add to the audit reason when the tunnel ends (None: nothing)."""
        ...


class Tunnel(Protocol):
    """What an end needs of the tunnel it belongs to: `tunnel.Connection`, which is its
    client end itself."""

    framing: Framing | None
    limits: ProxyLimits
    descriptors: DescriptorBudget
    pool: BufferPool

    @property
    def relaying(self) -> bool: ...
    def try_splice(self, src: End) -> None: ...
    def cut(self, why: str) -> None: ...
    def framing_step(self) -> None: ...
    def half_closed(self) -> None: ...
    def side_lost(self, exc: Exception | None) -> None: ...


class End(asyncio.BufferedProtocol):
    """One side of a tunnel: what it reads is written to its peer's transport."""

    __slots__ = (
        "buf",
        "client",
        "conn",
        "count",
        "eof",
        "held",
        "last",
        "lent",
        "lost",
        "out",
        "peer",
        "pool",
        "splice",
        "transport",
    )

    def __init__(self, conn: Tunnel, pool: BufferPool, *, client: bool = False) -> None:
        self.conn = conn
        self.client = client
        """This is the tunnel's client end (the `Tunnel` itself), not its upstream."""
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.peer: End | None = None
        self.out: asyncio.Transport | None = None
        """The peer's transport while relaying (what this side's reads are written to)."""
        self.buf: memoryview | None = None
        self.lent: list[memoryview] | None = None
        self.eof = False
        self.lost = False
        self.held = False
        """Reading stopped for good (a front's framing: nothing more is forwarded)."""
        self.count = 0
        self.last = 0.0
        self.splice: splicing.Direction | None = None

    def get_buffer(self, sizehint: int) -> memoryview:  # noqa: ARG002 - fixed-size buffers
        buf = self.buf
        if buf is None:
            buf = self.buf = self.pool.get()
        return buf

    def buffer_updated(self, nbytes: int) -> None:
        self.relay(nbytes)

    def relay(self, nbytes: int) -> None:
        buf = self.buf
        out = self.out
        if buf is None or out is None:
            return
        if self.conn.framing is None:
            self.count += nbytes
            self.last = time.monotonic()
            out.write(buf[:nbytes] if nbytes < len(buf) else buf)
        else:
            self.forward(buf[:nbytes])
        if out.get_write_buffer_size():
            # The peer transport may hold a view of `buf` until it drains; see module doc.
            self.buf = None
            if self.lent is None:
                self.lent = [buf]
            else:
                self.lent.append(buf)
            return
        if nbytes < len(buf):
            # A read that did not fill the buffer drained the socket: more may not come
            # soon, so the buffer goes back (a quiet tunnel holds none). After a full
            # read it stays this side's for the next one.
            self.buf = None
            self.pool.put(buf)
        after = self.conn.limits.splice_after
        if after is not None and self.count >= after:
            self.conn.try_splice(self)

    def forward(self, view: memoryview) -> None:
        """Write what `view` holds to the peer (through the front's framing, if any)."""
        out = self.out
        if out is None:
            return
        self.last = time.monotonic()
        conn = self.conn
        framing = conn.framing
        if framing is None:
            self.count += len(view)
            out.write(view)
            return
        extra = b""
        if self.client:
            keep, extra, cut = framing.client_bytes(view)
        else:
            keep, cut = framing.upstream_bytes(view)
        if keep:
            self.count += keep
            out.write(view[:keep])
        if cut is not None:
            conn.cut(cut)
            return
        if extra:
            self.count += len(extra)
            out.write(extra)
        conn.framing_step()

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
        """Give back the buffer this side holds for its next read (end of file, close,
        idle)."""
        if self.buf is not None:
            self.pool.put(self.buf)
            self.buf = None

    def eof_received(self) -> bool:
        self.eof = True
        self.return_buffer()
        conn = self.conn
        conn.half_closed()
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

    def __init__(self, conn: Tunnel) -> None:
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
