"""A T2 Linux jail *plan*: what a session fixes once, cached so a later `panday run` can
start the same jail without the policy model (docs/cli.md, "Start-up"; docs/benchmarks.md).

A plan is made from an open `LinuxSession` (`planning.plan_of`, on a miss only), so every
check a session makes at open (the policy model, the capability table, the tier's
refusals) has passed for it: bwrap and its options around the per-command binds, the
compiled seccomp program, the /etc view, the output cap and the wall clock, and the
policy's ``fs`` section. What must be decided at every command is *not* in it and is
redone each time (`binds.Roots`): the workspace and staged paths are opened again without
following links and judged again (symbolic links, home directories, system directories,
``sys.path``), and the protected entries get their read-only binds and placeholders.

The cache is keyed by everything the plan was made from (the caller passes its own inputs;
`host_facts` adds this host's), and the key is written at the head of the file and must
match byte for byte, so a changed policy, host or panday makes a fresh plan rather than a
stale one. A plan file is used only when it is a regular file owned by the caller that
nobody else may write, in a directory of the same kind reached without a link, its head
and body verify against the MAC written between them under this user's cache key
(`panday_core.userstate`: a key no jail can read), and the bwrap it names is the very file
a session would choose now (anything else is rebuilt, never trusted). Where the file lies
is not what makes it trusted, but it lies where a jail does not reach: panday's per-user
state under the password file's home (never ``$XDG_CACHE_HOME``), which is a protected
entry of any workspace that holds it and hidden in the jail, and a writable workspace
inside it is refused (`panday_core.protect.root_refusal`).

Memory, pid and CPU ceilings are planned, and so is the host's own protection that every
session gets where the policy sets no pid or memory ceiling (`hostguard`): each run makes
the session's and the command's cgroups afresh with the very function a session opens them
with, or sets the same rlimits, and uses the plan only when that comes out as it did when
the plan was made (`plan_ceilings`). Sessions with a disk ceiling (its /tmp is watched
through bwrap's block descriptor) or the egress bridge are not planned; they take the full
path.

This module is on `panday run`'s start-up path: it imports neither typing nor msgspec, and
what only a miss needs lives in `planning`.
"""

from __future__ import annotations

import _signal  # pyright: ignore[reportMissingModuleSource] - signal without its enum (panday_core.startup)
import marshal
import os
import select
import stat
import time
from _blake2 import blake2b

from panday_core import userstate
from panday_core.process import (
    DRAIN_GRACE_S,
    FALLBACK_REAP_S,
    READ_SIZE,
    ChildProcess,
    data_fd,
    output_breach_detail,
    spawn,
    truncation_marker,
    wall_clock_detail,
)
from panday_core.startup import suppress
from panday_tier_linux import host
from panday_tier_linux.binds import CommandBinds, Roots, entry_problem

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Literal

    from panday_tier_linux.cgroups import ExecCgroup
    from panday_tier_linux.plan_ceilings import Guard

    Stream = Literal["stdout", "stderr"]

FORMAT = 4
"""The plan file's layout; part of the key."""
MAGIC = b"panday-jail-plan 2\n"
MAX_PLAN_BYTES = 16 << 20


