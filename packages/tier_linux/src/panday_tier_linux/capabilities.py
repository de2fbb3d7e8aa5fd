"""What T2 Linux enforces on this host (rendered by `doctor`, the docs and the run report).

The table itself is data in core (`panday_core.declared.t2_linux`), so a host without this
package can still judge a policy against it. `declared_capabilities()` is that table on a
host that has everything the tier can use; it is host-independent, so the docs can be
generated anywhere. `host_capabilities()` is the same table with what this host lacks
turned into refusals with the reason (no writable cgroup -> the memory, pid and CPU
ceilings are refused by name; no interpreter for the egress relay -> ``net.allow``,
``net.deny`` and ``net.ports``); `create` and `doctor` use it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

from panday_core.declared.t2_linux import (
    CGROUP_FIELDS,
    CPU_POLL_MS,
    DISK_NEEDS_RO,
    GUARANTEES,
    capabilities,
    declared_capabilities,
)

if TYPE_CHECKING:
    from panday_core.capabilities import TierCapabilities

__all__ = [
    "CPU_POLL_MS",
    "DISK_NEEDS_RO",
    "GUARANTEES",
    "PROBE",
    "declared_capabilities",
    "host_capabilities",
    "probe_bridge",
    "probe_cgroups",
]

PROBE: Final = "probe"
"""`host_capabilities(bridge_reason=PROBE)`: ask this host whether the bridge can run."""


def host_capabilities(
    cgroup_reasons: dict[str, str] | None = None,
    *,
    bridge_reason: str | None = PROBE,
    overlay_reason: str | None = PROBE,
) -> TierCapabilities:
    """The table as it holds on this host: each cgroup ceiling probed (create, remove), and
    whether the egress bridge can run (its interpreter, checked once per process).

    `cgroup_reasons` (field -> reason), `bridge_reason` (why the bridge cannot run, or
    None when it can) and `overlay_reason` (why no overlay workspace can be mounted: the
    ``fs.writes`` modes checked and review) skip the probes when the caller already knows.
    """
    if cgroup_reasons is None:
        cgroup_reasons = probe_cgroups()
    if bridge_reason == PROBE:
        bridge_reason = probe_bridge()
    import os

    if overlay_reason == PROBE:
        from panday_tier_linux.host import overlay_reason as probe_overlay

        overlay_reason = probe_overlay()
    return capabilities(
        cgroup_reasons, bridge_reason, root=os.geteuid() == 0, overlay_reason=overlay_reason
    )


def probe_bridge() -> str | None:
    """Why the egress bridge cannot run here, or None (see `panday_tier_linux.bridge`)."""
    if not sys.platform.startswith("linux"):
        return f"the egress bridge needs Linux; this host is {sys.platform}"
    from panday_tier_linux.bridge import unavailable_reason as bridge_reason

    return bridge_reason()


def probe_cgroups() -> dict[str, str]:
    """field -> why no cgroup can hold that ceiling here (absent when one can)."""
    if not sys.platform.startswith("linux"):
        return dict.fromkeys(CGROUP_FIELDS, f"cgroups need Linux; this host is {sys.platform}")
    from panday_tier_linux import cgroups

    reasons: dict[str, str] = {}
    for name in CGROUP_FIELDS:
        reason = cgroups.probe({name.split(".", 1)[1]: 1 << 24})
        if reason is not None:
            reasons[name] = reason
    return reasons
