"""`T2LinuxSandbox`: the async `Sandbox` protocol over the synchronous `LinuxSession`.

A thin layer: sessions live in a dict keyed by handle id, and each call forwards to the
session. `exec` streams through the core pump's asyncio driver, so the loop is never
blocked while a command runs; opening a session is synchronous work of about a
millisecond (longer once per user when the seccomp program is first compiled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.errors import Internal
from panday_core.types import SandboxHandle, SandboxTier
from panday_tier_linux.capabilities import host_capabilities
from panday_tier_linux.probe import unavailable_reason
from panday_tier_linux.session import LinuxSession, open_session

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from panday_core.capabilities import TierCapabilities
    from panday_core.egress.thread import ProxySettings
    from panday_core.types import ExecEvent, ExecSpec, SessionSpec, Snapshot
    from panday_tier_linux import host
    from panday_tier_linux.enforcement import Enforcement


class T2LinuxSandbox:
    """T2 on Linux: bubblewrap + seccomp + cgroups (see docs/tiers/linux.md)."""

    def __init__(
        self, *, bwrap: host.Bwrap | None = None, egress: ProxySettings | None = None
    ) -> None:
        """`egress` configures the egress proxy of sessions with ``net.allow`` (resolver,
        audit callback or JSONL file, limits); the defaults suit real use."""
        self._bwrap = bwrap
        self._egress = egress
        self._sessions: dict[str, LinuxSession] = {}

    @property
    def tier(self) -> SandboxTier:
        return SandboxTier.T2_LINUX

    def capabilities(self) -> TierCapabilities:
        return host_capabilities()

    def unavailable_reason(self) -> str | None:
        return unavailable_reason(self._bwrap)

    def available(self) -> bool:
        return self.unavailable_reason() is None

    async def create(self, spec: SessionSpec) -> SandboxHandle:
        session = open_session(
            spec.policy, session_id=spec.session_id, bwrap=self._bwrap, egress=self._egress
        )
        if session.id in self._sessions:
            session.close()
            raise Internal(f"session id {session.id!r} is already open")
        self._sessions[session.id] = session
        return SandboxHandle(id=session.id, tier=self.tier, workspace=session.workspace)

    def session(self, handle: SandboxHandle) -> LinuxSession:
        """The synchronous session behind `handle` (for the SDK's blocking face)."""
        try:
            return self._sessions[handle.id]
        except KeyError:
            raise Internal(f"no open session {handle.id!r}") from None

    def exec(self, handle: SandboxHandle, spec: ExecSpec) -> AsyncIterator[ExecEvent]:
        return self.session(handle).aexec(spec)

    async def put(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        self.session(handle).put(path, data)

    async def get(self, handle: SandboxHandle, path: str, *, max_bytes: int) -> bytes:
        return self.session(handle).get(path, max_bytes=max_bytes)

    async def snapshot(self, handle: SandboxHandle) -> Snapshot:
        return self.session(handle).snapshot()

    async def enforcement(self, handle: SandboxHandle) -> Enforcement:
        return self.session(handle).enforcement()

    async def destroy(self, handle: SandboxHandle) -> None:
        session = self._sessions.pop(handle.id, None)
        if session is not None:
            session.close()