class Plan:
    """A session's jail without its per-command part. Read as a `binds.RootsPolicy`."""

    __slots__ = (
        "access",
        "allow_home",
        "block",
        "bwrap",
        "bwrap_id",
        "caller_env",
        "cpu_poll_ms",
        "etc_view",
        "explicit",
        "head",
        "held",
        "output_bytes",
        "program",
        "protect",
        "staged_ro",
        "tail",
        "unprotect",
        "wall_clock_ms",
        "workspace",
    )

    def __init__(
        self,
        *,
        bwrap: str,
        head: tuple[str, ...],
        tail: tuple[str, ...],
        caller_env: tuple[tuple[int, str], ...],
        program: bytes,
        workspace: str,
        access: str,
        staged_ro: tuple[str, ...],
        protect: tuple[str, ...],
        unprotect: tuple[str, ...],
        allow_home: bool,
        etc_view: str | None,
        output_bytes: int | None,
        wall_clock_ms: int | None,
        explicit: tuple[tuple[str, int], ...] = (),
        held: tuple[tuple[str, int], ...] = (),
        block: bool = False,
        cpu_poll_ms: int = 10,
        bwrap_id: tuple[int, int, int, int] | None = None,
    ) -> None:
        self.bwrap = bwrap
        self.bwrap_id = bwrap_id
        """`bwrap_identity` of `bwrap` when the plan was made: a plan runs only while the
        bwrap a session would choose now is that very file (`current_bwrap`)."""
        self.head = head
        """bwrap's options before the binds (namespaces, the read-only root, /etc, /tmp)."""
        self.tail = tail
        """bwrap's options after the binds (working directory, environment, the seccomp and
        status descriptors)."""
        self.caller_env = caller_env
        """(index into `tail`, name): values taken from the caller's environment at every
        run (``panday run --env NAME``), never written to the cache; the key holds a
        digest of each, so the value is the one the policy model accepted."""
        self.program = program
        self.workspace = workspace
        self.access = access
        self.staged_ro = staged_ro
        self.protect = protect
        self.unprotect = unprotect
        self.allow_home = allow_home
        self.etc_view = etc_view
        self.output_bytes = output_bytes
        self.wall_clock_ms = wall_clock_ms
        self.explicit = explicit
        """The policy's own cgroup ceilings (``mem_bytes``, ``pids``, ``cpu_ms``)."""
        self.held = held
        """The ceilings the session's cgroup held when the plan was made: `explicit` plus
        the host's protection (`hostguard.open_cgroups`); empty without a cgroup, when the
        host's protection is rlimits instead (`hostguard.plan`). Each run opens the cgroups
        again the same way and runs only if they hold exactly this."""
        self.block = block
        """Whether the jail waits on bwrap's block descriptor (5) until it is in its cgroup
        and has its rlimits: what numbers bwrap's descriptors have in `head` and `tail`."""
        self.cpu_poll_ms = cpu_poll_ms

    @property
    def cpu_ms(self) -> int | None:
        return dict(self.explicit).get("cpu_ms")

    @classmethod
    def decode(cls, body: bytes) -> Plan | None:
        """The plan in `body`, or None when it is not one of this format (each field's type
        is checked: the MAC says the body is what was written, not that it is sane)."""
        try:
            loaded: object = marshal.loads(body)  # noqa: S302 - our own file, MAC checked first
        except (EOFError, ValueError, TypeError):
            return None
        if not isinstance(loaded, tuple):
            return None
        v: tuple[object, ...] = loaded  # pyright: ignore[reportUnknownVariableType] - checked below
        if len(v) != 20 or v[0] != FORMAT:  # noqa: PLR2004 - the format's field count
            return None
        bwrap_id = _identity(v[19])
        bwrap, head, tail, caller_env, program, workspace, access = v[1:8]
        staged_ro, protect, unprotect, allow_home, etc_view, output_bytes, wall_clock_ms = v[8:15]
        explicit, held, block, poll = _ceilings(v[15]), _ceilings(v[16]), v[17], _limit(v[18])
        bwrap_p, workspace_p, view = _path(bwrap), _path(workspace), _path(etc_view)
        head_t, tail_t = _strings(head), _strings(tail)
        pairs = _pairs(caller_env)
        staged_t, protect_t, unprotect_t = (
            _strings(staged_ro),
            _strings(protect),
            _strings(unprotect),
        )
        out_cap, wall = _limit(output_bytes), _limit(wall_clock_ms)
        if (
            bwrap_p is None
            or workspace_p is None
            or (etc_view is not None and view is None)
            or not isinstance(program, bytes)
            or not program
            or len(program) % 8
            or access not in {"rw", "ro"}
            or not isinstance(allow_home, bool)
            or head_t is None
            or tail_t is None
            or pairs is None
            or staged_t is None
            or protect_t is None
            or unprotect_t is None
            or out_cap is False
            or wall is False
            or explicit is None
            or held is None
            or not isinstance(block, bool)
            or not isinstance(poll, int)
            or bwrap_id is None
        ):
            return None
        return cls(
            bwrap=bwrap_p,
            head=head_t,
            tail=tail_t,
            caller_env=pairs,
            program=program,
            workspace=workspace_p,
            access=str(access),
            staged_ro=staged_t,
            protect=protect_t,
            unprotect=unprotect_t,
            allow_home=allow_home,
            etc_view=view,
            output_bytes=out_cap,
            wall_clock_ms=wall,
            explicit=explicit,
            held=held,
            block=block,
            cpu_poll_ms=poll,
            bwrap_id=bwrap_id,
        )


