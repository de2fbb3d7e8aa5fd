"""A T1 Linux session: Landlock + seccomp + rlimits for hosts where bubblewrap cannot run.

`open_session` refuses, by field and before anything is spawned, what T1 cannot enforce
(its table: `panday_core.declared.t1_linux`), and T1 itself when this kernel's Landlock
is missing or too old. It then fixes a `jail.Jail`: the workspace and staged paths
(`binds.Roots`, opened once without following a link), the system paths T2 binds
read-only and the devices, each held open, a private tmp directory, and the seccomp
program (compiled once, per-user cache). Each command is started by `Jail.start`, the one
launch path (``panday run``'s cached plan takes it too), and streamed by the core pump.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.capabilities import Refusal, check_policy
from panday_core.errors import Internal, PolicyViolation, TierUnavailable
from panday_core.execution import astream, stream
from panday_core.protect import is_env_hook
from panday_tier_linux import common
from panday_tier_linux.common import JailSession
from panday_tier_linux.t1 import landlock
from panday_tier_linux.t1.capabilities import TIER, host_capabilities, kernel_abi
from panday_tier_linux.t1.jail import DEFAULT_PATH, Jail, hold_system, make_tmp, state_refusal

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator

    from panday_core.egress.thread import ProxySettings
    from panday_core.execution import Supervisor
    from panday_core.policy import SandboxPolicy
    from panday_core.process import ChildProcess
    from panday_core.t0.session import T0Session
    from panday_core.types import ExecEvent, ExecSpec
    from panday_tier_linux.binds import Roots

__all__ = ["DEFAULT_PATH", "T1Session", "open_session", "policy_refusals"]


class T1Session(JailSession):
    """One session: rules fixed at open, one restricted spawn per command."""

    def __init__(self, *, session_id: str, policy: SandboxPolicy, jail: Jail) -> None:
        self.id = session_id
        self.policy = policy
        self.jail = jail
        """The one launch path (`t1.jail`), as ``panday run``'s cached plan uses it."""
        self.roots = jail.roots
        """The workspace and staged paths, held open (the jail's, fixed at open)."""
        self.closed = False
        self._running: dict[int, tuple[ChildProcess, Supervisor]] = {}
        self._t0: T0Session | None = None

    @property
    def workspace(self) -> str:
        return self.jail.workspace

    @property
    def abi(self) -> int:
        return self.jail.abi

    @property
    def program(self) -> bytes:
        return self.jail.program

    @program.setter
    def program(self, value: bytes) -> None:
        self.jail.program = value

    @property
    def tmp(self) -> str:
        return self.jail.tmp

    def launch(
        self, spec: ExecSpec, *, stdin_pipe: bool = False
    ) -> tuple[ChildProcess, Supervisor]:
        """Spawn `spec` restricted (`Jail.start`); (process, supervisor)."""
        if self.closed:
            raise Internal(f"session {self.id} is closed")
        stdin = spec.stdin is not None or stdin_pipe
        return self.jail.start(spec.argv, cwd=self._cwd(spec.cwd), stdin=stdin)

    def exec(
        self, spec: ExecSpec, *, stdin_source: int | None = None
    ) -> Generator[ExecEvent, None, None]:
        """Run one command: output chunks as read, then one `ExecExit` (blocking)."""
        proc, sup = self.launch(spec, stdin_pipe=stdin_source is not None)
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

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        """Kill every running command's group, remove the private tmp. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for proc, sup in list(self._running.values()):
            sup.kill(proc)
        self._close_files()
        self.jail.close()


def policy_refusals(policy: SandboxPolicy) -> tuple[list[Refusal], Roots | None]:
    """What of the policy T1 refuses here (by field), and the held roots when nothing is."""
    from panday_tier_linux.binds import Roots

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
    why = None if roots is None else state_refusal(roots)
    if why is not None:
        refusals.append(Refusal(field="fs.workspace", reason=why))
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
    sid = common.session_id(session_id)
    refusals, roots = policy_refusals(policy)
    if refusals or roots is None:
        raise PolicyViolation(TIER, refusals)
    try:
        from panday_tier_linux import seccomp

        program = seccomp.program(seccomp.FilterSpec(namespaces=False))
        jail = Jail(
            abi=abi,
            roots=roots,
            system=hold_system(),
            tmp=make_tmp(sid),
            program=program,
            env=policy.env,
        )
    except BaseException:
        roots.close()
        raise
    return T1Session(session_id=sid, policy=policy, jail=jail)
