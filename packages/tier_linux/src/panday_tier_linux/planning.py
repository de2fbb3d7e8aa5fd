"""Making and storing T2 Linux jail plans (`panday_tier_linux.plan` reads and runs them).

Only on a miss of `panday run`'s plan cache, so none of this is on its start-up path.
"""

from __future__ import annotations

import marshal
import os

from panday_core import userstate
from panday_core.startup import suppress
from panday_tier_linux.plan import FORMAT, Plan, bwrap_identity, file_name, open_plan_dir, seal

TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.policy import SandboxPolicy
    from panday_tier_linux.session import LinuxSession

MAX_PLANS = 64
"""Plans kept per user; the oldest are removed when a new one is written."""
_BINDS = "\x00binds\x00"
"""Where the per-command binds go in the options (no option can contain a NUL byte)."""


def plannable(policy: SandboxPolicy) -> bool:
    """Whether a session for `policy` could be planned (`plan_of` decides; this only
    saves opening one that could not): no allowlist, no disk ceiling."""
    return not policy.net.allow and policy.limits.disk_bytes is None


def _ceilings(policy: SandboxPolicy) -> tuple[tuple[str, int], ...]:
    """The policy's cgroup ceilings (as `session._cgroup_limits`)."""
    limits = policy.limits
    wanted = {"mem_bytes": limits.mem_bytes, "pids": limits.pids, "cpu_ms": limits.cpu_ms}
    return tuple((k, v) for k, v in wanted.items() if v is not None)


def plan_of(session: LinuxSession, *, caller_env: Sequence[str] = ()) -> Plan | None:
    """The plan of an open session, or None when its jail needs more than a plan holds
    (a disk ceiling, the egress bridge). `caller_env` names the policy's variables whose
    values came from the caller's environment: they stay out of the plan.

    The jail's bounds are the session's: the policy's ceilings and the host's protection
    (`session.guard`: the ceilings its cgroup holds, or rlimits), which every run sets
    again the same way (`plan_ceilings.open_guard`).
    """
    from panday_tier_linux.argv import build_options  # noqa: PLC0415 - only when planning
    from panday_tier_linux.capabilities import CPU_POLL_MS  # noqa: PLC0415 - as above

    spec, policy, guard = session.spec, session.policy, session.guard
    if session.bridge is not None or spec.tmp_bytes is not None:
        return None
    explicit = _ceilings(policy)
    held = tuple(sorted(guard.held.items()))
    if bool(held) != (session.cgroup is not None) or not set(dict(explicit)) <= set(guard.held):
        return None
    # Exactly what `LinuxSession.launch` passes: 3 the options, 4 the seccomp program,
    # [5 the block descriptor when the jail waits to enter its cgroup and get its
    # rlimits,] the status, then the binds.
    block = session.cgroup is not None or bool(guard.rlimits)
    options = build_options(
        spec,
        cwd=session.workspace,
        seccomp_fd=4,
        block_fd=5 if block else None,
        status_fd=6 if block else 5,
        binds=[_BINDS],
    )
    cut = options.index(_BINDS)
    head, tail = options[:cut], options[cut + 1 :]
    hidden: list[tuple[int, str]] = []
    for name in caller_env:
        at = next(
            (i for i in range(len(tail) - 2) if tail[i] == "--setenv" and tail[i + 1] == name),
            None,
        )
        if at is None:
            return None
        tail[at + 2] = ""
        hidden.append((at + 2, name))
    fs = policy.fs
    return Plan(
        bwrap=session.bwrap.path,
        head=tuple(head),
        tail=tuple(tail),
        caller_env=tuple(hidden),
        program=session.program,
        workspace=session.workspace,
        access=fs.access,
        staged_ro=tuple(fs.staged_ro),
        protect=tuple(fs.protect),
        unprotect=tuple(fs.unprotect),
        allow_home=fs.allow_home,
        etc_view=spec.etc_view,
        output_bytes=policy.limits.output_cap,
        wall_clock_ms=policy.limits.wall_clock_cap,
        explicit=explicit,
        held=held,
        block=block,
        cpu_poll_ms=CPU_POLL_MS,
        bwrap_id=bwrap_identity(session.bwrap.path),
    )


def encode(plan: Plan) -> bytes:
    """The plan's body as `Plan.decode` reads it."""
    return marshal.dumps(
        (
            FORMAT,
            plan.bwrap,
            plan.head,
            plan.tail,
            plan.caller_env,
            plan.program,
            plan.workspace,
            plan.access,
            plan.staged_ro,
            plan.protect,
            plan.unprotect,
            plan.allow_home,
            plan.etc_view,
            plan.output_bytes,
            plan.wall_clock_ms,
            plan.explicit,
            plan.held,
            plan.block,
            plan.cpu_poll_ms,
            plan.bwrap_id,
        )
    )


def store(key: str, plan: Plan) -> bool:
    """Write `plan` for `key` (atomically, 0600, in a 0700 directory of ours); False when
    it cannot be written safely, which only means the next run plans again; sealed with
    this user's cache key (`userstate`), without which nothing is cached."""
    if plan.bwrap_id is None:
        return False
    secret = userstate.key(create=True)
    if secret is None:
        return False
    directory = open_plan_dir(create=True)
    if directory is None:
        return False
    data = seal(secret, key, encode(plan))
    tmp = f".tmp-{os.getpid()}-{os.urandom(4).hex()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o600, dir_fd=directory)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, file_name(key), src_dir_fd=directory, dst_dir_fd=directory)
    except OSError:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
        os.close(directory)
        return False
    _prune(directory)
    os.close(directory)
    return True


def _prune(directory: int) -> None:
    """Keep the newest `MAX_PLANS` plans (a plan per workspace and option set adds up)."""
    try:
        with os.scandir(directory) as entries:
            plans = [(e.stat().st_mtime_ns, e.name) for e in entries if e.name.endswith(".plan")]
    except OSError:
        return
    for _mtime, name in sorted(plans)[: max(0, len(plans) - MAX_PLANS)]:
        with suppress(OSError):
            os.unlink(name, dir_fd=directory)
