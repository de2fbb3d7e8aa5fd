"""Nothing a jail writes may run outside it later, or change what a later jail sees (issue 12).

Protected entries of a writable workspace stay read-only while ordinary writes succeed; no
rename of a directory above a protected or staged path carries it out from under its rule
(6(b)); secrets stay unreadable through their Data-volume spelling (6(a)); no set-id bit
sticks on any file (6(f)); a link a command planted is refused by the next session.

Every probe first shows the operation succeeding without the sandbox, or inside it with the
permission granted, and fails as inconclusive when that control fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest
from macos_escape_helpers import Jail, control, guarded, inconclusive, outside

from panday_core.errors import PolicyViolation

if TYPE_CHECKING:
    from pathlib import Path

READ = guarded("import sys", "with open(sys.argv[1], 'rb') as f:\n    f.read()", "READ")
WRITE = guarded("import sys", "with open(sys.argv[1], 'ab') as f:\n    f.write(b'x')", "WROTE")
OP = guarded("import os, sys", "exec(sys.argv[1])", "OK")
RENAME = guarded("import os, sys", "os.rename(sys.argv[1], sys.argv[2])", "MOVED")
# The jail's own TMPDIR (the session's private temp dir) as the destination of a rename.
RENAME_TO_TMP = guarded(
    "import os, sys",
    "os.rename(sys.argv[1], os.path.join(os.environ['TMPDIR'], 'moved'))",
    "MOVED",
)

SETID = """
import os, sys
path, mode, how = sys.argv[1], int(sys.argv[2], 8), sys.argv[3]
try:
    if how == 'create':
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode))
    else:
        os.chmod(path, mode)
except PermissionError:
    print('DENIED')
    sys.exit()
except OSError as e:
    print('ERROR', e.errno, e.strerror)
    sys.exit()