def _identity(value: object) -> tuple[int, int, int, int] | None:
    """A file's (device, inode, size, mtime)."""
    if not isinstance(value, tuple) or len(value) != 4:  # pyright: ignore[reportUnknownArgumentType] - checked here  # noqa: PLR2004 - four numbers
        return None
    a, b, c, d = value  # pyright: ignore[reportUnknownVariableType] - checked next
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (a, b, c, d)):  # pyright: ignore[reportUnknownVariableType] - as above
        return None
    return (int(a), int(b), int(c), int(d))  # pyright: ignore[reportUnknownArgumentType] - ints


def _ceilings(value: object) -> tuple[tuple[str, int], ...] | None:
    """(ceiling, value) pairs of the cgroup ceilings."""
    items = _items(value)
    if items is None:
        return None
    names = {"mem_bytes", "pids", "cpu_ms"}
    out = tuple(
        (a, b)
        for a, b in items
        if isinstance(a, str) and a in names and isinstance(b, int) and not isinstance(b, bool)
    )
    return out if len(out) == len(items) else None


def _path(value: object) -> str | None:
    return value if isinstance(value, str) and value.startswith("/") else None


def _strings(value: object) -> tuple[str, ...] | None:
    if not isinstance(value, tuple):
        return None
    items: tuple[object, ...] = value  # pyright: ignore[reportUnknownVariableType] - checked next
    out = tuple(i for i in items if isinstance(i, str))
    return out if len(out) == len(items) else None


def _items(value: object) -> list[tuple[object, object]] | None:
    """`value` as a tuple of pairs, or None."""
    if not isinstance(value, tuple):
        return None
    items: tuple[object, ...] = value  # pyright: ignore[reportUnknownVariableType] - checked next
    out: list[tuple[object, object]] = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:  # pyright: ignore[reportUnknownArgumentType] - a pair  # noqa: PLR2004 - a pair
            return None
        pair: tuple[object, object] = item  # pyright: ignore[reportUnknownVariableType] - checked
        out.append(pair)
    return out


def _pairs(value: object) -> tuple[tuple[int, str], ...] | None:
    """(tail index, variable name) pairs."""
    items = _items(value)
    if items is None:
        return None
    out = tuple((a, b) for a, b in items if isinstance(a, int) and isinstance(b, str))
    return out if len(out) == len(items) else None


