"""`panday run --writes` and `panday changes` as a user drives them (issue 24): held changes
named on stderr with the command to review them, list / show / apply / apply --held /
discard, JSON, and bad input answered in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self").exists(), reason="fs.writes checked and review run on T2 Linux"
)

_PLANT = "echo ordinary > notes.txt; echo 'export X=1' > .envrc"


def _run(exe: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(cwd.parent / "no-config")}
    return subprocess.run(
        [exe, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    where = tmp_path / "ws"
    where.mkdir()
    return where


def test_checked_run_names_each_held_change_and_how_to_review_it(exe: str, ws: Path) -> None:
    done = _run(exe, ws, "run", "--writes", "checked", "--", "sh", "-c", _PLANT)
    assert done.returncode == 0, done.stderr
    assert (ws / "notes.txt").read_text() == "ordinary\n"  # control: ordinary writes land
    assert not (ws / ".envrc").exists()
    assert "panday: held .envrc (create): protected-name:" in done.stderr
    found = re.search(r"panday changes show (\S+)`", done.stderr)
    assert found is not None, done.stderr
    change_id = found.group(1)
    try:
        listed = _run(exe, ws, "changes")
        assert listed.returncode == 0
        assert change_id in listed.stdout
        assert "1 held" in listed.stdout
        shown = _run(exe, ws, "changes", "show", change_id)
        assert shown.returncode == 0, shown.stderr
        assert "held" in shown.stdout
        assert ".envrc" in shown.stdout
        assert "+export X=1" in shown.stdout
        blanket = _run(exe, ws, "changes", "apply", change_id)
        assert blanket.returncode == 0, blanket.stderr
        assert not (ws / ".envrc").exists(), "a blanket apply applied a held change"
        named = _run(exe, ws, "changes", "apply", change_id, ".envrc", "--held")
        assert named.returncode == 0, named.stderr
        assert (ws / ".envrc").read_text() == "export X=1\n"
        assert change_id not in _run(exe, ws, "changes").stdout, "an empty set stays listed"
    finally:
        _run(exe, ws, "changes", "discard", change_id)


def test_review_json_reports_the_change_set_and_discard_removes_it(exe: str, ws: Path) -> None:
    done = _run(exe, ws, "run", "--json", "--writes", "review", "--", "sh", "-c", _PLANT)
    assert done.returncode == 0, done.stderr
    writes = json.loads(done.stdout)["writes"]
    assert writes["mode"] == "review"
    assert writes["pending"] == 1
    assert [h["path"] for h in writes["held"]] == [".envrc"]
    assert not (ws / "notes.txt").exists(), "review mode wrote into the workspace"
    gone = _run(exe, ws, "changes", "discard", writes["change_set"])
    assert gone.returncode == 0, gone.stderr
    assert writes["change_set"] not in _run(exe, ws, "changes", "list", "--all").stdout


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("run", "--writes", "maybe", "--", "true"), 64, "--writes 'maybe': choose direct"),
        (("changes", "show", "no-such-set"), 66, "no change set 'no-such-set'"),
        (("changes", "apply", "../etc"), 66, "is not a change set id"),
        (("changes", "frobnicate"), 64, "invalid choice"),
    ],
)
def test_bad_input_gets_one_line_and_a_code(
    exe: str, ws: Path, args: tuple[str, ...], code: int, words: str
) -> None:
    done = _run(exe, ws, *args)
    assert done.returncode == code, done.stderr
    assert words in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_names_the_jail_chose_reach_the_terminal_inert(exe: str, ws: Path) -> None:
    """A held path is the jail's choice: an escape sequence or a newline in it must not act
    on the caller's terminal or forge a line of panday's own."""
    name = r"x\033]0;pwned\007\npanday: all clear"  # printf's escapes: ESC, BEL, newline
    plant = f"mkdir .vscode && printf x > \"$(printf '.vscode/{name}')\""
    done = _run(exe, ws, "run", "--writes", "checked", "--", "sh", "-c", plant)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert any("^[]0;pwned^G^Jpanday: all clear" in line for line in lines), done.stderr
    assert "\x1b" not in done.stderr
    assert not any(line.startswith("panday: all clear") for line in lines), "a forged line"
    found = re.search(r"panday changes show (\S+)`", done.stderr)
    assert found is not None
    shown = _run(exe, ws, "changes", "show", found.group(1))
    assert "\x1b" not in shown.stdout
    _run(exe, ws, "changes", "discard", found.group(1))
