"""binds.py on a real file system: what each command's binds are, what a placeholder is and
when it goes, and what is refused before anything runs. (What the jail then does with the
binds -- a write that fails, a rename that is EBUSY -- is probed in escape/test_persistence.)
"""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING

import pytest

from panday_core.errors import PolicyViolation
from panday_core.policy import FsPolicy
from panday_tier_linux.binds import CommandBinds, Roots

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="descriptor binds are the Linux tier's"
)


def open_roots(ws: Path, **fs: object) -> Roots:
    roots, refusals = Roots.open(FsPolicy(workspace=str(ws), **fs))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType] - test keywords
    assert roots is not None, refusals
    return roots


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def roots(ws: Path) -> Iterator[Roots]:
    r = open_roots(ws)
    yield r
    r.close()


def dests(binds: CommandBinds, option: str) -> list[str]:
    return [dest for opt, _fd, dest in binds.ops if opt == option]


def test_the_workspace_is_bound_from_its_descriptor_first(ws: Path, roots: Roots) -> None:
    with roots.command_binds() as binds:
        options = binds.options(10)
        assert options[:3] == ["--bind-fd", "10", str(ws)]
        fd = binds.ops[0][1]
        assert os.path.samestat(os.fstat(fd), ws.stat())
        # Shallower destinations first: a bind inside the workspace is never hidden by it.
        depths = [d.count("/") for d in options[2::3]]
        assert depths == sorted(depths)


def test_missing_entries_get_placeholders_that_go_with_the_command(ws: Path, roots: Roots) -> None:
    assert not (ws / ".git").exists()
    with roots.command_binds() as binds:
        ro = dests(binds, "--ro-bind-fd")
        assert str(ws / ".git") in ro
        assert str(ws / ".mcp.json") in ro
        # Entries that may be created get none.
        assert str(ws / ".envrc") not in ro
        assert not (ws / ".envrc").exists()
        git = (ws / ".git").lstat()
        assert stat.S_ISDIR(git.st_mode)
        assert stat.S_IMODE(git.st_mode) & 0o222 == 0
        assert stat.S_ISREG((ws / ".mcp.json").lstat().st_mode)
    assert list(ws.iterdir()) == []  # all removed again


def test_existing_entries_are_bound_and_never_removed(ws: Path, roots: Roots) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / ".envrc").write_text("export A=1\n")
    (ws / ".vscode").mkdir()  # empty: could be a placeholder, but is the user's
    with roots.command_binds() as binds:
        ro = dests(binds, "--ro-bind-fd")
        for name in (".git", ".envrc", ".vscode"):
            assert str(ws / name) in ro
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert (ws / ".envrc").exists()
    assert (ws / ".vscode").is_dir()


def test_ancestors_of_a_nested_entry_are_pinned_and_entries_are_not(ws: Path) -> None:
    (ws / "a" / "b").mkdir(parents=True)
    roots = open_roots(ws, protect=("a/b/c/",))
    try:
        with roots.command_binds() as binds:
            pins = dests(binds, "--bind-fd")
            assert str(ws / "a") in pins
            assert str(ws / "a" / "b") in pins
            assert str(ws / ".git") not in pins
            assert str(ws / "a" / "b" / "c") in dests(binds, "--ro-bind-fd")
            assert (ws / "a" / "b" / "c").is_dir()
        assert not (ws / "a" / "b" / "c").exists()
    finally:
        roots.close()