def _limit(value: object) -> int | bool | None:
    """A positive int or None as itself; anything else False."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return False


# ---------------------------------------------------------------------- host facts


def host_facts() -> list[str] | None:
    """The facts of this host a plan depends on, as key lines (None: no bwrap to plan for).

    The kernel (its seccomp and namespace behaviour), which bwrap a session would use and
    that exact file, the libseccomp build that compiled the filter, the /etc view for /etc
    as it is now, the root's layout (merged /usr or not, the /proc files masked), the user,
    for an unprivileged user whether user namespaces are allowed, and the host's protection
    ceilings (they follow its RAM and pid space). Which cgroups a session could make is not
    a fact of the key: each run makes them the session's way and compares (`plan_ceilings`).
    """
    from panday_tier_linux import hostguard  # noqa: PLC0415 - light; loaded here only

    found = host.find_bwrap()
    if found is None:
        return None
    try:
        st = os.stat(found.path)
    except OSError:
        return None
    uname = os.uname()
    layout = host.host_layout()
    euid = os.geteuid()
    return [
        f"kernel {uname.sysname} {uname.release} {uname.version} {uname.machine}",
        (
            f"bwrap {found.path} {found.source} {st.st_dev} {st.st_ino} {st.st_size} "
            f"{st.st_mtime_ns} {st.st_mode:o} {st.st_uid}"
        ),
        f"libseccomp {host.library_identity()}",
        f"etc {host.existing_etc_view()}",
        f"layout {layout.top!r} {layout.etc!r} {layout.proc!r}",
        f"user {euid} {os.getegid()}",
        f"cache {plan_dir()}",
        f"userns {host.userns_restriction() if euid else 'root'}",
        f"guard {sorted(hostguard.ceilings().items())!r}",
    ]


# ---------------------------------------------------------------------- the cache


def plan_dir() -> str | None:
    """``<state>/plans`` (`userstate.state_dir`), beside the seccomp cache; None without a
    home."""
    state = userstate.state_dir()
    return None if state is None else os.path.join(state, "plans")


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_plan_dir(*, create: bool) -> int | None:
    """A descriptor on `plan_dir`, reached from the cache base without following a link at
    ``panday`` or ``plans``, each a directory of ours nobody else may write; None if not
    (`create`: make what is missing, 0700)."""
    state = userstate.open_state(create=create)
    if state is None:
        return None
    try:
        if create:
            with suppress(FileExistsError):
                os.mkdir("plans", 0o700, dir_fd=state)
        fd = os.open("plans", _DIR, dir_fd=state)
    except OSError:
        return None
    finally:
        os.close(state)
    if not userstate.private_fd(fd):
        os.close(fd)
        return None
    return fd


def file_name(key: str) -> str:
    return blake2b(key.encode("utf-8", "surrogateescape"), digest_size=16).hexdigest() + ".plan"


def file_head(key: str) -> bytes:
    return MAGIC + key.encode("utf-8", "surrogateescape") + b"\n\x00"


def seal(secret: bytes, key: str, body: bytes) -> bytes:
    """The plan file for `body` under `key`: the head, the MAC of head and body under this
    user's cache key (`userstate`), the body."""
    head = file_head(key)
    return head + userstate.mac(secret, userstate.PLAN, head + body) + body


def unseal(secret: bytes, key: str, blob: bytes) -> bytes | None:
    """The body of a plan file written by `seal` for `key` under `secret`, or None: another
    key's, or a head or body that is not what was sealed."""
    head = file_head(key)
    if not blob.startswith(head):
        return None
    at = len(head) + userstate.MAC_BYTES
    tag, body = blob[len(head) : at], blob[at:]
    return body if userstate.verify(secret, userstate.PLAN, head + body, tag) else None