# chmod(2) under the profile returns 0 and stores nothing (measured by others): judge the
# stored bit, never the return code.
print('SET' if os.stat(path).st_mode & mode & 0o6000 else 'NOT-SET')
"""


def _git_like(ws: Path) -> None:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n", encoding="utf-8")
    (ws / ".envrc").write_text("export A=1\n", encoding="utf-8")


def _snapshot(ws: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(ws)): p.read_bytes()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_protected_entries_stay_read_only_while_the_workspace_is_writable(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    _git_like(workspace)
    elsewhere = tmp_path / "outside-repo"
    _git_like(elsewhere)
    control(WRITE, str(elsewhere / ".git" / "config"), want="WROTE")
    control(WRITE, str(elsewhere / ".git" / "hooks" / "pre-commit"), want="WROTE")
    handle = jail.create(workspace)
    if jail.py(handle, WRITE, str(workspace / "ordinary.txt")) != "WROTE":
        inconclusive("an ordinary workspace file is writable inside")
    before = _snapshot(workspace)
    for target in (
        ".git/config",  # core.fsmonitor, core.hooksPath: run on the next git command
        ".git/hooks/pre-commit",
        ".envrc",  # exists, so protected (direnv has allowed this one)
        ".mcp.json",  # missing, may not be created: agents start what it lists
    ):
        assert jail.py(handle, WRITE, str(workspace / target)) == "DENIED", target
    mkdir = f"os.makedirs({str(workspace / '.vscode')!r})"
    assert jail.py(handle, OP, mkdir) == "DENIED", ".vscode cannot be created"
    assert _snapshot(workspace) == before
    assert not (workspace / ".mcp.json").exists()
    assert not (workspace / ".vscode").exists()


def test_unprotect_leaves_the_named_entry_writable(jail: Jail, workspace: Path) -> None:
    """The permission granted: the same write succeeds when the policy opts .git out."""
    _git_like(workspace)
    handle = jail.create(workspace, {"fs": {"unprotect": [".git"]}})
    assert jail.py(handle, WRITE, str(workspace / ".git" / "config")) == "WROTE"
    assert jail.py(handle, WRITE, str(workspace / ".envrc")) == "DENIED", "the others stay"


def test_a_missing_protected_entry_cannot_be_renamed_into_place(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    """A rename checks the directory it moves, not what is inside: a prepared directory
    renamed to `.vscode`, or to a directory that would hold a protected entry, is refused."""
    control(
        OP,
        f"os.makedirs({str(tmp_path / 'c' / 'x')!r}); "
        f"os.rename({str(tmp_path / 'c' / 'x')!r}, {str(tmp_path / 'c' / '.vscode')!r})",
        want="OK",
    )
    handle = jail.create(workspace, {"fs": {"protect": ["deploy/prod/run.sh"]}})
    prepare = (
        "os.makedirs('x/prod'); open('x/tasks.json', 'w').write('{}'); "
        "open('x/prod/run.sh', 'w').write('evil')"
    )
    if jail.py(handle, OP, prepare) != "OK":
        inconclusive("a directory can be made and filled inside the workspace")
    if jail.py(handle, RENAME, str(workspace / "x"), str(workspace / "y")) != "MOVED":
        inconclusive("an ordinary directory can be renamed inside the workspace")
    assert jail.py(handle, RENAME, str(workspace / "y"), str(workspace / ".vscode")) == "DENIED"
    assert jail.py(handle, RENAME, str(workspace / "y"), str(workspace / "deploy")) == "DENIED"
    assert not (workspace / ".vscode").exists()
    assert not (workspace / "deploy").exists()


def test_renaming_a_directory_above_a_protected_entry_is_refused(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    """Issue 12, 6(b): ``mv deploy d2`` would leave ``d2/run.sh`` under no rule."""
    for ws in (workspace, tmp_path / "outside"):
        (ws / "deploy").mkdir(parents=True)
        (ws / "deploy" / "run.sh").write_text("echo deploy\n", encoding="utf-8")
        (ws / "other").mkdir()
    _git_like(workspace)
    control(
        RENAME, str(tmp_path / "outside" / "deploy"), str(tmp_path / "outside" / "d2"), want="MOVED"
    )
    handle = jail.create(workspace, {"fs": {"protect": ["deploy/run.sh"]}})
    if jail.py(handle, RENAME, str(workspace / "other"), str(workspace / "other2")) != "MOVED":
        inconclusive("a directory holding nothing protected can be renamed inside")
    assert jail.py(handle, RENAME, str(workspace / "deploy"), str(workspace / "d2")) == "DENIED"
    assert jail.py(handle, RENAME, str(workspace / ".git"), str(workspace / "g2")) == "DENIED"
    assert jail.py(handle, RENAME_TO_TMP, str(workspace)) == "DENIED", "the workspace itself"
    assert (workspace / "deploy" / "run.sh").exists()
    assert (workspace / ".git" / "config").exists()


def test_a_nested_staged_input_cannot_be_moved_aside(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    """Issue 12, 1 and 6(b): ``mv sub sub.old`` would leave the staged input writable."""
    data = workspace / "sub" / "ro-data"
    data.mkdir(parents=True)
    (data / "input.csv").write_text("a,b\n", encoding="utf-8")
    (workspace / "sibling").mkdir()
    (tmp_path / "o" / "sub").mkdir(parents=True)
    control(RENAME, str(tmp_path / "o" / "sub"), str(tmp_path / "o" / "sub.old"), want="MOVED")
    handle = jail.create(workspace, {"fs": {"staged_ro": [str(data)]}})
    if jail.py(handle, WRITE, str(workspace / "sub" / "other.txt")) != "WROTE":
        inconclusive("the directory above the staged input is writable")
    if jail.py(handle, RENAME, str(workspace / "sibling"), str(workspace / "sib2")) != "MOVED":
        inconclusive("an ordinary directory can be renamed inside")
    assert jail.py(handle, RENAME, str(workspace / "sub"), str(workspace / "sub.old")) == "DENIED"
    assert jail.py(handle, RENAME, str(data), str(workspace / "x")) == "DENIED"
    assert jail.py(handle, WRITE, str(data / "input.csv")) == "DENIED"
    assert (data / "input.csv").read_text(encoding="utf-8") == "a,b\n"


def test_a_link_planted_by_one_session_is_refused_by_the_next(jail: Jail, workspace: Path) -> None:
    """Issue 12, 1: the next session never follows a link a command left behind."""
    (workspace / "real").mkdir()
    handle = jail.create(workspace)
    plant = "os.makedirs('sub2'); os.symlink('../../..', 'sub2/data')"
    if jail.py(handle, OP, plant) != "OK":
        inconclusive("a command can make a symbolic link in its workspace")
    jail.create(workspace, {"fs": {"staged_ro": [str(workspace / "real")]}})  # control
    with pytest.raises(PolicyViolation) as info:
        jail.create(workspace, {"fs": {"staged_ro": [str(workspace / "sub2" / "data")]}})
    assert info.value.field == "fs.staged_ro[0]"
    assert "symbolic link" in info.value.reason


def test_a_home_in_the_workspace_cannot_be_carried_off(jail: Jail, fake_home: Path) -> None:
    """Issue 12, 6(b): ``mv ~/.config ~/x; cat ~/x/gh/hosts.yml``, and the whole home moved
    into the session's temp dir, where no rule names its secrets."""
    (fake_home / "plain").mkdir()
    control(READ, str(fake_home / ".config" / "gh" / "hosts.yml"), want="READ")
    handle = jail.create(fake_home, {"fs": {"allow_home": True}})
    if jail.py(handle, RENAME, str(fake_home / "plain"), str(fake_home / "plain2")) != "MOVED":
        inconclusive("an ordinary directory of the home can be renamed inside")
    for holder in (".config", "Library", ".cargo"):
        got = jail.py(handle, RENAME, str(fake_home / holder), str(fake_home / "x"))
        assert got == "DENIED", holder
    assert jail.py(handle, RENAME_TO_TMP, str(fake_home)) == "DENIED"
    assert jail.py(handle, READ, str(fake_home / ".config" / "gh" / "hosts.yml")) == "DENIED"


