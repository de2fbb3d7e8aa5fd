"""Gates round three (issue 28): guards whose faults the auditor planted and no gate saw.

Each test asserts what the guard decides for an input written here from the outside
world's documentation (a shell's manual, git's), not the guard's own table read back; each
kills the `tools/mutations.toml` entry named beside it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from panday_core import hostpaths
from panday_core.errors import PolicyError
from panday_core.policy import policy_from_dict
from panday_core.protect import root_refusal

if TYPE_CHECKING:
    from pathlib import Path

# ---- kills core - a root caller accepts another login account's home


def test_a_root_caller_refuses_every_login_accounts_home_as_a_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("only a root caller judges every account's home (falsify runs as root)")
    someone = tmp_path / "home" / "someone"
    daemon = tmp_path / "var" / "daemon"
    for path in (someone, daemon):
        path.mkdir(parents=True)
    me = pwd.getpwuid(0)
    accounts = [
        me,
        pwd.struct_passwd(("someone", "x", 1234, 1234, "", str(someone), "/bin/bash")),
        pwd.struct_passwd(("daemon", "x", 1, 1, "", str(daemon), "/usr/sbin/nologin")),
    ]
    monkeypatch.setattr(pwd, "getpwall", lambda: accounts)
    monkeypatch.setattr(hostpaths, "_HOMES", [])  # what the last call remembered
    why = root_refusal(str(someone), writable=True, allow_home=False)
    assert why is not None, "another login account's home accepted as a root caller's workspace"
    assert "home directory" in why
    # Controls: an account that cannot log in, and a project beside the home, are accepted.
    assert root_refusal(str(daemon), writable=True, allow_home=False) is None
    project = tmp_path / "project"
    project.mkdir()
    assert root_refusal(str(project), writable=True, allow_home=False) is None


# ---- kills env - ENV dropped from the hooks / GIT_CONFIG_PARAMETERS accepted

# Variables that make a program run code of the variable's choosing: sh(1p) and dash(1)
# (ENV), bash(1) (BASH_ENV), git(1) (GIT_CONFIG_PARAMETERS is what `git -c` passes down,
# core.fsmonitor and core.pager among what it may set).
CODE_LOADING_ENV = ("ENV", "BASH_ENV", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT")


@pytest.mark.parametrize("name", CODE_LOADING_ENV)
def test_each_code_loading_variable_is_refused_in_env_unless_allowed(name: str) -> None:
    with pytest.raises(PolicyError) as refused:
        policy_from_dict({"env": {name: "/tmp/hook"}})
    assert refused.value.field == f"env.{name}"
    # Control: the same document with the hook allowed by name passes.
    allowed = policy_from_dict({"env": {name: "/tmp/hook"}, "allow_env_hooks": [name]})
    assert allowed.env[name] == "/tmp/hook"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="dash's ENV, on Linux")
def test_env_is_a_hook_sh_runs(tmp_path: Path) -> None:
    """Why ENV is refused: an interactive sh sources the file it names (the exploit)."""
    sh = shutil.which("dash") or shutil.which("sh")
    if sh is None:
        pytest.skip("no sh")
    hook = tmp_path / "hook"
    hook.write_text("echo HOOKED\n")
    done = subprocess.run(
        [sh, "-i", "-c", "true"],
        env={"ENV": str(hook), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert "HOOKED" in done.stdout
