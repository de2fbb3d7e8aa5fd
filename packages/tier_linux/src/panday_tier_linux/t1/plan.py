"""T1 Linux's plan for ``panday run`` (the registry's `planner`): a session's fixed part as a
plain value, cached, and one command launched from it through `t1.jail` (the session's
own launch path).

A plan holds what `open_session` fixed after every check at open (the policy's ``fs``
section and variables, the output cap and wall clock, the Landlock ABI it was judged for,
the compiled seccomp program). What must be decided at every command is redone: the roots
are opened again without following a link and judged again (`binds.Roots.open`, T1's
state refusal), the system paths held again, a private tmp made, and the ruleset built
(the writable workspace's entries listed then).

The cache is T2's (`panday_tier_linux.plan`: the same directory in panday's per-user
state, the same sealing with this user's cache key, the same checks on the file); a T1
plan's key holds ``tier t1-linux`` and the identity of T1's code and seccomp rules, so no
plan of another tier, or of older rules, is ever read as one. Only ``panday run --tier
t1-linux`` is served from it (``auto`` plans for the strongest tier of the host).

On `panday run`'s start-up path: it imports neither typing nor msgspec.
"""

from __future__ import annotations

import marshal
import os

from panday_core.execution import run_plain
from panday_core.startup import suppress
from panday_tier_linux.plan import plan_dir, read_sealed
from panday_tier_linux.t1.jail import Jail, hold_system, make_tmp, state_refusal

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from panday_core.execution import Ended, Supervisor
    from panday_core.policy import SandboxPolicy
    from panday_core.process import ChildProcess, Stream

FORMAT = 1
MAX_PLAN_BYTES = 1 << 20


class Plan:
    """A T1 session without its per-command part. Read as a `binds.RootsPolicy`."""

    __slots__ = (
        "abi",
        "access",
        "allow_home",
        "caller_env",
        "env",
        "output_bytes",
        "program",
        "protect",
        "staged_ro",
        "unprotect",
        "wall_clock_ms",
        "workspace",
    )

    def __init__(
        self,
        *,
        abi: int,
        program: bytes,
        workspace: str,
        access: str,
        staged_ro: tuple[str, ...],
        protect: tuple[str, ...],
        unprotect: tuple[str, ...],
        allow_home: bool,
        env: tuple[tuple[str, str], ...],
        caller_env: tuple[str, ...],
        output_bytes: int | None,
        wall_clock_ms: int | None,
    ) -> None:
        self.abi = abi
        self.program = program
        self.workspace = workspace
        self.access = access
        self.staged_ro = staged_ro
        self.protect = protect
        self.unprotect = unprotect
        self.allow_home = allow_home
        self.env = env
        self.caller_env = caller_env
        """Variables whose values come from the caller's environment at every run: never
        written to the cache (`encode` blanks them)."""
        self.output_bytes = output_bytes
        self.wall_clock_ms = wall_clock_ms

    def encode(self) -> bytes:
        env = tuple((k, "" if k in self.caller_env else v) for k, v in self.env)
        return marshal.dumps(
            (
                FORMAT,
                self.abi,
                self.program,
                self.workspace,
                self.access,
                self.staged_ro,
                self.protect,
                self.unprotect,
                self.allow_home,
                env,
                self.caller_env,
                self.output_bytes,
                self.wall_clock_ms,
            )
        )

    @classmethod
    def decode(cls, body: bytes) -> Plan | None:
        """The plan in `body`, or None when it is not one of this format (each field's type
        checked: the MAC says the body is what was written, not that it is sane)."""
        try:
            loaded: object = marshal.loads(body)  # noqa: S302 - our own file, MAC checked first
        except (EOFError, ValueError, TypeError):
            return None
        if not isinstance(loaded, tuple):
            return None
        v: tuple[object, ...] = loaded  # pyright: ignore[reportUnknownVariableType] - checked below
        if len(v) != 13 or v[0] != FORMAT:  # noqa: PLR2004 - the format's field count
            return None
        _, abi, program, workspace, access, staged, protect, unprotect, home = v[:9]
        env, names, out_cap, wall = _pairs(v[9]), _strings(v[10]), _limit(v[11]), _limit(v[12])
        staged, protect, unprotect = _strings(staged), _strings(protect), _strings(unprotect)
        if (
            not _int(abi)
            or not isinstance(program, bytes)
            or not program
            or len(program) % 8
            or not isinstance(workspace, str)
            or not os.path.isabs(workspace)
            or access not in {"rw", "ro"}
            or not isinstance(home, bool)
            or staged is None
            or protect is None
            or unprotect is None
            or env is None
            or names is None
            or out_cap is False
            or wall is False
        ):
            return None
        assert isinstance(abi, int)  # noqa: S101 - _int checked it
        return cls(
            abi=abi,
            program=program,
            workspace=workspace,
            access=str(access),
            staged_ro=staged,
            protect=protect,
            unprotect=unprotect,
            allow_home=home,
            env=env,
            caller_env=names,
            output_bytes=out_cap,
            wall_clock_ms=wall,
        )


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _strings(value: object) -> tuple[str, ...] | None:
    if not isinstance(value, tuple):
        return None
    items: tuple[object, ...] = value  # pyright: ignore[reportUnknownVariableType] - checked below
    return items if all(isinstance(i, str) for i in items) else None  # pyright: ignore[reportReturnType] - every item is a str


