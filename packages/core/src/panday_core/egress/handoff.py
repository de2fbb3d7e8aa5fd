"""Connections handed to the egress proxy as sockets, over a unix ``SOCK_SEQPACKET`` socket.

The Linux bridge's relay runs inside a jail whose network namespace holds nothing but its
own loopback. It accepts a tool's TCP connection on that loopback and passes the connected
socket itself to the proxy (``SCM_RIGHTS``), one socket per message, over the one unix
socket bound into the jail. The proxy then serves that socket like any client it accepted:
credentials, allowlist, resolution, relay. No process copies the jail's bytes on their
way to the proxy, so a jailed tool pays no more than an unjailed one.

What arrives is the jail's to choose, so every descriptor is checked before it is served:
only a connected (not listening) TCP socket is adopted; anything else (a file, a pipe, a
unix socket, extra descriptors in one message) is closed unread and reported (the proxy's
audit log sums up what arrives faster than a few a second). Descriptors are received
close-on-exec, so a process the caller spawns never inherits one.

Every process of a jail can reach this socket, not only its relay, so what one jail may
hold is bounded per jail: relay connections are keyed by the sender's pid namespace (each
command runs in one of its own; ``SO_PEERCRED`` names the sender), at most
`ProxyLimits.max_relays_per_jail` each and `MAX_RELAYS` in all, and the sockets a jail
hands over count against that jail's budget of unauthenticated connections. Each relay
connection holds a descriptor of the process's `DescriptorBudget`.

The listener knows nothing of the proxy: it calls `adopt` with each acceptable socket and
the key of the jail it came from, `report` with what it refused, and `gone` when a jail's
last relay connection has closed.
"""

from __future__ import annotations

import array
import contextlib
import errno
import os
import socket
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from panday_core.egress.limits import DescriptorBudget

MESSAGE = b"C"
"""The one byte each handoff message carries beside its descriptor."""
MAX_FDS = 4
"""Control space per message: room to see (and close) extra descriptors a sender adds."""
MAX_RELAYS = 256
"""Relay connections open at once, from every jail of the session together."""
_BATCH = 64
"""Messages (or connections) taken per readiness callback, so one relay cannot starve the
loop."""
_BACKOFF_S = 0.1
"""How long accepting pauses when the process is out of descriptors."""
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_PEERCRED = struct.Struct("3i")


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


def jail_key(conn: socket.socket) -> str:
    """Which jail `conn`'s sender runs in: its pid namespace (one per command), or its
    process when that cannot be read."""
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        pid = int(_PEERCRED.unpack(raw)[0])
    except (OSError, AttributeError, struct.error):
        return f"relay fd {conn.fileno()}"
    try:
        return f"jail {os.readlink(f'/proc/{pid}/ns/pid')}"  # noqa: PTH115 - os terms, as above
    except OSError:
        return f"process {pid}"


class HandoffListener:
    """Serves one ``SOCK_SEQPACKET`` unix socket that relays pass connected sockets through."""

    def __init__(
        self,
        path: str,
        *,
        loop: asyncio.AbstractEventLoop,
        adopt: Callable[[socket.socket, str], None],
        report: Callable[[str, str], None],
        gone: Callable[[str], None],
        descriptors: DescriptorBudget,
        per_jail: int,
        backlog: int,
    ) -> None:
        self.path = path
        self._loop = loop
        self._adopt = adopt
        self._report = report
        self._gone = gone
        self._descriptors = descriptors
        self._per_jail = per_jail
        self._backlog = backlog
        self._sock: socket.socket | None = None
        self._relays: dict[int, tuple[socket.socket, str]] = {}
        self._per_key: dict[str, int] = {}

    def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.bind(self.path)
            sock.listen(self._backlog)
            sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        except BaseException:
            sock.close()
            raise
        self._sock = sock = self._descriptors.lift_socket(sock)
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
            except OSError as exc:
                if exc.errno in _OUT_OF_DESCRIPTORS:
                    self._back_off(listener)
                return
            self._admit(conn)

    def _back_off(self, listener: socket.socket) -> None:
        """Out of descriptors: a listener that stays readable would spin, so stop reading
        it for a moment."""
        self._report("relays", "the process is out of descriptors; relay connections wait")
        self._loop.remove_reader(listener.fileno())

        def resume() -> None:
            if self._sock is listener:
                self._loop.add_reader(listener.fileno(), self._accept)

        self._loop.call_later(_BACKOFF_S, resume)

    def _admit(self, conn: socket.socket) -> None:
        key = jail_key(conn)
        held = self._per_key.get(key, 0)
        why = ""
        if held >= self._per_jail:
            why = f"this jail already holds {held} relay connections (its limit)"
        elif len(self._relays) >= MAX_RELAYS:
            why = f"{MAX_RELAYS} relay connections are open (the session's limit)"
        elif not self._descriptors.take():
            why = "the proxy has no descriptor left for another relay connection"
        if why:
            conn.close()
            self._report(key, f"relay connection refused: {why}")
            return
        conn = self._descriptors.lift_socket(conn)
        conn.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        self._relays[conn.fileno()] = (conn, key)
        self._per_key[key] = held + 1
        self._loop.add_reader(conn.fileno(), self._receive, conn)

    def _drop(self, conn: socket.socket) -> None:
        fd = conn.fileno()
        if fd >= 0:
            self._loop.remove_reader(fd)
            entry = self._relays.pop(fd, None)
            if entry is not None:
                self._descriptors.give()
                key = entry[1]
                left = self._per_key.get(key, 1) - 1
                if left > 0:
                    self._per_key[key] = left
                else:
                    self._per_key.pop(key, None)
                    self._gone(key)
        conn.close()

    def _receive(self, conn: socket.socket) -> None:
        space = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
        entry = self._relays.get(conn.fileno())
        key = entry[1] if entry is not None else "relay"
        for _ in range(_BATCH):
            try:
                data, ancillary, flags, _addr = conn.recvmsg(
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
            if data == MESSAGE and not fds and flags & socket.MSG_CTRUNC:
                # The kernel could not install the descriptor (this process is out of them)
                # and closed it: the client sees its connection end.
                self._report(key, "a handed-over connection was dropped: no descriptor free")
                continue
            self._handle(key, data, list(fds))

    def _handle(self, key: str, data: bytes, fds: list[int]) -> None:
        if data != MESSAGE or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            self._report(key, f"malformed handoff message ({len(fds)} descriptors)")
            return
        sock, why = _adoptable(self._descriptors.lift(fds[0]))
        if sock is None:
            self._report(key, why)
            return
        self._adopt(sock, key)

    def close(self) -> None:
        """Stop accepting, drop every relay connection and remove the socket file."""
        for conn, _key in list(self._relays.values()):
            self._drop(conn)
        if self._sock is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # noqa: PTH108 - this module works in os terms
