# Over 500 lines: the plan, its checked decoding, the cache and the cached launch: one import.
"""A T2 Linux jail *plan*: what a session fixes at open, as a plain value, and the launch
of one command from it (docs/cli.md, "Start-up"; docs/benchmarks.md).

`session.open_session` builds the `Plan` once every check at open has passed (the policy
model, the capability table, the tier's refusals): which bwrap, the jail's spec (its
root, /etc view, environment, /tmp), the compiled seccomp program, the output cap and the
wall clock, the cgroup ceilings the session's cgroup held, and the policy's ``fs``
section. Each command is launched from it by `jail.start` -- by the session, and by
``panday run`` from a cached plan (`launch`, `run`), the same code. What must be decided
at every command is *not* in it and is redone each time (`binds.Roots`): the workspace
and staged paths are opened again without following links and judged again, and the
protected entries get their read-only binds and placeholders.

The cache (``panday run`` only) serialises a plan (`planning.encode`) and reads it back
(`Plan.decode`), keyed by everything it was made from (the caller passes its own inputs;
`host_facts` adds this host's); the key is written at the head of the file and must match
byte for byte. A plan file is used only when it is a regular file owned by the caller that
nobody else may write, in a directory of the same kind reached without a link, its head
and body verify against the MAC written between them under this user's cache key
(`panday_core.userstate`: a key no jail can read), and the bwrap it names is the very file
a session would choose now. The cache lies in panday's per-user state under the password
file's home (never ``$XDG_CACHE_HOME``), a protected entry of any workspace that holds it
and hidden in the jail; a writable workspace inside it is refused.

A cached run bounds its jail as a session does: it opens the session's cgroups with the
same function (`jail.Guard.open`) and runs only when they hold what they held when the plan
was made (else the full path runs, and bounds it its own way). Sessions with a disk
ceiling or the egress bridge are not cached; they take the full path.

This module is on `panday run`'s start-up path: it imports neither typing nor msgspec, and
what only a miss needs lives in `planning`.
"""

from __future__ import annotations

import marshal
import os
import stat
from _blake2 import blake2b

from panday_core import userstate
from panday_core.execution import run_plain
from panday_core.startup import suppress
from panday_tier_linux import host
from panday_tier_linux.argv import JailSpec
from panday_tier_linux.binds import Roots, entry_problem
from panday_tier_linux.jail import CEILINGS, CPU_POLL_MS, Guard, Start, release, start

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from panday_core.execution import ChildProcess, Ended
    from panday_core.process import Stream
    from panday_tier_linux.jail import JailSupervisor

FORMAT = 6
"""The plan file's layout; part of the key."""
MAGIC = b"panday-jail-plan 3\n"
MAX_PLAN_BYTES = 16 << 20


class Plan:
    """A session's jail without its per-command part. Read as a `binds.RootsPolicy`."""

    __slots__ = (
        "access",
        "allow_home",
        "bwrap",
        "bwrap_id",
        "caller_env",
        "cpu_poll_ms",
        "explicit",
        "held",
        "output_bytes",
        "program",
        "protect",
        "spec",
        "staged_ro",
        "unprotect",
        "wall_clock_ms",
    )

    def __init__(
        self,
        *,
        bwrap: str,
        spec: JailSpec,
        program: bytes,
        access: str,
        staged_ro: tuple[str, ...],
        protect: tuple[str, ...],
        unprotect: tuple[str, ...],
        allow_home: bool,
        output_bytes: int | None,
        wall_clock_ms: int | None,
        explicit: tuple[tuple[str, int], ...] = (),
        held: tuple[tuple[str, int], ...] = (),
        cpu_poll_ms: int = CPU_POLL_MS,
        bwrap_id: tuple[int, int, int, int] | None = None,
        caller_env: tuple[str, ...] = (),
    ) -> None:
        self.bwrap = bwrap
        self.bwrap_id = bwrap_id
        """`bwrap_identity` of `bwrap` when the plan was made: a cached plan runs only while
        the bwrap a session would choose now is that very file (`current_bwrap`)."""
        self.spec = spec
        """The jail (`argv.build_options` makes each command's options from it)."""
        self.program = program
        self.access = access
        self.staged_ro = staged_ro
        self.protect = protect
        self.unprotect = unprotect
        self.allow_home = allow_home
        self.output_bytes = output_bytes
        self.wall_clock_ms = wall_clock_ms
        self.explicit = explicit
        """The policy's own cgroup ceilings (`jail.CEILINGS`)."""
        self.held = held
        """The ceilings the session's cgroup held: `explicit` plus the host's protection
        (`hostguard.open_cgroups`); empty without a cgroup. A cached run opens the cgroups
        again the same way and runs only if they hold exactly this."""
        self.cpu_poll_ms = cpu_poll_ms
        self.caller_env = caller_env
        """The policy's variables whose values come from the caller's environment at every
        run (``panday run --env NAME``): never written to the cache (`planning.encode`
        blanks them); the key holds a digest of each."""

    @property
    def workspace(self) -> str:
        return self.spec.workspace

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
        if len(v) != 22 or v[0] != FORMAT:  # noqa: PLR2004 - the format's field count
            return None
        spec = _spec(v[1:7], v[21])
        bwrap, bwrap_id, program = _path(v[7]), _identity(v[8]), v[9]
        access, allow_home = v[10], v[11]
        staged_ro, protect, unprotect = _strings(v[12]), _strings(v[13]), _strings(v[14])
        out_cap, wall = _limit(v[15]), _limit(v[16])
        explicit, held, poll, names = _ceilings(v[17]), _ceilings(v[18]), v[19], _strings(v[20])
        if (
            spec is None
            or bwrap is None
            or bwrap_id is None
            or not isinstance(program, bytes)
            or not program
            or len(program) % 8
            or access not in {"rw", "ro"}
            or not isinstance(allow_home, bool)
            or staged_ro is None
            or protect is None
            or unprotect is None
            or out_cap is False
            or wall is False
            or explicit is None
            or held is None
            or not isinstance(poll, int)
            or isinstance(poll, bool)
            or names is None
        ):
            return None
        return cls(
            bwrap=bwrap,
            spec=spec,
            program=program,
            access=str(access),
            staged_ro=staged_ro,
            protect=protect,
            unprotect=unprotect,
            allow_home=allow_home,
            output_bytes=out_cap,
            wall_clock_ms=wall,
            explicit=explicit,
            held=held,
            cpu_poll_ms=poll,
            bwrap_id=bwrap_id,
            caller_env=names,
        )