def _pairs(value: object) -> tuple[tuple[str, str], ...] | None:
    if not isinstance(value, tuple):
        return None
    items: tuple[object, ...] = value  # pyright: ignore[reportUnknownVariableType] - checked below
    out: list[tuple[str, str]] = []
    for item in items:
        pair = _strings(item)
        if pair is None or len(pair) != 2:  # noqa: PLR2004 - a name and a value
            return None
        out.append((pair[0], pair[1]))
    return tuple(out)


def _limit(value: object) -> int | bool | None:
    """A cap (a positive int) or None; False when it is neither."""
    if value is None:
        return None
    return value if _int(value) else False  # pyright: ignore[reportReturnType] - _int: an int


# ---------------------------------------------------------------------- host facts


def _code_identity() -> str:
    """T1's own modules (size, mtime): an edited T1 never runs an older plan."""
    here = os.path.dirname(__file__)
    parts: list[str] = []
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            st = os.stat(os.path.join(here, name))
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return " ".join(parts)


def host_facts() -> list[str] | None:
    """The facts a T1 plan depends on, as key lines (None: T1 cannot run here): the tier,
    the kernel and its Landlock ABI, T1's code and seccomp rules (their text names the
    compiler and libseccomp), the user, the cache, the host's protection ceilings."""
    from panday_tier_linux import host, hostguard
    from panday_tier_linux.t1.landlock import kernel_abi

    abi = kernel_abi()
    if isinstance(abi, str):
        return None
    uname = os.uname()
    # The rules are seccomp.py's code (not imported here: start-up time), compiled by
    # this libseccomp.
    rules = os.stat(os.path.join(os.path.dirname(os.path.dirname(__file__)), "seccomp.py"))
    return [
        "tier t1-linux",
        f"kernel {uname.sysname} {uname.release} {uname.version} {uname.machine}",
        f"landlock {abi}",
        f"code {_code_identity()}",
        f"seccomp {rules.st_size} {rules.st_mtime_ns} {host.library_identity()}",
        f"user {os.geteuid()} {os.getegid()}",
        f"cache {plan_dir()}",
        f"guard {sorted(hostguard.ceilings().items())!r}",
    ]


# ---------------------------------------------------------------------- the cache


def load(key: str) -> Plan | None:
    """The cached plan for `key`, or None: no cache key, missing, not ours, writable by
    others, another key's, a MAC that does not verify, or not a T1 plan."""
    body = read_sealed(key)
    return None if body is None else Plan.decode(body)


