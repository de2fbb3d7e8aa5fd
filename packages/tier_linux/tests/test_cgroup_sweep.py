"""What a SIGKILLed panday leaves in the cgroup hierarchies is swept by the next session.

On a stand-in tree (plain directories laid out as cgroup v1 and v2 would be), so every
case runs on any host: a dead owner's directory goes, in every hierarchy whichever
controllers the sweeping session needs; a live owner's stays; a pid now used by a process
that started at another time is a dead owner. The end-to-end case (a real panday,
SIGKILLed, then a real session) is in the SDK's tests (test_cli_run.py).
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

from panday_tier_linux import cgroups
from panday_tier_linux.cgroups import discover, sweep_stale

if TYPE_CHECKING:
    from pathlib import Path


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid  # reaped: nobody has it (until the kernel reuses it)


def _tree(tmp_path: Path) -> tuple[cgroups.Mounts, dict[str, Path]]:
    root = tmp_path / "cg"
    places = {
        "memory": root / "memory" / "process_api" / "abc",
        "pids": root / "pids",
        "cpuacct": root / "cpuacct",
        "v2": root / "unified",
    }
    for place in places.values():
        place.mkdir(parents=True)
    mountinfo = (
        "".join(
            f"{30 + i} 23 0:{40 + i} / {root / name} rw - cgroup cgroup rw,{name}\n"
            for i, name in enumerate(("memory", "pids", "cpuacct"))
        )
        + f"40 23 0:50 / {places['v2']} rw - cgroup2 cgroup2 rw\n"
    )
    own = "9:pids:/\n4:memory:/process_api/abc\n2:cpuacct:/\n0::/\n"
    return discover(mountinfo, own), places


def test_a_dead_owners_directories_go_in_every_hierarchy(tmp_path: Path) -> None:
    mounts, places = _tree(tmp_path)
    dead = _dead_pid()
    me = f"{os.getpid()}.{cgroups._start_time(os.getpid())}"  # pyright: ignore[reportPrivateUsage] - the name's format
    stale = [p / f"panday-{dead}.123-s1" for p in places.values()]
    legacy = places["pids"] / f"panday-{dead}-old"  # the name before start times
    live = [p / f"panday-{me}-s2" for p in places.values()]
    reused = places["memory"] / f"panday-{os.getpid()}.1-s3"  # our pid, another start
    other = places["cpuacct"] / "unrelated"
    theirs = places["pids"] / f"panday-{dead}.9-another-user"
    for made in (*stale, legacy, *live, reused, other, theirs):
        made.mkdir()
    (stale[0] / "exec-1").mkdir()  # a command's cgroup inside: removed with it
    kept = [*live, other]
    if os.geteuid() == 0:  # only root can give a directory to another user
        os.chown(theirs, 65534, 65534)
        kept.append(theirs)  # the next session of *that* user sweeps it
    else:
        stale.append(theirs)
    cgroups._SWEPT.clear()  # pyright: ignore[reportPrivateUsage] - a fresh process's state
    sweep_stale(mounts)
    assert not any(p.exists() for p in (*stale, legacy, reused))
    assert all(p.exists() for p in kept)


def test_the_sweep_runs_once_per_place_in_a_process(tmp_path: Path) -> None:
    mounts, places = _tree(tmp_path)
    cgroups._SWEPT.clear()  # pyright: ignore[reportPrivateUsage] - a fresh process's state
    sweep_stale(mounts)
    late = places["pids"] / f"panday-{_dead_pid()}.1-late"
    late.mkdir()
    sweep_stale(mounts)  # this process swept here already: its own sessions are not stale
    assert late.exists()