def _read_plan_file(directory: int, name: str) -> bytes | None:
    """The file's bytes if it is a regular file of ours nobody else may write, not larger
    than `MAX_PLAN_BYTES`."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        blob = b""
        while len(blob) <= MAX_PLAN_BYTES:  # reads sized by the file, not by the limit
            chunk = os.read(fd, min(MAX_PLAN_BYTES + 1, st.st_size + 1) - len(blob) or 1)
            if not chunk:
                break
            blob += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    return blob if len(blob) <= MAX_PLAN_BYTES else None


def load(key: str) -> Plan | None:
    """The cached plan for `key`, or None: no usable cache key (`userstate.key`), missing,
    not ours, writable by others, written for another key, a MAC that does not verify, not
    a plan, or a plan for another bwrap than the one a session would use now."""
    secret = userstate.key(create=False)
    if secret is None:
        return None
    directory = open_plan_dir(create=False)
    if directory is None:
        return None
    try:
        blob = _read_plan_file(directory, file_name(key))
    finally:
        os.close(directory)
    body = None if blob is None else unseal(secret, key, blob)
    found = None if body is None else Plan.decode(body)
    return found if found is not None and current_bwrap(found) else None


def bwrap_identity(path: str) -> tuple[int, int, int, int] | None:
    """(device, inode, size, mtime) of the file at `path` now."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def current_bwrap(plan: Plan) -> bool:
    """Whether `plan` names the bwrap a session would choose now (`host.find_bwrap`), and
    that file is still the one the plan was made with."""
    found = host.find_bwrap()
    return (
        found is not None
        and plan.bwrap == found.path
        and bwrap_identity(found.path) == plan.bwrap_id
    )


# ---------------------------------------------------------------------- running one


class Ended:
    """How a planned command ended: what `panday run` reports."""

    __slots__ = ("breach", "exit_code", "setup_failed", "signal")

    def __init__(
        self,
        *,
        exit_code: int | None,
        signal: int | None,
        breach: tuple[str, str] | None,
        setup_failed: bool,
    ) -> None:
        self.exit_code = exit_code
        self.signal = signal
        self.breach = breach
        """(`LimitKind` value, detail) of the ceiling the command crossed, if any."""
        self.setup_failed = setup_failed
        """bwrap ended without running the command (`supervisor.raise_setup_failure`'s
        condition): nothing of the command ran, and the caller reports it the full way."""


class Launched:
    """A planned jail that was spawned: its process, its bounds, and what to release."""

    def __init__(
        self,
        proc: ChildProcess,
        status_r: int,
        roots: Roots,
        binds: CommandBinds,
        guard: Guard | None = None,
    ) -> None:
        self.proc = proc
        self.status_r = status_r
        self.status = b""
        """What bwrap has written on its status descriptor so far."""
        self.roots = roots
        self.binds: CommandBinds | None = binds
        self.guard = guard
        """The session's and the command's cgroups and the rlimits (`plan_ceilings`)."""

    @property
    def cgroup(self) -> ExecCgroup | None:
        return None if self.guard is None else self.guard.command

    def kill(self) -> None:
        # As JailSupervisor.kill: bwrap is our unreaped child; its death takes the jail's
        # pid 1 (--die-with-parent) and with it the whole pid namespace; the cgroup kill is
        # a second net for anything in flight.
        if self.proc.status is None:
            with suppress(ProcessLookupError):
                os.kill(self.proc.pid, _signal.SIGKILL)
        if self.guard is not None and self.guard.command is not None:
            self.guard.command.kill()

    def close(self) -> None:
        """Kill and reap (if still running), then release every descriptor, placeholder
        and cgroup. Idempotent."""
        if self.proc.status is None:
            self.kill()
            self.proc.reap(block=True)
        self.proc.close()
        if self.status_r >= 0:
            os.close(self.status_r)
            self.status_r = -1
        if self.binds is not None:
            self.binds.close()
            self.binds = None
        self.roots.close()
        if self.guard is not None:
            guard, self.guard = self.guard, None
            guard.remove()


