# Over 500 lines: the macOS session, its runner and its survivor sweep share one lifecycle.
"""T2 macOS behind the async `Sandbox` protocol: every command runs under `sandbox-exec`.

A session is a policy, its generated Seatbelt profile, the parameter values the profile
needs (resolved paths), a private temp dir and the environment commands get. `create` does,
in this order and before anything is spawned: refuse every field this tier cannot enforce
(`require_enforceable`, by field name), refuse ``DYLD_*`` variables in ``env`` (macOS would
drop them silently), open and check the workspace and staged paths and compute the
workspace's protected entries (`panday_tier_macos.roots`: no link followed, no system or
home directory, nothing inside a protected path), check that the tier can run here (a root
caller is refused there), start the session's egress proxy when the policy has
``net.allow`` (refusing the net fields by name if it cannot start), then make the temp dir.

The egress proxy runs on a loop thread of its own (`ProxyThread`), listening on 127.0.0.1
and ::1 at one port, because Seatbelt can name loopback only as ``localhost``, which covers
both. The profile allows outbound TCP to that port and nothing else; each command's
environment carries the proxy variables with credentials issued for its command id, and
they are revoked when the command ends (tunnels opened with them are cut).

Each command is started by the shared exec machinery (`panday_core.execution`): posix_spawn
into a new session, output streamed and capped, the wall clock killing the process group.
`sandbox-exec` applies the profile and execs a tiny `/bin/sh` step that sets the core-dump
size to zero and changes into the working directory (posix_spawn cannot), then execs the
command, so the profile holds from the first instruction of the command onwards.

Each session's private temp dir is made inside one per-user directory (`session_tmp_base`,
0700, the user's own, no link), which the profile denies except the session's own dir, so
no session reads another's temp files. Before each command the missing protected names
of a writable workspace are held by immutable placeholders
(`panday_tier_macos.placeholders`), released after it. When the last running command of
a session ends, and again at `destroy`, every process still under the session's profile
(one that left the process group with ``setsid``, and was handed to launchd by a double
fork) is found by its sandbox and killed (`panday_tier_macos.survivors`), before the
egress proxy closes its port and before the temp dir is removed.

Files are put, read and listed in-process by T0 (`panday_core.t0`), whose path resolution
cannot be led out of the workspace by ``..`` or links; this tier adds nothing to it.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import secrets
import stat
from typing import TYPE_CHECKING, Final

import msgspec

from panday_core.capabilities import Refusal, no_egress_proxy, require_enforceable
from panday_core.errors import Internal, PolicyViolation, SandboxError, TierUnavailable
from panday_core.policy import SandboxPolicy
from panday_core.protect import is_env_hook
from panday_core.types import SandboxHandle, SandboxTier, SessionSpec
from panday_tier_macos import capabilities
from panday_tier_macos.placeholders import Placeholders
from panday_tier_macos.profile import (
    PARAM_ACCOUNT_HOME,
    PARAM_ANCESTOR,
    PARAM_HOST_HOME,
    PARAM_PROTECTED,
    PARAM_STAGED,
    PARAM_TMPBASE,
    PARAM_TMPDIR,
    PARAM_WORKSPACE,
    ProxyEndpoint,
    SeatbeltProfile,
)
from panday_tier_macos.roots import Roots, disk_spelling, open_roots
from panday_tier_macos.survivors import host_sweep

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from panday_core.capabilities import TierCapabilities
    from panday_core.egress.thread import ProxySettings, ProxyThread
    from panday_core.execution import ChildProcess
    from panday_core.t0.sandbox import T0Sandbox
    from panday_core.types import ExecEvent, ExecSpec, Snapshot
    from panday_tier_macos.placeholders import Kind

TIER: Final = SandboxTier.T2_MACOS

BASE_ENV: Final[Mapping[str, str]] = {
    "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
    "LANG": "en_US.UTF-8",
    "TERM": "dumb",
}
"""The fixed part of every command's environment; HOME and TMPDIR are the session's, and the
policy's `env` goes on top. Nothing is inherited from the caller."""

