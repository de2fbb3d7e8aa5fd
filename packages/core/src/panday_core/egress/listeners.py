"""Where the egress proxy's clients come from: its own listening sockets, and its upstreams.

A listener accepts by itself (``loop.create_server`` would accept a whole backlog in one
go, descriptors and all), so every connection is weighed against the budgets before it is
served, and accepting is paced: at most `ACCEPT_BATCH` connections per readiness callback,
so a client churning connections shares the loop with the tunnels already open instead of
starving them. A connection is looked at before anything is spent on it: one whose client
is already gone (connected and closed at once, which is what a churner's connections look
like by the time they are accepted) is closed at the edge without a transport, a task or an
audit line of its own; one that has sent bytes is served at once; one that has sent
nothing yet is served as *idle*, the first to be closed when its source is over its budget
(`admission`).

`open_connection` is the default connector: a connection to an already checked address,
on a descriptor numbered out of the caller's range.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from typing import TYPE_CHECKING, Protocol

from panday_core.egress.limits import descriptor_budget

if TYPE_CHECKING:
    from collections.abc import Callable

    from panday_core.egress.admission import Source

_log = logging.getLogger("panday_core.egress")

ACCEPT_BATCH = 64
"""Connections accepted per readiness callback, so a flood cannot starve the loop."""
BACKOFF_S = 0.1
"""How long accepting pauses when the process is out of descriptors."""
OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
NO_IPV6 = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT})
"""Errors that mean this host has no IPv6 loopback to listen on (so nobody else can)."""


class Server(Protocol):
    """What a listener needs of its proxy (`server.EgressProxy`)."""

    def serve(self, sock: socket.socket, source: Source) -> None: ...
    def edge(self, source: Source, reason: str) -> None: ...


def first_look(sock: socket.socket) -> bool | None:
    """None when the client has already closed (or reset) the connection, else whether it
    has sent nothing yet (True: idle)."""
    try:
        first = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return True  # nothing yet, and still connected
    except OSError:
        return None  # reset
    # An empty read is the client's end of file: it closed without sending anything.
    return None if not first else False


class Listener:
    """A listening socket the proxy accepts from itself (see the module doc)."""

    def __init__(
        self,
        server: Server,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        source: Source,
    ) -> None:
        self.server = server
        self.sock = sock
        self.source = source
        self.loop = loop
        self.loop.add_reader(sock.fileno(), self._ready)

    def _ready(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in OUT_OF_DESCRIPTORS:
                    self._back_off()
                elif exc.errno != errno.ECONNABORTED:
                    _log.warning("egress proxy: accept failed: %s", exc)
                return
            self.server.serve(conn, self.source)

    def _back_off(self) -> None:
        """Out of descriptors (something else in the process took them): a listener that
        stays readable would spin, so stop reading it for a moment."""
        self.server.edge(self.source, "the process is out of descriptors; not accepting for now")
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.sock.fileno())

        def resume() -> None:
            if self.sock.fileno() >= 0:
                self.loop.add_reader(self.sock.fileno(), self._ready)

        self.loop.call_later(BACKOFF_S, resume)

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


def bound_sockets(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets for every address `host` stands for (as ``create_server``)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    made: list[socket.socket] = []
    try:
        for family, kind, proto, _canon, addr in infos:
            sock = socket.socket(family, kind, proto)
            made.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            sock.listen(backlog)
            sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
            if port == 0:
                port = int(sock.getsockname()[1])  # later addresses take the same port
    except BaseException:
        for sock in made:
            sock.close()
        raise
    return made


async def open_connection(
    factory: Callable[[], asyncio.BaseProtocol], host: str, port: int
) -> object:
    """The default `Connector`: a TCP connection to `host` (an IP literal) and `port`, on a
    descriptor numbered out of the caller's range (`DescriptorBudget.lift`)."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = descriptor_budget().lift_socket(socket.socket(family, socket.SOCK_STREAM))
    try:
        sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        await loop.sock_connect(sock, (host, port))
        return await loop.create_connection(factory, sock=sock)
    except BaseException:
        sock.close()
        raise
