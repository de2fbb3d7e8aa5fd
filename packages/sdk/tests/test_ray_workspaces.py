"""The Ray node actor's clean-up of workspaces left by killed actors (no Ray needed: the
actor module imports Ray only on the node)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

from panday.ray import actor
from panday.ray.actor import WORKSPACE_PREFIX, reap_workspaces

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_workspace_left_by_a_dead_pid_or_an_earlier_owner_of_this_pid_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    me = os.getpid()
    dead = tmp_path / f"{WORKSPACE_PREFIX}{_dead_pid()}-a"
    reused = tmp_path / f"{WORKSPACE_PREFIX}{me}-old"  # an earlier process that had this pid
    mine = tmp_path / f"{WORKSPACE_PREFIX}{me}-new"  # made by this process, in use
    alive = tmp_path / f"{WORKSPACE_PREFIX}1-b"  # pid 1 is alive wherever this runs
    other = tmp_path / "not-panday-1-c"
    for d in (dead, reused, mine, alive, other):
        d.mkdir()
        (d / "file").write_text("x")
    monkeypatch.setattr(actor, "_MADE_HERE", {str(mine)})
    reap_workspaces(str(tmp_path))
    assert not dead.exists()
    assert not reused.exists()
    assert mine.exists()
    assert alive.exists()
    assert other.exists()
