"""Escape probes: what the jail inherits from its caller.

Proves: nothing of the caller's environment leaks in (a canary variable); the policy's
variables arrive but never appear on a host command line (/proc/<pid>/cmdline is readable
by every user); no descriptor of the caller leaks into the jail.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest
    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

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


def test_a_policy_secret_never_appears_on_a_host_command_line(esc: Escape) -> None:
    secret = f"s3cret-{os.urandom(6).hex()}"
    # Control: a host process with the secret on its command line is found by the scan.
    with subprocess.Popen(["sh", "-c", "sleep 30", secret]) as visible:
        try:
            deadline = time.monotonic() + 5
            while (
                visible.pid not in _cmdlines_holding(secret.encode())
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            if visible.pid not in _cmdlines_holding(secret.encode()):
                import pytest  # noqa: PLC0415

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
