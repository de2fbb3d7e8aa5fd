"""Bounds of the egress proxy: `ProxyLimits`, and the descriptor budget of this process.

A tier's session proxy runs inside its caller's process, so every connection it holds is a
descriptor in the caller's table, under the caller's ``RLIMIT_NOFILE``. A jailed command
that opens thousands of idle connections must never make the caller's own ``open()`` fail
with ``EMFILE``. So the first proxy of a process:

* raises the soft limit to the hard one (the usual soft limit, 1,024, is a compatibility
  default for ``select()``; the hard limit is what the administrator granted);
* leaves the caller its share: the whole of its original soft limit when the raise made
  room for it, otherwise a quarter of the limit (at least `MIN_CALLER`);
* keeps `EDGE_RESERVE` descriptors for the moments where a connection must be accepted (or
  received) only to be closed, which is how a refusal at the edge works;
* gives every proxy of the process one shared `DescriptorBudget` of the rest, which
  each accepted client, upstream connection, relay connection and spliced direction takes
  from before it is made, and gives back when it ends. What does not fit is refused at the
  edge; nothing waits for a descriptor;
* and keeps its own descriptors *numbered* at or above a floor (`DescriptorBudget.lift`):
  the original soft limit when the raise made room, else `SELECT_LIMIT` (1,024) whenever
  the limit leaves room above it, as when soft = hard = 20,000. The kernel hands out the
  lowest free number, so without this a proxy holding a thousand sockets would push the
  caller's next ``open()`` past 1,024, where ``select()`` cannot watch it (a caller that
  selects would fail with "filedescriptor out of range"). The numbers below stay the
  caller's.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import threading

import msgspec

SELECT_LIMIT = 1024
"""``FD_SETSIZE``: descriptors numbered at or above it break a caller's ``select()``."""
MIN_CALLER = 256
"""Descriptors always left to the caller, even when the limit cannot be raised."""
EDGE_RESERVE = 16
"""Descriptors kept for accepting (or receiving) a connection only to close it."""
MAX_DERIVED_CONNECTIONS = 8192
"""The most client connections a proxy derives from a large descriptor budget."""
_FALLBACK_LIMITS = (1 << 20, 10240)
"""Soft limits tried when the hard limit is unlimited (macOS caps at OPEN_MAX, 10240)."""


class ProxyLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on what clients may make the proxy hold or wait for."""

    max_head_bytes: int = 32 * 1024
    """Largest HTTP request head (request line and headers) accepted."""
    max_request_line: int = 8 * 1024
    max_headers: int = 100
    max_response_head_bytes: int = 64 * 1024
    """Largest plain-HTTP response head the proxy reads to find where the response ends;
    a larger one is relayed until the upstream closes."""
    max_connections: int | None = None
    """Client connections open at once for this proxy; None derives it from the process's
    descriptor budget (half of it: a tunnel holds two descriptors), at most
    `MAX_DERIVED_CONNECTIONS`."""
    max_unauthenticated: int = 1024
    """Connections one source (one jail's relay, or the proxy's own listeners) may hold
    before they present valid credentials. A new connection beyond it closes the oldest
    such connection rather than being refused, so idle connections cannot lock anyone out."""
    max_per_command: int | None = None
    """Connections one command's credentials may hold at once; None: a quarter of
    `max_connections`, at least 256. Session credentials are bounded by `max_connections`."""
    max_relays_per_jail: int = 4
    """Handoff connections one jail may hold (its relay needs one)."""
    head_timeout: float = 10.0
    """Seconds a client has to finish its request (HTTP head or SOCKS handshake)."""
    connect_timeout: float = 10.0
    """Seconds for resolving and connecting to the upstream, together."""
    idle_timeout: float = 300.0
    """Seconds a tunnel may carry no bytes in either direction before it is closed."""
    half_closed_timeout: float = 30.0
    """Seconds a tunnel one side has ended (end of file) may carry no bytes before it is
    closed (at most `idle_timeout`): an upstream that keeps its half open does not hold
    two descriptors for the whole idle timeout."""
    dns_cache_seconds: float = 5.0
    """How long a checked DNS answer is reused (pinned) for later requests to the name."""
    dns_negative_seconds: float = 2.0
    """How long a failed or refused resolution is remembered for the name."""
    dns_cache_entries: int = 1024
    max_lookups: int = 4
    """Name lookups running at once (the resolver's threads); the next is taken
    round-robin from the commands with lookups waiting."""
    max_lookups_per_command: int = 16
    """Distinct names one command's requests may wait on at once; beyond them a request
    for another name is refused as busy."""
    backlog: int = 4096
    chunk_bytes: int = 1024 * 1024
    """Size of the relay's read buffers while `buffer_budget_bytes` allows."""
    small_chunk_bytes: int = 16 * 1024
    """Size of the read buffers handed out beyond `buffer_budget_bytes`."""
    buffer_budget_bytes: int = 16 * 1024 * 1024
    """Bytes of large read buffers in use at once (lent to a slow peer included)."""
    write_buffer_bytes: int = 0
    """Bytes a transport may hold unsent before the other side stops reading."""
    pooled_buffers: int = 8
    """Free large read buffers kept for reuse; beyond this they are released."""
    splice_after: int | None = None
    """Bytes one direction of a tunnel relays through buffers before it switches to
    ``splice(2)`` (Linux; see `splicing`); None (the default) never switches. Off by
    default because, measured end to end on loopback, the buffered relay carried as much
    or more, except while another process held a core: splice saves the proxy its two
    copies, but the reader's copy of the pages it passes on costs the reader more
    (docs/egress.md, Performance)."""


class DescriptorBudget:
    """Descriptors the egress proxies of this process may hold at once (thread-safe: each
    session proxy runs on a loop thread of its own, and they share one table)."""

    def __init__(self, limit: int, caller: int, floor: int = 0) -> None:
        self.limit = limit
        """The soft ``RLIMIT_NOFILE`` the budget was derived from."""
        self.caller = caller
        """Descriptors left to the caller."""
        self.floor = floor
        """The lowest number the proxy's own descriptors take (0: wherever they fall)."""
        self.total = max(0, limit - caller - EDGE_RESERVE)
        self.used = 0
        self._lock = threading.Lock()

    def lift(self, fd: int) -> int:
        """`fd` renumbered at or above `floor` (the original closed), close-on-exec; `fd`
        itself when there is no floor or no room above it."""
        if self.floor <= 0 or fd >= self.floor:
            return fd
        import fcntl  # noqa: PLC0415 - POSIX only, and only with a floor

        try:
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, self.floor)
        except OSError:
            return fd  # nothing free above the floor: keep it where it is
        os.close(fd)
        return moved

    def lift_socket(self, sock: socket.socket) -> socket.socket:
        """`sock` renumbered as by `lift` (a new socket object; `sock` is consumed)."""
        if self.floor <= 0 or sock.fileno() >= self.floor:
            return sock
        timeout = sock.gettimeout()
        family, kind, proto = sock.family, sock.type, sock.proto
        fd = self.lift(sock.detach())
        try:
            # Family, type and protocol given: nothing is asked of the kernel again.
            moved = socket.socket(family, kind, proto, fileno=fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        if timeout != 0.0:
            moved.settimeout(timeout)
        else:
            moved.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        return moved

    def take(self, count: int = 1) -> bool:
        """Reserve `count` descriptors; False (nothing reserved) when they do not fit."""
        with self._lock:
            if self.used + count > self.total:
                return False
            self.used += count
            return True

    def give(self, count: int = 1) -> None:
        with self._lock:
            self.used = max(0, self.used - count)

    @property
    def free(self) -> int:
        return self.total - self.used

    def connections(self) -> int:
        """Client connections a proxy may derive from this budget (two descriptors each)."""
        return max(1, min(MAX_DERIVED_CONNECTIONS, self.total // 2))


_lock = threading.Lock()
_budget: DescriptorBudget | None = None


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))  # noqa: PTH208 - a count of names
    except OSError:
        return 0


def _raise_soft_limit() -> tuple[int, int]:
    """(soft limit before, soft limit now): the soft limit raised as far as allowed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = [hard] if hard != resource.RLIM_INFINITY else list(_FALLBACK_LIMITS)
    for target in wanted:
        if soft != resource.RLIM_INFINITY and target <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            continue
        break
    now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if now == resource.RLIM_INFINITY:
        now = _FALLBACK_LIMITS[0]
    return (soft if soft != resource.RLIM_INFINITY else now), now


def derive_budget(before: int, limit: int, open_now: int) -> DescriptorBudget:
    """The budget for a process whose soft limit was `before` and is `limit` now, with
    `open_now` descriptors open: the caller keeps its original limit (and the numbers
    below it) when the raise made room for it; else, when the limit is above
    `SELECT_LIMIT` with room to spare, the numbers below `SELECT_LIMIT` and at least a
    quarter of the limit; else a quarter of the limit (at least `MIN_CALLER`); and never
    less than what it holds already plus `MIN_CALLER`."""
    floor = 0
    if limit - before >= MIN_CALLER + EDGE_RESERVE:
        caller = floor = before
    elif limit - SELECT_LIMIT >= MIN_CALLER + EDGE_RESERVE:
        # The soft limit could not be raised (soft = hard, as for root or in Docker), but
        # it is above select()'s range: keep that range the caller's all the same.
        floor = SELECT_LIMIT
        caller = max(SELECT_LIMIT, limit // 4)
    else:
        caller = max(MIN_CALLER, limit // 4)
    caller = max(caller, open_now + MIN_CALLER)
    return DescriptorBudget(limit, min(caller, limit), floor)


def descriptor_budget() -> DescriptorBudget:
    """The process's budget, derived (and the soft limit raised) on first use."""
    global _budget  # noqa: PLW0603 - one descriptor table per process, so one budget
    with _lock:
        if _budget is None:
            before, limit = _raise_soft_limit()
            _budget = derive_budget(before, limit, _open_descriptors())
        return _budget
