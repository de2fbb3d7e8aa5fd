"""A full disk or a broken device on panday's own output is exit 74 with one line, on every
command (issue 27, 6): it was 70 "internal error" for doctor, policy and plugin, and a raw
traceback for --help and --version. The control: the same command to /dev/null exits 0."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

COMMANDS = [
    ["--help"],
    ["--version"],
    ["-V"],
    ["doctor"],
    ["policy", "schema"],
    ["policy", "check", str(EXAMPLES / "default.toml")],
    ["plugin", "inspect", str(EXAMPLES / "plugin.toml")],
    ["run", "--help"],
]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:2]) for a in COMMANDS])
def test_a_write_error_is_exit_74_and_one_line(exe: str, tmp_path: Path, args: list[str]) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "no-user-config")}

    def run(out: str) -> subprocess.CompletedProcess[str]:
        with open(out, "w") as sink:  # noqa: PTH123 - a device, as a shell redirection
            return subprocess.run(
                [exe, *args],
                stdout=sink,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
                cwd=tmp_path,
                env=env,
            )

    control = run(os.devnull)
    # The command itself works (plugin inspect and policy check exit 1 for "valid, not
    # enforceable here", which is an answer, not a failure to write it).
    assert control.returncode in {0, 1}, control.stderr
    assert not control.stderr.startswith("panday: "), control.stderr
    failed = run("/dev/full")
    assert failed.returncode == 74, failed.stderr
    assert "Traceback" not in failed.stderr
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1, failed.stderr
    assert lines[0].startswith("panday: cannot write standard output")
