"""T1's one launch path: what a command's restrictions are made of, and its start.

A `Jail` holds what every command's Landlock ruleset names (the workspace and staged
paths as `binds.Roots`, opened once without following a link; the system paths T2 binds
read-only; the devices; a private tmp directory) and the seccomp program. `Jail.start`
records a command's Landlock rules (a writable workspace's entries listed then, the
protected ones and staged ones left out), resolves its program, and spawns it from a
`launch.CommandThread` restricted by those rules (the last command's, when its rules were
the same; else a new one, started by the jail's `launch.Spawner`, which holds the seccomp
program), then sets the host's rlimits. A `T1Session` launches through it, and so does
``panday run`` from a cached plan (`t1.plan`): the same code.

On `panday run`'s start-up path: it imports neither typing nor msgspec.
"""

from __future__ import annotations

import _thread
import errno
import os
import stat

from panday_core.errors import (
    CommandNotFound,
    Internal,
    PolicyViolation,
    TierUnavailable,
    WorkspaceUnusable,
)
from panday_core.execution import Supervisor
from panday_core.process import spawn
from panday_core.startup import suppress
from panday_tier_linux.t1 import landlock
from panday_tier_linux.t1.launch import CommandThread, RestrictError, Restrictions, Spawner

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from panday_core.process import ChildProcess
    from panday_tier_linux.binds import Roots

TIER = "t1-linux"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
"""Device files a command may open (read and write, no ioctl): what T2's /dev holds."""
_O_PATH = os.O_PATH | os.O_CLOEXEC
NOT_FOUND = 127
NOT_EXECUTABLE = 126


def system_paths() -> list[str]:
    """What T2 binds read-only from the host: /usr, the top-level directories (links into
    /usr on merged systems, followed to where they lead), the /etc allowlist."""
    from panday_tier_linux.host import ETC_ALLOWLIST, TOP_LEVEL

    return ["/usr", *(f"/{n}" for n in TOP_LEVEL), *(f"/etc/{n}" for n in ETC_ALLOWLIST)]


class HeldPath:
    """A system path held open (O_PATH) from the session's open, with its rights."""

    __slots__ = ("fd", "is_dir", "rights")

    def __init__(self, fd: int, rights: int) -> None:
        self.fd = fd
        self.rights = rights
        self.is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)


def hold(path: str, rights: int) -> HeldPath | None:
    try:
        return HeldPath(os.open(path, _O_PATH), rights)
    except OSError:  # not on this host
        return None


def hold_system() -> list[HeldPath]:
    """The system paths (read) and the devices (read and write), each held open now."""
    held = [h for p in system_paths() if (h := hold(p, landlock.READ)) is not None]
    rw = landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE
    held += [h for d in DEVICES if (h := hold(d, rw)) is not None]
    return held


class Rules:
    """The rules of one command's Landlock ruleset, recorded before any is made: each
    path with its descriptor, and the key they make, (device, inode, rights, kind) in
    order. Two commands with equal keys are ruled by equal rulesets, so the second is
    spawned from the first one's command thread (`launch.CommandThread`). An inode named
    in a live ruleset is held by it, so its number cannot be reused meanwhile: an entry
    removed and made again is a different key. `base`: rules every command starts with
    (the jail's own paths, recorded once), whose descriptors the jail holds."""

    __slots__ = ("held", "key", "owned")

    def __init__(self, base: Rules | None = None) -> None:
        self.held: list[tuple[int, int, bool]] = list(base.held) if base else []
        self.key: list[tuple[int, int, int, bool]] = list(base.key) if base else []
        self.owned: list[int] = []
        """The descriptors these rules opened (copies), closed by `close`."""

    def allow_fd(self, fd: int, rights: int, *, is_dir: bool, kept: bool = False) -> None:
        """Record `rights` beneath `fd`; `kept`: `fd` outlives these rules (else a copy
        is held, since the caller closes its own)."""
        st = os.fstat(fd)
        self.key.append((st.st_dev, st.st_ino, rights, is_dir))
        if not kept:
            fd = os.dup(fd)
            self.owned.append(fd)
        self.held.append((fd, rights, is_dir))

    def take_fd(self, fd: int, st: os.stat_result, rights: int, *, is_dir: bool) -> None:
        """`allow_fd` for a descriptor the caller hands over (closed by `close`) and its
        `fstat`: every entry of a workspace is recorded at every command, and a copy and
        a second fstat were three more calls each."""
        self.key.append((st.st_dev, st.st_ino, rights, is_dir))
        self.owned.append(fd)
        self.held.append((fd, rights, is_dir))

    def build(self, abi: int) -> landlock.Ruleset:
        """The ruleset these rules make (the caller closes it)."""
        ruleset = landlock.Ruleset(abi)
        try:
            for fd, rights, is_dir in self.held:
                ruleset.allow_fd(fd, rights, is_dir=is_dir)
        except BaseException:
            ruleset.close()
            raise
        return ruleset

    def close(self) -> None:
        for fd in self.owned:
            os.close(fd)
        self.owned = []
        self.held = []


