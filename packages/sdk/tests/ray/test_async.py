"""The async face and futures: ``await pool.run``, ``async for`` over ``pool.map``, a
cancelled task kills its jailed command on its node, and `submit` futures cancel the same
way."""
# pyright: reportMissingModuleSource=false

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING

import pytest

from panday.ray import AsyncPool, Pool
from panday_core.errors import CommandNotFound, SandboxError

if TYPE_CHECKING:
    from conftest import Host, LocalCluster

LIMITED = {"limits": {"mem_bytes": 128 << 20, "pids": 64}}


def _sleepers(host: Host, actors: set[int]) -> set[int]:
    return {p for p in host.descendants(actors) if host.comm(p) == "sleep"}


def test_async_run_map_and_cancellation(cluster: LocalCluster, host: Host) -> None:
    async def main() -> None:
        async with AsyncPool(LIMITED, nodes=cluster.base) as pool:
            result = await pool.run(["echo", "hello"])
            assert result.stdout == b"hello\n"
            cmds = [["sh", "-c", 'echo "$0"', str(i)] for i in range(8)]
            seen = [r async for r in pool.map(cmds)]
            assert [getattr(r, "stdout", None) for r in seen] == [
                f"{i}\n".encode() for i in range(8)
            ]
            with pytest.raises(CommandNotFound):
                await pool.run(["no-such-program-here"])
            mixed = [
                r
                async for r in pool.map(
                    [["true"], ["no-such-program-here"]], return_exceptions=True
                )
            ]
            assert isinstance(mixed[1], SandboxError)

            # Cancellation kills the jailed command on its node.
            actors = {pid for report in pool.pool.nodes.values() for pid in report.pids}
            task = asyncio.create_task(pool.run(["sleep", "60"]))
            for _ in range(300):  # positive control: the jailed sleep really runs
                if _sleepers(host, actors):
                    break
                await asyncio.sleep(0.1)
            running = _sleepers(host, actors)
            assert running, "no jailed sleep started"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not await asyncio.to_thread(host.wait_gone, running, 10.0)
            assert pool.pool.counts["cancelled"] == 1
            # The slot goes on serving.
            assert (await pool.run(["echo", "after"])).stdout == b"after\n"

    asyncio.run(main())


def test_submit_returns_futures_that_cancel_the_jail(cluster: LocalCluster, host: Host) -> None:
    with Pool(LIMITED, nodes=cluster.base) as pool:
        futures = [pool.submit(["sh", "-c", f"echo {i}"]) for i in range(4)]
        assert [f.result(timeout=60).stdout for f in futures] == [
            f"{i}\n".encode() for i in range(4)
        ]
        actors = {pid for report in pool.nodes.values() for pid in report.pids}
        slow = pool.submit(["sleep", "60"])
        host.wait_for(lambda: _sleepers(host, actors), 30, "the jailed sleep")
        running = _sleepers(host, actors)
        assert slow.cancel()
        with pytest.raises(concurrent.futures.CancelledError):
            slow.result()
        assert not host.wait_gone(running, 10.0)

        # Futures compose with asyncio.
        async def both() -> list[bytes]:
            refs = [pool.submit(["echo", s]) for s in ("a", "b")]
            return [r.stdout for r in await asyncio.gather(*map(asyncio.wrap_future, refs))]

        assert asyncio.run(both()) == [b"a\n", b"b\n"]
