"""Bulk tunnel traffic moved by ``splice(2)``: socket to pipe to socket, never through Python.

A tunnel starts on the proxy's buffered relay (`asyncio.BufferedProtocol`): every byte is
copied into a Python buffer and out again. That is cheap for the short requests most tools
make, and it holds no extra descriptors. When `ProxyLimits.splice_after` is set (it is not
by default), once one direction of a tunnel has carried that many bytes (a download, an
upload, a clone), that direction switches to splice on Linux: the kernel moves the data
from the source socket into a pipe and from the pipe into the destination socket, so the
proxy no longer copies it at all. That saves the proxy's own CPU, but measured end to end
on loopback it mostly carried less than the buffered relay (more only while another
process held a core): the reader's copy of the pages it passes on costs the reader more
(see docs/egress.md, Performance). It stays available for hosts where the proxy's CPU is
what is short.

The switch happens only at a moment when the destination transport holds nothing unsent,
so the order of bytes is kept. From then on this direction owns the traffic: the source
transport's reading is paused (and stays paused), and the descriptors it reads and writes
are duplicates registered with the loop directly (asyncio refuses a reader on a descriptor
its transport owns). End of file, errors, the idle clock and the byte counts are reported
to the tunnel exactly as the buffered relay reports them, and closing either transport
releases every descriptor of the direction.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

AVAILABLE = sys.platform.startswith("linux") and hasattr(os, "splice")
"""splice(2) exists here (Linux, Python 3.10 or later)."""
PIPE_BYTES = 1 << 20
"""Pipe capacity asked for (F_SETPIPE_SZ); the default 64 KiB when the host refuses."""
DESCRIPTORS = 4
"""Descriptors one spliced direction holds: two duplicated sockets and a pipe."""
_F_SETPIPE_SZ = 1031
_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)


class Side(Protocol):
    """What a direction needs of a tunnel end (`tunnel.End`)."""

    transport: asyncio.Transport | None
    eof: bool
    count: int
    last: float


class Tunnel(Protocol):
    """What a direction reports to: the tunnel's two ends and how to end it."""

    def direction_done(self, src: object) -> None:
        """`src` reached end of file and everything it sent was delivered."""

    def direction_failed(self, exc: OSError) -> None:
        """Reading or writing failed: the tunnel must be aborted."""


class Direction:
    """One direction of a tunnel (`src` to `dst`) moved by splice; see the module doc."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        tunnel: Tunnel,
        src: Side,
        dst: Side,
        lift: Callable[[int], int] | None = None,
    ) -> None:
        self.lift = lift
        """Renumbers a new descriptor out of the caller's range (`DescriptorBudget.lift`)."""
        self.loop = loop
        self.tunnel = tunnel
        self.src = src
        self.dst = dst
        self.pending = 0
        self.reading = False
        self.writing = False
        self.done = False
        self.fds: list[int] = []
        self.rfd = self.wfd = self.pr = self.pw = -1

    def start(self) -> bool:
        """Take over the direction; False (and nothing changed) when it cannot."""
        src, dst = self.src.transport, self.dst.transport
        if src is None or dst is None or src.is_closing() or dst.is_closing():
            return False
        src_sock, dst_sock = src.get_extra_info("socket"), dst.get_extra_info("socket")
        if src_sock is None or dst_sock is None:
            return False
        try:
            self.rfd = self._keep(os.dup(src_sock.fileno()))
            self.wfd = self._keep(os.dup(dst_sock.fileno()))
            pr, pw = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self.pr, self.pw = self._keep(pr), self._keep(pw)
        except OSError:
            self.stop()
            return False
        with contextlib.suppress(OSError):
            import fcntl  # noqa: PLC0415 - Linux only, once per spliced direction

            fcntl.fcntl(self.pw, _F_SETPIPE_SZ, PIPE_BYTES)
        src.pause_reading()
        self._read_on()
        return True

    def _keep(self, fd: int) -> int:
        if self.lift is not None:
            fd = self.lift(fd)
        self.fds.append(fd)
        return fd

    def _read_on(self) -> None:
        if not self.reading:
            self.loop.add_reader(self.rfd, self._readable)
            self.reading = True

    def _read_off(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.rfd)
            self.reading = False

    def _readable(self) -> None:
        try:
            moved = os.splice(self.rfd, self.pw, PIPE_BYTES, flags=_FLAGS)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.tunnel.direction_failed(exc)
            return
        if moved == 0:
            self.src.eof = True
            self._read_off()
            if not self.pending:
                self._finish()
            return
        self.src.count += moved
        self.src.last = time.monotonic()
        self.pending += moved
        self._flush()

    def _writable(self) -> None:
        self._flush()

    def _flush(self) -> None:
        while self.pending:
            try:
                sent = os.splice(self.pr, self.wfd, self.pending, flags=_FLAGS)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.tunnel.direction_failed(exc)
                return
            self.pending -= sent
        if self.pending:
            # The destination is full: stop reading until it drains (flow control).
            self._read_off()
            if not self.writing:
                self.loop.add_writer(self.wfd, self._writable)
                self.writing = True
            return
        if self.writing:
            self.loop.remove_writer(self.wfd)
            self.writing = False
        if self.src.eof:
            self._finish()
        else:
            self._read_on()

    def _finish(self) -> None:
        if self.done:
            return
        self.done = True
        self.stop()
        self.tunnel.direction_done(self.src)

    def stop(self) -> None:
        """Unregister and close every descriptor of this direction (idempotent)."""
        if self.reading:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.rfd)
            self.reading = False
        if self.writing:
            with contextlib.suppress(Exception):
                self.loop.remove_writer(self.wfd)
            self.writing = False
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []
