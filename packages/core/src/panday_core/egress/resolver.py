"""Name resolution for the egress proxy, injectable so that tests never touch real DNS.

The proxy resolves every name itself (the jail has no resolver), checks each answer, and
then connects to the very address it checked. A `Resolver` only turns a name into
addresses; it never decides anything. `panday_core.egress.names` sits in front of it:
one lookup per name at a time, answers and failures cached.

Lookups that block (``getaddrinfo``) run on a small pool of threads of the resolver's own,
so a burst of names cannot take every thread of the loop's default executor, and the
number of lookups in flight (each may hold a socket to the system's resolver) is bounded.
"""

from __future__ import annotations

import asyncio
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

LOOKUP_THREADS = 4
"""Blocking lookups in flight at once, per resolver."""


class ResolveError(Exception):
    """The name has no usable address (no such host, no answer, resolver failure)."""


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> Sequence[str]:
        """The addresses (IP literals, in preference order) `host` stands for."""
        ...


class _Pool:
    """A lazily started, bounded thread pool for blocking lookups."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._executor: ThreadPoolExecutor | None = None

    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="panday-dns")
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class SystemResolver:
    """The host's resolver (`getaddrinfo`, on `threads` threads of its own)."""

    def __init__(self, threads: int = LOOKUP_THREADS) -> None:
        self._pool = _Pool(threads)

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.run_in_executor(
                self._pool.executor(),
                lambda: socket.getaddrinfo(
                    host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                ),
            )
        except (OSError, UnicodeError) as exc:
            raise ResolveError(f"cannot resolve {host}: {exc}") from None
        out: list[str] = []
        for _family, _type, _proto, _canon, sockaddr in infos:
            addr = str(sockaddr[0])
            if addr not in out:
                out.append(addr)
        if not out:
            raise ResolveError(f"cannot resolve {host}: no addresses")
        return out

    def close(self) -> None:
        self._pool.close()


class StaticResolver:
    """A fixed name → addresses table (tests, benchmarks, ``--resolve NAME=IP``).

    A value may be a callable, called on every lookup, so a test can model a resolver whose
    answer changes between lookups (DNS rebinding). With `delay` each lookup holds one of
    `threads` pool threads for that many seconds, as a blocking system lookup would: the
    benchmark's model of a name that takes time to resolve, without asking real DNS.
    """

    def __init__(
        self,
        table: Mapping[str, Iterable[str] | Callable[[], Iterable[str]]] | None = None,
        *,
        delay: float = 0.0,
        threads: int = LOOKUP_THREADS,
    ) -> None:
        self._table = {k.lower(): v for k, v in (table or {}).items()}
        self.lookups: list[str] = []
        self.delay = delay
        self._pool = _Pool(threads)

    async def resolve(self, host: str, port: int) -> Sequence[str]:  # noqa: ARG002 - protocol
        self.lookups.append(host)
        if self.delay > 0:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._pool.executor(), time.sleep, self.delay)
        entry = self._table.get(host.lower())
        if entry is None:
            raise ResolveError(f"cannot resolve {host}: no such host")
        answer = list(entry() if callable(entry) else entry)
        if not answer:
            raise ResolveError(f"cannot resolve {host}: no addresses")
        return answer

    def close(self) -> None:
        self._pool.close()
