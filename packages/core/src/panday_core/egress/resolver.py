"""Name resolution for the egress proxy, injectable so that tests never touch real DNS.

The proxy resolves every name itself (the jail has no resolver), checks each answer, and
then connects to the very address it checked. A `Resolver` only turns a name into
addresses; it never decides anything.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence


class ResolveError(Exception):
    """The name has no usable address (no such host, no answer, resolver failure)."""


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> Sequence[str]:
        """The addresses (IP literals, in preference order) `host` stands for."""
        ...


class SystemResolver:
    """The host's resolver (`getaddrinfo`, in the loop's thread pool)."""

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
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


class StaticResolver:
    """A fixed name → addresses table (tests, benchmarks, ``--resolve NAME=IP``).

    A value may be a callable, called on every lookup, so a test can model a resolver whose
    answer changes between lookups (DNS rebinding).
    """

    def __init__(
        self, table: Mapping[str, Iterable[str] | Callable[[], Iterable[str]]] | None = None
    ) -> None:
        self._table = {k.lower(): v for k, v in (table or {}).items()}
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int) -> Sequence[str]:  # noqa: ARG002 - protocol
        self.lookups.append(host)
        entry = self._table.get(host.lower())
        if entry is None:
            raise ResolveError(f"cannot resolve {host}: no such host")
        answer = list(entry() if callable(entry) else entry)
        if not answer:
            raise ResolveError(f"cannot resolve {host}: no addresses")
        return answer