def launch(plan: Plan, argv: Sequence[str], environ: Mapping[str, str]) -> Launched | None:
    """Open the roots and the protected entries again (every per-command check), bind them,
    bound the jail as a session would now (its cgroups, or the host's rlimits), spawn the
    jail for `argv` and move it into its cgroup and under its rlimits before it runs
    anything. None, with nothing left open or running and nothing of the command run, when
    any check would refuse, the bounds a session would have now are not the planned ones
    or cannot be set, or a value the plan takes from `environ` is gone: the caller then
    takes the full path, which refuses (or runs) with its own words.
    """
    tail = list(plan.tail)
    for index, name in plan.caller_env:
        value = environ.get(name)
        if value is None:
            return None
        tail[index] = value
    roots = _open_roots(plan)
    if roots is None:
        return None
    try:
        started = _start(plan, argv, tail, roots)
    except BaseException as exc:
        roots.close()
        from panday_core.errors import PolicyViolation  # noqa: PLC0415 - refusals only

        if isinstance(exc, PolicyViolation):
            return None
        raise
    if started is None:
        roots.close()
        return None
    launched, block_w = started
    if block_w >= 0:
        from panday_tier_linux.plan_ceilings import release  # noqa: PLC0415 - bounded plans only

        try:
            released = release(launched, block_w)
        except BaseException:  # Ctrl-C while bwrap waits: nothing of the command ran
            launched.close()
            raise
        if not released:
            launched.close()
            return None
    return launched


def _open_roots(plan: Plan) -> Roots | None:
    """The workspace and staged paths, opened and judged again (`binds.Roots`), or None
    when a session would refuse them now or could not enter the workspace."""
    roots, _refusals = Roots.open(plan, check_entries=False)  # command_binds checks them
    if roots is not None and entry_problem(roots.workspace) is not None:
        roots.close()  # as `open_session`: WorkspaceUnusable, said by the full path
        return None
    return roots


def _start(
    plan: Plan, argv: Sequence[str], tail: list[str], roots: Roots
) -> tuple[Launched, int] | None:
    """Bind, bound, spawn: the launched jail and our end of its block pipe (-1 when the
    plan has none), or None when the bounds are not the planned ones (nothing left open)."""
    binds = roots.command_binds()
    guard: Guard | None = None
    fds: list[int] = []
    status_r = block_w = -1
    try:
        if plan.block:
            from panday_tier_linux.plan_ceilings import open_guard  # noqa: PLC0415 - bounded plans only

            guard = open_guard(plan)
            if guard is None:
                binds.close()
                return None
        # As `LinuxSession.launch`: 3 the options, 4 the seccomp program, [5 block,] the
        # status, then the binds.
        options = [*plan.head, *binds.options(7 if plan.block else 6), *tail]
        fds.append(data_fd(b"".join(o.encode("utf-8", "surrogateescape") + b"\0" for o in options)))
        fds.append(data_fd(plan.program))
        if plan.block:
            block_r, block_w = os.pipe()
            fds.append(block_r)
        status_r, status_w = os.pipe()
        fds.append(status_w)
        proc = spawn([plan.bwrap, "--args", "3", "--", *argv], env={}, pass_fds=[*fds, *binds.fds])
    except BaseException:
        for fd in (status_r, block_w):
            if fd >= 0:
                os.close(fd)
        binds.close()
        if guard is not None:
            guard.remove()
        raise
    finally:
        for fd in fds:
            os.close(fd)
    binds.spawned()
    return Launched(proc, status_r, roots, binds, guard), block_w


_SETUP_MARKS = (b"bwrap: ", b"panday-relay: ")
_SETUP_LINE_MAX = 4096
"""As `supervisor.STDERR_TAIL`: longer than this, stderr is not one setup line."""


def _could_be_bwrap(data: bytes) -> bool:
    """Whether stderr so far could still be one setup line of bwrap (as
    `supervisor.StartCheck._could_be_setup_line`: it is held back until that is decided)."""
    if len(data) > _SETUP_LINE_MAX:
        return False
    for mark in _SETUP_MARKS:
        if data.startswith(mark):
            end = data.find(b"\n")
            return end < 0 or end == len(data) - 1  # one line so far, nothing after it
        if mark.startswith(data):
            return True
    return False


