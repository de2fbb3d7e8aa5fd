"""Connections handed to the egress proxy as sockets, over a unix ``SOCK_SEQPACKET`` socket.

The Linux bridge's relay runs inside a jail whose network namespace holds nothing but its
own loopback. It accepts a tool's TCP connection on that loopback and passes the connected
socket itself to the proxy (``SCM_RIGHTS``), one socket per message, over the one unix
socket bound into the jail. The proxy then serves that socket like any client it accepted:
credentials, allowlist, resolution, relay. No process copies the jail's bytes on their
way to the proxy, so a jailed tool pays no more than an unjailed one.

What arrives is the jail's to choose, so every descriptor is checked before it is served:
only a connected (not listening) TCP socket is adopted; anything else (a file, a pipe, a
unix socket, extra descriptors in one message) is closed unread and reported as a refused
audit event. Descriptors are received close-on-exec, so a process the caller spawns never
inherits one. Relay connections are bounded (`MAX_RELAYS`), and adopted sockets count
against the proxy's `max_connections` like any other client.
"""

from __future__ import annotations

import array
import contextlib
import os
import socket
import time
from typing import TYPE_CHECKING

from panday_core.egress.audit import AuditEvent

if TYPE_CHECKING:
    import asyncio

    from panday_core.egress.server import EgressProxy

MESSAGE = b"C"
"""The one byte each handoff message carries beside its descriptor."""
MAX_FDS = 4
"""Control space per message: room to see (and close) extra descriptors a sender adds."""
MAX_RELAYS = 256
"""Relay connections open at once (one per running command); more are closed on accept."""
_BATCH = 64
"""Messages read per readiness callback, so one busy relay cannot starve the loop."""


def _adoptable(fd: int) -> tuple[socket.socket | None, str]:
    """A socket object for `fd` when it is a connected TCP socket, else (None, why)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return None, "the relay handed over a descriptor that is not a socket"
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        ok = (
            sock.family in {socket.AF_INET, socket.AF_INET6}
            and sock.type == socket.SOCK_STREAM
            and not listening
        )
    except OSError:
        ok = False
    if not ok:
        sock.close()
        return None, "the relay handed over a socket that is not a connected TCP socket"
    return sock, ""


class HandoffListener:
    """Serves one ``SOCK_SEQPACKET`` unix socket that relays pass connected sockets through."""

    def __init__(self, proxy: EgressProxy, path: str) -> None:
        self.proxy = proxy
        self.path = path
        self._loop: asyncio.AbstractEventLoop = proxy.loop
        self._sock: socket.socket | None = None
        self._relays: dict[int, socket.socket] = {}

    def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.bind(self.path)
            sock.listen(self.proxy.limits.backlog)
            sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        listener = self._sock
        if listener is None:
            return
        for _ in range(_BATCH):
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(self._relays) >= MAX_RELAYS:
                conn.close()
                continue
            conn.setblocking(False)  # noqa: FBT003 - the socket API's own flag
            self._relays[conn.fileno()] = conn
            self._loop.add_reader(conn.fileno(), self._receive, conn)

    def _drop(self, conn: socket.socket) -> None:
        fd = conn.fileno()
        if fd >= 0:
            self._loop.remove_reader(fd)
            self._relays.pop(fd, None)
        conn.close()

    def _receive(self, conn: socket.socket) -> None:
        space = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
        for _ in range(_BATCH):
            try:
                data, ancillary, _flags, _addr = conn.recvmsg(
                    len(MESSAGE), space, socket.MSG_CMSG_CLOEXEC
                )
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._drop(conn)
                return
            fds = array.array("i")
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            if not data and not fds:
                self._drop(conn)  # the relay closed (its jail ended)
                return
            self._handle(data, list(fds))

    def _handle(self, data: bytes, fds: list[int]) -> None:
        if data != MESSAGE or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            self._report(f"malformed handoff message ({len(fds)} descriptors)")
            return
        sock, why = _adoptable(fds[0])
        if sock is None:
            self._report(why)
            return
        self.proxy.spawn(self.proxy.adopt(sock))

    def _report(self, reason: str) -> None:
        proxy = self.proxy
        proxy.emit(
            AuditEvent(
                time=time.time(),
                session_id=proxy.session_id,
                command_id=None,
                protocol="unknown",
                host=None,
                port=None,
                address=None,
                verdict="refused",
                reason=reason,
            )
        )

    def close(self) -> None:
        """Stop accepting, drop every relay connection and remove the socket file."""
        for conn in list(self._relays.values()):
            self._drop(conn)
        if self._sock is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # noqa: PTH108 - this module works in os terms
