"""panday's per-user state (`panday_core.userstate`): found from the password file, and the
key that seals the caches, trusted only as a private regular file of ours."""

from __future__ import annotations

import os
import pwd
import stat
import sys
from typing import TYPE_CHECKING

import pytest

from panday_core import userstate

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX users")
# ruff: noqa: PTH118 - the paths are compared as the module spells them (os.path)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A password-file home of this test's own."""
    where = tmp_path / "pwhome"
    where.mkdir()
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(where))
    return where


def test_the_state_is_under_the_password_files_home_whatever_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = pwd.getpwuid(os.geteuid()).pw_dir
    expected = os.path.join(entry, ".cache", "panday")
    assert userstate.state_dir() == expected
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert userstate.state_dir() == expected
    assert userstate.config_dir() == os.path.join(entry, ".config", "panday")


def test_a_key_is_made_once_private_and_then_read(home: Path) -> None:
    assert userstate.key(create=False) is None  # nothing made without `create`
    assert not (home / ".cache").exists()
    made = userstate.key(create=True)
    assert made is not None
    assert len(made) == userstate.KEY_BYTES
    path = home / ".cache" / "panday" / userstate.KEY_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_bytes() == made
    assert userstate.key(create=False) == made
    assert userstate.key(create=True) == made  # not replaced
    assert [p.name for p in path.parent.iterdir()] == [userstate.KEY_NAME]  # no temporaries


def test_the_key_is_private_whatever_the_umask(home: Path) -> None:
    old = os.umask(0)
    try:
        assert userstate.key(create=True) is not None
    finally:
        os.umask(old)
    state = home / ".cache" / "panday"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / userstate.KEY_NAME).stat().st_mode) == 0o600


def test_a_key_file_that_is_not_private_and_ours_disables_caching(home: Path) -> None:
    made = userstate.key(create=True)
    assert made is not None
    path = home / ".cache" / "panday" / userstate.KEY_NAME
    assert userstate.key(create=False) == made  # control
    for mode in (0o640, 0o604, 0o620, 0o602):
        path.chmod(mode)
        assert userstate.key(create=False) is None, oct(mode)
        assert userstate.key(create=True) is None, oct(mode)  # never replaced, never trusted
        assert path.read_bytes() == made
    path.chmod(0o600)
    assert userstate.key(create=False) == made
    # A link to a private key file of ours: not followed.
    elsewhere = home / "elsewhere"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    assert userstate.key(create=False) is None
    assert userstate.key(create=True) is None
    path.unlink()
    # A key of the wrong size, or a directory.
    path.write_bytes(made[:-1])
    path.chmod(0o600)
    assert userstate.key(create=True) is None
    path.unlink()
    path.mkdir(0o700)
    assert userstate.key(create=True) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_key_file_owned_by_another_user_disables_caching(home: Path) -> None:
    made = userstate.key(create=True)
    path = home / ".cache" / "panday" / userstate.KEY_NAME
    assert userstate.key(create=False) == made  # control
    os.chown(path, 65534, 65534)
    assert userstate.key(create=False) is None
    assert userstate.key(create=True) is None


def test_a_state_directory_others_can_write_or_reached_through_a_link_has_no_key(
    home: Path, tmp_path: Path
) -> None:
    made = userstate.key(create=True)
    state = home / ".cache" / "panday"
    state.chmod(0o770)
    assert userstate.key(create=False) is None
    state.chmod(0o700)
    assert userstate.key(create=False) == made  # control
    state.rename(tmp_path / "moved")
    state.symlink_to(tmp_path / "moved")
    assert userstate.key(create=False) is None
    assert userstate.key(create=True) is None


def test_no_password_file_home_means_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(userstate, "passwd_home", lambda: None)
    assert userstate.state_dir() is None
    assert userstate.key(create=True) is None


def test_a_mac_verifies_only_its_data_purpose_and_key() -> None:
    secret = os.urandom(32)
    tag = userstate.mac(secret, userstate.PLAN, b"data")
    assert userstate.verify(secret, userstate.PLAN, b"data", tag)  # control
    assert not userstate.verify(secret, userstate.PLAN, b"datA", tag)
    assert not userstate.verify(secret, userstate.SECCOMP, b"data", tag)
    assert not userstate.verify(os.urandom(32), userstate.PLAN, b"data", tag)
    assert not userstate.verify(secret, userstate.PLAN, b"data", tag[:-1])
