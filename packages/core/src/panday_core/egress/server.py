"""The egress proxy: one per session, on loopback (or a unix socket), authenticated.

Each client connection carries one request: an HTTP ``CONNECT``, an absolute-form
plain-HTTP request, or a SOCKS5 ``CONNECT`` (the first byte tells which: `fronts`). The
proxy checks the credentials, then the host against `net.deny` / `net.allow` /
`net.ports`, resolves the name itself (`names`), refuses any answer that is not globally
routable (unless that exact IP literal is allowlisted), and connects to the address it
checked, never re-resolving. Then it relays bytes both ways until either side closes
(`tunnel`), reporting an `AuditEvent` when the tunnel opens and when it closes.

This module wires the parts together and holds what is the proxy's as a whole: its
listeners (`listeners`, `handoff`), the credentials it issued (`credentials`), admission
(`admission`: nothing is accepted before the budgets say it fits), and the audit output
(`sink`: bounded, never blocking the loop).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import secrets
import socket
import time
from typing import TYPE_CHECKING, Self

from panday_core.egress import fronts
from panday_core.egress.admission import Admission, Source
from panday_core.egress.audit import AuditEvent, JsonlAuditLog, Throttle
from panday_core.egress.buffers import BufferPool
from panday_core.egress.credentials import MAX_USER, SESSION_USER, Credentials, valid_user
from panday_core.egress.limits import ProxyLimits, descriptor_budget
from panday_core.egress.listeners import (
    NO_IPV6,
    Listener,
    bound_sockets,
    first_look,
    open_connection,
)
from panday_core.egress.names import CheckedNames
from panday_core.egress.refusal import Refusal
from panday_core.egress.resolver import Resolver, StaticResolver, SystemResolver
from panday_core.egress.rules import EgressRules
from panday_core.egress.sink import AuditSink
from panday_core.egress.tunnel import Connection

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from panday_core.egress.handoff import HandoffListener
    from panday_core.egress.tunnel import Connector, FrontEnd
    from panday_core.policy import NetPolicy

__all__ = ["SESSION_USER", "EgressProxy", "ProxyLimits", "Refusal", "open_connection"]

_log = logging.getLogger("panday_core.egress")

_MIN_PER_COMMAND = 256
AUDIT_BATCH_S = 0.02
"""Audit events are handed to the sink at most this long after they happen."""
AUDIT_BATCH_MAX = 256


class EgressProxy:
    """One session's egress proxy. Use ``async with`` or `start` / `close`.

    `net` is the session's network policy; `resolver` turns names into addresses (the
    host's resolver by default; tests pass a `StaticResolver`); `audit` receives every
    `AuditEvent`, and `audit_jsonl` appends them to a file. `connector` opens the upstream
    connection to an already checked IP literal (``loop.create_connection`` by default);
    tests pass one that records where the proxy would connect and refuses anything off
    loopback, so that no test ever sends a packet elsewhere, even with a guard removed.

    Creating the first proxy of a process raises its soft ``RLIMIT_NOFILE`` to the hard
    limit (see `limits`).
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
        connector: Connector | None = None,
    ) -> None:
        self.rules = EgressRules(net)
        self.session_id = session_id or secrets.token_hex(8)
        self.resolver: Resolver = resolver or SystemResolver()
        self.limits = limits = limits or ProxyLimits()
        self.descriptors = descriptor_budget()
        self.max_connections = limits.max_connections or self.descriptors.connections()
        self.max_per_command = limits.max_per_command or max(
            _MIN_PER_COMMAND, self.max_connections // 4
        )
        self.pool = BufferPool(limits)
        self.names = CheckedNames(self.resolver, self.rules, limits)
        self.credentials_store = Credentials()
        self._source = Source("the proxy's listeners", limits.max_unauthenticated)
        self.admission = Admission(
            self.descriptors,
            max_connections=self.max_connections,
            max_per_command=self.max_per_command,
            listeners=self._source,
        )
        self.connector: Connector = connector or open_connection
        self._jsonl = JsonlAuditLog(audit_jsonl) if audit_jsonl else None
        consumers = [c for c in (self._jsonl, audit) if c is not None]  # the durable log first
        self.sink = AuditSink(consumers, session_id=self.session_id)
        self._batch: list[AuditEvent] = []
        self._listeners: list[Listener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._throttle: Throttle | None = None
        self.tcp_address: tuple[str, int] | None = None
        self.unix_path: str | None = None
        self.handoff_path: str | None = None
        self._handoffs: list[HandoffListener] = []

    @property
    def clients(self) -> set[Connection]:
        """The client connections the proxy holds."""
        return self.admission.clients

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # ------------------------------------------------------------------ credentials
    def credentials(self, command_id: str | None = None) -> tuple[str, str]:
        """(username, password) a client presents: the command id (or ``session``) and a
        random token issued for it, so the command id in the audit log is authenticated
        rather than claimed. Issuing a command's credentials takes a reference that
        `revoke` gives back; thread-safe."""
        user = SESSION_USER if command_id is None else command_id
        if command_id == SESSION_USER or not valid_user(user):
            raise ValueError(
                f"command id {command_id!r} must be 1-{MAX_USER} characters of "
                f"[A-Za-z0-9._-] and not {SESSION_USER!r}"
            )
        return user, self.credentials_store.issue(user)

    def revoke(self, command_id: str) -> int | None:
        """Give back one reference to `command_id`'s credentials (its command ended). When
        it was the last, they stop working at once, and the grant id is returned: pass it
        to `cut` (on the proxy's loop) to end the tunnels opened with them. Thread-safe."""
        return self.credentials_store.revoke(command_id)

    def cut(self, grant: int, command_id: str) -> None:
        """End every connection that presented the revoked grant (loop thread only)."""
        for conn in list(self.clients):
            if conn.grant == grant and conn.user is not None:
                conn.cut(f"the credentials of {command_id} were revoked (its command ended)")

    def grant_of(self, creds: tuple[str, str] | None) -> tuple[int, str | None] | None:
        """(grant id, command id) for live credentials a client presented, else None."""
        if creds is None:
            return None
        user, password = creds
        if not valid_user(user):
            return None
        grant = self.credentials_store.check(user, password)
        if grant is None:
            return None
        return grant, None if user == SESSION_USER else user

    def check_credentials(self, creds: tuple[str, str] | None) -> tuple[bool, str | None]:
        """(valid, command id) for credentials a client presented; constant-time compare."""
        granted = self.grant_of(creds)
        return (False, None) if granted is None else (True, granted[1])

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
    def _listen(self, socks: list[socket.socket]) -> None:
        self._loop = asyncio.get_running_loop()
        for sock in socks:
            lifted = self.descriptors.lift_socket(sock)
            self._listeners.append(Listener(self, self._loop, lifted, self._source))

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen on TCP (loopback by default) and return the bound (host, port)."""
        socks = bound_sockets(host, port, self.limits.backlog)
        name = socks[0].getsockname()  # before `_listen` renumbers (consumes) the sockets
        self._listen(socks)
        self.tcp_address = (str(name[0]), int(name[1]))
        return self.tcp_address

    async def start_unix(self, path: str) -> str:
        """Listen on a unix socket."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            sock.listen(self.limits.backlog)
            sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        except BaseException:
            sock.close()
            raise
        self._listen([sock])
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
        backlog = self.limits.backlog
        for _ in range(attempts if port == 0 else 1):
            (v4,) = bound_sockets("127.0.0.1", port, backlog)
            chosen = int(v4.getsockname()[1])
            try:
                v6 = bound_sockets("::1", chosen, backlog)
            except OSError as exc:
                if exc.errno in NO_IPV6:
                    v6 = []
                else:
                    v4.close()
                    if port != 0:
                        raise
                    continue  # someone holds this port on ::1: try another
            self._listen([v4, *v6])
            self.tcp_address = ("127.0.0.1", chosen)
            return chosen
        raise OSError(errno.EADDRINUSE, "no port is free on both 127.0.0.1 and ::1")

    async def start_handoff(self, path: str) -> str:
        """Receive connected client sockets over a unix socket at `path` (the Linux bridge:
        see `panday_core.egress.handoff`)."""
        from panday_core.egress.handoff import HandoffListener  # noqa: PLC0415 - Linux bridge only

        self._loop = asyncio.get_running_loop()
        listener = HandoffListener(
            path,
            loop=self._loop,
            adopt=self._handed,
            report=self._handoff_refused,
            gone=self._jail_gone,
            descriptors=self.descriptors,
            per_jail=self.limits.max_relays_per_jail,
            backlog=self.limits.backlog,
        )
        listener.start()
        self._handoffs.append(listener)
        self.handoff_path = path
        return path

    def _handed(self, sock: socket.socket, key: str) -> None:
        self.serve(sock, self.admission.jail(key))

    def _handoff_refused(self, key: str, reason: str) -> None:
        self._edge_event(f"{key} handoff", reason)

    def _jail_gone(self, key: str) -> None:
        self.admission.jail_gone(key)

    async def adopt(self, sock: socket.socket) -> None:
        """Serve `sock`, a connected TCP socket accepted elsewhere, as a client."""
        self.serve(sock, self._source)

    # ------------------------------------------------------------------ admission
    def serve(self, sock: socket.socket, source: Source) -> None:
        """Serve a connected client socket from `source`, or close it at the edge."""
        idle = first_look(sock)
        if idle is None:
            # The client is gone already (how a churner's connections look when they are
            # accepted): nothing to serve, nothing to spend on it.
            sock.close()
            return
        why = self.admission.room(source)
        if why is not None:
            sock.close()
            self.edge(source, why)
            return
        conn = Connection(self, source)
        self.admission.add(conn)
        try:
            sock = self.descriptors.lift_socket(sock)
        except OSError:
            sock.close()
            self._release(conn)
            return
        if idle:
            sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
            conn.park(sock)  # no transport until its first byte (`promote`)
        else:
            conn.heard = True
            self.spawn(self._attach(conn, sock))

    def promote(self, conn: Connection, sock: socket.socket) -> None:
        """A parked connection sent its first byte: serve it with a transport."""
        self.spawn(self._attach(conn, sock))

    async def _attach(self, conn: Connection, sock: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(lambda: conn, sock)
        except (OSError, RuntimeError):
            sock.close()
            conn.reason = "the proxy could not serve the connection"
            self._release(conn)

    def authenticated(self, conn: Connection) -> None:
        """`conn` presented valid credentials: it leaves its source's unauthenticated
        budget and takes a slot of its command's (raises `Refusal` when none is free)."""
        self.admission.grant(conn)

    def front(self, first: int) -> FrontEnd:
        """The front-end for a connection whose first byte is `first` (`fronts.choose`)."""
        return fronts.choose(first)

    def _release(self, conn: Connection) -> None:
        self.admission.release(conn)

    # ------------------------------------------------------------------ audit
    def throttle(self) -> Throttle:
        if self._throttle is None:
            self._throttle = Throttle(self.loop, self.emit)
        return self._throttle

    def edge(self, source: Source, reason: str) -> None:
        """A connection from `source` was closed at the edge (reported in aggregate)."""
        self._edge_event(f"{source.key} edge", f"closed on accept: {reason}")

    def _edge_event(self, key: str, reason: str) -> None:
        self.throttle().offer(key, self._event(reason))

    def _event(self, reason: str) -> AuditEvent:
        return AuditEvent(
            time=time.time(),
            session_id=self.session_id,
            command_id=None,
            protocol="unknown",
            host=None,
            port=None,
            address=None,
            verdict="refused",
            reason=reason,
        )

    def opened(self, event: AuditEvent) -> None:
        self.emit(event)

    def finished(self, conn: Connection, event: AuditEvent) -> None:
        """`conn` is done: release its budgets and report it."""
        self._release(conn)
        if conn.evicted:
            self.throttle().offer(f"{conn.source.key} edge", event)
        elif conn.user is None:
            # Before valid credentials nobody is accountable: a flood is summed up.
            self.throttle().offer(f"{conn.source.key} unauthenticated", event)
        else:
            self.emit(event)

    def emit(self, event: AuditEvent) -> None:
        """Hand `event` to the audit sink (bounded; never blocks the loop). Events are
        handed over in batches, at most `AUDIT_BATCH_S` after they happen, so the sink's
        writer thread is woken once a batch, not once an event."""
        batch = self._batch
        batch.append(event)
        if len(batch) == 1:
            self.loop.call_later(AUDIT_BATCH_S, self._hand_over)
        elif len(batch) >= AUDIT_BATCH_MAX:
            self._hand_over()

    def _hand_over(self) -> None:
        batch, self._batch = self._batch, []
        if batch:
            self.sink.offer(*batch)

    # ------------------------------------------------------------------ life cycle
    async def close(self) -> None:
        """Stop listening and cut every open connection."""
        for listener in self._handoffs:
            listener.close()
        self._handoffs.clear()
        for server in self._listeners:
            server.close()
        self._listeners.clear()
        self._abort_all()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self.names.close()
        await asyncio.sleep(0)  # let connection_lost callbacks run and report
        if self._throttle is not None:
            self._throttle.flush()
        self._hand_over()
        if isinstance(self.resolver, (SystemResolver, StaticResolver)):
            self.resolver.close()  # its lookup threads
        if self.sink.close() and self._jsonl is not None:
            self._jsonl.close()  # (a writer stuck in it keeps it open)

    def _abort_all(self) -> None:
        for client in list(self.clients):
            if client.parked is not None:
                client.close_parked()
                continue
            for end in (client, client.up):
                # Never touch a transport that is gone: Python 3.11 would report its loss twice.
                if end is not None and end.transport is not None and not end.lost:
                    end.transport.abort()

    async def __aenter__(self) -> Self:
        if not self._listeners:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def spawn(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None]:
        # asyncio keeps only weak references to tasks: hold them until done.
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
