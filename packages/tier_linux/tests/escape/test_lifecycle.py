"""Escape probes: outliving the command, the wall clock, and the caller.

A heartbeat (a file the jailed process rewrites every 50 ms) shows whether anything of the
jail is still running, without looking for its processes from outside. Proves: a daemon
that double-forks and leaves the session dies with the jail at the wall clock and when
the command exits; the whole jail dies when its caller is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from panday_core.types import LimitKind

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)


def _daemon(beat: Path, then: str) -> list[str]:
    # Fork twice and leave the session: the classic way to survive a parent's death. The
    # command waits for the first beat, so a loaded machine cannot turn this into a race.
    loop = f"while :; do date +%s%N > {beat}; sleep 0.05; done"
    started = f"until [ -s {beat} ]; do sleep 0.02; done"
    return ["/bin/sh", "-c", f"(setsid sh -c '{loop}' > /dev/null 2>&1 &) ; {started}; {then}"]


def _still_beating(beat: Path, wait: float = 1.5) -> bool:
    before = beat.read_text() if beat.exists() else ""
    time.sleep(wait)
    after = beat.read_text() if beat.exists() else ""
    return before != after


def test_the_wall_clock_kills_a_double_forked_daemon(esc: Escape) -> None:
    beat = esc.ws / "beat"
    # Control: the daemon really runs (it beats while the command is alive).
    control = esc.run(_daemon(beat, "echo beating"))
    if control.stdout.strip() != b"beating":
        pytest.fail(f"inconclusive: control failed: the daemon never beat: {control}")
    beat.unlink()
    started = time.monotonic()
    result = esc.run(_daemon(beat, "sleep 20"), wall_clock_ms=3000)
    assert time.monotonic() - started < 15
    assert result.breach is not None, result
    assert result.breach.kind is LimitKind.WALL_CLOCK
    if not beat.exists():
        pytest.fail("inconclusive: the daemon never started before the wall clock")
    assert not _still_beating(beat), "ESCAPE: the daemon outlived the wall-clock kill"
    esc.held()


def test_a_daemon_dies_when_its_command_exits(esc: Escape) -> None:
    beat = esc.ws / "beat"
    result = esc.run(_daemon(beat, "sleep 0.2"))
    assert result.exit_code == 0
    if not beat.exists():
        pytest.fail("inconclusive: the daemon never started")
    assert not _still_beating(beat), "ESCAPE: the daemon outlived its command"
    esc.held()


PARENT = """
import sys
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux.session import open_session
ws = sys.argv[1]
with open_session(SandboxPolicy(fs=FsPolicy(workspace=ws))) as session:
    session.run(["/bin/sh", "-c", "while :; do date +%s%N > " + ws + "/beat; sleep 0.05; done"])
"""


def test_the_jail_dies_with_a_sigkilled_caller(esc: Escape) -> None:
    beat = esc.ws / "beat"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(esc.ws)])
    try:
        deadline = time.monotonic() + 30
        while not beat.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        # Control: while the caller lives, the jail runs.
        if not _still_beating(beat):
            pytest.fail("inconclusive: control failed: the jail never ran under its caller")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        time.sleep(0.3)
        assert not _still_beating(beat), "ESCAPE: the jail outlived its SIGKILLed caller"
        esc.held()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
