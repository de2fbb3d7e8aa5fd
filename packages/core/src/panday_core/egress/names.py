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
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from panday_core.egress.resolver import ResolveError
from panday_core.egress.rules import parse_address
from panday_core.egress.tunnel import Refusal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.egress.addresses import IPAddress
    from panday_core.egress.limits import ProxyLimits
    from panday_core.egress.resolver import Resolver
    from panday_core.egress.rules import EgressRules

Outcome = tuple["IPAddress", ...] | Refusal


class CheckedNames:
    """Names → checked addresses, for one proxy (one loop)."""

    def __init__(self, resolver: Resolver, rules: EgressRules, limits: ProxyLimits) -> None:
        self.resolver = resolver
        self.rules = rules
        self.limits = limits
        self._cache: dict[str, tuple[float, Outcome]] = {}
        self._flights: dict[str, asyncio.Future[Outcome]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.lookups = 0
        """Lookups started (each flight is one)."""

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

    async def addresses(self, host: str, port: int, deadline: float) -> tuple[IPAddress, ...]:
        """The addresses `host` may be reached at, every one checked; raises `Refusal`."""
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
        if flight is None:
            flight = loop.create_future()
            self._flights[host] = flight
            task = loop.create_task(self._fly(host, port, flight))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            async with asyncio.timeout(max(deadline - now, 0.0)):
                outcome = await asyncio.shield(flight)
        except TimeoutError:
            raise Refusal("timeout", f"resolving {host} timed out") from None
        return _unwrap(outcome)

    async def _fly(self, host: str, port: int, flight: asyncio.Future[Outcome]) -> None:
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
            self._flights.pop(host, None)
        if keep > 0:
            if len(self._cache) >= self.limits.dns_cache_entries:
                self._cache.pop(next(iter(self._cache)))  # the oldest entry
            self._cache[host] = (loop.time() + keep, outcome)
        if not flight.done():
            flight.set_result(outcome)

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
            if not flight.done():
                flight.cancel()
        self._flights.clear()


def _unwrap(outcome: Outcome) -> tuple[IPAddress, ...]:
    if isinstance(outcome, Refusal):
        raise outcome.copy()
    return outcome
