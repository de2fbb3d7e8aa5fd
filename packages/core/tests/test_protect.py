"""panday_core.protect: roots opened without links, places that can never be a root, the
protected entries of a writable workspace and what a repository adds to them.

Real files in a temporary directory; the jail-level consequences (a bind that cannot be
redirected, a write that fails) are probed by the tiers' escape suites.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING

import pytest

from panday_core.errors import PolicyError
from panday_core.policy import FsPolicy, SandboxPolicy, policy_from_dict
from panday_core.protect import (
    DEFAULT_ENTRIES,
    MAX_ENTRIES,
    Entry,
    RootRefused,
    git_entries,
    interpreter_paths,
    is_env_hook,
    open_root,
    protected_entries,
    root_refusal,
    state_directories,
    sys_path_refusal,
)

if TYPE_CHECKING:
    from pathlib import Path

LINUX = sys.platform.startswith("linux")


def rels(entries: tuple[Entry, ...]) -> set[str]:
    return {e.rel for e in entries}


# ------------------------------------------------------------------------------ open_root


def test_a_real_directory_opens_and_names_the_same_inode(tmp_path: Path) -> None:
    fd = open_root(str(tmp_path))
    try:
        assert os.path.samestat(os.fstat(fd), tmp_path.stat())
    finally:
        os.close(fd)


@pytest.mark.parametrize("where", ["last", "middle"])
def test_a_link_anywhere_on_a_root_is_refused_naming_it(tmp_path: Path, where: str) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    os.close(open_root(str(real / "sub")))  # control: the real path opens
    (tmp_path / "alias").symlink_to(real)
    path = tmp_path / "alias" if where == "last" else tmp_path / "alias" / "sub"
    with pytest.raises(RootRefused) as refused:
        os.close(open_root(str(path)))
    assert "symbolic link" in refused.value.reason
    assert str(tmp_path / "alias") in refused.value.reason
    assert str(real) in refused.value.reason  # where it points, to give instead


def test_a_missing_or_relative_root_says_which(tmp_path: Path) -> None:
    with pytest.raises(RootRefused, match="nope"):
        open_root(str(tmp_path / "nope" / "deeper"))
    with pytest.raises(RootRefused, match="relative"):
        open_root("relative/path")


# --------------------------------------------------------------------------- root_refusal


@pytest.mark.parametrize(
    "path",
    ["/", "/usr", "/etc", "/tmp", "/var", "/var/tmp", "/home", "/run", "/boot", "/opt"],
)
def test_the_jails_own_places_are_never_a_root(path: str) -> None:
    for writable in (True, False):
        assert root_refusal(path, writable=writable, allow_home=True) is not None


@pytest.mark.parametrize(
    "path", ["/etc/ssl", "/proc/1", "/sys/kernel", "/dev/shm", "/run/user/0", "/var/run/x"]
)
def test_nothing_beneath_host_state_is_a_root(path: str) -> None:
    assert root_refusal(path, writable=False, allow_home=True) is not None


def test_program_directories_may_be_staged_but_never_written() -> None:
    assert root_refusal("/usr/local/go", writable=False, allow_home=False) is None
    assert root_refusal("/usr/local/go", writable=True, allow_home=False) is not None


def test_a_home_directory_or_its_parent_needs_allow_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / "someone"
    home.mkdir(parents=True)
    project = home / "project"
    monkeypatch.setenv("HOME", str(home))
    assert root_refusal(str(project), writable=True, allow_home=False) is None  # control
    for path in (home, home.parent):
        why = root_refusal(str(path), writable=True, allow_home=False)
        assert why is not None
        assert "home directory" in why
        assert "fs.allow_home" in why
        assert root_refusal(str(path), writable=True, allow_home=True) is None


def test_pandays_own_state_is_never_a_writable_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A jail writing the cached seccomp programs or jail plans would widen every later
    jail; a workspace holding them gets them as protected entries instead."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for base in ("cache", "config"):
        state = tmp_path / base / "panday"
        for path in (state, state / "plans" / "ws"):
            why = root_refusal(str(path), writable=True, allow_home=False)
            assert why is not None
            assert "panday's own state" in why
            assert root_refusal(str(path), writable=False, allow_home=False) is None
        # Control: beside it, and the directory holding it, are workspaces like any other.
        assert root_refusal(str(tmp_path / base / "other"), writable=True, allow_home=False) is None
        assert root_refusal(str(tmp_path / base), writable=True, allow_home=False) is None


def test_the_state_directories_are_where_the_caches_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as the caches ignore it
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert state_directories() == (
        str(tmp_path / "home" / ".cache" / "panday"),
        str(tmp_path / "home" / ".config" / "panday"),
    )


def test_a_writable_workspace_on_the_import_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = str(tmp_path)
    assert sys_path_refusal(ws, writable=True) is None  # control
    monkeypatch.setattr(sys, "path", [ws, *sys.path])
    why = sys_path_refusal(ws, writable=True)
    assert why is not None
    assert "-P" in why
    assert sys_path_refusal(ws, writable=False) is None
    monkeypatch.setattr(sys, "path", ["", *sys.path[1:]])
    monkeypatch.chdir(tmp_path)
    assert sys_path_refusal(ws, writable=True) is not None  # '' is the current directory


# ---------------------------------------------------------------------- protected entries


def test_every_default_entry_says_why() -> None:
    for entry in DEFAULT_ENTRIES:
        assert entry.why
        assert not entry.rel.startswith("/")
        assert ".." not in entry.rel.split("/")
    assert ".git" in rels(DEFAULT_ENTRIES)


def test_defaults_policy_entries_and_opt_outs(tmp_path: Path) -> None:
    ws = str(tmp_path)
    base = rels(protected_entries(ws))
    assert {".git", ".vscode", ".mcp.json"} <= base
    more = rels(protected_entries(ws, protect=("deploy.sh", "secrets/"), unprotect=(".git",)))
    assert {"deploy.sh", "secrets"} <= more
    assert ".git" not in more
    kinds = {e.rel: e.kind for e in protected_entries(ws, protect=("deploy.sh", "secrets/"))}
    assert kinds["deploy.sh"] == "file"
    assert kinds["secrets"] == "dir"


def test_an_entry_inside_another_is_covered_by_it(tmp_path: Path) -> None:
    entries = protected_entries(str(tmp_path), protect=(".git/hooks", "a/b", "a"))
    assert ".git/hooks" not in rels(entries)
    assert "a/b" not in rels(entries)
    assert "a" in rels(entries)


def test_the_interpreters_own_paths_inside_the_workspace_are_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = tmp_path / "venv" / "lib"
    lib.mkdir(parents=True)
    assert "venv/lib" not in rels(protected_entries(str(tmp_path)))  # control
    monkeypatch.setattr(sys, "path", [*sys.path, str(lib)])
    assert str(lib) in interpreter_paths()
    entries = protected_entries(str(tmp_path))
    assert "venv/lib" in rels(entries)
    assert not next(e for e in entries if e.rel == "venv/lib").create


def test_pandays_state_inside_the_workspace_is_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert {"cache/panday", "config/panday"} <= rels(protected_entries(str(tmp_path)))


def test_a_home_inside_the_workspace_keeps_its_start_up_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    found = rels(protected_entries(str(tmp_path)))
    assert {"users/me/.bashrc", "users/me/.ssh", "users/me/.config"} <= found
    assert ".bashrc" in rels(protected_entries(str(home)))


def test_too_many_entries_are_refused_not_truncated(tmp_path: Path) -> None:
    many = tuple(Entry(f"m{i}/.git", "file", "x") for i in range(MAX_ENTRIES + 1))
    with pytest.raises(RootRefused, match="at most"):
        protected_entries(str(tmp_path), derived=many)


# ------------------------------------------------------------------------- git, read


def _root(tmp_path: Path) -> int:
    return open_root(str(tmp_path))


def test_a_repository_adds_its_hooks_path_gitdir_and_submodules(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text(
        '[core]\n\tbare = false\n[Core]\n\tHooksPath = "tools/hooks" # ours\n'
    )
    (tmp_path / ".gitmodules").write_text(
        '[submodule "a"]\n\tpath = vendor/a\n[submodule "b"]\n\tpath = ../outside\n'
        '[submodule "c"]\n\tpath = /abs\n'
    )
    fd = _root(tmp_path)
    try:
        found = rels(git_entries(fd))
    finally:
        os.close(fd)
    assert found == {"tools/hooks", "vendor/a/.git"}


def test_a_git_file_adds_the_directory_it_points_to_when_inside(tmp_path: Path) -> None:
    (tmp_path / ".git").write_text("gitdir: meta/worktrees/w\n")
    fd = _root(tmp_path)
    try:
        assert rels(git_entries(fd)) == {"meta/worktrees/w"}
        (tmp_path / ".git").write_text("gitdir: /elsewhere/.git/worktrees/w\n")
        assert rels(git_entries(fd)) == set()
    finally:
        os.close(fd)


def test_git_files_are_never_read_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "config").write_text("[core]\nhooksPath = planted\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").symlink_to(tmp_path / "elsewhere" / "config")
    fd = _root(tmp_path)
    try:
        assert rels(git_entries(fd)) == set()
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- the model


def test_start_up_hooks_in_env_are_refused_by_name_unless_allowed() -> None:
    for name in ("LD_PRELOAD", "DYLD_INSERT_LIBRARIES", "NODE_OPTIONS", "BASH_ENV"):
        assert is_env_hook(name)
        with pytest.raises(PolicyError) as refused:
            policy_from_dict({"env": {name: "x"}})
        assert refused.value.field == f"env.{name}"
        assert "allow_env_hooks" in refused.value.reason
        allowed = policy_from_dict({"env": {name: "x"}, "allow_env_hooks": [name]})
        assert allowed.env[name] == "x"
    assert not is_env_hook("PATH")
    assert policy_from_dict({"env": {"LANGUAGE": "en"}}).env["LANGUAGE"] == "en"


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"fs": {"protect": ["/abs"]}}, "fs.protect[0]"),
        ({"fs": {"protect": ["a/../b"]}}, "fs.protect[0]"),
        ({"fs": {"protect": ["ok", ""]}}, "fs.protect[1]"),
        ({"fs": {"unprotect": [".gti"]}}, "fs.unprotect[0]"),
        ({"allow_env_hooks": ["1BAD"]}, "allow_env_hooks[0]"),
    ],
)
def test_bad_protection_fields_name_themselves(doc: dict[str, object], field: str) -> None:
    with pytest.raises(PolicyError) as refused:
        policy_from_dict(doc)
    assert refused.value.field == field


def test_unprotect_names_the_defaults_it_knows() -> None:
    with pytest.raises(PolicyError, match=r"\.git"):
        policy_from_dict({"fs": {"unprotect": ["nope"]}})
    policy = SandboxPolicy(fs=FsPolicy(unprotect=(".git", ".bashrc")))
    assert policy.fs.unprotect == (".git", ".bashrc")


@pytest.mark.skipif(not LINUX, reason="O_PATH descriptors are Linux's")
def test_the_root_descriptor_needs_no_read_permission(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IXUSR)
    try:
        os.close(open_root(str(locked)))
    finally:
        locked.chmod(stat.S_IRWXU)