def make(policy: SandboxPolicy, caller_env: Sequence[str]) -> Plan | None:
    """On a miss: the plan a T1 session for `policy` fixes, made by opening (and closing)
    that session, so every check at open runs; None when a name of `caller_env` is not
    one of its variables."""
    from panday_tier_linux.t1.session import open_session

    if not set(caller_env) <= set(policy.env):
        return None
    session = open_session(policy)
    try:
        fs, limits = policy.fs, policy.limits
        return Plan(
            abi=session.abi,
            program=session.program,
            workspace=session.workspace,
            access=fs.access,
            staged_ro=tuple(fs.staged_ro),
            protect=tuple(fs.protect),
            unprotect=tuple(fs.unprotect),
            allow_home=fs.allow_home,
            env=tuple(policy.env.items()),
            caller_env=tuple(caller_env),
            output_bytes=limits.output_cap,
            wall_clock_ms=limits.wall_clock_cap,
        )
    finally:
        session.close()


def store(key: str, plan: Plan) -> bool:
    """Write `plan` for `key` in T2's plan directory, as T2's plans are written
    (`planning.write_sealed`); False when it cannot be written safely."""
    from panday_tier_linux.planning import write_sealed

    return write_sealed(key, plan.encode())


# ---------------------------------------------------------------------- running one


class Launched:
    """A command started from a cached plan: its process, supervisor and jail."""

    __slots__ = ("jail", "proc", "sup")

    def __init__(self, proc: ChildProcess, sup: Supervisor, jail: Jail) -> None:
        self.proc = proc
        self.sup = sup
        self.jail = jail

    def close(self) -> None:
        """Kill and reap (if still running), then release everything. Idempotent."""
        if self.proc.status is None:
            self.sup.kill(self.proc)
            self.proc.reap(block=True)
        self.proc.close()
        self.jail.close()


def launch(plan: Plan, argv: Sequence[str], environ: Mapping[str, str]) -> Launched | None:
    """Open the roots again (every check at open that depends on them), hold the system
    paths, and start `argv` through `Jail.start`, as a session's command starts. None,
    with nothing left open and nothing of the command run, when any check would refuse,
    the kernel's ABI is not the planned one, a value the plan takes from `environ` is
    gone, or the command cannot start: the caller takes the full path, which refuses (or
    runs) with its own words."""
    from panday_tier_linux.binds import Roots
    from panday_tier_linux.t1.landlock import kernel_abi

    if kernel_abi() != plan.abi:
        return None
    env = dict(plan.env)
    for name in plan.caller_env:
        value = environ.get(name)
        if value is None:
            return None
        env[name] = value
    roots, _refusals = Roots.open(plan, check_entries=False)  # as a command: links get nothing
    if roots is None:
        return None
    if state_refusal(roots) is not None:
        roots.close()
        return None
    try:
        jail = Jail(
            abi=plan.abi,
            roots=roots,
            system=hold_system(),
            tmp=make_tmp(os.urandom(6).hex()),
            program=plan.program,
            env=env,
        )
    except BaseException:
        roots.close()
        raise
    try:
        proc, sup = jail.start(argv, cwd=jail.workspace, stdin=False)
    except Exception:  # noqa: BLE001 - refused or not found: the full path says which
        jail.close()
        return None
    except BaseException:
        jail.close()
        raise
    return Launched(proc, sup, jail)


def run(launched: Launched, plan: Plan, *, write: Callable[[Stream, bytes], None]) -> Ended:
    """Stream a command launched for `plan` to `write` until it ends, within the plan's
    output cap and wall clock (the core pump, as a session streams it); whatever happens,
    the command's group is killed and everything released."""
    try:
        return run_plain(
            launched.proc,
            launched.sup,
            write=write,
            output_cap=plan.output_bytes,
            timeout_ms=plan.wall_clock_ms,
        )
    finally:
        with suppress(OSError):
            launched.close()
