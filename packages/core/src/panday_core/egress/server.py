"""The egress proxy: one per session, on loopback (or a unix socket), authenticated.

Each client connection carries one request: an HTTP ``CONNECT``, an absolute-form
plain-HTTP request, or a SOCKS5 ``CONNECT`` (the first byte tells which: `fronts`). The
proxy checks the credentials, then the host against `net.deny` / `net.allow` /
`net.ports`, resolves the name itself (`names`), refuses any answer that is not globally
routable (unless that exact IP literal is allowlisted), and connects to the address it
checked, never re-resolving. Then it relays bytes both ways until either side closes
(`tunnel`), reporting an `AuditEvent` when the tunnel opens and when it closes.

This module holds what is the proxy's as a whole: the credentials (issued per command,
revoked when the command ends), the listeners, and admission. Nothing is accepted before
the budgets say it fits (see `limits`): the process's descriptor budget, the proxy's
connection slots, a small budget per source for connections that have not presented valid
credentials (a new one closes the oldest, so idle connections cannot lock anyone out), and
a budget per command. What does not fit is closed at the edge and reported in aggregate;
the caller's own work never runs out of descriptors because of the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import itertools
import logging
import secrets
import socket
import threading
import time
from typing import TYPE_CHECKING, Self

from panday_core.egress.audit import AuditEvent, JsonlAuditLog, Throttle
from panday_core.egress.limits import ProxyLimits, descriptor_budget
from panday_core.egress.names import CheckedNames
from panday_core.egress.resolver import Resolver, StaticResolver, SystemResolver
from panday_core.egress.rules import EgressRules
from panday_core.egress.tunnel import BufferPool, Connection, Refusal, Source

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from panday_core.egress.handoff import HandoffListener
    from panday_core.egress.tunnel import Connector
    from panday_core.policy import NetPolicy

__all__ = ["SESSION_USER", "EgressProxy", "ProxyLimits", "Refusal"]

_log = logging.getLogger("panday_core.egress")

SESSION_USER = "session"
"""The username of session-level credentials (no particular command)."""
_USER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_MAX_USER = 64
_TOKEN_BYTES = 20
"""160 random bits per issued token, shown as 40 hex digits."""
_NO_IPV6 = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT})
"""Errors that mean this host has no IPv6 loopback to listen on (so nobody else can)."""
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_BATCH = 64
"""Connections accepted per readiness callback, so a flood cannot starve the loop."""
_BACKOFF_S = 0.1
_MIN_PER_COMMAND = 256
GRACE_S = 1.0
"""How long a new connection has to present its credentials before a source over its
unauthenticated budget may close it to admit another: a burst of honest clients (which
send their request at once) is never thinned, a standing crowd of idle ones is."""


class _Grant:
    __slots__ = ("id", "refs", "token")

    def __init__(self, token: str, grant_id: int) -> None:
        self.token = token
        self.id = grant_id
        self.refs = 0


class Credentials:
    """Issued credentials: a random token per user (a command id, or ``session``).

    A command's credentials are issued when it starts and revoked when it ends; issuing
    an id that is still live adds a reference instead (two running commands may share a
    caller's command id), and the token dies with the last reference. A revoked id that is
    issued again gets a new token, so a process that kept the old one gets nothing. The
    session's credentials live as long as the proxy. Thread-safe: the caller issues and
    revokes from its own thread while the proxy's loop checks.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._grants: dict[str, _Grant] = {SESSION_USER: _Grant(secrets.token_hex(_TOKEN_BYTES), 0)}
        self._dummy = secrets.token_hex(_TOKEN_BYTES).encode("ascii")

    def issue(self, user: str) -> str:
        with self._lock:
            grant = self._grants.get(user)
            if grant is None:
                grant = self._grants[user] = _Grant(
                    secrets.token_hex(_TOKEN_BYTES), next(self._ids)
                )
            grant.refs += 1
            return grant.token

    def revoke(self, user: str) -> int | None:
        """Drop one reference to `user`'s credentials; the grant id when that was the last
        (its tunnels must be cut), else None."""
        if user == SESSION_USER:
            return None
        with self._lock:
            grant = self._grants.get(user)
            if grant is None:
                return None
            grant.refs -= 1
            if grant.refs > 0:
                return None
            del self._grants[user]
            return grant.id

    def check(self, user: str, password: str) -> int | None:
        """The grant id when (user, password) are live credentials, else None
        (constant-time in the token)."""
        grant = self._grants.get(user)
        token = grant.token.encode("ascii") if grant is not None else self._dummy
        ok = hmac.compare_digest(token, password.encode("utf-8", "replace"))
        return grant.id if ok and grant is not None else None


class _Listener:
    """A listening socket the proxy accepts from itself, so that every connection is
    weighed against the budgets before it is served (``loop.create_server`` would accept a
    whole backlog in one go, descriptors and all)."""

    def __init__(self, proxy: EgressProxy, sock: socket.socket, source: Source) -> None:
        self.proxy = proxy
        self.sock = sock
        self.source = source
        self.loop = proxy.loop
        self.loop.add_reader(sock.fileno(), self._ready)

    def _ready(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_DESCRIPTORS:
                    self._back_off()
                elif exc.errno != errno.ECONNABORTED:
                    _log.warning("egress proxy: accept failed: %s", exc)
                return
            self.proxy.serve(conn, self.source)

    def _back_off(self) -> None:
        """Out of descriptors (something else in the process took them): a listener that
        stays readable would spin, so stop reading it for a moment."""
        self.proxy.edge(self.source, "the process is out of descriptors; not accepting for now")
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.sock.fileno())

        def resume() -> None:
            if self.sock.fileno() >= 0:
                self.loop.add_reader(self.sock.fileno(), self._ready)

        self.loop.call_later(_BACKOFF_S, resume)

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


def _bound_sockets(host: str, port: int, backlog: int) -> list[socket.socket]:
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
        self.clients: set[Connection] = set()
        self.credentials_store = Credentials()
        self._per_command: dict[str, int] = {}
        self._audit = audit
        self.connector: Connector = connector or open_connection
        self._jsonl = JsonlAuditLog(audit_jsonl) if audit_jsonl else None
        self._listeners: list[_Listener] = []
        self._source = Source("the proxy's listeners", limits.max_unauthenticated)
        self._jails: dict[str, Source] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._throttle: Throttle | None = None
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
        random token issued for it, so the command id in the audit log is authenticated
        rather than claimed. Issuing a command's credentials takes a reference that
        `revoke` gives back; thread-safe."""
        user = SESSION_USER if command_id is None else command_id
        if command_id == SESSION_USER or not _valid_user(user):
            raise ValueError(
                f"command id {command_id!r} must be 1-{_MAX_USER} characters of "
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
        if not _valid_user(user):
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
            self._listeners.append(_Listener(self, lifted, self._source))

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen on TCP (loopback by default) and return the bound (host, port)."""
        socks = _bound_sockets(host, port, self.limits.backlog)
        self._listen(socks)
        name = socks[0].getsockname()
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
            (v4,) = _bound_sockets("127.0.0.1", port, backlog)
            chosen = int(v4.getsockname()[1])
            try:
                v6 = _bound_sockets("::1", chosen, backlog)
            except OSError as exc:
                if exc.errno in _NO_IPV6:
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
        source = self._jails.get(key)
        if source is None:
            source = self._jails[key] = Source(key, self.limits.max_unauthenticated)
        self.serve(sock, source)

    def _handoff_refused(self, key: str, reason: str) -> None:
        self._edge_event(f"{key} handoff", reason)

    def _jail_gone(self, key: str) -> None:
        self._jails.pop(key, None)

    async def adopt(self, sock: socket.socket) -> None:
        """Serve `sock`, a connected TCP socket accepted elsewhere, as a client."""
        self.serve(sock, self._source)

    # ------------------------------------------------------------------ admission
    def serve(self, sock: socket.socket, source: Source) -> None:
        """Serve a connected client socket from `source`, or close it at the edge."""
        conn = self._admit(source)
        if conn is None:
            sock.close()
            return
        try:
            sock = self.descriptors.lift_socket(sock)
        except OSError:
            sock.close()
            self._release(conn)
            return
        self.spawn(self._attach(conn, sock))

    async def _attach(self, conn: Connection, sock: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(lambda: conn, sock)
        except (OSError, RuntimeError):
            sock.close()
            conn.reason = "the proxy could not serve the connection"
            self._release(conn)

    def _admit(self, source: Source) -> Connection | None:
        limit = source.limit
        if len(source.pending) >= limit:
            oldest = next(iter(source.pending))
            if time.monotonic() - oldest.t0 >= GRACE_S:
                self._evict(
                    source,
                    f"closed without credentials to make room: {source.key} holds {limit} "
                    "connections that have not authenticated (ProxyLimits.max_unauthenticated)",
                )
        if len(self.clients) >= self.max_connections and not self._evict_anywhere():
            self.edge(source, f"connection limit ({self.max_connections}) reached")
            return None
        if not self.descriptors.take() and not (self._evict_anywhere() and self.descriptors.take()):
            self.edge(source, "the proxy's descriptor budget is spent")
            return None
        conn = Connection(self, source)
        conn.fd_held = True
        self.clients.add(conn)
        source.pending[conn] = None
        return conn

    def _evict(self, source: Source, why: str) -> bool:
        """Close `source`'s oldest unauthenticated connection; False if it has none."""
        if not source.pending:
            return False
        oldest = next(iter(source.pending))
        self._release(oldest)
        oldest.evict(why)
        return True

    def _evict_anywhere(self) -> bool:
        """Make room at the cost of the source holding the most unauthenticated
        connections (whoever floods pays)."""
        sources = [self._source, *self._jails.values()]
        busiest = max(sources, key=lambda s: len(s.pending))
        return self._evict(
            busiest,
            f"closed without credentials to make room: the proxy is full and {busiest.key} "
            "holds the most unauthenticated connections",
        )

    def authenticated(self, conn: Connection) -> None:
        """`conn` presented valid credentials: it leaves its source's unauthenticated
        budget and counts against its command's (raises `Refusal` when that is full)."""
        conn.source.pending.pop(conn, None)
        command_id = conn.command_id
        if command_id is None:
            return
        held = self._per_command.get(command_id, 0)
        if held >= self.max_per_command:
            raise Refusal(
                "busy",
                f"command {command_id} holds {held} connections through the proxy (its limit)",
            )
        self._per_command[command_id] = held + 1

    def _release(self, conn: Connection) -> None:
        """Stop counting `conn` in every budget (idempotent)."""
        if conn.released:
            return
        conn.released = True
        self.clients.discard(conn)
        conn.source.pending.pop(conn, None)
        if conn.fd_held:
            conn.fd_held = False
            self.descriptors.give()
        command_id = conn.command_id
        if command_id is not None and conn.user is not None:
            held = self._per_command.get(command_id, 1) - 1
            if held > 0:
                self._per_command[command_id] = held
            else:
                self._per_command.pop(command_id, None)

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
        for sink in (self._jsonl, self._audit):  # the durable log first
            if sink is None:
                continue
            try:
                sink(event)
            except Exception:  # noqa: BLE001 - an audit consumer's bug must not take the proxy down
                _log.exception("egress proxy: audit sink failed")

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
        if isinstance(self.resolver, (SystemResolver, StaticResolver)):
            self.resolver.close()  # its lookup threads
        if self._jsonl is not None:
            self._jsonl.close()

    def _abort_all(self) -> None:
        for client in list(self.clients):
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

    def spawn(self, coro: Coroutine[object, object, None]) -> None:
        # asyncio keeps only weak references to tasks: hold them until done.
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


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


def _valid_user(user: str) -> bool:
    return 0 < len(user) <= _MAX_USER and set(user) <= _USER_CHARS
