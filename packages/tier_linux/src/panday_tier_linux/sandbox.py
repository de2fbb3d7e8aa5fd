"""`T2LinuxSandbox`: the async `Sandbox` protocol over the synchronous `LinuxSession`.

A thin layer (`common.SessionTable`): sessions live in a table keyed by handle id, and
each call forwards to the session. Opening a session is synchronous work of about a
millisecond (longer once per user when the seccomp program is first compiled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.types import SandboxTier
from panday_tier_linux.capabilities import host_capabilities
from panday_tier_linux.common import SessionTable
from panday_tier_linux.probe import unavailable_reason
from panday_tier_linux.session import LinuxSession, open_session

if TYPE_CHECKING:
    from panday_core.capabilities import TierCapabilities
    from panday_core.egress.thread import ProxySettings
    from panday_core.types import SandboxHandle, SessionSpec
    from panday_tier_linux import host
    from panday_tier_linux.enforcement import Enforcement


class T2LinuxSandbox(SessionTable[LinuxSession]):
    """T2 on Linux: bubblewrap + seccomp + cgroups (see docs/tiers/linux.md)."""

    def __init__(
        self, *, bwrap: host.Bwrap | None = None, egress: ProxySettings | None = None
    ) -> None:
        """`egress` configures the egress proxy of sessions with ``net.allow`` (resolver,
        audit callback or JSONL file, limits); the defaults suit real use."""
        super().__init__()
        self._bwrap = bwrap
        self._egress = egress

    @property
    def tier(self) -> SandboxTier:
        return SandboxTier.T2_LINUX

    def capabilities(self) -> TierCapabilities:
        return host_capabilities()

    def unavailable_reason(self) -> str | None:
        return unavailable_reason(self._bwrap)

    def _open(self, spec: SessionSpec) -> LinuxSession:
        return open_session(
            spec.policy, session_id=spec.session_id, bwrap=self._bwrap, egress=self._egress
        )

    async def enforcement(self, handle: SandboxHandle) -> Enforcement:
        return self.session(handle).enforcement()