def grant_workspace(rules: Rules, root_fd: int, protected: Sequence[str]) -> None:
    """Read rights beneath the workspace; write rights on each of its entries except the
    `protected` ones (relative paths) and the directories above them, whose other entries
    are granted in turn. A link gets nothing (what it points to keeps its own rules)."""
    rules.allow_fd(root_fd, landlock.READ, is_dir=True, kept=True)
    _grant_below(rules, root_fd, "", frozenset(protected))


def _grant_below(rules: Rules, dir_fd: int, prefix: str, protected: frozenset[str]) -> None:
    listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        names = os.listdir(listing)
    finally:
        os.close(listing)
    for name in sorted(names):  # in order: the same entries make the same key
        rel = prefix + name
        if rel in protected:
            continue
        try:
            fd = os.open(name, _O_PATH | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError:  # gone since the listing
            continue
        try:
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                continue
            above = any(p.startswith(rel + "/") for p in protected)
            if above and stat.S_ISDIR(st.st_mode):
                _grant_below(rules, fd, rel + "/", protected)
            elif not above:
                rights = landlock.READ | landlock.WRITE
                rules.take_fd(fd, st, rights, is_dir=stat.S_ISDIR(st.st_mode))
                fd = -1  # the rules hold it now
        finally:
            if fd >= 0:
                os.close(fd)


class Jail:
    """What each command of one session (or one cached run) is restricted by."""

    __slots__ = (
        "_command",
        "_fixed",
        "_lock",
        "abi",
        "env",
        "roots",
        "spawner",
        "system",
        "tmp",
        "tmp_fd",
    )

    def __init__(
        self,
        *,
        abi: int,
        roots: Roots,
        system: list[HeldPath],
        tmp: str,
        program: bytes,
        env: Mapping[str, str],
    ) -> None:
        self.abi = abi
        self.roots = roots
        self.system = system
        self.tmp = tmp
        self.tmp_fd = os.open(tmp, _O_PATH | os.O_DIRECTORY)
        self._fixed = Rules()
        """The rules of every command: the system paths, the private tmp, the staged paths
        (held by the jail until it closes), recorded once."""
        for held in system:
            self._fixed.allow_fd(held.fd, held.rights, is_dir=held.is_dir, kept=True)
        self._fixed.allow_fd(self.tmp_fd, landlock.READ | landlock.WRITE, is_dir=True, kept=True)
        for staged in roots.staged:
            self._fixed.allow_fd(staged.fd, landlock.READ, is_dir=staged.is_dir, kept=True)
        self.spawner = Spawner(program)
        """The thread every command thread is started from (`launch`)."""
        self._command: CommandThread | None = None
        """The command thread of the last command, kept for the next one ruled alike."""
        self._lock = _thread.allocate_lock()
        self.env = dict(env)
        """The policy's variables."""

    @property
    def program(self) -> bytes:
        """The seccomp program (`seccomp.FilterSpec(namespaces=False)`, compiled)."""
        return self.spawner.program

    @program.setter
    def program(self, value: bytes) -> None:
        # A loaded program cannot be lifted: the next command starts a new spawner.
        with self._lock:
            self._end_thread()
            self.spawner.close()
            self.spawner = Spawner(value)

    @property
    def workspace(self) -> str:
        return self.roots.workspace.path

    def rules(self) -> Rules:
        """The Landlock rules of the next command (a writable workspace listed now)."""
        rules = Rules(self._fixed)
        try:
            ws = self.roots.workspace
            if self.roots.writable:
                try:
                    protected = [e.rel for e in self.roots.entries()]
                except PolicyViolation as exc:  # raised in T2's name by binds
                    raise PolicyViolation(TIER, exc.violations) from None
                # A staged path inside the workspace stays read-only: like a protected
                # entry, neither it nor the directories above it get a write right.
                protected += [
                    s.path[len(ws.path) + 1 :]
                    for s in self.roots.staged
                    if s.path.startswith(ws.path.rstrip("/") + "/")
                ]
                grant_workspace(rules, ws.fd, protected)
            else:
                rules.allow_fd(ws.fd, landlock.READ, is_dir=True, kept=True)
        except BaseException:
            rules.close()
            raise
        return rules

    def _thread_for(self, rules: Rules) -> CommandThread:
        """The command thread that spawns a command ruled by `rules`: the last one when
        its rules were the same, else a new one (the last ended). Under `_lock`."""
        root = os.geteuid() == 0
        key = (root, tuple(rules.key))
        current = self._command
        if current is not None and current.serves(key):
            return current
        self._end_thread()
        ruleset = rules.build(self.abi)
        try:
            thread = CommandThread(Restrictions(ruleset=ruleset, root=root), key)
            thread.start(self.spawner)
        finally:
            ruleset.close()
        self._command = thread
        return thread

    def _end_thread(self) -> None:
        thread, self._command = self._command, None
        if thread is not None:
            thread.end()

    def environment(self) -> dict[str, str]:
        env = {
            "PATH": DEFAULT_PATH,
            "HOME": self.workspace,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "TMPDIR": self.tmp,
        }
        env.update(self.env)
        return env

    @staticmethod
    def _program(name: str, env: Mapping[str, str], cwd: str) -> str:
        """`name` as execvp(3) would find it from `cwd` (a path with a slash is taken
        from there; a bare name searched in the command's PATH)."""
        if "/" in name:
            return name if os.path.isabs(name) else os.path.normpath(os.path.join(cwd, name))
        for directory in env.get("PATH", "").split(":"):
            found = os.path.join(directory or ".", name)
            if os.path.isfile(found) and os.access(found, os.X_OK):
                return found
        raise CommandNotFound(name, "not found inside the sandbox", exit_code=NOT_FOUND)

    def start(
        self, argv: Sequence[str], *, cwd: str, stdin: bool
    ) -> tuple[ChildProcess, Supervisor]:
        """Spawn `argv` in `cwd` restricted (the host's rlimits set right after)."""
        if not argv:
            raise ValueError("argv: empty")
        env = self.environment()
        resolved = [self._program(argv[0], env, cwd), *argv[1:]]
        try:
            cwd_fd = os.open(cwd, _O_PATH | os.O_DIRECTORY)
        except OSError as exc:
            raise WorkspaceUnusable("cwd", cwd, f"cannot be entered ({exc.strerror})") from None
        try:
            rules = self.rules()
        except BaseException:
            os.close(cwd_fd)
            raise
        try:
            with self._lock:
                thread = self._thread_for(rules)
                proc = spawn(
                    resolved, env=env, stdin=stdin, run_in=lambda call: thread.run(cwd_fd, call)
                )
        except RestrictError as exc:
            raise TierUnavailable(
                TIER, f"the spawning thread could not restrict itself: {exc}"
            ) from None
        except OSError as exc:
            if exc.errno in {errno.ENOENT, errno.ENOTDIR}:
                raise CommandNotFound(
                    argv[0], "not found inside the sandbox", exit_code=NOT_FOUND
                ) from None
            if exc.errno in {errno.EPERM, errno.ENOEXEC, errno.EACCES}:
                raise CommandNotFound(
                    argv[0],
                    f"cannot be executed inside the sandbox ({exc.strerror})",
                    exit_code=NOT_EXECUTABLE,
                ) from None
            raise Internal(f"T1 could not start the command: {exc}") from exc
        finally:
            rules.close()
            os.close(cwd_fd)
        sup = Supervisor()
        try:
            host_bounds(proc.pid)
        except OSError as exc:
            sup.kill(proc)
            proc.reap(block=True)
            proc.close()
            raise Internal(f"cannot bound the command's processes: {exc}") from exc
        return proc, sup

    def close(self) -> None:
        """End the spawner, release the held paths, remove the private tmp, close the
        roots. Idempotent."""
        with self._lock:
            self._end_thread()
        self.spawner.close()
        for held in self.system:
            os.close(held.fd)
        self.system = []
        if self.tmp_fd >= 0:
            os.close(self.tmp_fd)
            self.tmp_fd = -1
            remove_tree(self.tmp)
        self.roots.close()


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: str) -> None:
    """Remove `path` and what a command left in it, never following a link (each entry
    removed relative to its directory's descriptor, as `shutil.rmtree` does on Linux,
    without its import: start-up time); whatever cannot be removed is left."""
    try:
        fd = os.open(path, _DIR)
    except OSError:
        return
    try:
        _remove_below(fd)
    except (OSError, RecursionError):  # a tree deeper than recursion goes: the slow way
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        return
    finally:
        os.close(fd)
    with suppress(OSError):
        os.rmdir(path)