def _data_spelling(path: Path) -> str:
    spelled = "/System/Volumes/Data" + str(path)
    if not os.path.exists(spelled):  # noqa: PTH110 - a plain string path
        inconclusive("no Data-volume spelling of the test's files", spelled)
    return spelled


def test_a_secret_read_through_the_data_volume_spelling_is_denied(
    jail: Jail, workspace: Path, fake_home: Path
) -> None:
    """Issue 12, 6(a): the firmlinked name of a file is the same file."""
    secret = _data_spelling(fake_home / ".ssh" / "id_ed25519")
    control(READ, secret, want="READ")
    handle = jail.create(workspace)
    if jail.py(handle, READ, _data_spelling(fake_home / "notes.txt")) != "READ":
        inconclusive("an ordinary file is readable inside through its Data-volume spelling")
    assert jail.py(handle, READ, secret) == "DENIED"


def test_a_protected_entry_written_through_the_data_volume_spelling_is_denied(
    jail: Jail, workspace: Path
) -> None:
    """Holds even without the entry's Data-volume rule today (no allow names the workspace
    in that spelling, so such a write matches no allow at all); kept so that it stays true if
    one ever does."""
    _git_like(workspace)
    config = _data_spelling(workspace / ".git" / "config")
    handle = jail.create(workspace, {"fs": {"unprotect": [".git"]}})
    if jail.py(handle, WRITE, str(workspace / ".git" / "config")) != "WROTE":
        inconclusive("the unprotected entry is writable by its own name")
    protected = jail.create(workspace)
    assert jail.py(protected, WRITE, config) == "DENIED"


