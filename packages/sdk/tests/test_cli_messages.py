"""What a new user meets (issue 27, 8): a refusal of a workspace they never chose says it
defaulted to the current directory and what to do; ``--env NAME`` for an unset variable
does not suggest putting a value on the command line (every user sees it in ps); `policy
check` on a plugin manifest points at `plugin inspect`. Each with its control."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

pytestmark = pytest.mark.skipif(
    not Path("/proc/self").exists(), reason="the refusal is T2 Linux's (a home directory)"
)


def _run(exe: str, cwd: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "no-config")}
    return subprocess.run(
        [exe, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_a_refused_default_workspace_says_it_was_the_current_directory(
    exe: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    defaulted = _run(exe, home, "run", "--", "true", home=home)
    assert defaulted.returncode == 77, defaulted.stderr
    assert "home directory" in defaulted.stderr
    assert "defaulted to the current directory" in defaulted.stderr
    assert "--workspace DIR" in defaulted.stderr
    # Control: the same refusal of a workspace the user named carries no such hint.
    named = _run(exe, tmp_path, "run", "--workspace", str(home), "--", "true", home=home)
    assert named.returncode == 77, named.stderr
    assert "defaulted" not in named.stderr


def test_an_unset_env_name_does_not_suggest_a_value_on_the_command_line(
    exe: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PANDAY_TEST_UNSET"}
    done = subprocess.run(
        [exe, "run", "--env", "PANDAY_TEST_UNSET", "--", "true"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 64
    assert "not set in this environment" in done.stderr
    assert "=VALUE" not in done.stderr
    assert "export" in done.stderr


def test_policy_check_on_a_manifest_points_at_plugin_inspect(exe: str, tmp_path: Path) -> None:
    manifest = _run(exe, tmp_path, "policy", "check", str(EXAMPLES / "plugin.toml"), home=tmp_path)
    assert manifest.returncode == 65
    assert "panday plugin inspect" in manifest.stderr + manifest.stdout
    # Control: an invalid policy that is no manifest gets no such pointer.
    bad = tmp_path / "bad.toml"
    bad.write_text("nope = 1\n")
    other = _run(exe, tmp_path, "policy", "check", str(bad), home=tmp_path)
    assert other.returncode == 65
    assert "plugin inspect" not in other.stderr + other.stdout
