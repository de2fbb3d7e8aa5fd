"""Session and command cgroups on a stand-in cgroupfs: where they go, what they are called,
what is left over from a crashed caller, what a failure leaves behind, and the counters.

The stand-in is plain directories and files laid out as the kernel lays them out (see
test_cgroups_apply.py for the ceilings themselves). What a kernel does on its own (moving
a process, killing one) is not imitated: those paths run against the real hierarchy in the
escape suite. Where a test needs more of the kernel it says so: how ``cgroup.subtree_control``
answers "+memory" (`kernel_subtree_control`), a refused write (a directory where the file
is), time passing while a cgroup's last members leave (`Clock`).

No test here may reach the host's real hierarchy, even through a mutant (tools/mutmut_run.py
runs these tests against mutated code, as root on the shared host): every Mounts points
into a temporary directory, and the one test whose paths must be under /sys/fs/cgroup
makes no directory there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_tier_linux import cgroups
from panday_tier_linux.cgroups import CgroupUnavailable, ExecCgroup, Mounts, open_session

if TYPE_CHECKING:
    from collections.abc import Callable

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


def writable_only(*paths: str) -> Callable[[str], bool]:
    """Stands in for `_writable` as an unprivileged caller sees it: only `paths` are ours
    (as root, os.access calls every directory writable)."""

    def writable(path: str) -> bool:
        return path in paths

    return writable


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


def test_removing_twice_is_fine_and_a_busy_directory_is_given_up_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = open_session(LIMITS, "s", v1_tree(tmp_path))
    assert session.remove()
    assert session.remove()  # already gone: removed is removed
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "member").write_text("")  # a stand-in for a cgroup that still holds a process
    clock = Clock()  # the waits below pass without taking time
    monkeypatch.setattr(cgroups, "time", clock)
    assert not remove_tree(str(busy), clock.now + 0.1)
    assert busy.is_dir()
    # A busy child keeps its parent too: the tree is reported as not removed.
    parent = tmp_path / "parent"
    (parent / "child").mkdir(parents=True)
    (parent / "child" / "member").write_text("")
    assert not remove_tree(str(parent), clock.now + 0.1)
    assert (parent / "child").is_dir()


# ---------------------------------------------------------------------- messages


def test_every_hierarchy_tried_is_in_the_reason(tmp_path: Path) -> None:
    # A hybrid host: v2 delegates nothing, and v1 lacks the pids controller.
    v2 = v2_tree(tmp_path / "v2", controllers="cpu")
    v1 = v1_tree(tmp_path / "v1", ("memory",))
    with pytest.raises(CgroupUnavailable) as info:
        open_session(LIMITS, "s", Mounts(v1.v1, v2.v2, v2.v2_mount))
    assert info.value.reason == (
        f"cgroup v2: no writable cgroup above {tmp_path / 'v2' / 'app' / 'term'} hands down "
        "memory, pids (no delegated subtree); cgroup v1: the pids controller is not mounted"
    )


def test_no_cgroup_file_system_is_the_whole_reason() -> None:
    with pytest.raises(CgroupUnavailable) as info:
        open_session(LIMITS, "s", Mounts({}, None))
    assert info.value.reason == "no cgroup file system is mounted"


def test_v2_a_cpu_ceiling_alone_asks_for_a_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cpu_ms needs no v2 controller (usage is read from cpu.stat), only a cgroup we may write.
    mounts = v2_tree(tmp_path)
    monkeypatch.setattr(cgroups, "_writable", writable_only())
    with pytest.raises(CgroupUnavailable) as info:
        open_session({"cpu_ms": 500}, "s", mounts)
    assert info.value.reason == (
        f"cgroup v2: no writable cgroup above {tmp_path / 'app' / 'term'} hands down "
        "a cgroup (no delegated subtree)"
    )


# ---------------------------------------------------------------------- waiting for a busy cgroup


class Clock:
    """Stands in for the module's `time`: a sleep advances the clock at once, and
    `on_sleep(elapsed)` runs after each one (to let a busy directory empty at a given time)."""

    def __init__(self, on_sleep: Callable[[float], None] | None = None) -> None:
        self.start = self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(self.now - self.start)


def busy_dir(path: Path) -> Path:
    """A directory rmdir refuses, as the kernel refuses a cgroup that still holds a process."""
    path.mkdir(parents=True)
    (path / "member").write_text("")
    return path


def leaves_at(directory: Path, seconds: float) -> Callable[[float], None]:
    """The last member of `directory` leaves once `seconds` have passed."""

    def check(elapsed: float) -> None:
        if elapsed >= seconds:
            (directory / "member").unlink(missing_ok=True)

    return check


remove_tree = cgroups._remove_tree  # pyright: ignore[reportPrivateUsage] - the unit under test


def test_a_busy_cgroup_is_retried_soon_then_every_10ms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A killed tree's last processes usually leave within a millisecond: the first retry
    # comes after 0.2 ms, the wait doubles, and is never more than 10 ms.
    clock = Clock()
    monkeypatch.setattr(cgroups, "time", clock)
    busy = busy_dir(tmp_path / "busy")
    assert not remove_tree(str(busy), clock.now + 0.05)
    expected = [0.0002, 0.0004, 0.0008, 0.0016, 0.0032, 0.0064, 0.01, 0.01, 0.01]
    assert clock.sleeps[: len(expected)] == pytest.approx(expected)
    assert all(s == pytest.approx(0.01) for s in clock.sleeps[len(expected) :])
    assert sum(clock.sleeps[:-1]) < 0.05 <= sum(clock.sleeps)  # gives up at the deadline
    assert busy.is_dir()


def test_a_deadline_already_reached_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(cgroups, "time", clock)
    busy = busy_dir(tmp_path / "busy")
    assert not remove_tree(str(busy), clock.now)
    assert clock.sleeps == []


def test_a_cgroup_that_empties_while_waited_for_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = busy_dir(tmp_path / "busy")
    clock = Clock(leaves_at(busy, 0.001))
    monkeypatch.setattr(cgroups, "time", clock)
    assert remove_tree(str(busy), clock.now + 0.5)
    assert not busy.exists()
    assert len(clock.sleeps) == 3  # 0.2 + 0.4 + 0.8 ms


def test_a_cgroup_another_remover_takes_meanwhile_counts_as_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = busy_dir(tmp_path / "busy")

    def other_remover(elapsed: float) -> None:
        del elapsed
        (busy / "member").unlink()
        busy.rmdir()

    clock = Clock(other_remover)
    monkeypatch.setattr(cgroups, "time", clock)
    assert remove_tree(str(busy), clock.now + 0.5)
    assert len(clock.sleeps) == 1


@pytest.mark.parametrize("kind", ["exec", "session"])
def test_removing_a_cgroup_waits_two_seconds_for_its_members_to_leave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    def make(dirs: dict[str, str]) -> ExecCgroup | cgroups.SessionCgroup:
        if kind == "exec":
            return ExecCgroup(1, dirs, {})
        return cgroups.SessionCgroup(1, dirs, "")

    slow = busy_dir(tmp_path / "slow")  # its last member leaves after 1.5 s: removed
    clock = Clock(leaves_at(slow, 1.5))
    monkeypatch.setattr(cgroups, "time", clock)
    assert make({"memory": str(slow)}).remove()
    assert not slow.exists()
    stuck = busy_dir(tmp_path / "stuck")  # never empties: given up on after 2 s
    clock = Clock()
    monkeypatch.setattr(cgroups, "time", clock)
    assert not make({"memory": str(stuck)}).remove()
    assert 2.0 <= clock.now - clock.start < 2.02
    assert stuck.is_dir()


def test_a_stale_cgroup_is_waited_for_half_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reap = cgroups._reap_stale  # pyright: ignore[reportPrivateUsage] - the unit under test
    soon = busy_dir(tmp_path / "a" / f"panday-{dead_pid()}-soon")
    monkeypatch.setattr(cgroups, "time", Clock(leaves_at(soon, 0.1)))
    reap(str(tmp_path / "a"))
    assert not soon.exists()
    # A crashed caller's tree still busy after half a second is left to a later sweep
    # (a session does not wait long for another's leftovers).
    late = busy_dir(tmp_path / "b" / f"panday-{dead_pid()}-late")
    clock = Clock(leaves_at(late, 1.0))
    monkeypatch.setattr(cgroups, "time", clock)
    reap(str(tmp_path / "b"))
    assert late.is_dir()
    assert 0.5 <= clock.now - clock.start < 0.52


# ---------------------------------------------------------------------- who a name stands for


def start_time_of_self() -> str:
    return Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]


def test_a_name_means_its_pid_and_start_time(tmp_path: Path) -> None:
    mounts = v2_tree(tmp_path)
    parent = tmp_path / "app"
    me = os.getpid()
    reaped = {
        "dead with its start time": parent / f"panday-{dead_pid()}.12345-x",
        "our pid, another start time (a reused pid)": parent / f"panday-{me}.1-x",
    }
    kept = {
        "our pid and start time": parent / f"panday-{me}.{start_time_of_self()}-x",
        "our pid, an old name without a start time": parent / f"panday-{me}-x",
        "no pid at all": parent / "panday-notapid-x",
    }
    for path in (*reaped.values(), *kept.values()):
        path.mkdir()
    open_session(LIMITS, "s", mounts)
    assert [why for why, path in reaped.items() if path.exists()] == []
    assert [why for why, path in kept.items() if not path.is_dir()] == []


def test_a_zombie_callers_cgroups_are_stale(tmp_path: Path) -> None:
    # A caller killed with its parent is a zombie until some init reaps it: it runs nothing,
    # so what it left is stale, although its pid still answers kill(pid, 0).
    mounts = v2_tree(tmp_path)
    parent = tmp_path / "app"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only exits
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        os.kill(pid, 0)  # control: a zombie's pid still answers
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        zombie = parent / f"panday-{pid}.{start}-x"
        zombie.mkdir(parents=True)
        open_session(LIMITS, "s", mounts)
        assert not zombie.exists(), "a zombie caller's cgroup was kept"
    finally:
        os.waitpid(pid, 0)


def test_start_time_reads_past_a_command_name_with_parentheses() -> None:
    # The command name (field 2) is free text a process may set; the fields are counted
    # from its last ")".
    start_time = cgroups._start_time  # pyright: ignore[reportPrivateUsage] - the unit under test
    me = os.getpid()
    before = start_time(me)
    comm = Path("/proc/self/comm")
    old = comm.read_text().rstrip("\n")
    comm.write_text("x) 1 2) 3 4")
    try:
        renamed = Path(f"/proc/{me}/stat").read_text()
        during = start_time(me)
    finally:
        comm.write_text(old)
    assert "(x) 1 2) 3 4)" in renamed  # control: the name really has the parentheses
    assert before == start_time_of_self()
    assert during == before
    assert start_time(dead_pid()) is None


# ---------------------------------------------------------------------- where the sweep looks


def test_the_sweep_stays_below_the_v2_mount(tmp_path: Path) -> None:
    mounts = v2_tree(tmp_path / "cg")
    above = tmp_path / f"panday-{dead_pid()}-above"  # beside the mount point, not in it
    inside = tmp_path / "cg" / f"panday-{dead_pid()}-inside"
    above.mkdir()
    inside.mkdir()
    cgroups.sweep_stale(mounts)
    assert above.is_dir()
    assert not inside.exists()


@pytest.mark.parametrize("mount", ["{root}", "{root}/"])
def test_the_sweep_covers_the_v2_root_cgroup_we_live_in(tmp_path: Path, mount: str) -> None:
    stale = tmp_path / f"panday-{dead_pid()}-x"
    stale.mkdir()
    cgroups.sweep_stale(Mounts({}, str(tmp_path), mount.format(root=tmp_path)))
    assert not stale.exists()


def test_a_hybrid_host_is_swept_in_both_versions(tmp_path: Path) -> None:
    v2 = v2_tree(tmp_path / "v2")
    v1 = v1_tree(tmp_path / "v1")
    in_v1 = tmp_path / "v1" / "pids" / "user" / f"panday-{dead_pid()}-x"
    in_v2 = tmp_path / "v2" / "app" / f"panday-{dead_pid()}-x"
    in_v1.mkdir()
    in_v2.mkdir()
    cgroups.sweep_stale(Mounts(v1.v1, v2.v2, v2.v2_mount))
    assert not in_v1.exists()
    assert not in_v2.exists()


def test_each_place_is_swept_once_per_process(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    base = tmp_path / "memory" / "user"
    cgroups.sweep_stale(mounts)
    later = base / f"panday-{dead_pid()}-later"  # left after this process swept
    later.mkdir()
    cgroups.sweep_stale(mounts)
    assert later.is_dir()  # not scanned again by the same process
    child = os.fork()
    if child == 0:  # another process (a fork of this one) sweeps the same places
        code = 1
        try:
            cgroups.sweep_stale(mounts)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not later.exists()


def test_v1_uses_the_nearest_writable_cgroup_below_the_hierarchy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Unprivileged, our own v1 cgroup may be read-only while a delegated ancestor is not:
    # both the sweep and the session go there. The hierarchy's place is fixed
    # (/sys/fs/cgroup), so the paths are there, and nothing on this host may be touched
    # (a mutant writing the real hierarchy would leave cgroups behind): every mkdir is
    # refused as for a missing parent, and the sweep is only recorded.
    ours = "/sys/fs/cgroup/memory/no-such-cgroup/ours"
    parent = str(Path(ours).parent)
    monkeypatch.setattr(cgroups, "_writable", writable_only(parent))
    swept: list[str] = []
    monkeypatch.setattr(cgroups, "_reap_stale", swept.append)
    monkeypatch.setattr(cgroups, "_SWEPT", set[tuple[int, str]]())
    made: list[str] = []

    def mkdir(path: str, mode: int = 0o777) -> None:
        del mode
        made.append(path)
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(CgroupUnavailable) as info:
        open_session({"mem_bytes": 1 << 20}, "s", Mounts({"memory": ours}, None))
    assert swept == [parent]
    assert made == [f"{parent}/{own('s')}"]
    assert info.value.reason == f"cgroup v1: cannot create {made[0]}: No such file or directory"


# ---------------------------------------------------------------------- v2 parents


def test_v2_an_ancestor_we_may_not_write_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unprivileged, the parent of our cgroup may be read-only while the mount root (say, a
    # container's delegated root) is ours: the session goes there.
    mounts = v2_tree(tmp_path)
    monkeypatch.setattr(cgroups, "_writable", writable_only(str(tmp_path)))
    session = open_session(LIMITS, "s", mounts)
    assert Path(session.dirs["memory"]).parent == tmp_path


def test_v2_a_mount_root_that_refuses_to_hand_down_is_a_reason(tmp_path: Path) -> None:
    (tmp_path / "app" / "term").mkdir(parents=True)
    (tmp_path / "cgroup.subtree_control").mkdir()  # writing "+memory +pids" fails (EISDIR)
    mounts = cgroups.discover(
        f"30 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n", "0::/app/term\n"
    )
    with pytest.raises(CgroupUnavailable) as info:
        open_session(LIMITS, "s", mounts)
    assert info.value.reason.startswith("cgroup v2: no writable cgroup above ")


def test_a_process_of_another_user_is_alive() -> None:
    # kill(pid, 0) answers EPERM for another user's process: alive, its leftovers are kept.
    alive = cgroups._alive  # pyright: ignore[reportPrivateUsage] - the unit under test
    target = os.getpid()
    child = os.fork()
    if child == 0:
        code = 1
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)  # nobody: our parent is now another user's process
            try:
                os.kill(target, 0)
                code = 2  # inconclusive: the signal was allowed
            except PermissionError:
                code = 0 if alive(target) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 2:
        pytest.fail("inconclusive: kill(pid, 0) on another user's process was allowed")
    assert code == 0
    assert not alive(dead_pid())


# ---------------------------------------------------------------------- probe


def test_probe_makes_and_removes_a_throwaway_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mounts = v1_tree(tmp_path)
    monkeypatch.setattr(cgroups, "discover", lambda: mounts)
    made: list[str] = []
    real_mkdir = os.mkdir

    def mkdir(path: str, mode: int = 0o777) -> None:
        made.append(path)
        real_mkdir(path, mode)

    monkeypatch.setattr(os, "mkdir", mkdir)
    assert cgroups.probe(LIMITS) is None
    assert len(made) == 2  # memory and pids
    name = Path(made[0]).name
    assert re.fullmatch(rf"{re.escape(own('probe-'))}[0-9a-f]{{6}}", name)
    for c in ("memory", "pids", "cpuacct"):
        assert list((tmp_path / c / "user").iterdir()) == []  # nothing left
    assert cgroups.probe(LIMITS) is None
    assert Path(made[2]).name != name  # a fresh name each time


def test_probe_says_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups, "discover", lambda: Mounts({}, None))
    assert cgroups.probe(LIMITS) == "no cgroup file system is mounted"

    def refused(*args: object) -> None:
        del args
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cgroups, "open_session", refused)
    assert cgroups.probe(LIMITS) == "cgroup: Permission denied"


def test_a_leftover_another_sweeper_took_first_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two sessions may sweep at once: a directory listed by this one can be gone by the
    # time it is looked at. It is skipped, and the sweep goes on to the rest.
    parent = tmp_path / "p"
    taken = parent / f"panday-{dead_pid()}-taken"
    rest = [parent / f"panday-{dead_pid()}-rest{i}" for i in range(2)]
    for path in (taken, *rest):
        path.mkdir(parents=True, exist_ok=True)
    real_scandir = os.scandir

    def scandir(path: str) -> list[os.DirEntry[str]]:
        with real_scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name != taken.name)  # the taken one first
        if path == str(parent):
            taken.rmdir()  # the other sweeper, between the listing and the look
        return entries

    monkeypatch.setattr(os, "scandir", scandir)
    cgroups._reap_stale(str(parent))  # pyright: ignore[reportPrivateUsage] - the unit under test
    assert [p.name for p in rest if p.exists()] == []


def kernel_subtree_control(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the stand-in answer a write to ``cgroup.subtree_control`` as the kernel does:
    ``+memory +pids`` enables those controllers, and the file then lists them by name."""
    real_write = cgroups._write  # pyright: ignore[reportPrivateUsage] - wrapped, not replaced

    def write(path: str, value: str) -> None:
        if Path(path).name != "cgroup.subtree_control":
            real_write(path, value)
            return
        enabled = set((cgroups._read(path) or "").split())  # pyright: ignore[reportPrivateUsage]
        for word in value.split():
            (enabled.add if word[0] == "+" else enabled.discard)(word[1:])
        real_write(path, " ".join(sorted(enabled)) + "\n")

    monkeypatch.setattr(cgroups, "_write", write)


