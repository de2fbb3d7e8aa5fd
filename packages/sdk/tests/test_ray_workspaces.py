"""The Ray node actor's clean-up of workspaces left by killed actors (no Ray needed: the
actor module imports Ray only on the node)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from panday.ray.actor import WORKSPACE_PREFIX, reap_workspaces, workspace_prefix

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/ns").is_dir(), reason="names a workspace's owner from /proc (Linux)"
)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _start(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rfind(b")") + 2 :].split()[19].decode()


def test_a_workspace_is_removed_only_when_its_own_actor_process_is_gone(tmp_path: Path) -> None:
    me, ns = os.getpid(), str(Path("/proc/self/ns/pid").stat().st_ino)
    mine = tmp_path / (workspace_prefix() + "a")  # this process's, in use
    assert mine.name.startswith(f"{WORKSPACE_PREFIX}{me}-{_start(me)}-{ns}-")
    alive = tmp_path / f"{WORKSPACE_PREFIX}1-{_start(1)}-{ns}-b"  # pid 1's, which lives
    dead = tmp_path / f"{WORKSPACE_PREFIX}{_dead_pid()}-5-{ns}-c"  # its pid is gone
    # An earlier process with this pid, or with pid 1 (pids are reused): another start.
    reused = tmp_path / f"{WORKSPACE_PREFIX}{me}-{int(_start(me)) - 1}-{ns}-d"
    reused_1 = tmp_path / f"{WORKSPACE_PREFIX}1-{int(_start(1)) + 7}-{ns}-e"
    # Another pid namespace's (a container sharing this /tmp): its pid means nothing here.
    elsewhere = tmp_path / f"{WORKSPACE_PREFIX}{_dead_pid()}-5-{int(ns) + 1}-f"
    older = tmp_path / f"{WORKSPACE_PREFIX}{_dead_pid()}-g"  # an older panday's name: not judged
    other = tmp_path / "not-panday-1-2-3-h"
    for d in (mine, alive, dead, reused, reused_1, elsewhere, older, other):
        d.mkdir()
        (d / "file").write_text("x")
    reap_workspaces(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (mine, alive, elsewhere, older, other)
    )


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def test_a_zombie_actors_workspace_is_removed(tmp_path: Path) -> None:
    """An actor whose raylet was killed is re-parented; where nothing reaps it (a container
    whose pid 1 is no init: seen in CI) it stays a zombie with its pid and start time. It
    will never run again, so its workspace goes."""
    ns = str(Path("/proc/self/ns/pid").stat().st_ino)
    live = subprocess.Popen(["sleep", "60"])
    ended = subprocess.Popen(["true"])  # not waited for below until the end: a zombie
    try:
        for _ in range(600):  # bounded: 30 s
            if _state(ended.pid) == "Z":
                break
            time.sleep(0.05)
        assert _state(ended.pid) == "Z"
        # Positive control: the same names for a process that still runs are kept.
        running = tmp_path / f"{WORKSPACE_PREFIX}{live.pid}-{_start(live.pid)}-{ns}-a"
        zombie = tmp_path / f"{WORKSPACE_PREFIX}{ended.pid}-{_start(ended.pid)}-{ns}-b"
        for d in (running, zombie):
            d.mkdir()
            (d / "file").write_text("x")
        reap_workspaces(str(tmp_path))
        assert _state(ended.pid) == "Z"  # still the zombie it judged
        assert [p.name for p in tmp_path.iterdir()] == [running.name]
    finally:
        live.kill()
        live.wait()
        ended.wait()
