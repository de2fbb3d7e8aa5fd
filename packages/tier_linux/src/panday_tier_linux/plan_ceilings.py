"""The bounds of a planned jail (`panday_tier_linux.plan`): its cgroups and rlimits.

A session's jail is bounded by the policy's cgroup ceilings and, where the policy sets no
pid or memory ceiling, by the host's own protection (`hostguard`): more cgroup ceilings
where this caller can write a cgroup, rlimits where it cannot. A planned jail gets exactly
that: each run opens the cgroups with the function a session opens them with
(`hostguard.open_cgroups`), and runs from the plan only when they hold what they held when
the plan was made (otherwise the full path runs, and bounds it its own way); the rlimits
are the ones `hostguard.plan` gives a session for the same ceilings. Apart from
`panday_tier_linux.plan` so that what only bounded plans need is loaded only for them;
what each function mirrors in the session and its supervisor is named on it.
"""

from __future__ import annotations

import os
import select
import time

from panday_tier_linux.plan import status_value

TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from panday_tier_linux.cgroups import ExecCgroup, SessionCgroup
    from panday_tier_linux.hostguard import Rlimits
    from panday_tier_linux.plan import Launched, Plan


class Guard:
    """A planned jail's bounds: the session's and the command's cgroups (None without a
    cgroup), which of the command's ceilings are the host's protection rather than the
    policy's, and the rlimits for what no cgroup holds (as `session._Guard`)."""

    __slots__ = ("command", "defaults", "rlimits", "session")

    def __init__(
        self,
        session: SessionCgroup | None,
        command: ExecCgroup | None,
        defaults: frozenset[str],
        rlimits: Rlimits,
    ) -> None:
        self.session = session
        self.command = command
        self.defaults = defaults
        self.rlimits = rlimits

    def remove(self) -> None:
        """Remove the cgroups (as `LinuxSession.close`: the kernel may lag a moment)."""
        session, command = self.session, self.command
        self.session = self.command = None
        if command is not None:
            command.remove()
        if session is not None and not session.remove():
            time.sleep(0.05)
            session.remove()


def open_guard(plan: Plan) -> Guard | None:
    """The bounds a session would give this jail now (`hostguard.open_cgroups`, then
    `LinuxSession._exec_cgroup` and `hostguard.plan`), or None, with nothing left behind,
    when they are not the planned ones (the full path then bounds it, or refuses by name)
    or the command's cgroup cannot be made."""
    from panday_tier_linux import hostguard  # noqa: PLC0415 - bounded plans only

    explicit = dict(plan.explicit)
    try:
        session, held, _reasons = hostguard.open_cgroups(explicit, os.urandom(6).hex())
    except OSError:
        return None
    if held != dict(plan.held) or (session is None) != (not held):
        if session is not None:
            session.remove()
        return None
    rlimits = hostguard.plan(set(explicit), set(held))
    if (session is not None or bool(rlimits)) != plan.block:
        if session is not None:
            session.remove()
        return None
    command = None
    if session is not None:
        try:
            command = session.new_exec(held)
        except OSError:
            session.remove()
            return None
    defaults = frozenset(k for k in held if k not in explicit)
    return Guard(session, command, defaults, rlimits)


_CHILD_PID_TIMEOUT_S = 30.0
"""As `session._CHILD_PID_TIMEOUT_S`: how long bwrap may take to report the jail's pid."""


def release(launched: Launched, block_w: int) -> bool:
    """As `LinuxSession._release`: wait for the jail's pid while bwrap waits on its block
    descriptor, move the jail into the command's cgroup and set its rlimits, then let it
    run. False (the jail never ran anything) when bwrap ended first or a bound could not
    be set (the session raises `Internal` there; the full path then says so)."""
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
        guard = launched.guard
        if pid is None or guard is None:
            return False
        try:
            if guard.command is not None:
                guard.command.attach(pid)
            if guard.rlimits:
                guard.rlimits.apply(pid)
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


def ceiling_breach(
    cgroup: ExecCgroup, cpu_ms: int | None, defaults: frozenset[str] = frozenset()
) -> tuple[str, str] | None:
    """As `JailSupervisor.finished` with a cgroup: which ceiling ended the command, read
    from the cgroup's counters after its exit (`defaults`: the host's protection)."""
    if cgroup.oom_kills():
        limit = cgroup.limits.get("mem_bytes")
        detail = f"the kernel killed it at limits.mem_bytes={limit}"
        if "mem_bytes" in defaults:
            detail = (
                f"the kernel killed it at the host's protection ceiling of {limit} "
                "bytes (the policy sets no limits.mem_bytes)"
            )
        return ("memory", detail)
    breach = cpu_breach(cgroup, cpu_ms)
    if breach is not None:
        return breach
    refused = cgroup.pids_refused()
    if refused:
        limit = cgroup.limits.get("pids")
        detail = f"{refused} fork(s) refused at limits.pids={limit}"
        if "pids" in defaults:
            detail = (
                f"{refused} fork(s) refused at the host's protection ceiling of {limit} "
                "tasks (the policy sets no limits.pids)"
            )
        return ("pids", detail)
    return None
