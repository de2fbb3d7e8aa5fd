"""The `Sandbox` protocol every tier implements.

Async because a tier streams output while it waits on a process, and because the egress
proxy runs beside it; the SDK offers the synchronous face. A tier may refuse an operation
that has no meaning for it by raising `Unsupported` (T0 never executes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from panday_core.capabilities import TierCapabilities
    from panday_core.types import (
        ExecEvent,
        ExecSpec,
        SandboxHandle,
        SandboxTier,
        SessionSpec,
        Snapshot,
    )


class Sandbox(Protocol):
    """One isolation tier. A session runs from `create` to `destroy`."""

    @property
    def tier(self) -> SandboxTier: ...

    def capabilities(self) -> TierCapabilities:
        """What this tier enforces on this host (probes the host where it must)."""
        ...

    def unavailable_reason(self) -> str | None:
        """None when the tier can run here; otherwise one line saying why not."""
        ...

    async def create(self, spec: SessionSpec) -> SandboxHandle:
        """Open a session. Refuses (`PolicyViolation`) before spawning anything when the
        policy asks for something this tier cannot enforce."""
        ...

    def exec(self, handle: SandboxHandle, spec: ExecSpec) -> AsyncIterator[ExecEvent]:
        """Run one command: output chunks as they arrive, then exactly one `ExecExit`."""
        ...

    async def put(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        """Write a file into the workspace (path resolved so it cannot leave it)."""
        ...

    async def get(self, handle: SandboxHandle, path: str, *, max_bytes: int) -> bytes:
        """Read a file from the workspace or a staged path, at most `max_bytes`."""
        ...

    async def snapshot(self, handle: SandboxHandle) -> Snapshot:
        """List the workspace's files with sizes and hashes."""
        ...

    async def destroy(self, handle: SandboxHandle) -> None:
        """End the session: every process, cgroup, temp dir and proxy it started is gone."""
        ...
