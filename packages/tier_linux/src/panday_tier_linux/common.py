"""What T2 and T1 Linux sessions share: everything about a session but how it launches.

Both tiers fix their jail at open and launch each command from it their own way (bwrap
for T2, a restricted thread's spawn for T1). The rest is the same code, here once: the
session id's rules, a command's working directory and time limit, ``run``, files through
a T0 session over the session's own roots, and the async `Sandbox` protocol's table of
open sessions.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Generic, Protocol, Self, TypeVar

from panday_core.errors import Internal
from panday_core.execution import collect
from panday_core.types import ExecSpec, SandboxHandle

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator, Sequence

    from panday_core.capabilities import TierCapabilities
    from panday_core.policy import SandboxPolicy
    from panday_core.t0.session import T0Session
    from panday_core.types import ExecEvent, ExecResult, SessionSpec, Snapshot
    from panday_tier_linux.binds import Roots

MAX_ID = 64
"""A session id's longest form (it names cgroups and state directories)."""


def session_id(given: str | None) -> str:
    """`given` when it is a usable id (1-64 of ``[A-Za-z0-9._-]``, no leading dot), a
    random one for None; ValueError otherwise."""
    if given is None:
        return os.urandom(6).hex()
    ok = given and len(given) <= MAX_ID and all(c.isalnum() or c in "-_." for c in given)
    if not ok or given.startswith("."):
        raise ValueError(f"session_id: {given!r} must be 1-64 characters of [A-Za-z0-9._-]")
    return given


class JailSession:
    """The shared half of a Linux session; a tier's class adds its launch (`exec`,
    `aexec`), `close` and `enforcement`, and sets `id`, `policy`, `roots` and `workspace`."""

    id: str
    policy: SandboxPolicy
    roots: Roots
    closed: bool
    _t0: T0Session | None

    @property
    def workspace(self) -> str:
        raise NotImplementedError

    def exec(
        self, spec: ExecSpec, *, stdin_source: int | None = None
    ) -> Generator[ExecEvent, None, None]:
        raise NotImplementedError

    def _cwd(self, cwd: str | None) -> str:
        """A command's working directory: the workspace, an absolute path as given, or a
        relative one that stays inside the workspace."""
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
        """The command's wall clock: its own limit or the policy's, the smaller."""
        values = [v for v in (spec.timeout_ms, self.policy.limits.wall_clock_cap) if v is not None]
        return min(values) if values else None

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

    # ------------------------------------------------------------------ files

    def _files(self) -> T0Session:
        """put / get / snapshot go through a T0 session over the same workspace and staged
        directories: the core's confined path resolution (openat2 RESOLVE_BENEATH, or a
        no-follow walk), shared by every tier, rather than a second implementation here."""
        if self._t0 is None:
            import msgspec

            from panday_core.policy import SandboxPolicy
            from panday_core.t0.session import T0Session

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

    def _close_files(self) -> None:
        if self._t0 is not None:
            self._t0.close()
            self._t0 = None

    def put(self, path: str, data: bytes) -> None:
        """Write a workspace file (atomically; never through a link; refused when ro)."""
        self._files().write(path, data, make_parents=True)

    def get(self, path: str, *, max_bytes: int) -> bytes:
        """A whole file of the workspace or a staged directory (`LimitExceeded` if larger)."""
        return self._files().read_all(path, max_bytes=max_bytes)

    def snapshot(self) -> Snapshot:
        from panday_core.t0.sandbox import snapshot_of

        return snapshot_of(self._files(), self.id)

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


E_co = TypeVar("E_co", covariant=True)


class OpenSession(Protocol[E_co]):
    """What the async table needs of a session (`JailSession` subclasses)."""

    @property
    def id(self) -> str: ...
    @property
    def workspace(self) -> str: ...
    def aexec(self, spec: ExecSpec) -> AsyncIterator[ExecEvent]: ...
    def put(self, path: str, data: bytes) -> None: ...
    def get(self, path: str, *, max_bytes: int) -> bytes: ...
    def snapshot(self) -> Snapshot: ...
    def enforcement(self) -> E_co: ...
    def close(self) -> None: ...


S = TypeVar("S", bound=OpenSession[object])


class SessionTable(Generic[S]):
    """The async `Sandbox` protocol over a tier's synchronous sessions: open sessions by
    handle id, each call forwarded. A tier's class adds `tier`, `capabilities`,
    `unavailable_reason`, `_open` and its typed `enforcement`; `exec` streams through the
    core pump's asyncio driver, so the loop is never blocked while a command runs."""

    def __init__(self) -> None:
        self._sessions: dict[str, S] = {}

    @property
    def tier(self) -> str:
        raise NotImplementedError

    def capabilities(self) -> TierCapabilities:
        raise NotImplementedError

    def unavailable_reason(self) -> str | None:
        raise NotImplementedError

    def _open(self, spec: SessionSpec) -> S:
        raise NotImplementedError

    def available(self) -> bool:
        return self.unavailable_reason() is None

    async def create(self, spec: SessionSpec) -> SandboxHandle:
        session = self._open(spec)
        if session.id in self._sessions:
            session.close()
            raise Internal(f"session id {session.id!r} is already open")
        self._sessions[session.id] = session
        return SandboxHandle(id=session.id, tier=self.tier, workspace=session.workspace)

    def session(self, handle: SandboxHandle) -> S:
        """The synchronous session behind `handle` (for the SDK's blocking face)."""
        try:
            return self._sessions[handle.id]
        except KeyError:
            raise Internal(f"no open session {handle.id!r}") from None

    def exec(self, handle: SandboxHandle, spec: ExecSpec) -> AsyncIterator[ExecEvent]:
        return self.session(handle).aexec(spec)

    async def put(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        self.session(handle).put(path, data)

    async def get(self, handle: SandboxHandle, path: str, *, max_bytes: int) -> bytes:
        return self.session(handle).get(path, max_bytes=max_bytes)

    async def snapshot(self, handle: SandboxHandle) -> Snapshot:
        return self.session(handle).snapshot()

    async def destroy(self, handle: SandboxHandle) -> None:
        session = self._sessions.pop(handle.id, None)
        if session is not None:
            session.close()
