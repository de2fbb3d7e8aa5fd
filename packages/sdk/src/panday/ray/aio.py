"""The pool's async face: ``await pool.run(...)``, ``async for r in pool.map(...)``, and
cancellation that kills the jailed command (cancel the task that awaits it)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Self

from panday.ray.wire import Job
from panday_core.errors import SandboxError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Sequence

    from panday.ray.pool import Pool
    from panday.ray.wire import Done
    from panday_core.types import ExecResult


class AsyncPool:
    """A `Pool` used from asyncio. ``async with AsyncPool(policy, **options) as pool`` starts
    one (in a thread: judging the nodes takes a while) and closes it; `AsyncPool.of(pool)`
    wraps a pool that is already running (the pool itself knows nothing of asyncio).

    A task awaiting `run` that is cancelled cancels its command: never sent if it is still
    queued, its jail killed on its node if it runs. Leaving an ``async for`` over `map`
    early cancels the commands not yet yielded.
    """

    def __init__(self, policy: object = None, **options: object) -> None:
        self._args = (policy, options)
        self._pool: Pool | None = None

    @classmethod
    def of(cls, pool: Pool) -> AsyncPool:
        wrapped = cls()
        wrapped._pool = pool
        return wrapped

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            raise SandboxError("the async pool is not open: use `async with AsyncPool(...)`")
        return self._pool

    async def __aenter__(self) -> Self:
        from panday.ray.pool import Pool  # noqa: PLC0415 - Ray comes with it

        policy, options = self._args
        self._pool = await asyncio.to_thread(Pool, policy, **options)  # pyright: ignore[reportArgumentType] - Pool's own keywords, checked at run time
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._pool is not None:
            await asyncio.to_thread(self._pool.close)

    async def run(
        self,
        cmd: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's time limit, as in Pool.run
        idempotent: bool = False,
    ) -> ExecResult:
        """`Pool.run`, awaited."""
        future = self.pool.submit(cmd, stdin=stdin, cwd=cwd, timeout=timeout, idempotent=idempotent)
        return await asyncio.wrap_future(future)

    async def run_job(self, job: Job) -> Done:
        """`Pool.run_job`, awaited."""
        return await asyncio.wrap_future(self.pool.submit_job(job))

    async def map(
        self,
        cmds: Iterable[Sequence[str]],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - each command's time limit, as in Pool.map
        idempotent: bool = False,
        return_exceptions: bool = False,
    ) -> AsyncIterator[ExecResult | SandboxError]:
        """Every command sent at once; results yielded in input order as they are ready.
        A failed command raises its own error at its place (the rest are cancelled), or takes
        its place with `return_exceptions`."""
        jobs = [Job(argv=c, timeout=timeout, idempotent=idempotent) for c in cmds]
        futures = self.pool.submit_jobs(jobs)
        try:
            for future in futures:
                try:
                    done = await asyncio.wrap_future(future)
                except SandboxError as exc:
                    if not return_exceptions:
                        raise
                    yield exc
                    continue
                yield done.result
        finally:
            for future in futures:
                future.cancel()