START: Final = 'ulimit -c 0; cd -- "$1" || exit 125; unset OLDPWD; shift; exec "$@"'
"""Runs inside the profile: no core dumps (a dump is the process's memory written to disk),
then the working directory (``cd`` would leave the caller's in OLDPWD, so that goes), then
the command. Arguments arrive as positional parameters and are never parsed by the shell.
Exit 125 means the working directory could not be entered."""

PROFILE_CHECK_TIMEOUT_S: Final = 30

EMPTY_HOME: Final = "/private/var/empty"
"""Stands in for a home directory of "/": ``//.ssh`` would match nothing, and the account's
home is protected separately anyway."""


DYLD_REASON: Final = (
    "is a dynamic-loader variable, and macOS removes every DYLD_* variable when a protected "
    "system program starts (System Integrity Protection); each command starts through "
    "/bin/sh, so it would never reach the command. Refused rather than silently dropped "
    "(allow_env_hooks cannot change that on this tier)"
)


TMP_BASE_NAME: Final = "panday-t2m"
"""The per-user directory under the user's temp dir that holds every session's temp dir."""


def session_tmp_base(parent: str | None = None) -> str:
    """The per-user directory every session's private temp dir is made in (resolved): made
    0700 when missing; refused (`Internal`) unless it is a directory of this user's, not a
    link, that no one else can enter. `parent` defaults to the user's temp dir."""
    import tempfile  # noqa: PLC0415 - only sessions need it

    base = os.path.join(os.path.realpath(parent or tempfile.gettempdir()), TMP_BASE_NAME)  # noqa: PTH118 - a plain string path
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)  # noqa: PTH102 - as above
    st = os.lstat(base)
    if (
        not stat.S_ISDIR(st.st_mode)
        or st.st_uid != os.geteuid()
        or stat.S_IMODE(st.st_mode) & 0o077
    ):
        raise Internal(
            f"{base} must be a directory of this user's that no one else can enter (mode "
            "0700, not a link); remove it and try again"
        )
    return base


def _refuse(field: str, reason: str) -> PolicyViolation:
    return PolicyViolation(str(TIER), [Refusal(field=field, reason=reason)])


def env_refusals(policy: SandboxPolicy) -> list[Refusal]:
    """``env`` entries this tier will not set: every ``DYLD_*`` name, listed in
    ``allow_env_hooks`` or not, and (as the model already does; a policy built around its
    checks must not slip one past the tier) any other start-up hook not listed there."""
    refusals: list[Refusal] = []
    for name in sorted(policy.env):
        if name.startswith("DYLD_"):
            refusals.append(Refusal(field=f"env.{name}", reason=DYLD_REASON))
        elif is_env_hook(name) and name not in policy.allow_env_hooks:
            reason = "a start-up hook not listed in allow_env_hooks"
            refusals.append(Refusal(field=f"env.{name}", reason=reason))
    return refusals


def _home(path: str) -> str:
    # The profile's secret rules are written under this path: resolved, and spelled as the
    # disk spells it (a $HOME in another case would name the same directory, not the rules').
    real = disk_spelling(os.path.realpath(path))
    return EMPTY_HOME if real == "/" else real


def protected_homes() -> tuple[str, str]:
    """The runner's ``$HOME`` and the account's home (they differ when a caller sets HOME)."""
    import pwd  # noqa: PLC0415 - only sessions need the user database

    account = pwd.getpwuid(os.getuid()).pw_dir
    return _home(os.environ.get("HOME") or account), _home(account)


def guard_params(roots: Roots) -> dict[str, str]:
    """The values of the profile's protected-entry and ancestor parameters, in order."""
    return {
        **{f"{PARAM_PROTECTED}{i}": path for i, path in enumerate(roots.protected)},
        **{f"{PARAM_ANCESTOR}{i}": path for i, path in enumerate(roots.ancestors)},
    }


