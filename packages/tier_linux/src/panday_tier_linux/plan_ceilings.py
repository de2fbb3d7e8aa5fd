"""The cgroup side of a planned jail (`panday_tier_linux.plan`), for plans with ceilings.

Apart so that a plan without ceilings (the embedded default's) does not compile or load it
at every start; what each function mirrors in the session and its supervisor is named on it.
"""

from __future__ import annotations

import os
import select
import time

from panday_tier_linux.plan import status_value

TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from panday_tier_linux.cgroups import ExecCgroup, SessionCgroup
    from panday_tier_linux.plan import Launched, Plan


def open_cgroups(plan: Plan) -> tuple[SessionCgroup, ExecCgroup] | None:
    """The session's and the command's cgroups for the plan's ceilings (as `open_session`
    and `LinuxSession._exec_cgroup` make them); None when they cannot be made here now,
    which the full path refuses by name."""
    from panday_tier_linux import cgroups  # noqa: PLC0415 - plans with ceilings only

    limits = dict(plan.ceilings)
    try:
        session = cgroups.open_session(limits, os.urandom(6).hex())
    except (cgroups.CgroupUnavailable, OSError):
        return None
    try:
        return session, session.new_exec(limits)
    except OSError:
        session.remove()
        return None


_CHILD_PID_TIMEOUT_S = 30.0
"""As `session._CHILD_PID_TIMEOUT_S`: how long bwrap may take to report the jail's pid."""


def release(launched: Launched, block_w: int) -> bool:
    """As `LinuxSession._release`: wait for the jail's pid while bwrap waits on its block
    descriptor, move the jail into the command's cgroup, then let it run. False (the jail
    never ran anything) when bwrap ended first or the move failed."""
    try:
        deadline = time.monotonic() + _CHILD_PID_TIMEOUT_S
        while status_value(launched.status, "child-pid") is None or b"}" not in launched.status:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([launched.status_r], [], [], left)[0]:
                return False
            chunk = os.read(launched.status_r, 4096)
            if not chunk:
                return False
            launched.status += chunk
        pid = status_value(launched.status, "child-pid")
        cgroup = launched.cgroup
        if pid is None or cgroup is None:
            return False
        try:
            cgroup.attach(pid)
        except OSError:
            return False
        try:
            os.write(block_w, b"x")
        except OSError:  # bwrap is gone: it never ran the command
            return False
        return True
    finally:
        os.close(block_w)


def cpu_breach(cgroup: ExecCgroup, cpu_ms: int | None) -> tuple[str, str] | None:
    """As `JailSupervisor._cpu_breach`: the CPU ceiling crossed, polled while it runs."""
    if cpu_ms is None:
        return None
    used = cgroup.cpu_usage_ns()
    if used is not None and used >= cpu_ms * 1_000_000:
        return ("cpu", f"used {used // 1_000_000} ms of CPU, limits.cpu_ms={cpu_ms}; killed")
    return None


def ceiling_breach(cgroup: ExecCgroup, cpu_ms: int | None) -> tuple[str, str] | None:
    """As `JailSupervisor.finished` with a cgroup: which ceiling ended the command, read
    from the cgroup's counters after its exit."""
    if cgroup.oom_kills():
        limit = cgroup.limits.get("mem_bytes")
        return ("memory", f"the kernel killed it at limits.mem_bytes={limit}")
    breach = cpu_breach(cgroup, cpu_ms)
    if breach is not None:
        return breach
    refused = cgroup.pids_refused()
    if refused:
        return ("pids", f"{refused} fork(s) refused at limits.pids={cgroup.limits.get('pids')}")
    return None