def test_a_protected_entry_that_is_a_link_is_refused_at_open(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (ws / ".vscode").symlink_to(tmp_path / "elsewhere")
    roots, refusals = Roots.open(FsPolicy(workspace=str(ws)))
    assert roots is None
    assert [r.field for r in refusals] == ["fs.protect"]
    assert ".vscode" in refusals[0].reason
    assert "fs.unprotect" in refusals[0].reason
    roots, refusals = Roots.open(FsPolicy(workspace=str(ws), unprotect=(".vscode",)))
    assert roots is not None, refusals
    roots.close()


def test_a_replaced_nested_staged_path_is_refused_before_the_next_command(ws: Path) -> None:
    data = ws / "sub" / "data"
    data.mkdir(parents=True)
    roots = open_roots(ws, staged_ro=(str(data),))
    try:
        with roots.command_binds() as binds:  # control: unchanged, it binds
            assert str(ws / "sub") in dests(binds, "--bind-fd")
            assert str(data) in dests(binds, "--ro-bind-fd")
        (ws / "sub").rename(ws / "sub.old")
        (ws / "sub").mkdir()
        (ws / "sub" / "data").symlink_to("/etc")
        with pytest.raises(PolicyViolation) as refused:
            roots.command_binds()
        assert refused.value.field == "fs.staged_ro[0]"
        assert "no longer" in refused.value.reason
    finally:
        roots.close()


def test_a_staged_path_given_through_a_link_is_refused(ws: Path, tmp_path: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "data").symlink_to(tmp_path)
    roots, refusals = Roots.open(FsPolicy(workspace=str(ws), staged_ro=(str(ws / "sub/data"),)))
    assert roots is None
    assert [r.field for r in refusals] == ["fs.staged_ro[0]"]
    assert "symbolic link" in refusals[0].reason


def test_a_shared_placeholder_is_removed_by_the_last_command_holding_it(
    ws: Path, roots: Roots
) -> None:
    first = roots.command_binds()
    second = roots.command_binds()  # starts while the first still holds .git
    try:
        assert (ws / ".git").is_dir()
        first.close()
        assert (ws / ".git").is_dir(), "removed while another command had it mounted"
    finally:
        second.close()
        first.close()
    assert not (ws / ".git").exists()


def test_a_linked_placeholder_is_kept_while_another_command_holds_it(
    ws: Path, roots: Roots
) -> None:
    """A command's file placeholders are hard links of its first one, which alone holds
    the lock: another command holding one of the names keeps every one of them."""
    first = roots.command_binds()
    try:
        names = [ws / ".mcp.json", ws / ".npmrc", ws / "opencode.json"]
        inodes = {(p.lstat().st_dev, p.lstat().st_ino) for p in names}
        assert len(inodes) == 1, "inconclusive: the placeholders are not one inode's links"
        second = roots.command_binds()
        try:
            first.close()
            assert all(p.exists() for p in names), "removed while another command held them"
        finally:
            second.close()
    finally:
        first.close()
    assert not any(p.exists() for p in names)


def test_a_link_to_a_replaced_template_is_not_kept(ws: Path) -> None:
    """The first file placeholder's name replaced (by another jail) before the next is
    linked to it: the link would give someone else's file a protected name, so it goes."""
    from panday_tier_linux import binds as module  # noqa: PLC0415 - its private steps

    made = CommandBinds()
    parent = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    try:
        template = module._make_placeholder(parent, "a", "file", made)  # pyright: ignore[reportPrivateUsage]
        assert template is not None
        control = module._make_placeholder(parent, "b", "file", made)  # pyright: ignore[reportPrivateUsage]
        assert control is not None, "inconclusive: no link was made to an intact template"
        assert os.path.samestat((ws / "a").lstat(), (ws / "b").lstat())
        (ws / "foreign").write_text("#!/bin/sh\nrun me\n")
        (ws / "foreign").replace(ws / "a")
        assert module._make_placeholder(parent, "c", "file", made) is None  # pyright: ignore[reportPrivateUsage]
        assert not (ws / "c").exists()
        assert (ws / "a").read_text() == "#!/bin/sh\nrun me\n"  # theirs, left alone
        for fd in (*template, *control):
            if fd >= 0:
                os.close(fd)
    finally:
        os.close(parent)
        made.close()


def test_a_placeholder_written_into_is_kept(ws: Path, roots: Roots) -> None:
    binds = roots.command_binds()
    try:
        git = ws / ".git"
        git.chmod(0o755)  # something outside the jail writes into it meanwhile
        (git / "HEAD").write_text("ref: refs/heads/main\n")
    finally:
        binds.close()
    assert (ws / ".git" / "HEAD").exists()


def test_a_placeholder_left_by_a_crash_is_cleared_after_the_next_command(
    ws: Path, roots: Roots
) -> None:
    (ws / ".mcp.json").touch()
    try:
        os.setxattr(ws / ".mcp.json", "user.panday.placeholder", b"999999999:1")
    except OSError as exc:
        pytest.fail(f"inconclusive: this file system has no user extended attributes ({exc})")
    with roots.command_binds() as binds:
        assert str(ws / ".mcp.json") in dests(binds, "--ro-bind-fd")
    assert not (ws / ".mcp.json").exists()


def test_a_read_only_workspace_has_no_placeholders_or_pins(ws: Path) -> None:
    roots = open_roots(ws, access="ro")
    try:
        with roots.command_binds() as binds:
            assert binds.options(3) == ["--ro-bind-fd", "3", str(ws)]
        assert list(ws.iterdir()) == []
    finally:
        roots.close()


def test_descriptors_are_closed_once_bwrap_has_them(roots: Roots) -> None:
    binds = roots.command_binds()
    fds = binds.fds
    binds.spawned()
    for fd in fds:
        with pytest.raises(OSError):  # noqa: PT011 - EBADF, whatever the message
            os.fstat(fd)
    binds.close()
