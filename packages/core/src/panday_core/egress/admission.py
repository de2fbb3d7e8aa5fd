"""Admission: which client connections the egress proxy holds, and whose budget each uses.

Nothing is served before the budgets say it fits: the process's descriptor budget
(`limits`), the proxy's connection slots, a budget per *source* (the proxy's own
listeners, or one jail's relay) for connections that have not presented valid credentials,
and a budget per command for connections that have.

* A source's unauthenticated connections are counted from the moment they are accepted
  (no grace period): at its limit a new one closes one of the source's own, the oldest
  that has not sent a byte yet, else the oldest. Idle connections cannot lock anyone out,
  and a client that sends its request at once is the last to be thinned.
* Unauthenticated connections from every source together may hold at most
  ``max_connections - reserved`` slots: the reserved share (a quarter) is kept for clients
  that authenticate, so a crowd without credentials never pushes them out. Beyond it the
  source holding the most unauthenticated connections pays.
* A command's slots are granted and released here and nowhere else: `grant` records the
  command a connection holds a slot of only when it took one, and `release` gives back
  exactly what was granted. A connection refused as busy holds nothing and gives back
  nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.egress.refusal import Refusal

if TYPE_CHECKING:
    from panday_core.egress.limits import DescriptorBudget
    from panday_core.egress.tunnel import Connection

RESERVED_SHARE = 4
"""One slot in this many is kept for clients that have authenticated."""


class Source:
    """Where connections come from: the proxy's own listeners, or one jail (its relay).

    `pending` holds its connections that have not presented valid credentials yet, oldest
    first; at `limit` one of them is closed to admit a new one.
    """

    __slots__ = ("key", "limit", "pending")

    def __init__(self, key: str, limit: int) -> None:
        self.key = key
        self.limit = limit
        self.pending: dict[Connection, None] = {}


class Admission:
    """The proxy's client connections and their budgets (one loop; see the module doc)."""

    def __init__(
        self,
        descriptors: DescriptorBudget,
        *,
        max_connections: int,
        max_per_command: int,
        listeners: Source,
    ) -> None:
        self.descriptors = descriptors
        self.max_connections = max_connections
        self.max_per_command = max_per_command
        self.reserved = max_connections // RESERVED_SHARE
        self.clients: set[Connection] = set()
        self.per_command: dict[str, int] = {}
        self.listeners = listeners
        self.jails: dict[str, Source] = {}

    # ------------------------------------------------------------------ sources
    def jail(self, key: str) -> Source:
        source = self.jails.get(key)
        if source is None:
            source = self.jails[key] = Source(key, self.listeners.limit)
        return source

    def jail_gone(self, key: str) -> None:
        self.jails.pop(key, None)

    def sources(self) -> list[Source]:
        return [self.listeners, *self.jails.values()]

    # ------------------------------------------------------------------ admitting
    def room(self, source: Source) -> str | None:
        """Make room for a new connection from `source`; None when it fits (its descriptor
        taken), else why not."""
        if len(source.pending) >= source.limit:
            self.evict(
                source,
                f"closed without credentials to make room: {source.key} holds "
                f"{source.limit} connections that have not authenticated "
                "(ProxyLimits.max_unauthenticated)",
            )
        waiting = sum(len(s.pending) for s in self.sources())
        if waiting >= self.max_connections - self.reserved:
            self.evict_anywhere("the share of connections without credentials is full")
        if len(self.clients) >= self.max_connections and not self.evict_anywhere(
            "the proxy is full"
        ):
            return f"connection limit ({self.max_connections}) reached"
        if not self.descriptors.take() and not (
            self.evict_anywhere("the proxy's descriptor budget is spent")
            and self.descriptors.take()
        ):
            return "the proxy's descriptor budget is spent"
        return None

    def add(self, conn: Connection) -> None:
        """Count `conn` (its descriptor taken by `room`) as unauthenticated."""
        conn.fd_held = True
        self.clients.add(conn)
        conn.source.pending[conn] = None

    def evict(self, source: Source, why: str) -> bool:
        """Close one of `source`'s unauthenticated connections (the oldest that has sent
        nothing, else the oldest); False if it has none."""
        if not source.pending:
            return False
        victim = next((c for c in source.pending if not c.heard), None)
        if victim is None:
            victim = next(iter(source.pending))
        self.release(victim)
        victim.evict(why)
        return True

    def evict_anywhere(self, why: str) -> bool:
        """Make room at the cost of the source holding the most unauthenticated
        connections (whoever floods pays)."""
        busiest = max(self.sources(), key=lambda s: len(s.pending))
        return self.evict(
            busiest,
            f"closed without credentials to make room: {why} and {busiest.key} holds the "
            "most unauthenticated connections",
        )

    # ------------------------------------------------------------------ commands
    def grant(self, conn: Connection) -> None:
        """`conn` presented valid credentials: it leaves its source's unauthenticated
        budget and takes a slot of its command's (raises `Refusal` when none is free;
        then it holds none)."""
        conn.source.pending.pop(conn, None)
        command_id = conn.command_id
        if command_id is None or conn.slot is not None:
            return
        held = self.per_command.get(command_id, 0)
        if held >= self.max_per_command:
            raise Refusal(
                "busy",
                f"command {command_id} holds {held} connections through the proxy (its limit)",
            )
        self.per_command[command_id] = held + 1
        conn.slot = command_id

    def release(self, conn: Connection) -> None:
        """Stop counting `conn` in every budget: exactly what it was granted (idempotent)."""
        if conn.released:
            return
        conn.released = True
        self.clients.discard(conn)
        conn.source.pending.pop(conn, None)
        if conn.fd_held:
            conn.fd_held = False
            self.descriptors.give()
        command_id, conn.slot = conn.slot, None
        if command_id is not None:
            held = self.per_command.get(command_id, 1) - 1
            if held > 0:
                self.per_command[command_id] = held
            else:
                self.per_command.pop(command_id, None)
