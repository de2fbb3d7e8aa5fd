"""A T1 Linux session: Landlock + seccomp + rlimits for hosts where bubblewrap cannot run.

`open_session` refuses, by field and before anything is spawned, what T1 cannot enforce
(its table: `panday_core.declared.t1_linux`), and T1 itself when this kernel's Landlock
is missing or too old. It then holds what every command's ruleset names: the workspace
and staged paths (`binds.Roots`, opened once without following a link), the system paths
T2 binds read-only (/usr and the top-level links into it, the /etc allowlist, three
devices), and a private tmp directory; and it compiles the seccomp program once (per-user
cache). Each command gets a fresh ruleset (a writable workspace's entries are listed
then, the protected ones left out) and is spawned by `launch.run_restricted`.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from typing import TYPE_CHECKING, Self

from panday_core.capabilities import Refusal, check_policy
from panday_core.errors import (
    CommandNotFound,
    Internal,
    PolicyViolation,
    TierUnavailable,
    WorkspaceUnusable,
)
from panday_core.execution import Supervisor, astream, collect, stream
from panday_core.process import spawn
from panday_core.protect import is_env_hook
from panday_core.types import ExecSpec
from panday_tier_linux.t1 import landlock
from panday_tier_linux.t1.capabilities import TIER, host_capabilities, kernel_abi
from panday_tier_linux.t1.launch import Restrictions, run_restricted

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator, Sequence

    from panday_core.egress.thread import ProxySettings
    from panday_core.policy import SandboxPolicy
    from panday_core.t0.session import T0Session
    from panday_core.types import ExecEvent, ExecResult, Snapshot
    from panday_tier_linux.binds import Roots

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
"""Device files a command may open (read and write, no ioctl): what T2's /dev holds."""
_O_PATH = os.O_PATH | os.O_CLOEXEC
NOT_FOUND = 127
NOT_EXECUTABLE = 126


def _system_paths() -> list[str]:
    """What T2 binds read-only from the host: /usr, the top-level directories (links into
    /usr on merged systems, followed to where they lead), the /etc allowlist."""
    from panday_tier_linux.host import ETC_ALLOWLIST, TOP_LEVEL

    return ["/usr", *(f"/{n}" for n in TOP_LEVEL), *(f"/etc/{n}" for n in ETC_ALLOWLIST)]


class _HeldPath:
    __slots__ = ("fd", "is_dir", "rights")

    def __init__(self, fd: int, rights: int) -> None:
        self.fd = fd
        self.rights = rights
        self.is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)


def _hold(path: str, rights: int) -> _HeldPath | None:
    try:
        return _HeldPath(os.open(path, _O_PATH), rights)
    except OSError:  # not on this host
        return None


def grant_workspace(ruleset: landlock.Ruleset, root_fd: int, protected: Sequence[str]) -> None:
    """Read rights beneath the workspace; write rights on each of its entries except the
    `protected` ones (relative paths) and the directories above them, whose other entries
    are granted in turn. A link gets nothing (what it points to keeps its own rules)."""
    ruleset.allow_fd(root_fd, landlock.READ, is_dir=True)
    _grant_below(ruleset, root_fd, "", frozenset(protected))


