"""`T1LinuxSandbox`: the async `Sandbox` protocol over the synchronous `T1Session`
(`common.SessionTable`, as T2 Linux's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_tier_linux.common import SessionTable
from panday_tier_linux.t1.capabilities import TIER, host_capabilities
from panday_tier_linux.t1.probe import unavailable_reason
from panday_tier_linux.t1.session import T1Session, open_session

if TYPE_CHECKING:
    from panday_core.capabilities import TierCapabilities
    from panday_core.types import SandboxHandle, SessionSpec


class T1LinuxSandbox(SessionTable[T1Session]):
    """T1 on Linux: Landlock + seccomp + rlimits (see docs/tiers/t1-linux.md)."""

    @property
    def tier(self) -> str:
        return TIER

    def capabilities(self) -> TierCapabilities:
        return host_capabilities()

    def unavailable_reason(self) -> str | None:
        return unavailable_reason()

    def _open(self, spec: SessionSpec) -> T1Session:
        return open_session(spec.policy, session_id=spec.session_id)

    async def enforcement(self, handle: SandboxHandle) -> dict[str, object]:
        return self.session(handle).enforcement()
