"""Filesystem escape probes: secrets stay unreadable, writes stay in the workspace and temp dir.

Every probe first shows the operation succeeding without the sandbox (or with the
permission granted) and fails as inconclusive if that control fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from macos_escape_helpers import SECRETS, Jail, control, guarded, inconclusive

from panday_core.errors import PolicyViolation

READ = guarded("import sys", "with open(sys.argv[1], 'rb') as f:\n    f.read()", "READ")
WRITE = guarded("import sys", "with open(sys.argv[1], 'ab') as f:\n    f.write(b'x')", "WROTE")
OP = guarded("import os, sys", "exec(sys.argv[1])", "OK")


@pytest.mark.parametrize("secret", SECRETS)
def test_a_secret_in_home_cannot_be_read(
    jail: Jail, workspace: Path, fake_home: Path, secret: str
) -> None:
    target = str(fake_home / secret)
    control(READ, target, want="READ")
    handle = jail.create(workspace)
    if jail.py(handle, READ, str(fake_home / "notes.txt")) != "READ":
        inconclusive("an ordinary file in the same home is readable inside the sandbox")
    assert jail.py(handle, READ, target) == "DENIED"


def test_a_workspace_that_contains_home_still_cannot_read_its_secrets(
    jail: Jail, fake_home: Path
) -> None:
    secret = str(fake_home / ".ssh/id_ed25519")
    control(READ, secret, want="READ")
    handle = jail.create(fake_home, {"fs": {"allow_home": True}})
    if jail.py(handle, WRITE, str(fake_home / "new.txt")) != "WROTE":
        inconclusive("the workspace itself is writable")
    assert jail.py(handle, READ, secret) == "DENIED"
    assert jail.py(handle, WRITE, secret) == "DENIED"


def test_a_workspace_inside_a_protected_path_is_refused(
    jail: Jail, workspace: Path, fake_home: Path
) -> None:
    jail.create(workspace)  # control: the same policy elsewhere opens
    with pytest.raises(PolicyViolation) as info:
        jail.create(fake_home / ".ssh")
    assert info.value.field == "fs.workspace"
    assert ".ssh" in info.value.reason


def test_the_home_is_a_workspace_only_when_the_policy_says_so(
    jail: Jail, workspace: Path, fake_home: Path
) -> None:
    jail.create(workspace)  # control: an ordinary directory opens
    with pytest.raises(PolicyViolation) as info:
        jail.create(fake_home)
    assert info.value.field == "fs.workspace"
    assert "fs.allow_home" in info.value.reason
    jail.create(fake_home, {"fs": {"allow_home": True}})


@pytest.mark.parametrize("where", ["/tmp", "/var/tmp", "/etc", "/usr", "/System", "/Users"])
def test_a_system_directory_is_refused_as_the_workspace(
    jail: Jail, workspace: Path, where: str
) -> None:
    jail.create(workspace)  # control
    with pytest.raises(PolicyViolation) as info:
        jail.create(Path(where))
    assert info.value.field == "fs.workspace"


def test_a_workspace_named_through_a_link_is_refused_with_the_private_spelling(
    jail: Jail, workspace: Path
) -> None:
    """/var is a link to /private/var on macOS: the refusal names the path to give."""
    real = str(workspace)
    if not real.startswith("/private/var/"):
        inconclusive("the test's temp dir is not under /private/var", real)
    jail.create(workspace)  # control: the real spelling opens
    with pytest.raises(PolicyViolation) as info:
        jail.create(Path(real.removeprefix("/private")))
    assert info.value.field == "fs.workspace"
    assert "symbolic link" in info.value.reason
    assert repr(real) in info.value.reason


def test_a_symlink_in_the_workspace_does_not_lead_to_a_secret(
    jail: Jail, workspace: Path, fake_home: Path
) -> None:
    (workspace / "plain.txt").write_text("fine\n", encoding="utf-8")
    (workspace / "ok").symlink_to(workspace / "plain.txt")
    (workspace / "key").symlink_to(fake_home / ".ssh/id_ed25519")
    control(READ, str(workspace / "key"), want="READ")
    handle = jail.create(workspace)
    if jail.py(handle, READ, str(workspace / "ok")) != "READ":
        inconclusive("a symlink to a workspace file is readable inside")
    assert jail.py(handle, READ, str(workspace / "key")) == "DENIED"


def test_writes_outside_the_workspace_are_denied(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    control(WRITE, str(elsewhere / "control.txt"), want="WROTE")
    handle = jail.create(workspace)
    if jail.py(handle, WRITE, str(workspace / "inside.txt")) != "WROTE":
        inconclusive("the workspace is writable inside")
    assert jail.py(handle, WRITE, str(elsewhere / "escape.txt")) == "DENIED"
    assert not (elsewhere / "escape.txt").exists()


def test_a_symlink_in_the_workspace_does_not_lead_writes_out(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("original\n", encoding="utf-8")
    (workspace / "out").symlink_to(target)
    (workspace / "in").symlink_to(workspace / "mine.txt")
    control(WRITE, str(workspace / "out"), want="WROTE")
    target.write_text("original\n", encoding="utf-8")
    handle = jail.create(workspace)
    if jail.py(handle, WRITE, str(workspace / "in")) != "WROTE":
        inconclusive("a symlink to a workspace file is writable inside")
    assert jail.py(handle, WRITE, str(workspace / "out")) == "DENIED"
    assert target.read_text(encoding="utf-8") == "original\n"


def test_a_read_only_workspace_cannot_be_written(jail: Jail, workspace: Path) -> None:
    rw = jail.create(workspace)
    if jail.py(rw, WRITE, str(workspace / "a.txt")) != "WROTE":
        inconclusive("the same workspace is writable when access is rw")
    ro = jail.create(workspace, {"fs": {"access": "ro"}})
    assert jail.py(ro, READ, str(workspace / "a.txt")) == "READ"
    assert jail.py(ro, WRITE, str(workspace / "b.txt")) == "DENIED"
    assert not (workspace / "b.txt").exists()


def test_a_staged_input_inside_the_workspace_stays_read_only(jail: Jail, workspace: Path) -> None:
    inputs = workspace / "inputs"
    inputs.mkdir()
    (inputs / "data.csv").write_text("a,b\n", encoding="utf-8")
    handle = jail.create(workspace, {"fs": {"staged_ro": [str(inputs)]}})
    if jail.py(handle, WRITE, str(workspace / "other.txt")) != "WROTE":
        inconclusive("the rest of the workspace is writable")
    assert jail.py(handle, READ, str(inputs / "data.csv")) == "READ"
    assert jail.py(handle, WRITE, str(inputs / "data.csv")) == "DENIED"
    assert jail.py(handle, WRITE, str(inputs / "new.csv")) == "DENIED"


def test_an_outside_file_cannot_be_hard_linked_into_the_workspace(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    source = tmp_path / "outside.txt"
    source.write_text("outside\n", encoding="utf-8")
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    control(OP, f"os.link({str(source)!r}, {str(control_dir / 'l')!r})", want="OK")
    handle = jail.create(workspace)
    (workspace / "own.txt").write_text("own\n", encoding="utf-8")
    link = str(workspace / "linked")
    assert jail.py(handle, OP, f"os.link({str(source)!r}, {link!r})") == "DENIED"
    assert not Path(link).is_symlink()
    assert not Path(link).exists()


def test_an_outside_file_cannot_be_moved_into_the_workspace(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    for name in ("control.txt", "victim.txt"):
        (tmp_path / name).write_text("outside\n", encoding="utf-8")
    control(
        OP, f"os.rename({str(tmp_path / 'control.txt')!r}, {str(tmp_path / 'moved')!r})", want="OK"
    )
    handle = jail.create(workspace)
    move = f"os.rename({str(tmp_path / 'victim.txt')!r}, {str(workspace / 'stolen')!r})"
    assert jail.py(handle, OP, move) == "DENIED"
    assert (tmp_path / "victim.txt").exists()


def _readable_file_under_var_db() -> str | None:
    """A world-readable regular file under /private/var/db outside the carve-outs."""
    skip = (
        "/private/var/db/timezone",
        "/private/var/db/xcode_select_link",
        "/private/var/db/DarwinDirectory",
    )
    for dirpath, dirnames, filenames in os.walk("/private/var/db"):
        if dirpath.count("/") > 6:  # bounded search depth
            dirnames.clear()
        dirnames[:] = sorted(d for d in dirnames if not f"{dirpath}/{d}".startswith(skip))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if str(path).startswith(skip) or path.is_symlink() or not path.is_file():
                continue
            if os.access(path, os.R_OK):
                return str(path)
    return None


def test_private_var_db_cannot_be_read(jail: Jail, workspace: Path) -> None:
    target = _readable_file_under_var_db()
    if target is None:
        inconclusive("no readable file under /private/var/db to probe with")
    control(READ, target, want="READ")
    handle = jail.create(workspace)
    assert jail.py(handle, READ, target) == "DENIED"


def test_the_temp_dir_is_private_and_shared_tmp_is_not_writable(
    jail: Jail, workspace: Path
) -> None:
    shared = Path(f"/private/tmp/panday-escape-{os.getpid()}-{os.urandom(4).hex()}")
    control(WRITE, str(shared), want="WROTE")
    shared.unlink()
    handle = jail.create(workspace)
    code = (
        "import os, tempfile\n"
        "f = tempfile.NamedTemporaryFile(delete=False)\n"
        "print('WROTE' if os.path.exists(f.name) else 'MISSING')"
    )
    assert jail.py(handle, code) == "WROTE"
    assert jail.py(handle, WRITE, str(shared)) == "DENIED"
    assert not shared.exists()
