"""Fail closed per node: a node whose host really lacks what the policy needs refuses, the
pool says which node and why, and no command is ever sent there.

How a node is made to lack something (conftest.ConstrainedNode): its whole Ray node (raylet,
object store, the worker processes that host our actors) runs in a mount namespace where
the host fact is different. ``bwrap`` gone: a char device is bound over every bubblewrap
panday would find, so the tier's own search finds none there. cgroups gone: an empty
read-only tmpfs covers /sys/fs/cgroup, so no cgroup can be made there. Nothing in panday is
told to pretend: the actor runs the same `panday.open` as anywhere, and the jail's commands
would see the same filesystem. A control node started the same way with nothing hidden
must accept, so the namespace alone is not what refuses.
"""
# pyright: reportMissingModuleSource=false

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from panday.ray import ClusterRefused, Done, Job, Pool
from panday_core.types import ExecResult
from panday_tier_linux import host as tier_host

if TYPE_CHECKING:
    from conftest import ConstrainedNode, Host, LocalCluster, NodeMaker

LIMITED = {"limits": {"mem_bytes": 128 << 20, "pids": 64}}


class Nodes:
    def __init__(
        self, control: ConstrainedNode, no_bwrap: ConstrainedNode, no_cg: ConstrainedNode
    ) -> None:
        self.control = control
        self.no_bwrap = no_bwrap
        self.no_cgroups = no_cg


@pytest.fixture(scope="module")
def constrained(make_node: NodeMaker) -> Nodes:
    assert tier_host.find_bwrap() is not None  # this host has bubblewrap...
    hidden = make_node.bwrap_paths()
    assert hidden  # ...and the constrained node hides every one panday would find
    return Nodes(
        make_node(),
        make_node(hide_files=hidden),
        make_node(cover_dirs=["/sys/fs/cgroup"]),
    )


def test_a_node_without_bwrap_refuses_and_receives_no_work(
    cluster: LocalCluster, constrained: Nodes, host: Host
) -> None:
    bad, control = constrained.no_bwrap.node_id, constrained.control.node_id
    nodes = [*cluster.base, bad, control]
    with Pool(LIMITED, nodes=nodes) as pool:
        assert sorted(pool.nodes) == sorted([*cluster.base, control])  # the control accepts
        assert list(pool.refused) == [bad]
        report = pool.refused[bad]
        # T1 runs there but refuses LIMITED's ceilings, naming why T2 cannot run.
        assert report.error == "PolicyViolation"
        assert all("bubblewrap" in reason for _, reason in report.refusals), report
        assert (bad, "limits.mem_bytes") in {(n, f) for n, f, _ in pool.refusals()}
        # Its actors are gone at once: nothing there can take a command.
        assert report.pids
        assert not host.wait_gone(report.pids)
        outcomes = pool.map_jobs([Job(argv=["true"]) for _ in range(30)])
        ran_on = {o.node_id for o in outcomes if isinstance(o, Done)}
        assert len(outcomes) == 30
        assert bad not in ran_on
        assert control in ran_on
        assert bad not in {r.node_id for r in pool.records}
    with pytest.raises(ClusterRefused, match=bad):
        Pool(LIMITED, nodes=nodes, require_all=True)


def test_a_node_without_cgroups_refuses_the_fields_it_cannot_enforce(
    constrained: Nodes,
) -> None:
    bad, control = constrained.no_cgroups.node_id, constrained.control.node_id
    with Pool(LIMITED, nodes=[bad, control]) as pool:
        assert list(pool.nodes) == [control]
        report = pool.refused[bad]
        assert report.error == "PolicyViolation"
        fields = {f for f, _ in report.refusals}
        assert fields == {"limits.mem_bytes", "limits.pids"}, report
        results = pool.map([["true"]] * 4)
        assert all(isinstance(r, ExecResult) and r.exit_code == 0 for r in results)
        assert {r.node_id for r in pool.records} == {control}
    # Positive control: the same node accepts a policy that needs no cgroup, and runs it.
    with Pool({"limits": {"wall_clock_ms": 10_000}}, nodes=[bad]) as pool:
        assert list(pool.nodes) == [bad]
        assert pool.run(["echo", "ran"]).stdout == b"ran\n"


def test_no_node_able_means_no_pool(constrained: Nodes) -> None:
    bad = sorted([constrained.no_bwrap.node_id, constrained.no_cgroups.node_id])
    with pytest.raises(ClusterRefused, match="no node can enforce this policy") as refused:
        Pool(LIMITED, nodes=bad)
    assert sorted(r.node_id for r in refused.value.refused) == bad
    # Both refuse by field: the node without bwrap through T1 (naming why T2 cannot run),
    # the one without cgroups through T2.
    assert {r.error for r in refused.value.refused} == {"PolicyViolation"}


def test_an_actor_off_its_node_refuses(cluster: LocalCluster) -> None:
    """Node affinity puts each actor where it was asked; the actor checks it all the same,
    because a command must only run on the node whose host was judged."""
    import msgspec  # noqa: PLC0415
    import ray  # noqa: PLC0415
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    from panday.ray import NodeWorker  # noqa: PLC0415

    here, elsewhere = cluster.base[0], cluster.base[1]
    doc = msgspec.msgpack.encode({"limits": {"wall_clock_ms": 10_000}})
    verdicts: dict[str, list[object]] = {}
    for expected in (here, elsewhere):  # the first is the positive control
        actor = (
            ray.remote(NodeWorker)
            .options(
                num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)
            )
            .remote(doc, "auto", expected)
        )
        try:
            raw = ray.get(actor.start.remote(), timeout=60)
            verdicts[expected] = msgspec.msgpack.decode(raw, type=list[object])
            ray.get(actor.close.remote(), timeout=30)
        finally:
            ray.kill(actor)
    accepted, misplaced = verdicts[here], verdicts[elsewhere]
    assert accepted[0] == here
    assert accepted[3] == "t2-linux"  # the tier it opened
    assert accepted[5] is None  # no refusal
    assert misplaced[0] == here
    assert misplaced[5] == "Misplaced"
    assert misplaced[3] is None  # no session was opened there