@pytest.mark.parametrize("how", ["chmod", "create"])
@pytest.mark.parametrize("mode", ["4755", "2755"])
def test_no_set_id_bit_sticks_on_a_file_the_command_writes(
    jail: Jail, workspace: Path, tmp_path: Path, how: str, mode: str
) -> None:
    """Issue 12, 3 and 6(f): a set-id file left in the workspace would run with its owner's
    identity for whoever starts it later, outside the jail."""
    control_path = tmp_path / f"control-{how}-{mode}"
    inside = workspace / f"planted-{how}-{mode}"
    if how == "chmod":
        for path in (control_path, inside):
            shutil.copyfile("/usr/bin/true", path)
    control_got = outside(SETID, str(control_path), mode, how)
    if control_got != "SET":
        inconclusive(f"{how} {mode} stores the bit without the sandbox", control_got)
    handle = jail.create(workspace)
    got = jail.py(handle, SETID, str(inside), mode, how)
    assert got in {"DENIED", "NOT-SET"}, got
    if inside.exists():
        assert not inside.stat().st_mode & 0o6000


def test_chmod_the_program_cannot_set_a_set_id_bit_either(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    """/bin/chmod calls fchmodat, which is refused with EPERM rather than ignored."""
    control_target = tmp_path / "control-tool"
    shutil.copyfile("/usr/bin/true", control_target)
    subprocess.run(["/bin/chmod", "4755", str(control_target)], check=False, timeout=30)
    if not control_target.stat().st_mode & 0o4000:
        inconclusive("/bin/chmod 4755 sets the bit without the sandbox")
    target = workspace / "tool"
    shutil.copyfile("/usr/bin/true", target)
    handle = jail.create(workspace)
    plain = jail.run(handle, "/bin/chmod", "755", str(target))
    if plain.exit_code != 0:
        inconclusive("/bin/chmod 755 works inside", plain.stderr)
    jail.run(handle, "/bin/chmod", "4755", str(target))
    jail.run(handle, "/bin/chmod", "g+s", str(target))
    assert not target.stat().st_mode & 0o6000


def _case_insensitive(path: Path) -> bool:
    flipped = path.parent / path.name.swapcase()
    return flipped != path and flipped.exists() and flipped.samefile(path)


def test_a_case_variant_does_not_slip_past_a_protected_entry(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    """The default macOS volume ignores case: ``.GIT/config`` is ``.git/config``, and
    ``.VSCODE`` is what VS Code finds as ``.vscode``."""
    _git_like(workspace)
    elsewhere = tmp_path / "outside-repo"
    _git_like(elsewhere)
    if not _case_insensitive(elsewhere / ".git"):
        inconclusive("the test's volume ignores case (macOS's default)")
    control(WRITE, str(elsewhere / ".GIT" / "config"), want="WROTE")
    handle = jail.create(workspace)
    if jail.py(handle, WRITE, str(workspace / "Ordinary.TXT")) != "WROTE":
        inconclusive("an ordinary workspace file is writable inside")
    assert jail.py(handle, WRITE, str(workspace / ".GIT" / "config")) == "DENIED"
    assert jail.py(handle, WRITE, str(workspace / ".Git" / "hooks" / "pre-commit")) == "DENIED"
    mkdir = f"os.makedirs({str(workspace / '.VSCODE')!r})"
    assert jail.py(handle, OP, mkdir) == "DENIED"
    assert jail.py(handle, WRITE, str(workspace / ".MCP.json")) == "DENIED"


def test_a_root_spelled_in_another_case_is_refused(
    jail: Jail, workspace: Path, fake_home: Path
) -> None:
    """``/users/me`` opens the home as ``/Users/me`` does, but no string check would see a
    home in it: the spelling is refused, naming the one to give."""
    if not _case_insensitive(fake_home):
        inconclusive("the test's volume ignores case (macOS's default)")
    jail.create(workspace)  # control
    variant = fake_home.parent / fake_home.name.swapcase()
    with pytest.raises(PolicyViolation) as info:
        jail.create(variant)
    assert info.value.field == "fs.workspace"
    assert repr(str(fake_home)) in info.value.reason