def build_environment(policy: SandboxPolicy, workspace: str, tmpdir: str) -> dict[str, str]:
    env = dict(BASE_ENV)
    env["HOME"] = workspace
    env["TMPDIR"] = tmpdir + "/"
    env.update(policy.env)
    return env


def stricter_limit(a: int | None, b: int | None) -> int | None:
    present = [x for x in (a, b) if x is not None]
    return min(present) if present else None


def start_proxy(
    policy: SandboxPolicy, session_id: str, settings: ProxySettings | None
) -> tuple[ProxyThread, ProxyEndpoint]:
    """The session's egress proxy for `policy.net` and where the profile must point, or
    `PolicyViolation` naming ``net.allow`` (and the cause) when it cannot start."""
    from panday_core.egress.thread import ProxyThread  # noqa: PLC0415 - sessions with net.allow only

    proxy = ProxyThread(policy.net, session_id=session_id, settings=settings)
    try:
        port = proxy.start_loopback()
        return proxy, ProxyEndpoint(host="127.0.0.1", port=port)
    except (OSError, RuntimeError, TimeoutError) as exc:
        proxy.close()
        caps = capabilities.host_capabilities(proxy_reason=f"it could not start: {exc}")
        require_enforceable(policy, caps)
        raise PolicyViolation(
            str(TIER), [Refusal(field="net.allow", reason=no_egress_proxy(str(exc)))]
        ) from exc


class _Session:
    __slots__ = (
        "commands",
        "files",
        "id",
        "missing",
        "params",
        "policy",
        "profile",
        "proxy",
        "running",
        "tmpdir",
        "workspace",
    )

    def __init__(
        self,
        *,
        session_id: str,
        policy: SandboxPolicy,
        profile: SeatbeltProfile,
        params: dict[str, str],
        workspace: str,
        tmpdir: str,
        files: SandboxHandle,
        proxy: ProxyThread | None = None,
        missing: tuple[tuple[str, Kind], ...] = (),
    ) -> None:
        self.id = session_id
        self.missing = missing
        self.policy = policy
        self.profile = profile
        self.params = params
        self.workspace = workspace
        self.tmpdir = tmpdir
        self.files = files
        self.proxy = proxy
        self.running: set[ChildProcess] = set()
        self.commands = 0

    @property
    def env(self) -> dict[str, str]:
        return build_environment(self.policy, self.workspace, self.tmpdir)

    def env_for(self, command_id: str | None) -> tuple[dict[str, str], str | None]:
        """A command's environment: the session's, then the proxy variables with
        credentials issued for its id (the caller's, else ``cmd-N``). Also the id the
        credentials were issued for (None without a proxy), which `command_ended` takes
        when the command has ended."""
        env = self.env
        if self.proxy is None:
            return env, None
        self.commands += 1
        issued = command_id or f"cmd-{self.commands}"
        try:
            env.update(self.proxy.environment(issued))
        except ValueError as exc:
            raise ValueError(f"command_id: {exc}") from None
        return env, issued

    def command_ended(self, issued: str | None) -> None:
        """The command `env_for` issued credentials for has ended: give them back. With the
        last reference to them they stop working at once and the tunnels opened with them
        are cut, so a process the command left running (Seatbelt has no jail that dies with
        the command) or a copy of its environment reaches nothing more through the proxy."""
        if issued is not None and self.proxy is not None:
            self.proxy.revoke(issued)

    def cwd(self, cwd: str | None) -> str:
        if cwd is None:
            return self.workspace
        if "\x00" in cwd:
            raise ValueError("cwd: contains a NUL byte")
        return posixpath.normpath(posixpath.join(self.workspace, cwd))


