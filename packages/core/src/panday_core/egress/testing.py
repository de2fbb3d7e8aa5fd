"""Connectors for tests and benchmarks: the proxy reaches loopback and nothing else.

A test of the proxy (or of a tier's egress bridge) runs with a guard removed when it is
falsified; the connector is the last line that keeps such a run from sending a packet off
this host. `LoopbackOnly` records every address the proxy connects to and opens only
loopback ones.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


class LoopbackOnly:
    """A `Connector` that records each (address, port) and refuses anything off loopback."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, int]] = []

    async def __call__(
        self, factory: Callable[[], asyncio.BaseProtocol], host: str, port: int
    ) -> object:
        self.attempts.append((host, port))
        if not ipaddress.ip_address(host).is_loopback:
            raise ConnectionRefusedError(f"test connector: {host} is not loopback; not connecting")
        return await asyncio.get_running_loop().create_connection(factory, host=host, port=port)
