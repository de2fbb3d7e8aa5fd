"""The asynchronous face of panday: ``async with panday.aio.open() as session``.

Every tier implements the async `Sandbox` protocol (`panday_core.protocol`); an
`AsyncSession` is one open handle on one of them, with the same methods as the synchronous
`panday.Session`. Output streams through the event loop; nothing blocks it while a
command runs.

>>> import asyncio, panday.aio
>>> async def main() -> bytes:
...     async with panday.aio.open() as session:
...         result = await session.run(["echo", "hello"])
...     return result.stdout
>>> asyncio.run(main())
b'hello\\n'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from panday import tiers
from panday._shared import (
    DEFAULT_GET_BYTES,
    SessionInfo,
    StartGuard,
    exec_spec,
    resolve_policy,
)

if TYPE_CHECKING:
    import os
    from collections.abc import AsyncIterator, Generator, Mapping, Sequence

    from panday_core.policy import SandboxPolicy
    from panday_core.protocol import Sandbox
    from panday_core.types import ExecEvent, ExecResult, ExecSpec, SandboxHandle, Snapshot
    from panday_tier_linux.enforcement import Enforcement


def sandbox_for(tier: str) -> Sandbox:
    """A fresh instance of `tier`'s async `Sandbox` (its package imported only now;
    `TierUnavailable` when it is not installed on this host)."""
    return tiers.sandbox(tier)


class AsyncSession(SessionInfo):
    """One open session on one tier (asynchronous). Close it, or use ``async with``."""

    def __init__(self, sandbox: Sandbox, handle: SandboxHandle, policy: SandboxPolicy) -> None:
        super().__init__(
            session_id=handle.id, tier=str(handle.tier), workspace=handle.workspace, policy=policy
        )
        self.sandbox = sandbox
        """The tier's `Sandbox` this session is open on."""
        self._handle: SandboxHandle | None = handle

    @property
    def handle(self) -> SandboxHandle:
        """The tier's handle; `SessionClosed` once the session is closed."""
        if self._handle is None:
            from panday_core.errors import SessionClosed

            raise SessionClosed(self.id)
        return self._handle

    async def run(
        self,
        cmd: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's wall clock (tier)
    ) -> ExecResult:
        """Run `cmd` (a list; never a shell line) to completion; its output is kept up to
        ``limits.output_bytes`` per stream. A crossed ceiling is in ``result.breach``."""
        from panday_core.execution import acollect

        return await acollect(self.stream(cmd, stdin=stdin, cwd=cwd, timeout=timeout))

    def stream(
        self,
        cmd: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[ExecEvent]:
        """`OutputChunk`s as the command writes them, then exactly one `ExecExit`.

        Raises `CommandNotFound` when the program cannot be started inside the sandbox, and
        `SessionClosed` at once (not when iterated) on a closed session.
        Leaving the loop early kills the command's whole process tree.
        """
        _ = self.handle  # a closed session refuses here, as the synchronous one does
        return self._events(exec_spec(cmd, stdin=stdin, cwd=cwd, timeout=timeout))

    async def _events(self, spec: ExecSpec) -> AsyncIterator[ExecEvent]:
        guard = StartGuard(self.policy, spec, self.tier)
        events = self.sandbox.exec(self.handle, spec)
        try:
            async for event in events:
                for out in guard.feed(event):
                    yield out
        except BaseException as exc:
            failure = guard.failure(exc)
            if failure is exc:
                raise
            raise failure from None
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    async def put(self, path: str, data: bytes | str) -> None:
        """Write a workspace file (relative to the workspace; it cannot leave it)."""
        payload = data.encode() if isinstance(data, str) else data
        await self.sandbox.put(self.handle, path, payload)

    async def get(self, path: str, *, max_bytes: int = DEFAULT_GET_BYTES) -> bytes:
        """A whole file of the workspace or a staged path (`LimitExceeded` past `max_bytes`)."""
        return await self.sandbox.get(self.handle, path, max_bytes=max_bytes)

    async def snapshot(self) -> Snapshot:
        """The workspace's files with sizes, modes and SHA-256 digests."""
        return await self.sandbox.snapshot(self.handle)

    async def enforcement(self) -> Enforcement:
        """What the kernel reports a jail of this session actually has (T2 Linux: namespaces,
        capabilities, seccomp, mounts, cgroup ceilings). `Unsupported` on tiers that cannot
        read it back yet."""
        read = getattr(self.sandbox, "enforcement", None)
        if read is None:
            from panday_core.errors import Unsupported

            raise Unsupported(f"tier {self.tier} has no enforcement read-back")
        report: Enforcement = await read(self.handle)
        return report

    async def close(self) -> None:
        """End the session: its processes, cgroups and temporary files are gone. Idempotent."""
        handle, self._handle = self._handle, None
        if handle is not None:
            await self.sandbox.destroy(handle)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def open_session(policy: SandboxPolicy, tier: str) -> AsyncSession:
    """Open `policy` (workspace set) on exactly `tier` (a tier name, not auto)."""
    from panday_core.types import SessionSpec

    sandbox = sandbox_for(tier)
    handle = await sandbox.create(SessionSpec(policy=policy))
    return AsyncSession(sandbox, handle, policy)


class _Opening:
    """What `open` returns: await it for a session, or use it with ``async with``."""

    def __init__(self, policy: SandboxPolicy, tier: str) -> None:
        self._policy = policy
        self._tier = tier
        self._session: AsyncSession | None = None

    async def _open(self) -> AsyncSession:
        return await open_session(self._policy, tiers.choose(self._policy, self._tier))

    def __await__(self) -> Generator[object, None, AsyncSession]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSession:
        self._session = await self._open()
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()


def open(  # noqa: A001 - the public API's name, as in panday.open
    policy: SandboxPolicy | Mapping[str, object] | str | os.PathLike[str] | None = None,
    *,
    tier: str = "auto",
) -> _Opening:
    """Open a session: ``async with panday.aio.open(...) as s`` or ``s = await panday.aio.open()``.

    Arguments as for `panday.open`. The policy is validated here, before anything else.
    """
    resolved = resolve_policy(policy)
    return _Opening(resolved, tiers.check_name(tier))
