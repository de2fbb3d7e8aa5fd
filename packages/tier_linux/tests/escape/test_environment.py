"""Escape probes: what the jail inherits from its caller.

Proves: nothing of the caller's environment leaks in (a canary variable); the policy's
variables arrive but never appear on a host command line (/proc/<pid>/cmdline is readable
by every user); no descriptor of the caller leaks into the jail.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest

from panday_core.errors import PolicyError, PolicyViolation
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux.session import open_session

if TYPE_CHECKING:
    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

    from panday_tier_linux.session import LinuxSession

CANARY = "PANDAY_ESCAPE_CANARY"


def test_a_canary_in_the_callers_environment_does_not_leak(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = f"canary-{os.urandom(4).hex()}"
    monkeypatch.setenv(CANARY, value)
    code = f"""
if os.environ.get({CANARY!r}) == {value!r}:
    ok("canary inherited")
blocked(f"{{len(os.environ)}} variables, none of them the canary")
"""
    esc.control(esc.outside(code))  # a child of the caller inherits it
    esc.must_block(esc.inside(code))


def _cmdlines_holding(needle: bytes) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.usefixtures("launch")
def test_a_policy_secret_never_appears_on_a_host_command_line(esc: Escape) -> None:
    secret = f"s3cret-{os.urandom(6).hex()}"
    # Control: a host process with the secret on its command line is found by the scan.
    # One process that never forks (``sh -c`` forks its command: a fork killed before it
    # exec'd still shows the parent's command line, and once showed here as an "escape").
    holder = [sys.executable, "-c", "import time; time.sleep(30)", secret]
    with subprocess.Popen(holder) as visible:
        try:
            deadline = time.monotonic() + 5
            while (
                visible.pid not in _cmdlines_holding(secret.encode())
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            if visible.pid not in _cmdlines_holding(secret.encode()):
                pytest.fail("inconclusive: control failed: the scan did not find a visible secret")
        finally:
            visible.kill()
    seen: list[int] = []
    stop = threading.Event()

    def scan() -> None:
        while not stop.is_set():
            seen.extend(_cmdlines_holding(secret.encode()))
            time.sleep(0.01)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    # The probe compares a digest: the secret itself must not be on *its* command line.
    digest = hashlib.sha256(secret.encode()).hexdigest()
    code = f"""
import hashlib, time
time.sleep(1.0)
if hashlib.sha256(os.environ.get("API_TOKEN", "").encode()).hexdigest() == {digest!r}:
    ok("the policy's variable arrived")
blocked("missing")
"""
    try:
        inside = esc.inside(code, env={"API_TOKEN": secret})
    finally:
        stop.set()
        scanner.join(timeout=5)
    esc.control(inside)  # the variable is there, inside
    assert not seen, (
        f"ESCAPE: the secret was on the command line of host pid(s) {sorted(set(seen))}"
    )
    esc.held()


def test_no_descriptor_of_the_caller_leaks_in(esc: Escape) -> None:
    r, w = os.pipe()
    os.set_inheritable(r, True)  # noqa: FBT003 - os's positional flag
    code = """
fds = []
for name in os.listdir("/proc/self/fd"):
    try:
        os.fstat(int(name))  # the listing's own descriptor is closed by now
        fds.append(int(name))
    except OSError:
        pass
extra = sorted(fd for fd in fds if fd > 2)
if extra:
    ok(f"inherited {extra}")
blocked("only stdin, stdout and stderr")
"""
    try:
        esc.control(esc.outside(code, close_fds=False))
        esc.must_block(esc.inside(code))
    finally:
        os.close(r)
        os.close(w)


def test_home_is_the_workspace_and_the_environment_is_small(esc: Escape) -> None:
    result = esc.run(["/usr/bin/env"], env={"EXTRA": "1"})
    env = dict(line.split("=", 1) for line in result.stdout.decode().splitlines())
    assert env.pop("HOME") == str(esc.ws)
    assert env.pop("EXTRA") == "1"
    assert set(env) <= {"PATH", "LANG", "TERM", "PWD"}


# ------------------------------------------------- env names that load code (issue 22, 7)


def _hooked_session(esc: Escape, env: dict[str, str], *, allow: tuple[str, ...]) -> LinuxSession:
    policy = SandboxPolicy(
        fs=FsPolicy(workspace=str(esc.ws), access="rw"), env=env, allow_env_hooks=allow
    )
    return open_session(policy, egress=esc.egress())


def _refused_at_both_layers(esc: Escape, env: dict[str, str]) -> None:
    """Refused by the model (naming env.NAME), and by the tier for a policy built around
    the model's check (a future loader must not slip one past it)."""
    name = next(iter(env))
    with pytest.raises(PolicyError) as by_model:
        _hooked_session(esc, env, allow=())
    assert by_model.value.field == f"env.{name}"
    assert "allow_env_hooks" in by_model.value.reason
    policy = SandboxPolicy(fs=FsPolicy(workspace=str(esc.ws), access="rw"))
    msgspec.structs.force_setattr(policy, "env", env)
    with pytest.raises(PolicyViolation) as by_tier:
        open_session(policy, egress=esc.egress())
    assert f"env.{name}" in {v.field for v in by_tier.value.violations}
    esc.held()


def test_pythonpath_runs_a_sitecustomize_only_when_allowed(esc: Escape) -> None:
    hooks = esc.ws / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "print('RESULT ok sitecustomize ran from PYTHONPATH', flush=True)\nraise SystemExit(0)\n"
    )
    env = {"PYTHONPATH": str(hooks)}
    # Not -I (the suite's usual probe): isolated mode ignores PYTHONPATH.
    argv = ["/usr/bin/python3", "-c", "print('RESULT blocked no hook ran', flush=True)"]
    # Control: granted, every python the command starts runs the policy's module first.
    with _hooked_session(esc, env, allow=("PYTHONPATH",)) as session:
        result = session.run(argv, timeout_ms=60_000)
    esc.control(
        esc.parse("inside, PYTHONPATH granted", result.stdout, result.stderr, result.exit_code)
    )
    # Not granted: the policy never opens.
    _refused_at_both_layers(esc, env)
    esc.must_block(esc.inside_run(argv))  # and without it, nothing runs the module


def test_git_config_from_the_environment_runs_a_command_only_when_allowed(esc: Escape) -> None:
    if shutil.which("git") is None:
        pytest.fail("the escape suite needs git on the host (it is what the probe hooks)")
    subprocess.run(["git", "init", "-q", str(esc.ws)], check=True)
    marker = esc.ws / "hooked"
    env = {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": f"touch {marker}; true",
    }
    code = f"""
import subprocess
subprocess.run(["git", "-C", {str(esc.ws)!r}, "status", "--short"], capture_output=True)
if os.path.exists({str(marker)!r}):
    ok("core.fsmonitor from GIT_CONFIG_* ran")
blocked("git ran no command of the environment's")
"""
    with _hooked_session(esc, env, allow=tuple(env)) as session:
        result = session.run(esc.py(code), timeout_ms=60_000)
    esc.control(
        esc.parse("inside, GIT_CONFIG_* granted", result.stdout, result.stderr, result.exit_code)
    )
    marker.unlink()
    for name, value in env.items():  # each of the three alone is refused
        _refused_at_both_layers(esc, {name: value})
    esc.must_block(esc.inside(code))
    assert not marker.exists()
