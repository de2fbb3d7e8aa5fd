"""Session and command cgroups on a stand-in cgroupfs: where they go, what they are called,
what is left over from a crashed caller, what a failure leaves behind, and the counters.

The stand-in is plain directories and files laid out as the kernel lays them out (see
test_cgroups_apply.py for the ceilings themselves). What a kernel does on its own (moving
a process, enabling a controller when "+memory" is written) is not imitated: those paths
run against the real hierarchy in the escape suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from panday_tier_linux import cgroups
from panday_tier_linux.cgroups import CgroupUnavailable, ExecCgroup, Mounts, open_session

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux cgroups")

LIMITS = {"mem_bytes": 64 << 20, "pids": 10}


def v2_tree(root: Path, controllers: str = "memory pids") -> Mounts:
    """A v2 mount at `root` whose root hands `controllers` down; we live in /app/term."""
    (root / "app" / "term").mkdir(parents=True)
    (root / "cgroup.subtree_control").write_text(f"{controllers}\n")
    (root / "app" / "cgroup.subtree_control").write_text(f"{controllers}\n")
    return cgroups.discover(f"30 23 0:26 / {root} rw - cgroup2 cgroup2 rw\n", "0::/app/term\n")


def v1_tree(root: Path, controllers: tuple[str, ...] = ("memory", "pids", "cpuacct")) -> Mounts:
    own = {c: root / c / "user" for c in controllers}
    for path in own.values():
        path.mkdir(parents=True)
    return Mounts({c: str(p) for c, p in own.items()}, None)


def own(session_id: str) -> str:
    """Our session directory's name: pid and start time (field 22 of /proc/self/stat, read
    here on its own), so a recycled pid never passes for the caller that made it."""
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    start = stat.rsplit(")", 1)[1].split()[19]
    return f"panday-{os.getpid()}.{start}-{session_id}"


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# ---------------------------------------------------------------------- v2


def test_v2_session_directory_name_roles_and_mechanism(tmp_path: Path) -> None:
    mounts = v2_tree(tmp_path)
    session = open_session(LIMITS, "s1", mounts)
    path = tmp_path / "app" / own("s1")
    assert session.version == 2
    assert session.dirs == dict.fromkeys(("memory", "pids", "cpu", "kill"), str(path))
    assert session.mechanism == f"cgroup v2 at {tmp_path / 'app'}"
    assert session.count == 0
    assert set((path / "cgroup.subtree_control").read_text().split()) == {"+memory", "+pids"}


def test_v2_commands_are_numbered_children_and_attach_writes_the_pid(tmp_path: Path) -> None:
    session = open_session(LIMITS, "s", v2_tree(tmp_path))
    first, second = session.new_exec(LIMITS), session.new_exec(LIMITS)
    base = Path(session.dirs["memory"])
    assert [Path(first.dirs["pids"]).name, Path(second.dirs["pids"]).name] == ["exec-1", "exec-2"]
    assert first.dirs == dict.fromkeys(("memory", "pids", "cpu", "kill"), str(base / "exec-1"))
    assert first.version == 2
    assert first.limits == LIMITS
    assert not first.removed
    assert (base / "exec-1").stat().st_mode & 0o777 == 0o755
    first.attach(4242)
    assert (base / "exec-1" / "cgroup.procs").read_text() == "4242"


def test_v2_without_a_delegating_ancestor_names_the_controllers(tmp_path: Path) -> None:
    mounts = v2_tree(tmp_path, controllers="cpu")
    with pytest.raises(CgroupUnavailable) as info:
        open_session(LIMITS, "s", mounts)
    assert info.value.reason == (
        f"cgroup v2: no writable cgroup above {tmp_path / 'app' / 'term'} hands down "
        "memory, pids (no delegated subtree)"
    )


def test_v2_a_session_directory_that_cannot_be_made_is_a_reason(tmp_path: Path) -> None:
    mounts = v2_tree(tmp_path)
    blocker = tmp_path / "app" / own("s")
    blocker.write_text("in the way")  # a file where the directory would go
    with pytest.raises(CgroupUnavailable) as info:
        open_session(LIMITS, "s", mounts)
    assert info.value.reason.startswith(f"cgroup v2: cannot create {blocker}: ")


def test_only_a_dead_callers_leftovers_are_reaped(tmp_path: Path) -> None:
    mounts = v2_tree(tmp_path)
    parent = tmp_path / "app"
    stale = parent / f"panday-{dead_pid()}-old"
    (stale / "exec-1").mkdir(parents=True)  # with a command cgroup inside, as left behind
    ours = parent / own("other")
    alive = parent / "panday-1-init"  # pid 1 is always alive
    foreign = parent / "someone-else"
    not_a_dir = parent / f"panday-{dead_pid()}-file"
    for d in (ours, alive, foreign):
        d.mkdir()
    not_a_dir.write_text("")
    open_session(LIMITS, "s", mounts)
    assert not stale.exists()
    assert ours.is_dir()
    assert alive.is_dir()
    assert foreign.is_dir()
    assert not_a_dir.is_file()


def test_remove_takes_the_session_and_its_commands(tmp_path: Path) -> None:
    # v1, and commands without ceilings: rmdir on a real cgroupfs ignores the interface
    # files a cgroup shows, on the stand-in written files would keep a directory busy.
    session = open_session(LIMITS, "s", v1_tree(tmp_path))
    command = session.new_exec({})
    assert command.remove()
    assert command.removed
    assert command.remove()  # idempotent
    for role in ("memory", "pids"):
        assert not Path(command.dirs[role]).exists()
    session.new_exec({})
    assert session.remove()
    for role in ("memory", "pids"):
        assert not Path(session.dirs[role]).exists()


# ---------------------------------------------------------------------- v1


def test_v1_session_has_one_directory_per_controller(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    session = open_session({**LIMITS, "cpu_ms": 500}, "s", mounts)
    name = own("s")
    assert session.version == 1
    assert session.dirs == {
        "memory": str(tmp_path / "memory" / "user" / name),
        "pids": str(tmp_path / "pids" / "user" / name),
        "cpu": str(tmp_path / "cpuacct" / "user" / name),
    }
    where = ", ".join(sorted(str(tmp_path / c / "user") for c in ("cpuacct", "memory", "pids")))
    assert session.mechanism == f"cgroup v1 under {where}"
    command = session.new_exec(LIMITS)
    for role in ("memory", "pids", "cpu"):
        assert command.dirs[role] == str(Path(session.dirs[role], "exec-1"))
    assert command.version == 1
    command.attach(77)
    for role in ("memory", "pids", "cpu"):
        assert Path(command.dirs[role], "cgroup.procs").read_text() == "77"


def test_v1_a_missing_controller_is_the_reason(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path, ("memory",))
    with pytest.raises(CgroupUnavailable, match="cgroup v1: the pids controller is not mounted"):
        open_session(LIMITS, "s", mounts)
    # Nothing half-made is left in the hierarchy that was there.
    assert [p.name for p in (tmp_path / "memory" / "user").iterdir()] == []


def test_no_cgroup_file_system_at_all() -> None:
    with pytest.raises(CgroupUnavailable, match="no cgroup file system is mounted"):
        open_session(LIMITS, "s", Mounts({}, None))


def test_a_command_cgroup_that_cannot_be_made_leaves_nothing_behind(tmp_path: Path) -> None:
    session = open_session(LIMITS, "s", v1_tree(tmp_path))
    (Path(session.dirs["pids"]) / "exec-1").write_text("in the way")
    with pytest.raises(OSError, match="exists"):
        session.new_exec(LIMITS)
    assert not (Path(session.dirs["memory"]) / "exec-1").exists()  # the one made is removed


def test_v1_read_back_and_counters(tmp_path: Path) -> None:
    memory, pids, cpu = (tmp_path / n for n in ("memory", "pids", "cpu"))
    for d in (memory, pids, cpu):
        d.mkdir()
    (memory / "memory.limit_in_bytes").write_text("1048576\n")
    (memory / "memory.memsw.limit_in_bytes").write_text("1048576\n")
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (pids / "pids.max").write_text("5\n")
    (pids / "pids.events").write_text("max 3\n")
    (cpu / "cpuacct.usage").write_text("123456789\n")
    cg = ExecCgroup(1, {"memory": str(memory), "pids": str(pids), "cpu": str(cpu)}, {})
    assert cg.read_back() == {
        "memory.limit_in_bytes": "1048576",
        "memory.memsw.limit_in_bytes": "1048576",
        "pids.max": "5",
    }
    assert cg.oom_kills() == 2
    assert cg.pids_refused() == 3
    assert cg.cpu_usage_ns() == 123456789
    (cpu / "cpuacct.usage").write_text("garbage\n")
    assert cg.cpu_usage_ns() is None


def test_v2_counters(tmp_path: Path) -> None:
    leaf = tmp_path / "exec-1"
    leaf.mkdir()
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    (leaf / "pids.events").write_text("max 7\n")
    (leaf / "cpu.stat").write_text("usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n")
    cg = ExecCgroup(2, dict.fromkeys(("memory", "pids", "cpu", "kill"), str(leaf)), {})
    assert cg.oom_kills() == 1
    assert cg.pids_refused() == 7
    assert cg.cpu_usage_ns() == 2_500_000
    assert cg.read_back() == {}  # no ceiling files: nothing to show


def test_without_the_roles_the_counters_are_empty() -> None:
    cg = ExecCgroup(2, {}, {})
    assert cg.cpu_usage_ns() is None
    assert cg.oom_kills() == 0
    assert cg.pids_refused() == 0
    assert cg.read_back() == {}
    cg.kill()  # nothing to kill: no error


# ---------------------------------------------------------------------- discovery


def test_mountinfo_lines_are_read_by_their_columns(tmp_path: Path) -> None:
    del tmp_path
    mountinfo = (
        "garbage line without a separator\n"
        "1 2 3 - cgroup2 cgroup2 rw\n"  # too few fields before the separator: ignored
        "41 31 0:38 / /sys/fs/cgroup/my\\040mount rw,relatime - cgroup2 cgroup2 rw\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:1 - cgroup cgroup rw,memory\n"
        "36 31 0:33 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
    )
    mounts = cgroups.discover(mountinfo, "5:pids:/p\n4:memory:/m\n0::/u\n")
    assert mounts.v2 == "/sys/fs/cgroup/my mount/u"
    assert mounts.v2_mount == "/sys/fs/cgroup/my mount"
    assert mounts.v1 == {"memory": "/sys/fs/cgroup/memory/m", "pids": "/sys/fs/cgroup/pids/p"}


def test_a_cgroup_at_the_mount_root_and_a_path_equal_to_the_mount_root(tmp_path: Path) -> None:
    del tmp_path
    mountinfo = "30 23 0:26 /docker/abc /sys/fs/cgroup/ rw - cgroup2 cgroup2 rw\n"
    assert cgroups.discover(mountinfo, "0::/docker/abc\n").v2 == "/sys/fs/cgroup"
    assert cgroups.discover(mountinfo, "0::/elsewhere\n").v2 == "/sys/fs/cgroup/elsewhere"
    plain = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert cgroups.discover(plain, "0::/\n").v2 == "/sys/fs/cgroup"
    assert cgroups.discover(plain, "0::/abc\n").v2 == "/sys/fs/cgroup/abc"
    # Without a v2 mount, the unified line of /proc/self/cgroup means nothing.
    assert cgroups.discover("", "0::/abc\n").v2 is None


def test_the_reason_is_kept_on_the_exception() -> None:
    exc = CgroupUnavailable("why not")
    assert exc.reason == "why not"
    assert str(exc) == "why not"


# ---------------------------------------------------------------------- edges


def test_discover_reads_this_process_when_given_nothing() -> None:
    mountinfo = Path("/proc/self/mountinfo").read_text(encoding="ascii")
    own = Path("/proc/self/cgroup").read_text(encoding="ascii")
    expected = cgroups.discover(mountinfo, own)
    found = cgroups.discover()
    assert (found.v1, found.v2, found.v2_mount) == (expected.v1, expected.v2, expected.v2_mount)
    assert found.v1 or found.v2  # control: this host has a cgroup hierarchy at all


def test_cgroup_lines_split_on_the_first_two_colons_only() -> None:
    mountinfo = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert cgroups.discover(mountinfo, "broken\n0::/a:b\n").v2 == "/sys/fs/cgroup/a:b"


def test_session_and_command_directories_are_0755_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        v2 = open_session(LIMITS, "s", v2_tree(tmp_path / "v2"))
        v1 = open_session(LIMITS, "s", v1_tree(tmp_path / "v1"))
        command = v1.new_exec({})
    finally:
        os.umask(old)
    paths = [v2.dirs["memory"], v1.dirs["memory"], v1.dirs["pids"], command.dirs["pids"]]
    for path in paths:
        assert Path(path).stat().st_mode & 0o777 == 0o755, path


def test_v2_in_the_root_cgroup_goes_right_below_it(tmp_path: Path) -> None:
    # Inside a container we may be in the (namespaced) root cgroup itself; a mount point
    # written with a trailing slash is the same directory.
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    mounts = Mounts({}, str(tmp_path), f"{tmp_path}/")
    session = open_session(LIMITS, "s", mounts)
    assert Path(session.dirs["memory"]).parent == tmp_path


def test_v2_asks_only_the_mount_root_to_hand_controllers_down(tmp_path: Path) -> None:
    (tmp_path / "app" / "term").mkdir(parents=True)
    (tmp_path / "cgroup.subtree_control").write_text("")
    (tmp_path / "app" / "cgroup.subtree_control").write_text("cpu\n")
    mounts = cgroups.discover(
        f"30 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n", "0::/app/term\n"
    )
    with pytest.raises(CgroupUnavailable):  # a plain file does not enable anything
        open_session(LIMITS, "s", mounts)
    written = (tmp_path / "cgroup.subtree_control").read_text()
    assert sorted(written.split(" ")) == ["+memory", "+pids"]
    assert (tmp_path / "app" / "cgroup.subtree_control").read_text() == "cpu\n"


def test_v1_a_session_directory_that_cannot_be_made_removes_the_ones_made(
    tmp_path: Path,
) -> None:
    mounts = v1_tree(tmp_path)
    (tmp_path / "pids" / "user" / own("s")).write_text("in the way")
    with pytest.raises(CgroupUnavailable) as info:
        open_session(LIMITS, "s", mounts)
    assert "cgroup v1: cannot create " in info.value.reason
    assert [p.name for p in (tmp_path / "memory" / "user").iterdir()] == []


def test_v1_a_hierarchy_we_may_not_write_is_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As root every directory is writable (os.access says so), so "not writable" is what
    # an unprivileged caller meets; it is stood in for by answering no.
    def never(path: str) -> bool:
        del path
        return False

    monkeypatch.setattr(cgroups, "_writable", never)
    with pytest.raises(CgroupUnavailable, match=r"\(memory\) is not writable by uid"):
        open_session(LIMITS, "s", v1_tree(tmp_path))


def test_reaping_knows_our_names_and_never_follows_links(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    base = tmp_path / "memory" / "user"
    dead = dead_pid()
    stale = base / f"panday-{dead}-a-b"  # a session id with dashes
    stale.mkdir()
    lookalike = base / f"cgroup-{dead}-x"  # as long a prefix, another name
    lookalike.mkdir()
    outside = tmp_path / "outside" / "keep"
    outside.mkdir(parents=True)
    (base / f"panday-{dead}-link").symlink_to(outside.parent)
    open_session(LIMITS, "s", mounts)
    assert not stale.exists()
    assert lookalike.is_dir()
    assert outside.is_dir()


def test_removing_twice_is_fine_and_a_busy_directory_is_given_up_on(tmp_path: Path) -> None:
    session = open_session(LIMITS, "s", v1_tree(tmp_path))
    assert session.remove()
    assert session.remove()  # already gone: removed is removed
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "member").write_text("")  # a stand-in for a cgroup that still holds a process
    remove_tree = cgroups._remove_tree  # pyright: ignore[reportPrivateUsage] - the unit under test
    assert not remove_tree(str(busy), time.monotonic() + 0.1)
    assert busy.is_dir()
    # A busy child keeps its parent too: the tree is reported as not removed.
    parent = tmp_path / "parent"
    (parent / "child").mkdir(parents=True)
    (parent / "child" / "member").write_text("")
    assert not remove_tree(str(parent), time.monotonic() + 0.1)
    assert (parent / "child").is_dir()
