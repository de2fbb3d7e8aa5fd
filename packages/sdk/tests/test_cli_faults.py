"""Faults of the caller's paths and commands are reported as what they are, not as a broken
tier or an internal error: each case runs its positive control first (the same command
with the fault removed works), then the fault, which must be one line with its own code.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import panday
from panday import exitcodes
from panday_core.errors import WorkspaceUnusable

if TYPE_CHECKING:
    from collections.abc import Callable
    from subprocess import CompletedProcess

    Cli = Callable[..., CompletedProcess[str]]
    Line = Callable[[CompletedProcess[str]], str]

pytestmark = pytest.mark.usefixtures("linux_tier")


@pytest.fixture
def deleted(tmp_path: Path) -> Path:
    """A directory that exists now; `in_deleted` removes it just before panday starts."""
    gone = tmp_path / "gone"
    gone.mkdir()
    return gone


def in_deleted(exe: str, where: Path, *args: str, stdin: str = "") -> CompletedProcess[str]:
    """panday started inside `where` after `where` was removed (as a shell left in a
    directory another process deleted would start it)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(where.parent / "no-user-config")}
    return subprocess.run(
        ["/bin/sh", "-c", 'rmdir "$0" && exec "$@"', str(where), exe, *args],
        cwd=where,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_deleted_current_directory_is_a_missing_input(
    tmp_path: Path, cli: Cli, clean_line: Line, deleted: Path, exe: str
) -> None:
    control = cli("run", "--", "true", cwd=deleted)
    if control.returncode != 0:
        pytest.fail(f"inconclusive: control failed: {control.stderr}")
    result = in_deleted(exe, deleted, "run", "--", "true")
    assert result.returncode == exitcodes.NO_INPUT, result.stderr
    line = clean_line(result)
    assert f"fs.workspace: '{deleted}' is the current directory" in line
    assert "no longer exists" in line
    assert "--workspace" in line  # the fix
    # With a workspace given, the deleted directory does not matter.
    ws = tmp_path / "ws"
    ws.mkdir()
    deleted.mkdir()
    given = in_deleted(exe, deleted, "run", "--workspace", str(ws), "--", "pwd")
    assert given.returncode == 0, given.stderr
    assert given.stdout == f"{ws}\n"
    deleted.mkdir()
    check = in_deleted(exe, deleted, "policy", "check", "-")
    assert check.returncode == exitcodes.NO_INPUT, check
    assert "missing here: fs.workspace" in check.stdout


def test_the_sdk_reports_a_deleted_current_directory(deleted: Path) -> None:
    here = Path.cwd()
    os.chdir(deleted)
    try:
        deleted.rmdir()
        with pytest.raises(WorkspaceUnusable) as info:
            panday.open()
    finally:
        os.chdir(here)
    assert info.value.field == "fs.workspace"
    assert info.value.path == str(deleted)


def test_a_workspace_the_jail_cannot_enter_is_a_fault_of_the_path(
    tmp_path: Path, cli: Cli, clean_line: Line
) -> None:
    ws = tmp_path / "locked"
    ws.mkdir()
    ws.chmod(0o755)
    control = cli("run", "--workspace", str(ws), "--", "true")
    if control.returncode != 0:
        pytest.fail(f"inconclusive: control failed: {control.stderr}")
    cases = [0o600]
    if os.geteuid() == 0:
        cases.append(0o700)  # then owned by another user: root's jail cannot pass the bits
    for mode in cases:
        if mode == 0o700:
            os.chown(ws, 65534, 65534)
        ws.chmod(mode)
        try:
            result = cli("run", "--workspace", str(ws), "--", "true")
            with pytest.raises(WorkspaceUnusable) as info:
                panday.open({"fs": {"workspace": str(ws)}})
        finally:
            ws.chmod(0o755)
            if mode == 0o700:
                os.chown(ws, os.geteuid(), os.getegid())
        assert result.returncode == exitcodes.NO_INPUT, (oct(mode), result.stderr)
        line = clean_line(result)
        assert f"fs.workspace: '{ws}' cannot be entered from inside the sandbox" in line
        assert "chmod" in line
        assert "unavailable" not in line
        assert info.value.path == str(ws)


def test_ro_on_a_link_is_the_tiers_refusal_naming_the_real_path(
    tmp_path: Path, cli: Cli, clean_line: Line
) -> None:
    real = tmp_path / "data"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    control = cli("run", "--ro", str(real), "--", "ls", str(real))
    if control.returncode != 0:
        pytest.fail(f"inconclusive: control failed: {control.stderr}")
    result = cli("run", "--ro", str(link), "--", "ls", str(real))
    assert result.returncode == exitcodes.POLICY_REFUSED, result.stderr
    line = clean_line(result)
    assert f"fs.staged_ro[0]: '{link}' is a symbolic link" in line
    assert f"give the real path: '{real}'" in line
    assert "leave it out" not in line  # staged paths are enforced; the value is the fault


@pytest.mark.parametrize("option", ["--ro", "--workspace"])
def test_dot_dot_is_refused_on_the_command_line_as_in_a_policy_file(
    tmp_path: Path, cli: Cli, clean_line: Line, option: str
) -> None:
    (tmp_path / "a").mkdir()
    target = tmp_path / "b"
    target.mkdir()
    control = cli("run", option, str(target), "--", "true")
    if control.returncode != 0:
        pytest.fail(f"inconclusive: control failed: {control.stderr}")
    for given in (f"{tmp_path}/a/../b", "../b"):
        result = cli("run", option, given, "--", "true", cwd=tmp_path / "a")
        assert result.returncode == exitcodes.USAGE, result.stderr
        assert f"{option} {given!r}: contains '..'" in clean_line(result)


@pytest.mark.parametrize("allow", [False, True], ids=["no network", "net.allow"])
def test_a_commands_own_output_never_changes_how_its_exit_is_read(
    cli: Cli, clean_line: Line, allow: bool
) -> None:
    extra = ["--allow", "example.com"] if allow else []
    missing = cli("run", *extra, "--", "no-such-program-here")
    assert missing.returncode == exitcodes.NOT_FOUND, missing.stderr  # control
    assert "'no-such-program-here': not found inside the sandbox" in clean_line(missing)
    line = "bwrap: execvp no-such-program-here: No such file or directory"
    for code in (125, 1, 127):
        result = cli("run", *extra, "--", "sh", "-c", f"echo '{line}' >&2; exit {code}")
        assert result.returncode == code, result.stderr
        assert result.stderr == f"{line}\n"


def test_a_policy_files_protected_entries_survive_the_command_line_options(
    tmp_path: Path, cli: Cli
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("mine\n")
    write = ["sh", "-c", "echo theirs > keep.txt; echo exit=$?"]
    plain = tmp_path / "plain.toml"
    plain.write_text("version = 1\n")
    control = cli("run", "--policy", str(plain), "--workspace", str(ws), "--", *write)
    if "exit=0" not in control.stdout or (ws / "keep.txt").read_text() != "theirs\n":
        pytest.fail(f"inconclusive: control failed: {control}")
    (ws / "keep.txt").write_text("mine\n")
    guarded = tmp_path / "guarded.toml"
    guarded.write_text('version = 1\n[fs]\nprotect = ["keep.txt"]\n')
    result = cli("run", "--policy", str(guarded), "--workspace", str(ws), "--", *write)
    assert "exit=0" not in result.stdout, result
    assert (ws / "keep.txt").read_text() == "mine\n"
