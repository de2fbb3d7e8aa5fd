"""Is T2 Linux usable here, and if not, why (one line naming the cause)?

The probe runs the real thing: a jail built by the same argv builder and seccomp program
`exec` uses, around ``/usr/bin/true``. Cheap static checks first (not Linux, no bwrap, a
sysctl that forbids user namespaces, libseccomp missing), so the usual causes are named
precisely; a failing jail run then reports bwrap's own message, with the user-namespace
sysctl when one is set (e.g. Ubuntu's ``kernel.apparmor_restrict_unprivileged_userns``).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from panday_core.errors import PolicyViolation, SandboxError, TierUnavailable
from panday_tier_linux import host

_CACHE: dict[str, str | None] = {}


def unavailable_reason(bwrap: host.Bwrap | None = None) -> str | None:
    """None when a jail runs here; otherwise the cause. Cached per bwrap binary."""
    if not host.is_linux():
        return f"T2 Linux needs Linux; this host is {os.uname().sysname}"
    binary = bwrap or host.find_bwrap()
    if binary is None:
        from panday_tier_linux.session import MISSING_BWRAP

        return MISSING_BWRAP
    if binary.path not in _CACHE:
        _CACHE[binary.path] = _probe(binary)
    return _CACHE[binary.path]


def _probe(binary: host.Bwrap) -> str | None:
    from panday_core.policy import FsPolicy, SandboxPolicy
    from panday_tier_linux.session import open_session

    workspace = tempfile.mkdtemp(prefix="panday-probe-")
    try:
        policy = SandboxPolicy(fs=FsPolicy(workspace=workspace))
        with open_session(policy, bwrap=binary) as session:
            result = session.run(["/usr/bin/true"], timeout_ms=30_000)
    except TierUnavailable as exc:
        return exc.reason
    except PolicyViolation as exc:  # pragma: no cover - the probe's policy asks for nothing
        return str(exc)
    except (SandboxError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    if result.exit_code != 0:
        tail = result.stderr.decode("utf-8", "replace").strip().splitlines()
        return (
            f"the probe jail failed (exit {result.exit_code}): {tail[-1] if tail else 'no message'}"
        )
    return None


def available(bwrap: host.Bwrap | None = None) -> bool:
    return unavailable_reason(bwrap) is None


def _host_bounds(cgroup_reasons: dict[str, str]) -> str:
    """How a command is bounded when the policy sets no pid or memory ceiling (hostguard)."""
    import os

    from panday_tier_linux import hostguard

    bounds = hostguard.ceilings()
    pids, gib = bounds["pids"], bounds["mem_bytes"] / (1 << 30)
    parts = [
        f"{pids} tasks (cgroup)"
        if "limits.pids" not in cgroup_reasons
        else "no pid bound (root ignores RLIMIT_NPROC)"
        if os.geteuid() == 0
        else f"this uid's tasks up to the host's count at the start + {pids} "
        "(RLIMIT_NPROC, partial)",
        f"{gib:.1f} GiB of memory (cgroup)"
        if "limits.mem_bytes" not in cgroup_reasons
        else f"{gib:.1f} GiB of address space per process (RLIMIT_AS, partial)",
    ]
    return "; ".join(parts) + " when the policy sets none"


def host_report() -> dict[str, str]:
    """What `panday doctor` shows for T2 Linux: which bwrap and version, user namespaces,
    libseccomp, the cgroup ceilings this caller can hold, and whether a jail runs."""
    from panday_tier_linux.capabilities import probe_bridge, probe_cgroups
    from panday_tier_linux.host import library_identity

    binary = host.find_bwrap() if host.is_linux() else None
    cgroups = probe_cgroups()
    report = {
        "bwrap": (
            f"{binary.path} ({binary.source}; {host.bwrap_version(binary.path)})"
            if binary is not None
            else "not found"
        ),
        "user namespaces": host.userns_restriction() or "no restricting sysctl set",
        "libseccomp": _library_shown(library_identity()),
    }
    for field in ("limits.mem_bytes", "limits.pids", "limits.cpu_ms"):
        report[field] = f"refused: {cgroups[field]}" if field in cgroups else "enforced (cgroup)"
    report["host bounds"] = _host_bounds(cgroups)
    bridge = probe_bridge()
    report["net.allow"] = (
        f"refused: {bridge}" if bridge else "enforced (egress proxy; relay run by /usr/bin/python3)"
    )
    from panday_tier_linux import wall

    no_wall = wall.unavailable_reason()
    report["landlock wall"] = (
        f"absent (jails run on their mounts alone): {no_wall}"
        if no_wall
        else "in force: writes only beneath the workspace, /tmp and the device files, "
        "whatever the mounts say"
    )
    report["jail"] = unavailable_reason(binary) or "runs (probe jail succeeded)"
    return report


def _library_shown(identity: str | None) -> str:
    """`host.library_identity` (the seccomp cache's key: path, size, mtime in ns) for a
    person: ``/usr/lib/.../libseccomp.so.2.5.4 (126 KiB, 2024-05-25)``."""
    if identity is None:
        return "not found in the usual library directories"
    try:
        path, size_text, mtime_text = identity.rsplit(" ", 2)
        size, mtime_ns = int(size_text), int(mtime_text)
    except ValueError:
        return identity
    import time

    day = time.strftime("%Y-%m-%d", time.gmtime(mtime_ns / 1e9))
    return f"{path} ({size // 1024} KiB, {day})"