def _remove_below(dir_fd: int) -> None:
    with os.scandir(dir_fd) as entries:
        found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in found:
        if is_dir:
            sub = os.open(name, _DIR, dir_fd=dir_fd)
            try:
                _remove_below(sub)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)


def host_bounds(pid: int) -> None:
    """The host's protection (hostguard's rlimits), the policy having no ceilings here."""
    from panday_tier_linux.hostguard import Rlimits

    Rlimits(tasks=os.geteuid() != 0, address_space=True).apply(pid)


def state_refusal(roots: Roots) -> str | None:
    """Why these roots cannot be T1's (they hold panday's per-user state), or None."""
    from panday_tier_linux.host import state_to_hide

    hidden = state_to_hide([roots.workspace.path, *(s.path for s in roots.staged)])
    if not hidden:
        return None
    return (
        f"holds panday's per-user state ({', '.join(hidden)}), which T1 cannot hide: "
        "Landlock cannot except a path beneath an allowed one"
    )


def make_tmp(session_id: str) -> str:
    """A new private (0700) directory for the session's commands, as `tempfile.mkdtemp`
    makes one under ``$TMPDIR`` or /tmp (without its import: start-up time)."""
    base = os.environ.get("TMPDIR") or ""
    if not os.path.isabs(base):
        base = "/tmp"  # noqa: S108 - mkdtemp's own fallback; a private directory is made in it
    for _ in range(16):
        path = os.path.join(base, f"panday-t1-{session_id}-{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free name for a private tmp under {base}")
