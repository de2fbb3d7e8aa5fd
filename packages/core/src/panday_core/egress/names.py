"""Checked answers for names: one lookup per name at a time, answers and failures cached.

A thousand tunnels opened at once to one name must not become a thousand lookups: they
would queue on the resolver's few threads, and the last would wait a thousand lookups
long. So the first request for a name starts one *flight* (resolve, then check every
address of the answer); every request for the same name that arrives while it is in the
air waits for that flight instead of starting its own; each waits no longer than its own
deadline, and a request that gives up does not cancel the flight for the others.

The outcome is remembered: a passing answer for `ProxyLimits.dns_cache_seconds` (pinned:
later requests connect to the same checked addresses), a failure or a refused answer for
`ProxyLimits.dns_negative_seconds`, so a flood of requests for a name that does not
resolve (or resolves to a private address) costs one lookup, not one per request. A
lookup that timed out is not remembered.

Lookups are scheduled fairly between commands (the credentials' user, ``session`` for
session credentials): at most `ProxyLimits.max_lookups` run at once (the resolver's
threads), the next is taken round-robin from the commands with lookups waiting, so one
command's flood of names delays another's lookup by at most one lookup time; a command may
wait on at most `ProxyLimits.max_lookups_per_command` lookups at once (beyond them a
request is refused as busy). A lookup that every request waiting for it gave up on (its
deadline passed, or its client went away) is cancelled before it starts; one already
running finishes (a blocking lookup cannot be interrupted) and its answer is cached.
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING

from panday_core.egress.refusal import Refusal
from panday_core.egress.resolver import ResolveError
from panday_core.egress.rules import parse_address

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.egress.addresses import IPAddress
    from panday_core.egress.limits import ProxyLimits
    from panday_core.egress.resolver import Resolver
    from panday_core.egress.rules import EgressRules

Outcome = tuple["IPAddress", ...] | Refusal


class _Flight:
    """One lookup of one name, shared by every request waiting for it."""

    __slots__ = ("future", "host", "port", "started", "waiters")

    def __init__(self, host: str, port: int, future: asyncio.Future[Outcome]) -> None:
        self.host = host
        self.port = port
        self.future = future
        self.started = False
        self.waiters = 0


class CheckedNames:
    """Names → checked addresses, for one proxy (one loop)."""

    def __init__(self, resolver: Resolver, rules: EgressRules, limits: ProxyLimits) -> None:
        self.resolver = resolver
        self.rules = rules
        self.limits = limits
        self._cache: dict[str, tuple[float, Outcome]] = {}
        self._flights: dict[str, _Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._queues: dict[str, collections.deque[_Flight]] = {}
        """Lookups not started yet, per command, in the order the commands get turns."""
        self._waiting: dict[str, dict[str, int]] = {}
        """Per command: the names it waits on (queued or running), and how many of its
        requests wait on each."""
        self._running = 0
        self.lookups = 0
        """Lookups started (each flight is one)."""
        self.abandoned = 0
        """Lookups cancelled before they started (nobody waited for them any more)."""

    def literal(self, host: str) -> tuple[IPAddress, ...] | None:
        """The checked address when `host` is an IP literal, None for a name; raises
        `Refusal` for a literal that must not be reached."""
        literal = parse_address(host)
        if literal is None:
            return None
        problem = self.rules.check_address(host, literal)
        if problem is not None:
            raise Refusal("policy", problem, address=str(literal))
        return (literal,)

    async def addresses(
        self, host: str, port: int, deadline: float, *, who: str = ""
    ) -> tuple[IPAddress, ...]:
        """The addresses `host` may be reached at, every one checked; raises `Refusal`.
        `who` is the command asking (whose lookup budget it uses)."""
        literal = self.literal(host)
        if literal is not None:
            return literal
        loop = asyncio.get_running_loop()
        now = loop.time()
        cached = self._cache.get(host)
        if cached is not None:
            if cached[0] > now:
                return _unwrap(cached[1])
            del self._cache[host]
        flight = self._flights.get(host)
        waiting = self._waiting.get(who)
        if waiting is None:
            waiting = self._waiting[who] = {}
        if host not in waiting and len(waiting) >= self.limits.max_lookups_per_command:
            raise Refusal(
                "busy",
                f"{who or 'this client'} waits on {len(waiting)} name lookups already "
                "(ProxyLimits.max_lookups_per_command)",
            )
        if flight is None:
            flight = self._flights[host] = _Flight(host, port, loop.create_future())
            self._queue(who, flight)
        elif not flight.started:
            self._queue(who, flight)  # its turn may come sooner under this command
        flight.waiters += 1
        waiting[host] = waiting.get(host, 0) + 1
        try:
            async with asyncio.timeout(max(deadline - now, 0.0)):
                outcome = await asyncio.shield(flight.future)
        except TimeoutError:
            raise Refusal("timeout", f"resolving {host} timed out") from None
        finally:
            self._gave_up(flight, who)
        return _unwrap(outcome)

    def _queue(self, who: str, flight: _Flight) -> None:
        queue = self._queues.get(who)
        if queue is None:
            # A command with nothing waiting goes first: its turn comes before those of
            # commands that have been served already (then it joins the back).
            queue = collections.deque[_Flight]()
            self._queues = {who: queue, **self._queues}
        queue.append(flight)
        self._pump()

    def _gave_up(self, flight: _Flight, who: str) -> None:
        """A request stopped waiting for `flight` (answered, timed out, or cancelled)."""
        flight.waiters -= 1
        waiting = self._waiting.get(who, {})
        left = waiting.get(flight.host, 1) - 1
        if left > 0:
            waiting[flight.host] = left
        else:
            waiting.pop(flight.host, None)
            if not waiting:
                self._waiting.pop(who, None)
        if flight.waiters <= 0 and not flight.started and not flight.future.done():
            # Nobody waits for it: it never starts (it is skipped where it is queued).
            flight.future.cancel()
            self.abandoned += 1
            if self._flights.get(flight.host) is flight:
                del self._flights[flight.host]

    def _pump(self) -> None:
        """Start lookups while fewer than `max_lookups` run, one command's turn each."""
        queues = self._queues
        while self._running < self.limits.max_lookups and queues:
            who = next(iter(queues))
            queue = queues.pop(who)
            flight = None
            while queue:
                candidate = queue.popleft()
                if not candidate.started and not candidate.future.done():
                    flight = candidate
                    break
            if queue:
                queues[who] = queue  # back of the line: the next command's turn
            if flight is None:
                continue
            flight.started = True
            self._running += 1
            task = asyncio.get_running_loop().create_task(self._fly(flight))
            self._tasks.add(task)
            task.add_done_callback(self._landed)

    def _landed(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._running -= 1
        if not task.cancelled():
            self._pump()

    async def _fly(self, flight: _Flight) -> None:
        host, port = flight.host, flight.port
        self.lookups += 1
        loop = asyncio.get_running_loop()
        keep = self.limits.dns_negative_seconds
        outcome: Outcome
        try:
            async with asyncio.timeout(self.limits.connect_timeout):
                answer = await self.resolver.resolve(host, port)
            outcome = self._check(host, answer)
            if not isinstance(outcome, Refusal):
                keep = self.limits.dns_cache_seconds
        except TimeoutError:
            outcome, keep = Refusal("timeout", f"resolving {host} timed out"), 0.0
        except ResolveError as exc:
            outcome = Refusal("unresolvable", str(exc))
        except Exception as exc:  # noqa: BLE001 - a resolver's bug fails this name, not the proxy
            outcome, keep = Refusal("unresolvable", f"cannot resolve {host}: {exc}"), 0.0
        finally:
            if self._flights.get(host) is flight:
                del self._flights[host]
        if keep > 0:
            if len(self._cache) >= self.limits.dns_cache_entries:
                self._cache.pop(next(iter(self._cache)))  # the oldest entry
            self._cache[host] = (loop.time() + keep, outcome)
        if not flight.future.done():
            flight.future.set_result(outcome)

    def _check(self, host: str, answer: Sequence[str]) -> Outcome:
        """Every address of `answer` checked: a mixed answer (how rebinding looks) is
        refused whole."""
        addresses: list[IPAddress] = []
        for text in answer:
            addr = parse_address(str(text))
            if addr is None:
                return Refusal("unresolvable", f"resolver gave a non-address for {host}")
            problem = self.rules.check_address(host, addr)
            if problem is not None:
                return Refusal("policy", problem, address=str(addr))
            addresses.append(addr)
        if not addresses:
            return Refusal("unresolvable", f"cannot resolve {host}: no addresses")
        return tuple(addresses)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for flight in self._flights.values():
            if not flight.future.done():
                flight.future.cancel()
        self._flights.clear()
        self._queues.clear()


def _unwrap(outcome: Outcome) -> tuple[IPAddress, ...]:
    if isinstance(outcome, Refusal):
        raise outcome.copy()
    return outcome
