"""Gates round three (issue 28): a node named in ``nodes=`` that the cluster does not have is
refused by name, never silently left out (kills "ray: a node named in only= that is
missing is skipped")."""
# pyright: reportMissingModuleSource=false

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from panday.ray import ClusterRefused, Pool

if TYPE_CHECKING:
    from conftest import LocalCluster

MISSING = "f" * 56  # a Ray node id no cluster here has


def test_a_named_node_the_cluster_lacks_is_refused_by_name(cluster: LocalCluster) -> None:
    present = cluster.base[0]
    with Pool({}, nodes=[present, MISSING]) as pool:
        # Control: the node that is there is judged and runs.
        assert list(pool.nodes) == [present]
        assert pool.run(["echo", "ran"]).stdout == b"ran\n"
        report = pool.refused[MISSING]
        assert not report.accepted
        assert report.error == "NotStarted"
    with pytest.raises(ClusterRefused) as refused:
        Pool({}, nodes=[present, MISSING], require_all=True)
    assert [r.node_id for r in refused.value.refused] == [MISSING]
