"""Ceilings written into a stand-in cgroupfs (v1 and v2), and the kill of a command's tree.

The escape suite exercises the real hierarchy this host has (here v1; CI's runners have
v2), so only one of the two versions ever runs against a kernel on a given machine. These
tests give both versions the files a kernel shows in a cgroup directory (plain files in a
temporary directory, laid out as cgroupfs lays them out) and check what panday writes into
them: the memory ceiling, swap closed (v1 ``memory.memsw.limit_in_bytes`` equal to the
ceiling, v2 ``memory.swap.max`` = 0: otherwise swap lets a command hold more than its
ceiling), the pid ceiling, and that a kill reaches every member: real processes, listed in
the stand-in ``cgroup.procs`` the way the kernel lists them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_tier_linux.cgroups import ExecCgroup, _apply  # pyright: ignore[reportPrivateUsage] - the unit under test

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="cgroups and /proc are Linux-only"
)

MEM = 96 * 1024 * 1024
PIDS = 17
UNLIMITED_V1 = "9223372036854771712\n"

# What the kernel shows in a fresh cgroup directory (the files panday reads or writes).
V2_FILES = {
    "cgroup.procs": "",
    "cgroup.kill": "",
    "memory.max": "max\n",
    "memory.swap.max": "max\n",
    "pids.max": "max\n",
}
V1_MEMORY = {
    "cgroup.procs": "",
    "memory.limit_in_bytes": UNLIMITED_V1,
    "memory.memsw.limit_in_bytes": UNLIMITED_V1,
}
V1_PIDS = {"cgroup.procs": "", "pids.max": "max\n"}


def cgroup_dir(path: Path, files: dict[str, str]) -> str:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text, encoding="ascii")
    return str(path)


def read(directory: str, name: str) -> str:
    return Path(directory, name).read_text(encoding="ascii").strip()


# ---------------------------------------------------------------------- ceilings


def test_v2_memory_ceiling_closes_swap_and_sets_pids(tmp_path: Path) -> None:
    leaf = cgroup_dir(tmp_path / "exec-1", V2_FILES)
    _apply(2, {"memory": leaf, "pids": leaf}, {"mem_bytes": MEM, "pids": PIDS})
    assert read(leaf, "memory.max") == str(MEM)
    assert read(leaf, "memory.swap.max") == "0"
    assert read(leaf, "pids.max") == str(PIDS)


def test_v2_without_swap_accounting_writes_no_swap_file(tmp_path: Path) -> None:
    # A kernel without swap accounting has no memory.swap.max (and none can be created).
    files = {k: v for k, v in V2_FILES.items() if k != "memory.swap.max"}
    leaf = cgroup_dir(tmp_path / "exec-1", files)
    _apply(2, {"memory": leaf, "pids": leaf}, {"mem_bytes": MEM})
    assert read(leaf, "memory.max") == str(MEM)
    assert not (tmp_path / "exec-1" / "memory.swap.max").exists()
    assert read(leaf, "pids.max") == "max"  # no pid ceiling asked for: left alone


def test_v1_memory_ceiling_also_bounds_memory_plus_swap(tmp_path: Path) -> None:
    memory = cgroup_dir(tmp_path / "memory" / "exec-1", V1_MEMORY)
    pids = cgroup_dir(tmp_path / "pids" / "exec-1", V1_PIDS)
    _apply(1, {"memory": memory, "pids": pids}, {"mem_bytes": MEM, "pids": PIDS})
    assert read(memory, "memory.limit_in_bytes") == str(MEM)
    assert read(memory, "memory.memsw.limit_in_bytes") == str(MEM)
    assert read(pids, "pids.max") == str(PIDS)


def test_v1_without_swap_accounting_writes_no_memsw_file(tmp_path: Path) -> None:
    files = {k: v for k, v in V1_MEMORY.items() if k != "memory.memsw.limit_in_bytes"}
    memory = cgroup_dir(tmp_path / "memory" / "exec-1", files)
    _apply(1, {"memory": memory}, {"mem_bytes": MEM})
    assert read(memory, "memory.limit_in_bytes") == str(MEM)
    assert not (tmp_path / "memory" / "exec-1" / "memory.memsw.limit_in_bytes").exists()


def test_read_back_shows_what_was_written(tmp_path: Path) -> None:
    leaf = cgroup_dir(tmp_path / "exec-1", V2_FILES)
    limits = {"mem_bytes": MEM, "pids": PIDS}
    _apply(2, {"memory": leaf, "pids": leaf}, limits)
    shown = ExecCgroup(2, {"memory": leaf, "pids": leaf, "kill": leaf}, limits).read_back()
    assert shown == {"memory.max": str(MEM), "memory.swap.max": "0", "pids.max": str(PIDS)}


# ---------------------------------------------------------------------- kill


@pytest.fixture
def members() -> Iterator[Callable[[int], list[subprocess.Popen[bytes]]]]:
    """Real processes to list as a cgroup's members (killed at the end, whatever happens)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(count: int) -> list[subprocess.Popen[bytes]]:
        procs = [subprocess.Popen(["sleep", "60"]) for _ in range(count)]
        started.extend(procs)
        return procs

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def dead(proc: subprocess.Popen[bytes]) -> bool:
    try:
        proc.wait(timeout=5)  # a SIGKILLed sleep is reaped in milliseconds
    except subprocess.TimeoutExpired:
        return False
    return True