async def _check_profile_applies(session: _Session) -> None:
    """Apply the session's profile once to /usr/bin/true before any command runs under it.

    A profile this macOS cannot compile (an operation or filter it does not know) or apply
    would otherwise surface as a strange exit status of the user's first command; here it
    becomes an `Internal` error at `create`, with sandbox-exec's own message.
    """
    import asyncio  # noqa: PLC0415 - already loaded by any caller of this async method

    argv = session.profile.argv(["/usr/bin/true"], session.params)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": BASE_ENV["PATH"]},
        cwd=session.workspace,
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout=PROFILE_CHECK_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise Internal("the generated Seatbelt profile did not apply within 30 s") from None
    if proc.returncode != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        detail = lines[-1] if lines else f"exit status {proc.returncode}"
        raise Internal(f"the generated Seatbelt profile does not apply on this macOS: {detail}")


class T2MacosSandbox:
    """The T2 macOS tier: Seatbelt through `/usr/bin/sandbox-exec`."""

    def __init__(self, *, egress: ProxySettings | None = None) -> None:
        """`egress` configures the egress proxy of sessions with ``net.allow`` (resolver,
        audit callback or JSONL file, limits); the defaults suit real use."""
        self._sessions: dict[str, _Session] = {}
        self._t0: T0Sandbox | None = None
        self._egress = egress

    @property
    def tier(self) -> SandboxTier:
        return TIER

    def capabilities(self) -> TierCapabilities:
        return capabilities.host_capabilities()

    def unavailable_reason(self) -> str | None:
        return capabilities.unavailable_reason()

    @property
    def _files(self) -> T0Sandbox:
        if self._t0 is None:
            from panday_core.t0.sandbox import T0Sandbox  # noqa: PLC0415 - lazy

            self._t0 = T0Sandbox()
        return self._t0

    async def create(self, spec: SessionSpec) -> SandboxHandle:
        policy = spec.policy
        # Refuse first, by field name, before anything is probed, made or spawned.
        require_enforceable(policy, self.capabilities())
        if policy.fs.workspace is None:
            raise _refuse("fs.workspace", "no workspace was given (the SDK sets it)")
        refused = env_refusals(policy)
        if refused:
            raise PolicyViolation(str(TIER), refused)
        homes = protected_homes()
        roots = open_roots(policy.fs, homes)
        reason = self.unavailable_reason()
        if reason is not None:
            raise TierUnavailable(str(TIER), reason)
        session_id = spec.session_id or f"t2m-{secrets.token_hex(6)}"
        if session_id in self._sessions:
            raise SandboxError(f"session {session_id!r} is already open")
        proxy, endpoint = (
            start_proxy(policy, session_id, self._egress) if policy.net.allow else (None, None)
        )
        try:
            session = await self._open(
                policy, session_id=session_id, roots=roots, homes=homes, endpoint=endpoint
            )
        except BaseException:
            if proxy is not None:
                proxy.close()
            raise
        session.proxy = proxy
        self._sessions[session_id] = session
        return SandboxHandle(id=session_id, tier=TIER, workspace=roots.workspace)

    async def _open(
        self,
        policy: SandboxPolicy,
        *,
        session_id: str,
        roots: Roots,
        homes: tuple[str, str],
        endpoint: ProxyEndpoint | None,
    ) -> _Session:
        """Profile, files, temp dir; a session whose profile applies here (or nothing left)."""
        workspace = roots.workspace
        profile = SeatbeltProfile.from_policy(
            policy, endpoint, protected=len(roots.protected), ancestors=len(roots.ancestors)
        )
        # get() holds each file to the policy's output ceiling, as T0 does.
        limits = msgspec.structs.replace(
            SandboxPolicy().limits, output_bytes=policy.limits.output_bytes
        )
        files_policy = SandboxPolicy(
            fs=msgspec.structs.replace(policy.fs, workspace=workspace), limits=limits
        )
        files = await self._files.create(SessionSpec(policy=files_policy, session_id=session_id))
        try:
            import tempfile  # noqa: PLC0415 - only sessions need it

            base = session_tmp_base()
            tmpdir = os.path.realpath(tempfile.mkdtemp(prefix="s-", dir=base))  # noqa: ASYNC240 - a few quick syscalls; a thread hop would cost more
        except BaseException:
            await self._files.destroy(files)
            raise
        params = {
            PARAM_WORKSPACE: workspace,
            PARAM_TMPDIR: tmpdir,
            PARAM_TMPBASE: base,
            PARAM_HOST_HOME: homes[0],
            PARAM_ACCOUNT_HOME: homes[1],
            **{f"{PARAM_STAGED}{i}": path for i, path in enumerate(roots.staged)},
            **guard_params(roots),
        }
        session = _Session(
            session_id=session_id,
            policy=policy,
            profile=profile,
            params={k: v for k, v in params.items() if k in profile.params},
            workspace=workspace,
            tmpdir=tmpdir,
            files=files,
            missing=roots.missing,
        )
        try:
            await _check_profile_applies(session)
        except BaseException:
            await self._files.destroy(files)
            import shutil  # noqa: PLC0415 - only cleanup needs it

            shutil.rmtree(tmpdir, ignore_errors=True)
            raise
        return session

    def _session(self, handle: SandboxHandle) -> _Session:
        session = self._sessions.get(handle.id)
        if session is None:
            raise SandboxError(f"no open T2 macOS session {handle.id!r}")
        return session

    async def exec(self, handle: SandboxHandle, spec: ExecSpec) -> AsyncIterator[ExecEvent]:
        """Run one command under the session's profile: output chunks, then one `ExecExit`."""
        from panday_core.execution import Supervisor, astream, spawn  # noqa: PLC0415 - lazy

        session = self._session(handle)
        limits = session.policy.limits
        command = ["/bin/sh", "-c", START, "panday", session.cwd(spec.cwd), *spec.argv]
        argv = session.profile.argv(command, session.params)
        env, issued = session.env_for(spec.command_id)
        held = Placeholders()
        try:
            held = Placeholders.make(session.missing)
            proc = spawn(argv, env=env, stdin=spec.stdin is not None)
            session.running.add(proc)
            try:
                async for event in astream(
                    proc,
                    Supervisor(),
                    stdin_data=spec.stdin,
                    output_cap=limits.output_cap,
                    timeout_ms=stricter_limit(spec.timeout_ms, limits.wall_clock_cap),
                ):
                    yield event
            finally:
                session.running.discard(proc)
                if not session.running:
                    # Nothing of the session should run now: what does left the group.
                    host_sweep(session.tmpdir)
        finally:
            held.release()
            session.command_ended(issued)  # also when it could not be spawned

    async def put(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        await self._files.put(self._session(handle).files, path, data)

    async def get(self, handle: SandboxHandle, path: str, *, max_bytes: int) -> bytes:
        return await self._files.get(self._session(handle).files, path, max_bytes=max_bytes)

    async def snapshot(self, handle: SandboxHandle) -> Snapshot:
        return await self._files.snapshot(self._session(handle).files)

    async def destroy(self, handle: SandboxHandle) -> None:
        """Kill the session's running commands and every process left under its profile,
        then stop its proxy, close its files and remove its temp dir."""
        session = self._sessions.pop(handle.id, None)
        if session is None:
            return
        from panday_core.execution import Supervisor  # noqa: PLC0415 - lazy

        for proc in list(session.running):
            Supervisor().kill(proc)
        _, swept = host_sweep(session.tmpdir)
        if session.proxy is not None:
            session.proxy.close()
        await self._files.destroy(session.files)
        import shutil  # noqa: PLC0415 - only destroy needs it

        shutil.rmtree(session.tmpdir, ignore_errors=True)
        if not swept:
            raise Internal(
                f"session {handle.id!r}: processes under its profile were still forking after "
                "every kill pass; they may still run"
            )