def status_value(text: bytes, key: str) -> int | None:
    """A number bwrap wrote on --json-status-fd (as `supervisor.Status.value`)."""
    marker = f'"{key}":'.encode()
    at = text.find(marker)
    if at < 0:
        return None
    digits = text[at + len(marker) :].lstrip()
    end = 0
    while end < len(digits) and digits[end : end + 1].isdigit():
        end += 1
    return int(digits[:end]) if end else None


def setup_failed(status: bytes, *, exit_code: int | None, breach: object) -> bool:
    """`supervisor.raise_setup_failure`'s condition: bwrap reported no exit code for the
    command (and it was not our kill), so the jail never ran it."""
    if breach is not None or status_value(status, "exit-code") is not None:
        return False
    return not (status_value(status, "child-pid") is not None and exit_code != 1)


class _Pump:
    """`panday_core.execution`'s pump for one planned command, writing output straight to
    the caller (`write(stream, data)`) instead of making events: the same reads, cap and
    marker, wall clock, tree kill at the main process's exit and drain grace."""

    def __init__(
        self,
        launched: Launched,
        *,
        cap: int | None,
        timeout_ms: int | None,
        write: Callable[[Stream, bytes], None],
        cpu_ms: int | None,
        cpu_poll_ms: int,
    ) -> None:
        proc = launched.proc
        self.launched = launched
        self.proc = proc
        self.cap = cap
        self.timeout_ms = timeout_ms
        self.write = write
        self.deadline = proc.started + timeout_ms / 1000 if timeout_ms is not None else None
        self.cpu_ms = cpu_ms if launched.cgroup is not None else None
        self.tick_s = cpu_poll_ms / 1000
        self.next_tick = proc.started + self.tick_s if self.cpu_ms is not None else None
        self.kept = {"stdout": 0, "stderr": 0}
        self.truncated = {"stdout": False, "stderr": False}
        self.output_breach: tuple[str, str] | None = None
        self.kill_breach: tuple[str, str] | None = None
        self.exited_at: float | None = None
        self.drain_until = 0.0
        self.held: list[bytes] = []
        self.deciding = True
        self.streams: dict[int, Stream] = {}
        if proc.stdout is not None:
            self.streams[proc.stdout] = "stdout"
        if proc.stderr is not None:
            self.streams[proc.stderr] = "stderr"
        self.poller = select.poll()
        for fd in self.streams:
            self.poller.register(fd, select.POLLIN)
        if proc.pidfd is not None:
            self.poller.register(proc.pidfd, select.POLLIN)

    def run(self) -> Ended:
        while True:
            for fd, _mask in self.poller.poll(self._wait_ms()):
                if fd in self.streams:
                    self._read(fd)
                elif fd == self.proc.pidfd:
                    self._main_exited()
            now = time.monotonic()
            if self.exited_at is None and self.proc.pidfd is None and self.proc.exited():
                self._main_exited()
            if self.exited_at is None:
                self._timers(now)
            elif not self.streams or self.drain_until <= now:
                return self._finish()

    def _wait_ms(self) -> int | None:
        now = time.monotonic()
        due: list[float] = []
        if self.exited_at is None:
            if self.deadline is not None and self.kill_breach is None:
                due.append(self.deadline)
            if self.next_tick is not None and self.kill_breach is None:
                due.append(self.next_tick)
            if self.proc.pidfd is None:
                due.append(now + FALLBACK_REAP_S)
        else:
            due.append(self.drain_until)
        if not due:
            return None
        wait = max(0.0, min(due) - now)
        return int(wait * 1000) + (wait > 0)

    def _emit(self, stream: Stream, data: bytes) -> None:
        if self.deciding:
            if stream == "stderr" and _could_be_bwrap(b"".join(self.held) + data):
                self.held.append(data)
                return
            self._release()
        self.write(stream, data)

    def _release(self) -> None:
        self.deciding = False
        held, self.held = self.held, []
        for data in held:
            self.write("stderr", data)

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        stream = self.streams[fd]
        if not data:
            self._close_stream(fd)
            return
        if self.cap is None:
            self._emit(stream, data)
            return
        room = self.cap - self.kept[stream]
        if room > 0:
            kept = data[:room]
            self.kept[stream] += len(kept)
            self._emit(stream, kept)
        if len(data) > room and not self.truncated[stream]:
            self.truncated[stream] = True
            self._emit(stream, truncation_marker(stream, self.cap))
            if self.output_breach is None:
                self.output_breach = ("output", output_breach_detail(stream, self.cap))

    def _close_stream(self, fd: int) -> None:
        self.poller.unregister(fd)
        stream = self.streams.pop(fd)
        os.close(fd)
        if stream == "stdout":
            self.proc.stdout = None
        else:
            self.proc.stderr = None

    def _timers(self, now: float) -> None:
        if self.kill_breach is not None:
            return
        if self.deadline is not None and now >= self.deadline:
            self.kill_breach = ("wall_clock", wall_clock_detail(self.timeout_ms))
            self.launched.kill()
            return
        cgroup = self.launched.cgroup
        if self.next_tick is not None and now >= self.next_tick and cgroup is not None:
            from panday_tier_linux.plan_ceilings import cpu_breach  # noqa: PLC0415 - ceilings only

            self.next_tick = now + self.tick_s
            breach = cpu_breach(cgroup, self.cpu_ms)
            if breach is not None:
                self.kill_breach = breach
                self.launched.kill()

    def _main_exited(self) -> None:
        # As the core pump: bwrap is a zombie until reaped, so nothing can reuse its pid.
        self.launched.kill()
        self.proc.reap(block=True)
        self.exited_at = time.monotonic()
        self.drain_until = self.exited_at + DRAIN_GRACE_S
        if self.proc.pidfd is not None:
            self.poller.unregister(self.proc.pidfd)
            os.close(self.proc.pidfd)
            self.proc.pidfd = None

    def _finish(self) -> Ended:
        for fd in list(self.streams):
            self._close_stream(fd)
        status = self.proc.status if self.proc.status is not None else 255 << 8
        code = os.waitstatus_to_exitcode(status)
        exit_code, sig = (code, None) if code >= 0 else (None, -code)
        counted = None
        guard = self.launched.guard
        if guard is not None and guard.command is not None:
            from panday_tier_linux.plan_ceilings import ceiling_breach  # noqa: PLC0415 - as above

            counted = ceiling_breach(guard.command, self.cpu_ms, guard.defaults)
        breach = self.kill_breach or counted or self.output_breach
        text = self.launched.status + _read_all(self.launched.status_r)
        if setup_failed(text, exit_code=exit_code, breach=breach):
            self.held = []
            return Ended(exit_code=exit_code, signal=sig, breach=breach, setup_failed=True)
        self._release()
        return Ended(exit_code=exit_code, signal=sig, breach=breach, setup_failed=False)


def _read_all(fd: int) -> bytes:
    """What bwrap wrote on its status descriptor (it has exited: the pipe is at its end)."""
    out = b""
    if fd < 0:
        return out
    os.set_blocking(fd, False)
    while len(out) < MAX_PLAN_BYTES:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            break
        if not chunk:
            break
        out += chunk
    return out


def run(launched: Launched, plan: Plan, *, write: Callable[[Stream, bytes], None]) -> Ended:
    """Stream a command launched for `plan` to `write` until it ends, within the plan's
    output cap, wall clock and (with ceilings) CPU ceiling, polled as the session's
    supervisor polls it; whatever happens (a breach, an exception from `write`, a
    signal), the jail is killed and everything released."""
    try:
        pump = _Pump(
            launched,
            cap=plan.output_bytes,
            timeout_ms=plan.wall_clock_ms,
            write=write,
            cpu_ms=plan.cpu_ms,
            cpu_poll_ms=plan.cpu_poll_ms,
        )
        return pump.run()
    finally:
        launched.close()