def _grant_below(
    ruleset: landlock.Ruleset, dir_fd: int, prefix: str, protected: frozenset[str]
) -> None:
    listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        names = os.listdir(listing)
    finally:
        os.close(listing)
    for name in names:
        rel = prefix + name
        if rel in protected:
            continue
        try:
            fd = os.open(name, _O_PATH | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError:  # gone since the listing
            continue
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                continue
            above = any(p.startswith(rel + "/") for p in protected)
            if above and stat.S_ISDIR(mode):
                _grant_below(ruleset, fd, rel + "/", protected)
            elif not above:
                rights = landlock.READ | landlock.WRITE
                ruleset.allow_fd(fd, rights, is_dir=stat.S_ISDIR(mode))
        finally:
            os.close(fd)


class T1Session:
    """One session: rules fixed at open, one restricted spawn per command."""

    def __init__(
        self,
        *,
        session_id: str,
        policy: SandboxPolicy,
        abi: int,
        roots: Roots,
        system: list[_HeldPath],
        tmp: str,
        program: bytes,
    ) -> None:
        self.id = session_id
        self.policy = policy
        self.abi = abi
        self.roots = roots
        self.system = system
        self.tmp = tmp
        self.tmp_fd = os.open(tmp, _O_PATH | os.O_DIRECTORY)
        self.program = program
        self.closed = False
        self._running: dict[int, tuple[object, Supervisor]] = {}
        self._t0: T0Session | None = None

    @property
    def workspace(self) -> str:
        return self.roots.workspace.path

    # ------------------------------------------------------------------ rules

    def ruleset(self) -> landlock.Ruleset:
        """The Landlock ruleset of the next command (a writable workspace listed now)."""
        ruleset = landlock.Ruleset(self.abi)
        try:
            for held in self.system:
                ruleset.allow_fd(held.fd, held.rights, is_dir=held.is_dir)
            ruleset.allow_fd(self.tmp_fd, landlock.READ | landlock.WRITE, is_dir=True)
            for staged in self.roots.staged:
                ruleset.allow_fd(staged.fd, landlock.READ, is_dir=staged.is_dir)
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
                grant_workspace(ruleset, ws.fd, protected)
            else:
                ruleset.allow_fd(ws.fd, landlock.READ, is_dir=True)
        except BaseException:
            ruleset.close()
            raise
        return ruleset

    # ------------------------------------------------------------------ exec

    def _cwd(self, cwd: str | None) -> str:
        if cwd is None:
            return self.workspace
        if "\x00" in cwd:
            raise ValueError("cwd: contains a NUL byte")
        if os.path.isabs(cwd):
            return os.path.normpath(cwd)
        joined = os.path.normpath(os.path.join(self.workspace, cwd))
        if joined != self.workspace and not joined.startswith(self.workspace + "/"):
            raise ValueError(f"cwd: {cwd!r} leaves the workspace")
        return joined

    def environment(self) -> dict[str, str]:
        env = {
            "PATH": DEFAULT_PATH,
            "HOME": self.workspace,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "TMPDIR": self.tmp,
        }
        env.update(self.policy.env)
        return env

    def _program(self, name: str, env: dict[str, str]) -> str:
        if "/" in name:
            return name if os.path.isabs(name) else os.path.join(self.workspace, name)
        for directory in env.get("PATH", "").split(":"):
            found = os.path.join(directory or ".", name)
            if os.path.isfile(found) and os.access(found, os.X_OK):
                return found
        raise CommandNotFound(name, "not found inside the sandbox", exit_code=NOT_FOUND)

    def launch(self, spec: ExecSpec, *, stdin_pipe: bool = False) -> tuple[object, Supervisor]:
        """Spawn `spec` restricted (its rlimits set right after); (process, supervisor)."""
        if self.closed:
            raise Internal(f"session {self.id} is closed")
        if not spec.argv:
            raise ValueError("argv: empty")
        env = self.environment()
        argv = [self._program(spec.argv[0], env), *spec.argv[1:]]
        cwd = self._cwd(spec.cwd)
        try:
            cwd_fd = os.open(cwd, _O_PATH | os.O_DIRECTORY)
        except OSError as exc:
            raise WorkspaceUnusable("cwd", cwd, f"cannot be entered ({exc.strerror})") from None
        ruleset = self.ruleset()
        restrictions = Restrictions(
            ruleset=ruleset, program=self.program, cwd_fd=cwd_fd, root=os.geteuid() == 0
        )
        try:
            proc = spawn(
                argv,
                env=env,
                stdin=spec.stdin is not None or stdin_pipe,
                run_in=run_restricted(restrictions),
            )
        except OSError as exc:
            if exc.errno in {errno.ENOENT, errno.ENOTDIR}:
                raise CommandNotFound(
                    spec.argv[0], "not found inside the sandbox", exit_code=NOT_FOUND
                ) from None
            if exc.errno in {errno.EPERM, errno.ENOEXEC, errno.EACCES}:
                raise CommandNotFound(
                    spec.argv[0],
                    f"cannot be executed inside the sandbox ({exc.strerror})",
                    exit_code=NOT_EXECUTABLE,
                ) from None
            raise Internal(f"T1 could not start the command: {exc}") from exc
        finally:
            ruleset.close()
            os.close(cwd_fd)
        sup = Supervisor()
        try:
            _host_bounds(proc.pid)
        except OSError as exc:
            sup.kill(proc)
            proc.reap(block=True)
            proc.close()
            raise Internal(f"cannot bound the command's processes: {exc}") from exc
        return proc, sup

    def _timeout(self, spec: ExecSpec) -> int | None:
        values = [v for v in (spec.timeout_ms, self.policy.limits.wall_clock_cap) if v is not None]
        return min(values) if values else None

    def exec(
        self, spec: ExecSpec, *, stdin_source: int | None = None
    ) -> Generator[ExecEvent, None, None]:
        """Run one command: output chunks as read, then one `ExecExit` (blocking)."""
        proc, sup = self.launch(spec, stdin_pipe=stdin_source is not None)
        from panday_core.process import ChildProcess

        assert isinstance(proc, ChildProcess)  # noqa: S101 - launch returns one
        self._running[proc.pid] = (proc, sup)
        try:
            yield from stream(
                proc,
                sup,
                stdin_data=spec.stdin,
                stdin_source=stdin_source,
                output_cap=self.policy.limits.output_cap,
                timeout_ms=self._timeout(spec),
            )
        finally:
            self._running.pop(proc.pid, None)

    async def aexec(self, spec: ExecSpec) -> AsyncIterator[ExecEvent]:
        """`exec` for asyncio."""
        proc, sup = self.launch(spec)
        from panday_core.process import ChildProcess

        assert isinstance(proc, ChildProcess)  # noqa: S101 - launch returns one
        self._running[proc.pid] = (proc, sup)
        try:
            async for event in astream(
                proc,
                sup,
                stdin_data=spec.stdin,
                output_cap=self.policy.limits.output_cap,
                timeout_ms=self._timeout(spec),
            ):
                yield event
        finally:
            self._running.pop(proc.pid, None)

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        cwd: str | None = None,
        timeout_ms: int | None = None,
    ) -> ExecResult:
        """Run a command to completion and collect its (bounded) output."""
        spec = ExecSpec(argv=tuple(argv), stdin=stdin, cwd=cwd, timeout_ms=timeout_ms)
        return collect(self.exec(spec))

    def enforcement(self) -> dict[str, object]:
        """What this session applies to each command."""
        return {
            "tier": TIER,
            "landlock_abi": self.abi,
            "handled_fs": landlock.handled_fs(self.abi),
            "handled_net": self.abi >= landlock.NET_ABI,
            "scoped": self.abi >= landlock.SCOPE_ABI,
            "seccomp_bytes": len(self.program),
            "tmp": self.tmp,
        }

    # ------------------------------------------------------------------ files

    def _files(self) -> T0Session:
        """put / get / snapshot through a T0 session over the same roots (as T2 does)."""
        if self._t0 is None:
            import msgspec

            from panday_core.policy import SandboxPolicy
            from panday_core.t0.session import T0Session

            fs = msgspec.structs.replace(
                self.policy.fs,
                workspace=self.workspace,
                staged_ro=tuple(h.path for h in self.roots.staged if h.is_dir),
            )
            limits = msgspec.structs.replace(
                SandboxPolicy().limits, output_bytes=self.policy.limits.output_bytes
            )
            self._t0 = T0Session(SandboxPolicy(fs=fs, limits=limits), session_id=self.id)
        return self._t0

    def put(self, path: str, data: bytes) -> None:
        self._files().write(path, data, make_parents=True)

    def get(self, path: str, *, max_bytes: int) -> bytes:
        return self._files().read_all(path, max_bytes=max_bytes)

    def snapshot(self) -> Snapshot:
        from panday_core.t0.sandbox import snapshot_of

        return snapshot_of(self._files(), self.id)

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        """Kill every running command's group, remove the private tmp. Idempotent."""
        if self.closed:
            return
        self.closed = True
        from panday_core.process import ChildProcess

        for proc, sup in list(self._running.values()):
            if isinstance(proc, ChildProcess):
                sup.kill(proc)
        if self._t0 is not None:
            self._t0.close()
            self._t0 = None
        for held in self.system:
            os.close(held.fd)
        self.system = []
        os.close(self.tmp_fd)
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.roots.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _host_bounds(pid: int) -> None:
    """The host's protection (hostguard's rlimits), the policy having no ceilings here."""
    from panday_tier_linux.hostguard import Rlimits

    Rlimits(tasks=os.geteuid() != 0, address_space=True).apply(pid)


