"""Faults are explicit: a node killed mid-command yields `WorkerLost` for exactly the commands
it held, correct results for the rest, and a retry only for commands marked idempotent."""
# pyright: reportMissingModuleSource=false

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday.ray import Done, Job, Pool, WorkerLost

if TYPE_CHECKING:
    from conftest import Host, LocalCluster

    from panday_core.errors import SandboxError

LIMITED = {"limits": {"mem_bytes": 128 << 20, "pids": 64}}
GO = "go"
# Each command waits, in its session's workspace (its cwd), for a `go` file the test writes
# only once the victim node is gone: no command can finish on the victim however late the
# kill comes on a busy machine (a fixed sleep could, and did at load 10). The wait is bounded
# (60 s) so that a command never outlives a failed test.
# A node added, a pool started, the node killed and a second pool started: about 20 s on an
# idle host, past pytest's default 120 s at load 10 (seen), so these tests get five minutes.
SLOW = pytest.mark.timeout(300)
WAIT_FOR_GO = (
    f'i=0; while [ ! -e {GO} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo "$0"'
)


def _jobs(count: int, *, idempotent: bool) -> list[Job]:
    return [
        Job(argv=["sh", "-c", WAIT_FOR_GO, str(i)], idempotent=idempotent) for i in range(count)
    ]


def _kill_mid_command(
    cluster: LocalCluster, host: Host, *, idempotent: bool
) -> tuple[Pool, str, list[Done | SandboxError], set[int], set[str], set[str]]:
    """A pool over a fresh victim node and one base worker; the victim is killed (no grace)
    while its jails run. Returns the pool, the victim's id, the outcomes, its jail pids and
    its actors' cgroup directories and workspaces (there while the jails ran)."""
    victim = cluster.add_node()
    victim_id = victim.node_id
    survivor = cluster.base[-1]
    pool: Pool | None = None
    removed = False
    others: set[str] = set()
    runner: threading.Thread | None = None
    try:
        host.wait_for(lambda: victim_id in _live(), 30, "the victim node")
        pool = Pool(LIMITED, nodes=[victim_id, survivor], depth=2)
        assert sorted(pool.nodes) == sorted([victim_id, survivor])
        actors = set(pool.nodes[victim_id].pids)
        outcomes: list[Done | SandboxError] = []
        jobs = _jobs(4, idempotent=idempotent)  # 2 per node: one running, one queued behind it
        runner = threading.Thread(
            target=lambda: outcomes.extend(pool.map_jobs(jobs, return_exceptions=True))
        )
        runner.start()

        def jails() -> set[int]:
            return {p for p in host.descendants(actors) if host.comm(p) == "bwrap"}

        host.wait_for(jails, 20, "a jail running on the victim node")
        running = jails() | host.descendants(jails())
        workspaces = {
            str(p) for a in actors for p in Path(tempfile.gettempdir()).glob(f"panday-ray-{a}-*")
        }
        assert len(workspaces) == len(actors)  # positive control: each actor's workspace
        cgroups = host.cgroup_dirs(actors)
        assert cgroups  # positive control: the jail's ceilings are in place on the host
        others = {
            str(p)
            for a in pool.nodes[survivor].pids
            for p in Path(tempfile.gettempdir()).glob(f"panday-ray-{a}-*")
        }
        assert others  # positive control: where the survivor's commands wait for `go`
        cluster.remove_node(victim, graceful=False)
        removed = True
        left = host.wait_gone(actors | running, 60)
        assert not left, f"the victim's actors and jails outlived it: {host.describe(left)}"
        for workspace in others:
            (Path(workspace) / GO).touch()
        runner.join(timeout=60)
        assert not runner.is_alive()
    except BaseException:
        # A failed check must not leave this pool's actors holding the survivor's CPU: every
        # later test that needs that node would wait for a slot that never frees (seen: the
        # rest of the module timed out in its pools' start after one failure here).
        for workspace in others:
            (Path(workspace) / GO).touch()
        if runner is not None:
            runner.join(timeout=90)
        if pool is not None:
            pool.close()
        if not removed:  # nor leave the victim for the next test's pools
            cluster.remove_node(victim, graceful=False)
        raise
    return pool, victim_id, outcomes, running, cgroups, workspaces


def _live() -> set[str]:
    import ray  # noqa: PLC0415 - conftest has set Ray's environment up by now

    return {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}


@SLOW
def test_killed_node_loses_exactly_its_commands(
    cluster: LocalCluster, host: Host, tmp_path: Path
) -> None:
    pool, victim, outcomes, jails, cgroups, workspaces = _kill_mid_command(
        cluster, host, idempotent=False
    )
    try:
        assert len(outcomes) == 4
        lost = {i: o for i, o in enumerate(outcomes) if isinstance(o, WorkerLost)}
        done = {i: o for i, o in enumerate(outcomes) if isinstance(o, Done)}
        assert len(lost) + len(done) == 4
        # Exactly the victim's commands are lost (round robin gave it two), each sent once.
        assert len(lost) == 2
        assert all(e.node_id == victim and e.attempts == 1 for e in lost.values())
        # The rest completed on the survivor with their own, correct output.
        for i, d in done.items():
            assert d.node_id != victim
            assert d.result.stdout == f"{i}\n".encode()
        # Never reported as done: the audit has a "lost" record per lost command, on the victim.
        lost_records = [r for r in pool.records if r.outcome == "lost"]
        assert {r.node_id for r in lost_records} == {victim}
        assert len(lost_records) == 2
        assert victim in pool.lost
        # The pool goes on with the survivor alone.
        assert pool.slots == 1
        assert pool.run(["echo", "after"]).stdout == b"after\n"
    finally:
        pool.close()
    # The victim's jails died with it (bwrap --die-with-parent)...
    assert not host.wait_gone(jails)
    # ...and a session opened beside its stale cgroups reaps them (the tier's own rule). It
    # opens in a process of its own: a process sweeps each place once (`cgroups._SWEPT`), and
    # this one may have swept before the victim died.
    opener = (
        "import json, sys, panday\n"
        "with panday.open(json.loads(sys.argv[1])) as session:\n"
        "    assert session.run(['true']).exit_code == 0\n"
    )
    policy = json.dumps({**LIMITED, "fs": {"workspace": str(tmp_path)}})
    opened = subprocess.run(
        [sys.executable, "-c", opener, policy], capture_output=True, timeout=120, check=False
    )
    assert opened.returncode == 0, opened.stderr.decode(errors="replace")
    assert not {d for d in cgroups if Path(d).exists()}, "the killed actor's cgroups stayed"
    # Its workspace outlived it (no one could remove it); the next actor on the host does.
    assert {d for d in workspaces if Path(d).exists()} == workspaces
    with Pool(None, nodes=cluster.base[:1]):
        assert not {d for d in workspaces if Path(d).exists()}, "a dead actor's workspace"


@SLOW
def test_idempotent_commands_are_retried_elsewhere(cluster: LocalCluster, host: Host) -> None:
    pool, victim, outcomes, _, _, _ = _kill_mid_command(cluster, host, idempotent=True)
    try:
        assert all(isinstance(o, Done) for o in outcomes), outcomes
        done = [o for o in outcomes if isinstance(o, Done)]
        assert [d.result.stdout for d in done] == [f"{i}\n".encode() for i in range(4)]
        assert all(d.node_id != victim for d in done)
        assert sorted(d.attempts for d in done) == [1, 1, 2, 2]
        assert [r.node_id for r in pool.records if r.outcome == "lost"] == [victim, victim]
    finally:
        pool.close()
