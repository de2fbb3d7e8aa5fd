"""Making and storing T2 Linux jail plans (`panday_tier_linux.plan` reads and runs them).

Only on a miss of `panday run`'s plan cache, so none of this is on its start-up path.
"""

from __future__ import annotations

import marshal
import os

from panday_core import userstate
from panday_core.startup import suppress
from panday_tier_linux.plan import FORMAT, Plan, file_name, open_plan_dir, seal

TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.policy import SandboxPolicy
    from panday_tier_linux.session import LinuxSession

MAX_PLANS = 64
"""Plans kept per user; the oldest are removed when a new one is written."""


def plannable(policy: SandboxPolicy) -> bool:
    """Whether a session for `policy` could be cached (`cacheable` decides; this only
    saves opening one that could not): no allowlist, no disk ceiling, writes in place (a
    change set per command is made and judged by the full path)."""
    return (
        not policy.net.allow and policy.limits.disk_bytes is None and policy.fs.writes == "direct"
    )


def cacheable(session: LinuxSession) -> bool:
    """Whether `session.plan` can be written to the cache: not with the egress bridge (a
    proxy per session) or a disk ceiling (its /tmp is found while the jail waits to run)."""
    plan = session.plan
    return (
        session.bridge is None
        and session.policy.fs.writes == "direct"
        and plan.spec.relay is None
        and plan.spec.tmp_bytes is None
        and plan.bwrap_id is not None
    )


def make(policy: SandboxPolicy, caller_env: Sequence[str]) -> Plan | None:
    """The plan a session for `policy` launches its commands from, made by opening (and
    closing) that session, so every check at open runs; None when it cannot be cached, or
    when a name of `caller_env` (values the cache must not hold: `encode` leaves them out)
    is not in its environment."""
    if not plannable(policy):
        return None
    from panday_tier_linux.session import open_session

    session = open_session(policy)
    try:
        made = session.plan
        if not cacheable(session) or not set(caller_env) <= set(made.spec.env):
            return None
        made.caller_env = tuple(caller_env)
    finally:
        session.close()
    return made


def encode(plan: Plan) -> bytes:
    """The plan's body as `Plan.decode` reads it; the values of `plan.caller_env` left out
    (they come from the caller's environment at every run)."""
    spec = plan.spec
    env = tuple((k, "" if k in plan.caller_env else v) for k, v in spec.env.items())
    layout = spec.layout
    return marshal.dumps(
        (
            FORMAT,
            spec.workspace,
            spec.workspace_rw,
            env,
            spec.etc_view,
            (layout.top, layout.etc, layout.proc),
            spec.tmp_bytes,
            plan.bwrap,
            plan.bwrap_id,
            plan.program,
            plan.access,
            plan.allow_home,
            plan.staged_ro,
            plan.protect,
            plan.unprotect,
            plan.output_bytes,
            plan.wall_clock_ms,
            plan.explicit,
            plan.held,
            plan.cpu_poll_ms,
            plan.caller_env,
            spec.wall,
        )
    )


def store(key: str, plan: Plan) -> bool:
    """Write `plan` for `key` (`write_sealed`); False when it cannot be written safely,
    which only means the next run plans again."""
    if plan.bwrap_id is None:
        return False
    return write_sealed(key, encode(plan))


def write_sealed(key: str, body: bytes) -> bool:
    """Write a plan's `body` (any tier's) for `key`: atomically, 0600, in a 0700 directory
    of ours, sealed with this user's cache key (`userstate`), without which nothing is
    cached; the oldest plans beyond `MAX_PLANS` go. False when it cannot be written
    safely (`plan.read_sealed` reads it back)."""
    secret = userstate.key(create=True)
    if secret is None:
        return False
    directory = open_plan_dir(create=True)
    if directory is None:
        return False
    data = seal(secret, key, body)
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