def list_members(directory: str, procs: list[subprocess.Popen[bytes]]) -> None:
    Path(directory, "cgroup.procs").write_text("".join(f"{p.pid}\n" for p in procs))


def test_v1_kill_signals_every_member_of_every_hierarchy(
    tmp_path: Path, members: Callable[[int], list[subprocess.Popen[bytes]]]
) -> None:
    memory = cgroup_dir(tmp_path / "memory" / "exec-1", V1_MEMORY)
    pids = cgroup_dir(tmp_path / "pids" / "exec-1", V1_PIDS)
    in_memory, in_pids = members(2), members(1)
    list_members(memory, in_memory)
    list_members(pids, in_pids)
    # Control: listed members are alive until the kill (a dead one would prove nothing).
    if any(p.poll() is not None for p in in_memory + in_pids):
        pytest.fail("inconclusive: a member died before the kill")
    ExecCgroup(1, {"memory": memory, "pids": pids}, {"mem_bytes": MEM}).kill()
    assert all(dead(p) for p in in_memory + in_pids)
    assert all(p.returncode == -9 for p in in_memory + in_pids)  # SIGKILL, not a request


def test_v2_kill_uses_cgroup_kill(tmp_path: Path) -> None:
    leaf = cgroup_dir(tmp_path / "exec-1", V2_FILES)
    ExecCgroup(2, {"memory": leaf, "pids": leaf, "kill": leaf}, {}).kill()
    assert read(leaf, "cgroup.kill") == "1"


def test_v2_without_cgroup_kill_signals_every_member(
    tmp_path: Path, members: Callable[[int], list[subprocess.Popen[bytes]]]
) -> None:
    # cgroup.kill arrived in Linux 5.14; before it, members are killed one by one.
    files = {k: v for k, v in V2_FILES.items() if k != "cgroup.kill"}
    leaf = cgroup_dir(tmp_path / "exec-1", files)
    procs = members(3)
    list_members(leaf, procs)
    if any(p.poll() is not None for p in procs):
        pytest.fail("inconclusive: a member died before the kill")
    ExecCgroup(2, {"memory": leaf, "pids": leaf, "kill": leaf}, {}).kill()
    assert all(dead(p) for p in procs)
    assert not (tmp_path / "exec-1" / "cgroup.kill").exists()


def test_a_removed_cgroup_is_not_killed_again(
    tmp_path: Path, members: Callable[[int], list[subprocess.Popen[bytes]]]
) -> None:
    # After `remove`, the pids once listed may belong to unrelated processes.
    memory = cgroup_dir(tmp_path / "memory" / "exec-1", V1_MEMORY)
    procs = members(1)
    list_members(memory, procs)
    cgroup = ExecCgroup(1, {"memory": memory}, {})
    cgroup.removed = True
    cgroup.kill()
    assert procs[0].poll() is None


def test_a_member_already_gone_does_not_stop_the_kill(
    tmp_path: Path, members: Callable[[int], list[subprocess.Popen[bytes]]]
) -> None:
    # cgroup.procs can still list a process that has just exited; the ones after it die.
    gone = subprocess.Popen(["true"])
    gone.wait()
    memory = cgroup_dir(tmp_path / "memory" / "exec-1", V1_MEMORY)
    procs = members(1)
    Path(memory, "cgroup.procs").write_text(f"{gone.pid}\n{procs[0].pid}\n")
    if procs[0].poll() is not None:
        pytest.fail("inconclusive: the member died before the kill")
    ExecCgroup(1, {"memory": memory}, {}).kill()
    assert dead(procs[0])
    assert procs[0].returncode == -9


def test_v2_a_cgroup_kill_the_kernel_refuses_is_not_an_error(tmp_path: Path) -> None:
    # The kill is best effort (the cgroup may be going away): a refused write raises nothing.
    files = {k: v for k, v in V2_FILES.items() if k != "cgroup.kill"}
    leaf = cgroup_dir(tmp_path / "exec-1", files)
    (tmp_path / "exec-1" / "cgroup.kill").mkdir()  # opening it for writing fails (EISDIR)
    with pytest.raises(IsADirectoryError):  # control: writing it does fail
        Path(leaf, "cgroup.kill").write_text("1")
    ExecCgroup(2, {"memory": leaf, "pids": leaf, "kill": leaf}, {}).kill()