def _sanitize_id(session_id: str | None) -> str:
    if session_id is None:
        return os.urandom(6).hex()
    ok = session_id and len(session_id) <= 64 and all(c.isalnum() or c in "-_." for c in session_id)  # noqa: PLR2004 - id length cap
    if not ok or session_id.startswith("."):
        raise ValueError(f"session_id: {session_id!r} must be 1-64 characters of [A-Za-z0-9._-]")
    return session_id


def policy_refusals(policy: SandboxPolicy) -> tuple[list[Refusal], Roots | None]:
    """What of the policy T1 refuses here (by field), and the held roots when nothing is."""
    from panday_tier_linux.binds import Roots
    from panday_tier_linux.host import state_to_hide

    refusals = list(check_policy(policy, host_capabilities()))
    refusals += [
        Refusal(field=f"env.{name}", reason="a start-up hook not listed in allow_env_hooks")
        for name in policy.env
        if is_env_hook(name) and name not in policy.allow_env_hooks
    ]
    if refusals:
        return refusals, None
    roots, found = Roots.open(policy.fs)
    refusals += found
    if roots is not None:
        hidden = state_to_hide([roots.workspace.path, *(s.path for s in roots.staged)])
        if hidden:
            refusals.append(
                Refusal(
                    field="fs.workspace",
                    reason=f"holds panday's per-user state ({', '.join(hidden)}), which T1 "
                    "cannot hide: Landlock cannot except a path beneath an allowed one",
                )
            )
    if refusals and roots is not None:
        roots.close()
        roots = None
    return refusals, roots


