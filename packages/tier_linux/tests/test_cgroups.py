"""Finding our place in the cgroup hierarchies (parsing only; the escape suite runs them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from panday_tier_linux.cgroups import CgroupUnavailable, _key, discover, open_session  # pyright: ignore[reportPrivateUsage] - unit under test

V1_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_SELF = """\
9:pids:/user.slice
4:memory:/process_api/abc
2:cpu,cpuacct:/
0::/
"""


def test_hybrid_v1_layout() -> None:
    m = discover(V1_MOUNTINFO, V1_SELF)
    assert m.v1["memory"] == "/sys/fs/cgroup/memory/process_api/abc"
    assert m.v1["pids"] == "/sys/fs/cgroup/pids/user.slice"
    assert m.v1["cpuacct"] == "/sys/fs/cgroup/cpu,cpuacct"
    assert m.v2 == "/sys/fs/cgroup/unified"
    assert m.v2_mount == "/sys/fs/cgroup/unified"


def test_pure_v2_layout() -> None:
    mountinfo = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    m = discover(mountinfo, "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope\n")
    assert m.v1 == {}
    assert m.v2 == "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope"
    assert m.v2_mount == "/sys/fs/cgroup"


def test_a_container_sees_its_subtree_as_the_mount_root() -> None:
    mountinfo = "30 23 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    m = discover(mountinfo, "0::/docker/abc/inner\n")
    assert m.v2 == "/sys/fs/cgroup/inner"


def test_flat_keyed_counters() -> None:
    assert _key("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill") == 3
    assert _key("max 0\n", "max") == 0
    assert _key(None, "max") == 0


def test_v2_sessions_go_below_the_nearest_ancestor_that_hands_controllers_down(
    tmp_path: Path,
) -> None:
    # A stand-in v2 tree (plain directories): our own cgroup holds processes, so the
    # session must go below its parent, whose subtree_control already has the controllers.
    root = tmp_path / "cg"
    own = root / "user.slice" / "app.slice" / "term.scope"
    own.mkdir(parents=True)
    (root / "user.slice" / "app.slice" / "cgroup.subtree_control").write_text("memory pids\n")
    (root / "user.slice" / "cgroup.subtree_control").write_text("memory pids\n")
    mountinfo = f"30 23 0:26 / {root} rw - cgroup2 cgroup2 rw\n"
    mounts = discover(mountinfo, "0::/user.slice/app.slice/term.scope\n")
    session = open_session({"mem_bytes": 64 << 20, "pids": 10}, "t", mounts)
    try:
        assert session.version == 2
        base = Path(session.dirs["memory"])
        assert base.parent == root / "user.slice" / "app.slice"
        assert (base / "cgroup.subtree_control").read_text() in {"+memory +pids", "+pids +memory"}
        command = session.new_exec({"mem_bytes": 64 << 20, "pids": 10})
        leaf = Path(command.dirs["memory"])
        assert leaf.parent == base
        assert (leaf / "memory.max").read_text() == str(64 << 20)
        assert (leaf / "pids.max").read_text() == "10"
    finally:
        shutil.rmtree(root)


def test_without_a_writable_ancestor_the_reason_names_the_hierarchy(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    (root / "a").mkdir(parents=True)
    mountinfo = f"30 23 0:26 / {root} rw - cgroup2 cgroup2 rw\n"
    mounts = discover(mountinfo, "0::/a\n")
    with pytest.raises(CgroupUnavailable, match="cgroup v2"):
        open_session({"pids": 10}, "t", mounts)


def test_a_hierarchy_is_known_by_its_type_not_its_source() -> None:
    # mountinfo after " - ": type, source, super options. The source is free text: a
    # hand-made mount (`mount -t cgroup none ...`) calls it "none".
    mountinfo = (
        "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup none rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 none rw\n"
        "42 31 0:39 / /mnt/fake rw - tmpfs cgroup rw,pids\n"  # a source named cgroup: not one
    )
    m = discover(mountinfo, "9:pids:/p\n4:memory:/m\n0::/u\n")
    assert m.v1 == {"memory": "/sys/fs/cgroup/memory/m"}
    assert m.v2 == "/sys/fs/cgroup/unified/u"
