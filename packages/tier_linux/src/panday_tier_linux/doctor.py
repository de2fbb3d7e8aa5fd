"""What `panday doctor` shows under T2 Linux on this host: bwrap, libseccomp, the jail's
mechanisms (`probe.host_report`) and how the session's ceilings would be held (a throwaway
session cgroup, made and removed). Reached through the SDK's tier registry entry."""

from __future__ import annotations

import os

from panday_tier_linux import cgroups
from panday_tier_linux.probe import host_report


def cgroup_mechanism() -> str:
    """How T2 Linux would hold ceilings here: a throwaway session cgroup, made and removed."""
    try:
        made = cgroups.open_session(
            {"mem_bytes": 1 << 26, "pids": 64, "cpu_ms": 1000}, f"doctor-{os.urandom(3).hex()}"
        )
    except cgroups.CgroupUnavailable as exc:
        return f"none: {exc.reason}"
    except OSError as exc:
        return f"none: {exc.strerror}"
    made.remove()
    return made.mechanism


def writes_modes() -> str:
    """Which ``fs.writes`` modes this host gives, which is in force by default, and why."""
    from panday_tier_linux import host

    reason = host.overlay_reason(probe=True)
    if reason is not None:
        return f"direct only (partial: protected names); checked and review are refused: {reason}"
    found = host.overlay_bwrap()
    where = f" ({found.path}, {host.bwrap_version(found.path)})" if found is not None else ""
    return (
        "direct by default (partial: protected names); checked and review available: the "
        f"workspace as an overlay{where}, changes judged by the hazard rules (docs/workspace.md)"
    )


def details() -> dict[str, str]:
    """Doctor's rows for this host (name -> text), the jail's own row last."""
    found = host_report()
    jail = found.pop("jail", None)
    found["fs.writes"] = writes_modes()
    found["cgroups"] = cgroup_mechanism()
    if jail is not None:
        found["jail"] = jail
    return found
