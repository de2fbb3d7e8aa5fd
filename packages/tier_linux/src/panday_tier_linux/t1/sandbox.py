"""`T1LinuxSandbox`: the async `Sandbox` protocol over the synchronous `T1Session`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.errors import Internal
from panday_core.types import SandboxHandle
from panday_tier_linux.t1.capabilities import TIER, host_capabilities
from panday_tier_linux.t1.probe import unavailable_reason
from panday_tier_linux.t1.session import T1Session, open_session

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from panday_core.capabilities import TierCapabilities
    from panday_core.types import ExecEvent, ExecSpec, SessionSpec, Snapshot


class T1LinuxSandbox:
    """T1 on Linux: Landlock + seccomp + rlimits (see docs/tiers/t1-linux.md)."""

    def __init__(self) -> None:
        self._sessions: dict[str, T1Session] = {}

    @property
    def tier(self) -> str:
        return TIER

    def capabilities(self) -> TierCapabilities:
        return host_capabilities()

    def unavailable_reason(self) -> str | None:
        return unavailable_reason()

    def available(self) -> bool:
        return self.unavailable_reason() is None

    async def create(self, spec: SessionSpec) -> SandboxHandle:
        session = open_session(spec.policy, session_id=spec.session_id)
        if session.id in self._sessions:
            session.close()
            raise Internal(f"session id {session.id!r} is already open")
        self._sessions[session.id] = session
        return SandboxHandle(id=session.id, tier=self.tier, workspace=session.workspace)

    def session(self, handle: SandboxHandle) -> T1Session:
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

    async def enforcement(self, handle: SandboxHandle) -> dict[str, object]:
        return self.session(handle).enforcement()

    async def destroy(self, handle: SandboxHandle) -> None:
        session = self._sessions.pop(handle.id, None)
        if session is not None:
            session.close()
