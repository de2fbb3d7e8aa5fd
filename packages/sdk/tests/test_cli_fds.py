"""The CLI started with a standard descriptor closed or unusable: repaired with /dev/null.

Each case first runs the same command with every descriptor open (the positive control:
its exit code and output are what the repaired run must give), then with one descriptor
closed (``<&-``, ``>&-``, ``2>&-``) or opened the wrong way round (``1</dev/null``,
``0>/dev/null``). Without the repair these ended in ``'echo': not found``, ``bwrap: Can't
read --args data``, an ``AttributeError`` traceback or an internal error.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday import exitcodes

if TYPE_CHECKING:
    from collections.abc import Sequence

pytestmark = pytest.mark.usefixtures("linux_tier")

REPO = Path(__file__).resolve().parents[3]

COMMANDS: dict[str, tuple[str, ...]] = {
    "run": ("run", "--", "echo", "hi"),
    "doctor": ("doctor",),
    "policy check": ("policy", "check", str(REPO / "examples" / "default.toml")),
    "plugin inspect": ("plugin", "inspect", str(REPO / "examples" / "plugin.toml")),
    "--help": ("--help",),
}

DESCRIPTORS = {
    "stdin closed": "<&-",
    "stdout closed": ">&-",
    "stderr closed": "2>&-",
}
"""What the shell does to the descriptor before exec'ing panday."""


def _run(
    exe: str, args: Sequence[str], redirect: str, tmp: Path, *, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    where = tmp / "cwd"
    where.mkdir(exist_ok=True)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "no-user-config")}
    env.pop("GITHUB_TOKEN", None)  # plugin inspect's answer must not depend on the caller
    return subprocess.run(
        ["/bin/sh", "-c", f'exec "$0" "$@" {redirect}', exe, *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
        cwd=where,
        env=env,
    )


def _clean(result: subprocess.CompletedProcess[bytes]) -> None:
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        assert b"Traceback" not in text, f"{name}: {text!r}"
        assert b"internal error" not in text, f"{name}: {text!r}"
        assert b"Bad file descriptor" not in text, f"{name}: {text!r}"


@pytest.mark.parametrize("descriptor", sorted(DESCRIPTORS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_closed_standard_descriptor_is_replaced_with_dev_null(
    exe: str, tmp_path: Path, command: str, descriptor: str
) -> None:
    args = COMMANDS[command]
    control = _run(exe, args, "", tmp_path)
    _clean(control)
    if control.returncode not in {exitcodes.OK, exitcodes.FAILED} or not control.stdout:
        pytest.fail(f"inconclusive: control failed: {control}")
    result = _run(exe, args, DESCRIPTORS[descriptor], tmp_path)
    _clean(result)
    assert result.returncode == control.returncode, result
    if descriptor == "stdout closed":
        # Output went to /dev/null: nothing on the pipe the caller did not give us.
        assert result.stdout == b""
    else:
        assert result.stdout.splitlines()[:1] == control.stdout.splitlines()[:1]
    if descriptor == "stderr closed":
        assert result.stderr == b""


@pytest.mark.parametrize(
    ("redirect", "what"),
    [("1</dev/null", "stdout opened read-only"), ("0>/dev/null", "stdin opened write-only")],
)
def test_a_standard_descriptor_opened_the_wrong_way_is_replaced(
    exe: str, tmp_path: Path, redirect: str, what: str
) -> None:
    args = ("run", "--stdin", "--", "sh", "-c", "cat; echo ran")
    control = _run(exe, args, "", tmp_path, stdin=b"fed\n")
    if control.returncode != 0 or control.stdout != b"fed\nran\n":
        pytest.fail(f"inconclusive: control failed: {control}")
    result = _run(exe, args, redirect, tmp_path, stdin=b"fed\n")
    _clean(result)
    assert result.returncode == 0, (what, result)
    # The repaired stream is /dev/null: an empty stdin, or output that goes nowhere.
    assert result.stdout == (b"ran\n" if redirect.startswith("0") else b""), what


def test_a_closed_stdin_reads_as_empty_for_the_command(exe: str, tmp_path: Path) -> None:
    args = ("run", "--stdin", "--", "sh", "-c", "wc -c; echo exit=$?")
    control = _run(exe, args, "", tmp_path, stdin=b"12345")
    if control.stdout.split() != [b"5", b"exit=0"]:
        pytest.fail(f"inconclusive: control failed: {control}")
    result = _run(exe, args, "<&-", tmp_path)
    _clean(result)
    assert result.returncode == 0, result
    assert result.stdout.split() == [b"0", b"exit=0"]


def test_a_failing_command_with_stderr_closed_still_exits_with_its_code(
    exe: str, tmp_path: Path
) -> None:
    # An error path with no stderr to write to: the code still says what happened.
    control = _run(exe, ("run", "--", "no-such-program-here"), "", tmp_path)
    if control.returncode != exitcodes.NOT_FOUND:
        pytest.fail(f"inconclusive: control failed: {control}")
    result = _run(exe, ("run", "--", "no-such-program-here"), "2>&-", tmp_path)
    assert result.returncode == exitcodes.NOT_FOUND, result
    assert result.stderr == b""
