"""A host where bubblewrap cannot run, reproduced without touching host-wide settings.

A launcher installs, on itself and everything it starts, the seccomp rule Docker's
default profile has: clone and unshare with CLONE_NEWUSER fail with EPERM, clone3 with
ENOSYS. Under it, `panday doctor` names T2 Linux unavailable (with bwrap's reason) and T1
Linux as the tier in force; `panday run` runs in T1, where a read next to the workspace
fails while the same command succeeds outside (positive control); and a policy only T2
could enforce is refused naming both reasons, never run with less.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Escape  # the suite's fixture type

LAUNCHER = """
import os, sys
import pyseccomp as sc
CLONE_NEWUSER = 0x10000000
f = sc.SyscallFilter(sc.ALLOW)
for call in ("clone", "unshare"):
    f.add_rule(sc.ERRNO(1), call, sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
f.add_rule(sc.ERRNO(38), "clone3")
f.load()
os.execv(sys.argv[1], sys.argv[1:])
"""


def _panday() -> str:
    found = Path(sys.executable).parent / "panday"
    if not found.exists():
        pytest.fail(f"inconclusive: no panday script beside {sys.executable}")
    return str(found)


def _restricted(esc: Escape, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(esc.tmp / "config")}
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, _panday(), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=esc.ws,
        timeout=120,
        check=False,
    )


def test_doctor_names_t1_in_force_and_why_t2_cannot_run(esc: Escape) -> None:
    # Control: unrestricted, T2 runs here (the escape suite requires it).
    free = subprocess.run(
        [_panday(), "doctor"], capture_output=True, text=True, timeout=120, check=False
    )
    assert "t2-linux: available (this host's command tier)" in free.stdout, free.stdout
    done = _restricted(esc, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    t2 = next(line for line in lines if line.startswith("t2-linux:"))
    assert t2.startswith("t2-linux: unavailable"), t2
    assert "namespace" in t2.lower() or "permitted" in t2.lower(), t2
    assert "t1-linux: available (this host's command tier)" in lines, done.stdout
    esc.held()


def test_run_falls_to_t1_and_t1_holds(esc: Escape) -> None:
    secret = esc.next_door / "secret"
    secret.write_text("next door")
    outside = subprocess.run(
        ["cat", str(secret)], capture_output=True, text=True, timeout=60, check=False
    )
    esc.control(esc.parse("outside", b"RESULT ok " + outside.stdout.encode(), b"", 0))
    ran = _restricted(esc, "run", "--workspace", str(esc.ws), "--", "sh", "-c", "echo in-t1")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "in-t1"
    read = _restricted(esc, "run", "--workspace", str(esc.ws), "--", "cat", str(secret))
    assert read.returncode != 0
    assert "Permission denied" in read.stderr, read.stderr
    assert "next door" not in read.stdout
    esc.held()


def test_a_policy_only_t2_enforces_is_refused_with_both_reasons(esc: Escape) -> None:
    refused = _restricted(esc, "run", "--workspace", str(esc.ws), "--mem", "256M", "--", "true")
    assert refused.returncode != 0
    assert "limits.mem_bytes" in refused.stderr, refused.stderr
    assert "t1-linux" in refused.stderr, refused.stderr
    assert "t2-linux cannot run here" in refused.stderr, refused.stderr
    esc.count_refusal()


def test_inside_a_user_namespace_with_no_room_for_another_t1_is_in_force(esc: Escape) -> None:
    """The other restricted host: a user namespace whose max_user_namespaces is 0 (a
    per-namespace limit: the host's own setting is untouched). bwrap cannot make its user
    namespace there; T1 needs none."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("inconclusive: this probe needs unshare(1) (util-linux)")
    script = f"echo 0 > /proc/sys/user/max_user_namespaces && exec {_panday()} doctor"
    env = {**os.environ, "XDG_CONFIG_HOME": str(esc.tmp / "config")}
    done = subprocess.run(
        [unshare, "--user", "--map-root-user", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=esc.ws,
        timeout=120,
        check=False,
    )
    if "unshare failed" in done.stderr:
        pytest.fail(f"inconclusive: no user namespace for the probe itself: {done.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    t2 = next(line for line in lines if line.startswith("t2-linux:"))
    assert t2.startswith("t2-linux: unavailable"), t2
    assert "t1-linux: available (this host's command tier)" in lines, done.stdout
    esc.held()


def test_a_cached_run_holds_as_the_first(esc: Escape) -> None:
    """``panday run --tier t1-linux``: the first run plans (the full path) and caches the
    plan; the next runs from it (the same launch path, its roots judged again): both read
    inside the workspace and fail next door, while the control outside reads it."""
    secret = esc.next_door / "secret"
    secret.write_text("next door")
    (esc.ws / "mine").write_text("mine")
    outside = subprocess.run(
        ["cat", str(secret)], capture_output=True, text=True, timeout=60, check=False
    )
    esc.control(esc.parse("outside", b"RESULT ok " + outside.stdout.encode(), b"", 0))
    argv = [_panday(), "run", "--tier", "t1-linux", "--workspace", str(esc.ws), "--"]
    env = {**os.environ, "XDG_CONFIG_HOME": str(esc.tmp / "config")}
    for attempt in ("plans", "cached"):
        inside = subprocess.run(
            [*argv, "sh", "-c", f"cat mine; cat {secret}"],
            capture_output=True,
            text=True,
            env=env,
            cwd=esc.ws,
            timeout=60,
            check=False,
        )
        assert inside.stdout == "mine", (attempt, inside.stdout, inside.stderr)
        assert "Permission denied" in inside.stderr, (attempt, inside.stderr)
        assert inside.returncode == 1, (attempt, inside.returncode)
        esc.held()


def test_a_host_that_refuses_landlock_makes_t1_unavailable_with_its_reason(esc: Escape) -> None:
    """A container whose seccomp profile lets landlock_create_ruleset through but refuses
    landlock_restrict_self: T1's probe command names it, and T1 is not offered."""
    launcher = LAUNCHER.replace(
        'f.add_rule(sc.ERRNO(38), "clone3")', "f.add_rule(sc.ERRNO(1), 446)"
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(esc.tmp / "config")}
    done = subprocess.run(
        [sys.executable, "-c", launcher, _panday(), "doctor"],
        capture_output=True,
        text=True,
        env=env,
        cwd=esc.ws,
        timeout=120,
        check=False,
    )
    lines = done.stdout.splitlines()
    t1 = next(line for line in lines if line.startswith("t1-linux:"))
    assert t1.startswith("t1-linux: unavailable"), t1
    assert "could not restrict itself" in t1, t1
    assert "Operation not permitted" in t1, t1
    esc.held()