def open_session(
    policy: SandboxPolicy,
    *,
    session_id: str | None = None,
    egress: ProxySettings | None = None,  # noqa: ARG001 - the registry's opener signature; T1 refuses net.allow
) -> T1Session:
    """Open a session, or refuse: `TierUnavailable` when this kernel cannot run T1,
    `PolicyViolation` naming every field T1 cannot enforce. Nothing is spawned."""
    abi = kernel_abi()
    if isinstance(abi, str):
        raise TierUnavailable(TIER, abi)
    sid = _sanitize_id(session_id)
    refusals, roots = policy_refusals(policy)
    if refusals or roots is None:
        raise PolicyViolation(TIER, refusals)
    try:
        from panday_tier_linux import seccomp

        program = seccomp.program(seccomp.FilterSpec(namespaces=False))
        system: list[_HeldPath] = []
        for path in _system_paths():
            held = _hold(path, landlock.READ)
            if held is not None:
                system.append(held)
        rw = landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE
        system += [h for d in DEVICES if (h := _hold(d, rw)) is not None]
        tmp = tempfile.mkdtemp(prefix=f"panday-t1-{sid}-")
    except BaseException:
        roots.close()
        raise
    return T1Session(
        session_id=sid,
        policy=policy,
        abi=abi,
        roots=roots,
        system=system,
        tmp=tmp,
        program=program,
    )