def test_v2_the_mount_root_is_asked_to_hand_controllers_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # We live right below the root, which hands nothing down yet: it is asked to (the root
    # cgroup may enable controllers although it holds processes), then used.
    (tmp_path / "term").mkdir()
    (tmp_path / "cgroup.subtree_control").write_text("\n")
    kernel_subtree_control(monkeypatch)
    mounts = cgroups.discover(f"30 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n", "0::/term\n")
    session = open_session(LIMITS, "s", mounts)
    assert (tmp_path / "cgroup.subtree_control").read_text() == "memory pids\n"
    assert session.dirs["memory"] == str(tmp_path / own("s"))
    assert (tmp_path / own("s") / "cgroup.subtree_control").read_text() == "memory pids\n"


def test_v2_a_session_directory_that_cannot_hand_down_is_removed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel may refuse to enable a controller in the new directory; it must not stay.
    mounts = v2_tree(tmp_path / "cg")
    real_mkdir = os.mkdir

    def mkdir(path: str, mode: int = 0o777) -> None:
        real_mkdir(path, mode)
        if Path(path).name.startswith("panday-"):  # a stand-in for the refusal
            real_mkdir(Path(path, "cgroup.subtree_control"))

    monkeypatch.setattr(os, "mkdir", mkdir)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # empty: a path lost on the way finds nothing here
    path = tmp_path / "cg" / "app" / own("s")
    with pytest.raises(CgroupUnavailable) as info:
        open_session(LIMITS, "s", mounts)
    assert info.value.reason == f"cgroup v2: cannot create {path}: Is a directory"
    assert not path.exists()


def test_writable_means_we_may_make_directories_in_it() -> None:
    # What an unprivileged caller meets: a cgroup it can see but not write is not a place
    # for its session. As root every directory passes, so the check runs as nobody, with a
    # directory of its own (the control) and the root directory, which it may only read.
    writable = cgroups._writable  # pyright: ignore[reportPrivateUsage] - the unit under test
    nobody = 65534
    with tempfile.TemporaryDirectory() as scratch:  # under /tmp: searchable by anyone
        ours = Path(scratch)
        if os.geteuid() == 0:
            os.chown(ours, nobody, nobody)
        child = os.fork()
        if child == 0:
            code = 1
            try:
                if os.geteuid() == 0:
                    os.setgid(nobody)
                    os.setuid(nobody)
                code = 0 if (writable(str(ours)), writable("/")) == (True, False) else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        # Also called here, not only in the child: mutmut picks the tests to run against a
        # mutant by the calls it saw, and a forked child's calls are not seen.
        assert writable(scratch)  # ours too (as its owner, or as root)
    assert os.waitstatus_to_exitcode(status) == 0