def _spec(v: tuple[object, ...], wall: object) -> JailSpec | None:
    """The jail spec of a decoded plan (`planning.encode` writes these six fields, and
    `wall` last)."""
    workspace, workspace_rw, env, etc_view, layout, tmp_bytes = v
    path, view, pairs = _path(workspace), _path(etc_view), _items(env)
    if (
        path is None
        or not isinstance(workspace_rw, bool)
        or (etc_view is not None and view is None)
        or pairs is None
        or not all(isinstance(a, str) and isinstance(b, str) for a, b in pairs)
        or tmp_bytes is not None
        or not isinstance(wall, bool)
    ):
        return None
    found = _layout(layout)
    if found is None:
        return None
    return JailSpec(
        layout=found,
        workspace=path,
        workspace_rw=workspace_rw,
        env={str(a): str(b) for a, b in pairs},
        etc_view=view,
        wall=wall,
    )


def _layout(value: object) -> host.HostLayout | None:
    """A `host.HostLayout` from its three tuples (top and etc: triples of strings)."""
    if not isinstance(value, tuple) or len(value) != 3:  # pyright: ignore[reportUnknownArgumentType] - checked here  # noqa: PLR2004 - top, etc, proc
        return None
    top, etc, proc = value  # pyright: ignore[reportUnknownVariableType] - checked next
    triples: list[tuple[tuple[str, str, str], ...]] = []
    for part in (top, etc):  # pyright: ignore[reportUnknownVariableType] - checked next
        if not isinstance(part, tuple):
            return None
        items: tuple[object, ...] = part  # pyright: ignore[reportUnknownVariableType] - checked next
        out: list[tuple[str, str, str]] = []
        for item in items:
            strings = _strings(item)
            if strings is None or len(strings) != 3:  # noqa: PLR2004 - a triple
                return None
            out.append((strings[0], strings[1], strings[2]))
        triples.append(tuple(out))
    masked = _strings(proc)  # pyright: ignore[reportUnknownArgumentType] - checked there
    return None if masked is None else host.HostLayout(triples[0], triples[1], masked)


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
    out = tuple(
        (a, b)
        for a, b in items
        if isinstance(a, str) and a in CEILINGS and isinstance(b, int) and not isinstance(b, bool)
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
    a fact of the key: each run makes them the session's way and compares (`open_guard`).
    """
    from panday_tier_linux import hostguard

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
    body = read_sealed(key)
    found = None if body is None else Plan.decode(body)
    return found if found is not None and current_bwrap(found) else None


def read_sealed(key: str) -> bytes | None:
    """The body of the plan file for `key` (any tier's), or None: no usable cache key
    (`userstate.key`), missing, not ours, writable by others, written for another key, or
    a MAC that does not verify (`planning.write_sealed` writes it)."""
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
    return None if blob is None else unseal(secret, key, blob)


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


class Launched:
    """A command started from a cached plan: its process and supervisor (which hold its
    binds, cgroup and pipes), the roots and the bounds, released by `close`."""

    __slots__ = ("guard", "proc", "roots", "sup")

    def __init__(self, proc: ChildProcess, sup: JailSupervisor, roots: Roots, guard: Guard) -> None:
        self.proc = proc
        self.sup = sup
        self.roots = roots
        self.guard = guard

    def close(self) -> None:
        """Kill and reap (if still running), then release everything. Idempotent."""
        if self.proc.status is None:
            self.sup.kill(self.proc)
            self.proc.reap(block=True)
        self.proc.close()
        self.sup.close()
        self.roots.close()
        self.guard.remove()


def open_guard(plan: Plan) -> Guard | None:
    """The bounds a session would give this jail now (`jail.Guard.open`), or None, with
    nothing left behind, when they are not the planned ones (the full path then bounds
    it, or refuses by name) or cannot be opened."""
    explicit = dict(plan.explicit)
    try:
        guard, _reasons = Guard.open(explicit, os.urandom(6).hex())
    except OSError:
        return None
    if guard.held != dict(plan.held) or (guard.session is None) != (not plan.held):
        guard.remove()
        return None
    return guard


def launch(plan: Plan, argv: Sequence[str], environ: Mapping[str, str]) -> Launched | None:
    """Open the roots and the protected entries again (every per-command check), bound the
    jail as a session would now, and start `argv` in it with `jail.start`, as a session's
    command starts. None, with nothing left open or running and nothing of the command
    run, when any check would refuse, the bounds a session would have now are not the
    planned ones or cannot be set, or a value the plan takes from `environ` is gone: the
    caller then takes the full path, which refuses (or runs) with its own words.
    """
    spec = plan.spec
    if plan.caller_env:
        env = dict(spec.env)
        for name in plan.caller_env:
            value = environ.get(name)
            if value is None:
                return None
            env[name] = value
        spec = JailSpec(
            layout=spec.layout,
            workspace=spec.workspace,
            workspace_rw=spec.workspace_rw,
            env=env,
            etc_view=spec.etc_view,
            wall=spec.wall,
        )
    roots, _refusals = Roots.open(plan, check_entries=False)  # command_binds checks them
    if roots is None:
        return None
    if entry_problem(roots.workspace) is not None:
        roots.close()  # as `open_session`: WorkspaceUnusable, said by the full path
        return None
    guard = open_guard(plan)
    if guard is None:
        roots.close()
        return None
    try:
        return _start(plan, spec, argv, roots, guard)
    except BaseException as exc:
        roots.close()
        guard.remove()
        from panday_core.errors import PolicyViolation

        if isinstance(exc, PolicyViolation):
            return None
        raise


def _start(
    plan: Plan, spec: JailSpec, argv: Sequence[str], roots: Roots, guard: Guard
) -> Launched | None:
    binds = roots.command_binds()
    proc, sup, filter_w = start(
        spec,
        argv,
        bwrap=plan.bwrap,
        program=plan.program,
        binds=binds,
        cwd=spec.workspace,
        guard=guard,
        cpu_ms=plan.cpu_ms,
    )
    launched = Launched(proc, sup, roots, guard)
    if filter_w >= 0:
        try:
            why = release(proc, sup, filter_w, guard)
        except BaseException:  # Ctrl-C while bwrap waits: nothing of the command ran
            launched.close()
            raise
        if why is not None:
            launched.close()
            return None
    return launched


def run(launched: Launched, plan: Plan, *, write: Callable[[Stream, bytes], None]) -> Ended | None:
    """Stream a command launched for `plan` to `write` until it ends, within the plan's
    output cap, wall clock and ceilings (the core pump with the jail's supervisor, as a
    session streams it). None when the command never ran (bwrap could not set the jail
    up: the caller takes the full path, which says why); whatever happens (a breach, an
    exception from `write`, a signal), the jail is killed and everything released."""
    check = Start(launched.sup, relay=plan.spec.reports)

    def passed(stream: Stream, data: bytes) -> None:
        for out_stream, out in check.feed(stream, data):
            write(out_stream, out)

    try:
        ended = run_plain(
            launched.proc,
            launched.sup,
            write=passed,
            output_cap=plan.output_bytes,
            timeout_ms=plan.wall_clock_ms,
        )
        if check.failure(breach=ended.breach, exit_code=ended.exit_code) is not None:
            return None
        for out_stream, out in check.release():
            write(out_stream, out)
        return ended
    finally:
        with suppress(OSError):
            launched.close()
