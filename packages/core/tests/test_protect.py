"""panday_core.protect: roots opened without links, places that can never be a root, the
protected entries of a writable workspace and what a repository adds to them.

Real files in a temporary directory; the jail-level consequences (a bind that cannot be
redirected, a write that fails) are probed by the tiers' escape suites.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from panday_core import gitfind, hostpaths, identity, protect, userstate
from panday_core.errors import PolicyError
from panday_core.policy import FsPolicy, SandboxPolicy, policy_from_dict
from panday_core.protect import (
    DEFAULT_ENTRIES,
    ENV_HOOK_PREFIXES,
    ENV_HOOKS,
    HOME_ENTRIES,
    MACOS_HOME_ENTRIES,
    MAX_ENTRIES,
    OPT_OUT_NAMES,
    Entry,
    RootRefused,
    ancestry,
    env_hook_reason,
    git_directory_refusal,
    git_entries,
    interpreter_paths,
    is_env_hook,
    missing_import_paths,
    normal_path,
    open_root,
    protected_entries,
    root_refusal,
    roots_refusals,
    state_directories,
    sys_path_refusal,
    within,
)

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
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(tmp_path / "pw"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for base in ("pw/.cache", "config"):
        state = tmp_path / base / "panday"
        (state / "plans" / "ws").mkdir(parents=True)  # refused by identity: they exist
        (tmp_path / base / "other").mkdir()
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
    """The caches (and their key) under the password file's home, whatever $XDG_CACHE_HOME
    and $HOME say; the per-user policy where it is read ($XDG_CONFIG_HOME, else ~/.config)
    and under the password file's home."""
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(tmp_path / "pw"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for cache in ("relative/cache", str(tmp_path / "xdg-cache")):
        monkeypatch.setenv("XDG_CACHE_HOME", cache)  # ignored: the caches ignore it
        assert state_directories() == (
            str(tmp_path / "pw" / ".cache" / "panday"),
            str(tmp_path / "home" / ".config" / "panday"),
            str(tmp_path / "pw" / ".config" / "panday"),
        )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    assert state_directories()[1] == str(tmp_path / "xdg-config" / "panday")


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


def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No variable of this process names a place inside `tmp_path` but the test's own."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONSTARTUP", "BASH_ENV", "NODE_OPTIONS"):
        monkeypatch.delenv(name, raising=False)
    assert not [v for v in os.environ.values() if str(tmp_path) in v]


def test_places_the_callers_environment_runs_code_from_are_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory on the caller's PATH, its active virtual environment (whole) and what a
    start-up hook names, inside the workspace, missing or not; HOME is left to the home
    entries. Control: the same environment pointing elsewhere adds nothing."""
    _clean_env(monkeypatch, tmp_path)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    before = rels(protected_entries(str(tmp_path)))
    assert not {"bin", "tools/bin", "venv", "startup.py", "hook.js", "me"} & before  # control
    monkeypatch.setenv("PATH", f"{tmp_path}/bin:/usr/bin:/{tmp_path}/tools/bin")
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "venv"))
    monkeypatch.setenv("PYTHONSTARTUP", str(tmp_path / "startup.py"))
    monkeypatch.setenv("NODE_OPTIONS", f"--require={tmp_path}/hook.js --max-old-space-size=99")
    entries = {e.rel: e for e in protected_entries(str(tmp_path))}
    assert {"bin", "tools/bin", "venv", "startup.py", "hook.js"} <= set(entries)
    assert all(entries[r].create for r in ("bin", "tools/bin", "startup.py", "hook.js"))
    assert "venv/bin" not in entries  # covered by the whole environment
    assert "me" not in entries  # a home keeps its own, finer list
    assert "PYTHONSTARTUP" in entries["startup.py"].why


def test_a_workspace_the_callers_environment_runs_code_from_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clean_env(monkeypatch, tmp_path)
    ws = tmp_path / "bin"
    ws.mkdir()
    assert roots_refusals(str(ws), (), writable=True, allow_home=False) == []  # control
    monkeypatch.setenv("PATH", f"//{ws}:/usr/bin")  # another spelling
    (field, why), *_ = roots_refusals(str(ws), (), writable=True, allow_home=False)
    assert field == "fs.workspace"
    assert "on the caller's PATH" in why
    assert roots_refusals(str(ws), (), writable=False, allow_home=False) == []  # read-only
    # Set after a session opened: its next command is refused, not run with it writable.
    with pytest.raises(RootRefused, match="caller runs code from"):
        protected_entries(str(ws))


def test_pandays_state_inside_the_workspace_is_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(tmp_path / "pw"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    found = rels(protected_entries(str(tmp_path)))
    assert {"pw/.cache/panday", "pw/.config/panday"} <= found
    # The caller's XDG_CONFIG_HOME inside is protected whole (what its programs read),
    # its panday directory with it.
    assert "config" in found


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


# ----------------------------------------------------------------- identity, not spelling


@pytest.mark.parametrize("path", ["//etc", "/./etc", "///usr", "/usr/./local/../../etc", "//"])
def test_a_refused_place_is_refused_in_every_spelling(path: str) -> None:
    assert root_refusal("/usr/local", writable=False, allow_home=True) is None  # control
    why = root_refusal(path, writable=True, allow_home=True)
    assert why is not None, path
    fd = open_root(normal_path(path))
    try:  # the descriptor a tier holds gives the same answer as the path
        assert root_refusal(path, writable=True, allow_home=True, fd=fd) is not None
    finally:
        os.close(fd)


def test_normal_path_reads_a_leading_double_slash_as_the_root() -> None:
    assert normal_path("//etc") == "/etc"
    assert normal_path("//usr/./lib/../bin") == "/usr/bin"
    assert normal_path("/") == "/"


def test_a_home_is_refused_by_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert root_refusal(str(home / "x"), writable=True, allow_home=False) is None  # control
    for spelling in ("/" + str(home), f"{tmp_path}/./home", f"/{tmp_path}"):
        why = root_refusal(spelling, writable=True, allow_home=False)
        assert why is not None, spelling
        assert "home directory" in why


def test_the_ancestry_of_a_descriptor_ends_at_the_root(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    fd = open_root(str(deep))
    try:
        chain = ancestry(fd)
    finally:
        os.close(fd)
    expected = [deep, deep.parent, tmp_path]
    assert chain[:3] == [(p.stat().st_dev, p.stat().st_ino) for p in expected]
    root = Path("/").stat()
    assert (root.st_dev, root.st_ino) in chain


@pytest.mark.skipif(not LINUX, reason="a bind mount in a new user and mount namespace: Linux")
def test_a_bind_alias_of_a_refused_place_is_refused(tmp_path: Path) -> None:
    """``mount --bind /etc x``: x opens as /etc's inode, and the answer follows it. Made in
    a user and mount namespace of this test's own (`unshare -Urm`), so it works for any
    caller and changes nothing on the host."""
    alias = tmp_path / "alias"
    alias.mkdir()
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("inconclusive: unshare (util-linux) is missing")
    check = (
        "import os, sys\n"
        "from panday_core.protect import open_root, root_refusal\n"
        "path = sys.argv[1]\n"
        "fd = open_root(path)\n"
        "print('REFUSED' if root_refusal(path, writable=True, allow_home=True, fd=fd) else 'OK')\n"
    )
    script = 'mount --bind "$1" "$2" && exec "$3" -c "$4" "$2"'

    def judge(source: str) -> str:
        proc = subprocess.run(
            [unshare, "-Urm", "sh", "-c", script, "sh", source, str(alias), sys.executable, check],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(f"inconclusive: {proc.stderr.strip()}")
        return proc.stdout.strip()

    other = tmp_path / "ordinary"
    other.mkdir()
    assert judge(str(other)) == "OK"  # control: an alias of an ordinary directory is fine
    assert judge("/etc") == "REFUSED"
    assert judge("/usr/share") == "REFUSED"
    assert judge("/var") == "REFUSED"  # refused only as the jail's own place: exact identity


def test_a_missing_import_path_inside_the_workspace_is_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "not-yet" / "lib"
    assert "not-yet/lib" not in rels(protected_entries(str(tmp_path)))  # control
    monkeypatch.setattr(sys, "path", [*sys.path, str(missing)])
    assert str(missing) in missing_import_paths()
    entries = {e.rel: e for e in protected_entries(str(tmp_path))}
    assert entries["not-yet/lib"].create  # a placeholder keeps it from being created


def test_pandays_own_project_files_are_protected_when_it_runs_from_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From where panday's packages are loaded now: the uv workspace root and the member
    holding the package, not a list of paths."""
    member = tmp_path / "packages" / "sdk"
    package = member / "src" / "panday"
    package.mkdir(parents=True)
    for project in (tmp_path, member):
        (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "uv.lock").write_text("")
    assert "pyproject.toml" not in rels(protected_entries(str(tmp_path)))  # control
    fake = types.ModuleType("panday")
    fake.__path__ = [str(package)]
    monkeypatch.setitem(sys.modules, "panday", fake)
    entries = {e.rel: e for e in protected_entries(str(tmp_path))}
    for rel in ("pyproject.toml", "uv.lock", "packages/sdk/pyproject.toml"):
        assert rel in entries, rel
    assert entries["uv.toml"].create
    assert entries[".python-version"].create
    assert not entries["pyproject.toml"].create
    assert "packages/pyproject.toml" not in entries  # no project there


def test_a_panday_package_imported_between_two_listings_is_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A panday package loaded after a listing (an editable install maps it from
    anywhere: here into the workspace) is protected at the next one, however sys.modules
    changed meanwhile: imported at its end; imported after the newest module was removed,
    that module then imported again; imported while another was removed (the count of
    modules unchanged). Each time the listing before is the control."""
    package = tmp_path / "vendored" / "panday_tier_late"
    package.mkdir(parents=True)
    late = types.ModuleType("panday_tier_late")
    late.__path__ = [str(package)]
    spare = types.ModuleType("panday_test_spare_module")
    monkeypatch.setitem(sys.modules, spare.__name__, spare)
    for change in ("appended", "the newest removed and imported again", "another removed"):
        assert "vendored/panday_tier_late" not in rels(protected_entries(str(tmp_path))), change
        if change == "appended":
            monkeypatch.setitem(sys.modules, late.__name__, late)
        elif change == "another removed":
            monkeypatch.delitem(sys.modules, spare.__name__)
            monkeypatch.setitem(sys.modules, late.__name__, late)
        else:
            newest = next(reversed(sys.modules))
            module = sys.modules[newest]
            monkeypatch.delitem(sys.modules, newest)
            monkeypatch.setitem(sys.modules, late.__name__, late)
            sys.modules[newest] = module
        assert late in hostpaths.panday_packages(), change
        entries = {e.rel: e for e in protected_entries(str(tmp_path))}
        assert "vendored/panday_tier_late" in entries, change
        monkeypatch.delitem(sys.modules, late.__name__)
    assert late not in hostpaths.panday_packages()  # gone once removed


def test_inside_is_decided_by_identity(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    st = tmp_path.stat()
    root = (st.st_dev, st.st_ino)
    assert within(str(tmp_path / "a" / "b"), root) == "a/b"
    assert within("/" + str(tmp_path / "a"), root) == "a"
    assert within(str(tmp_path), root) is None  # not strictly inside
    assert within("/usr/bin", root) is None


# ------------------------------------------------------------------------- git, read


def _root(tmp_path: Path) -> int:
    return open_root(str(tmp_path))


@pytest.fixture
def host_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The caller's own git configuration, as a file of this test's outside the workspace
    (the real one is left out, so a hooksPath in the machine's ~/.gitconfig cannot change
    the expected set)."""
    config = tmp_path_factory.mktemp("host") / "host-gitconfig"
    config.write_text("")
    monkeypatch.setattr(gitfind, "host_git_configs", lambda: (str(config),))
    return config


def _git_entries(root: Path) -> dict[str, Entry]:
    fd = _root(root)
    try:
        return {e.rel: e for e in git_entries(fd)}
    finally:
        os.close(fd)


def _git_rels(root: Path) -> set[str]:
    return set(_git_entries(root))


@pytest.mark.usefixtures("host_git")
def test_a_repository_adds_its_hooks_path_gitdir_and_submodules(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text(
        '[core]\n\tbare = false\n[Core]\n\tHooksPath = "tools/hooks" # ours\n'
    )
    (tmp_path / ".gitmodules").write_text(
        '[submodule "a"]\n\tpath = vendor/a\n[submodule "b"]\n\tpath = ../outside\n'
        '[submodule "c"]\n\tpath = /abs\n'
    )
    assert _git_rels(tmp_path) == {"HEAD", "tools/hooks", "vendor/a/.git"}


@pytest.mark.usefixtures("host_git")
def test_the_root_never_becomes_a_git_directory(tmp_path: Path) -> None:
    """git takes a directory with HEAD, objects and refs for a git directory before any
    parent's .git: HEAD at the root is protected (a missing one is held by a placeholder),
    whatever else the workspace has."""
    entries = _git_entries(tmp_path)
    assert entries["HEAD"].create
    assert entries["HEAD"].kind == "file"


@pytest.mark.usefixtures("host_git")
def test_a_git_file_adds_the_directory_it_points_to_when_inside(tmp_path: Path) -> None:
    (tmp_path / ".git").write_text("gitdir: meta/worktrees/w\n")
    assert _git_rels(tmp_path) == {"HEAD", "meta/worktrees/w"}
    (tmp_path / ".git").write_text("gitdir: /elsewhere/.git/worktrees/w\n")
    assert _git_rels(tmp_path) == {"HEAD"}
    # An absolute gitdir inside the workspace, in any spelling, is found by identity.
    for spelling in (str(tmp_path / "meta"), "/" + str(tmp_path / "meta"), f"{tmp_path}/./meta"):
        (tmp_path / "meta").mkdir(exist_ok=True)
        (tmp_path / ".git").write_text(f"gitdir: {spelling}\n")
        assert _git_rels(tmp_path) == {"HEAD", "meta"}, spelling


@pytest.mark.usefixtures("host_git")
def test_files_a_repository_config_includes_are_protected(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text(
        "[include]\n\tpath = ../.gitconfig\n"
        '[includeIf "gitdir:~/"]\n\tpath = "../team.inc"\n'
        f"[include]\n\tpath = /{tmp_path}/abs.inc\n"  # '//' in front: identity, not spelling
        "[include]\n\tpath = /etc/elsewhere.inc\n"
    )
    found = _git_rels(tmp_path)
    assert {".gitconfig", "team.inc", "abs.inc"} <= found
    assert not any("elsewhere" in rel for rel in found)
    entries = _git_entries(tmp_path)
    assert entries[".gitconfig"].create  # a missing include is read once it exists


@pytest.mark.usefixtures("host_git")
def test_an_absolute_hooks_path_inside_the_workspace_is_protected(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text(f"[core]\n\thooksPath = //{tmp_path}/hooks\n")
    assert "hooks" in _git_rels(tmp_path)
    (tmp_path / ".git" / "config").write_text("[core]\n\thooksPath = /usr/share/hooks\n")
    assert _git_rels(tmp_path) == {"HEAD"}


def test_the_callers_own_git_configuration_is_read(tmp_path: Path, host_git: Path) -> None:
    """A global core.hooksPath that is relative runs from the top of each working tree: the
    workspace's own; an include of the global configuration inside it is code too."""
    ws = tmp_path / "ws"
    ws.mkdir()
    assert _git_rels(ws) == {"HEAD"}  # control: nothing in the caller's configuration
    host_git.write_text(f"[core]\n\thooksPath = .githooks\n[include]\n\tpath = {ws}/shared.inc\n")
    assert _git_rels(ws) == {"HEAD", ".githooks", "shared.inc"}


def test_long_git_configurations_are_read_to_their_end(tmp_path: Path, host_git: Path) -> None:
    """The caller's and the repository's configurations are read a chunk at a time: a
    hooks path after 40 KB of comments is still found (control: at the top)."""
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    padding = "# a comment line of a long configuration file\n" * 1000
    for head in ("", padding):
        host_git.write_text(f"{head}[core]\n\thooksPath = .githooks\n")
        (ws / ".git" / "config").write_text(f"{head}[core]\n\thooksPath = {ws}/repohooks\n")
        assert {".githooks", "repohooks"} <= _git_rels(ws), len(head)
    host_git.write_text("#" * (300 * 1024) + "\n[core]\n\thooksPath = .githooks\n")
    assert ".githooks" not in _git_rels(ws)  # past the most read: left as before


@pytest.mark.usefixtures("host_git")
def test_a_linked_worktrees_git_file_is_protected(tmp_path: Path) -> None:
    (tmp_path / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {tmp_path}/.git/worktrees/wt\n")
    (tmp_path / ".git" / "worktrees" / "wt" / "gitdir").write_text(f"{tmp_path}/wt/.git\n")
    entries = _git_entries(tmp_path)
    assert "wt/.git" in entries
    assert not entries["wt/.git"].create


def test_the_host_git_configuration_files_are_the_ones_git_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global"))
    found = protect.host_git_configs()
    assert "/etc/gitconfig" in found
    assert str(tmp_path / ".gitconfig") in found
    assert str(tmp_path / "xdg" / "git" / "config") in found
    assert str(tmp_path / "global") in found


def test_the_callers_git_configuration_inside_the_workspace_is_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A global configuration the caller's git reads (here through GIT_CONFIG_GLOBAL and
    XDG_CONFIG_HOME) that lies in the workspace, missing or not, cannot be written or made
    there; one outside adds nothing."""
    (tmp_path / "ws" / "xdg" / "git").mkdir(parents=True)
    (tmp_path / "ws" / "xdg" / "git" / "config").write_text("[user]\n\tname = x\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", f"/{tmp_path}/ws/global")  # another spelling
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "ws" / "xdg"))
    entries = _git_entries(tmp_path / "ws")
    assert entries["global"].create
    assert entries["global"].kind == "file"
    assert "xdg/git/config" in entries
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "outside"))
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert not {"global", "outside", "xdg/git/config"} & set(_git_entries(tmp_path / "ws"))


@pytest.mark.usefixtures("host_git")
def test_git_files_are_never_read_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "config").write_text("[core]\nhooksPath = planted\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").symlink_to(tmp_path / "elsewhere" / "config")
    assert _git_rels(tmp_path) == {"HEAD"}


def test_a_workspace_in_a_git_directory_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for sub in ("objects", "refs", "hooks"):
        (repo / ".git" / sub).mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert git_directory_refusal(str(repo)) is None  # control: the working tree is fine
    for path in (repo / ".git", repo / ".git" / "hooks"):
        why = git_directory_refusal(str(path))
        assert why is not None
        assert "git directory" in why
    bare = tmp_path / "bare.git"
    for sub in ("objects", "refs"):
        (bare / sub).mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    assert git_directory_refusal(str(bare)) is not None
    assert git_directory_refusal(str(bare / "objects")) is not None


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


# ------------------------------------------- issue 22: homes, anchors' names, env hooks
#
# Each list below is the issue's (or the brief's) own wording: dropping one of its names
# from the tables in protect.py turns the test that reads it red.

ISSUE_HOME_PATHS = (
    # issue 22, case 6: reproduced as writable under fs.allow_home
    ".bash_aliases",
    ".local/lib/python3.12/site-packages/planted.pth",
    ".vimrc",
    ".aws/config",
    ".kube/config",
    ".cargo/config.toml",
    ".npmrc",
    ".ipython/profile_default/startup/planted.py",
    # and what else commonly runs code at login, a new terminal or the next command
    ".inputrc",
    ".vim/plugin/planted.vim",
    ".emacs",
    ".emacs.d/init.el",
    ".tmux.conf",
    ".screenrc",
    ".docker/cli-plugins/docker-planted",
    ".m2/settings.xml",
    ".gradle/init.d/planted.gradle",
    ".terraformrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".condarc",
    ".Rprofile",
    ".pythonrc",
    ".oh-my-zsh/custom/planted.zsh",
    ".p10k.zsh",
    ".xinitrc",
    ".Xresources",
    ".curlrc",
    ".wgetrc",
    ".gemrc",
    ".bundle/config",
    ".rustup/toolchains/stable/bin/rustc",
    ".nvm/nvm.sh",
    "bin/ls",
    ".local/bin/ls",
    ".local/share/systemd/user/planted.service",
    ".cache/pre-commit/repo/hook.py",
)
"""Paths under a home that a jail must not write under fs.allow_home (by covering entry)."""

ISSUE_MACOS_HOME_PATHS = (
    "Library/LaunchAgents/planted.plist",
    "Library/Python/3.12/lib/python/site-packages/planted.pth",
    "Library/Preferences/com.apple.Terminal.plist",
    "Library/Application Support/Code/User/settings.json",
)

ISSUE_DEFAULT_NAMES = (
    ".devcontainer.json",
    "opencode.json",
    ".roo",
    ".zed",
    ".continue",
    ".kiro",
    ".amazonq",
    ".windsurf",
    "mise.toml",
    ".mise.toml",
    ".yarnrc.yml",
    ".npmrc",
    ".hg",
    ".jj",
    ".gitconfig",
    ".ripgreprc",
)
"""Issue 22, case 8: names the anchors protect, each decided protected (DEFAULT_ENTRIES)."""

ISSUE_ENV_NAMES = (
    # issue 22, case 7: accepted in env before
    "PYTHONPATH",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_0",
    "GIT_CONFIG_VALUE_0",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_SSH_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "PAGER",
    "EDITOR",
    "LESSOPEN",
    "PERL5LIB",
    "RUBYLIB",
    "NODE_PATH",
    "GCONV_PATH",
    "SHELLOPTS",
    "GLIBC_TUNABLES",
    # the brief's list
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "DYLD_INSERT_LIBRARIES",
    "BASH_FUNC_ls",
    "PYTHONUSERBASE",
    "PYTHONEXECUTABLE",
    "GIT_SSH",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_PROXY_COMMAND",
    "MANPAGER",
    "VISUAL",
    "BROWSER",
    "LESSCLOSE",
    "PERLLIB",
    "LOCPATH",
    "NLSPATH",
    "BASHOPTS",
    "PS4",
    "LUA_INIT",
    "LUA_INIT_5_4",
    "LUA_PATH",
    "LUA_CPATH",
    "TCLLIBPATH",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "CLASSPATH",
    "R_PROFILE",
    "R_PROFILE_USER",
    # what was refused before
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PERL5OPT",
    "PERL5DB",
    "RUBYOPT",
    "NODE_OPTIONS",
    "JAVA_TOOL_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "_JAVA_OPTIONS",
)


def _covered(rel: str, entries: tuple[Entry, ...]) -> Entry | None:
    for entry in entries:
        if rel == entry.rel or rel.startswith(entry.rel + "/"):
            return entry
    return None


def _entry(rel: str, entries: tuple[Entry, ...]) -> Entry:
    entry = _covered(rel, entries)
    assert entry is not None, rel
    return entry


def _home_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def test_every_start_up_file_the_issue_names_is_protected_in_a_home_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home_workspace(tmp_path, monkeypatch)
    entries = protected_entries(str(home))
    missing = [rel for rel in ISSUE_HOME_PATHS if _covered(rel, entries) is None]
    assert not missing, f"not protected in a home workspace: {missing}"
    # ... and none of them may be created where missing (a new .bash_aliases runs too)
    creatable = [rel for rel in ISSUE_HOME_PATHS if not _entry(rel, entries).create]
    assert not creatable, f"may be created: {creatable}"
    # control: a project directory of that home gets none of them
    project = home / "project"
    project.mkdir()
    assert _covered(".bash_aliases", protected_entries(str(project))) is None


def test_a_home_inside_the_workspace_gets_its_entries_below_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home_workspace(tmp_path, monkeypatch)
    entries = protected_entries(str(tmp_path))
    for rel in (".bash_aliases", ".local/lib/python3.12/site-packages/x.pth", ".cargo/env"):
        assert _covered(f"home/{rel}", entries) is not None, rel
    del home


def test_the_macos_home_entries_are_listed_and_applied_on_macos_only() -> None:
    missing = [p for p in ISSUE_MACOS_HOME_PATHS if _covered(p, MACOS_HOME_ENTRIES) is None]
    assert not missing
    for entry in MACOS_HOME_ENTRIES:
        assert (entry in HOME_ENTRIES) == (sys.platform == "darwin")
        assert entry.rel in OPT_OUT_NAMES  # one policy means the same on every platform


def test_a_home_entry_left_out_by_fs_unprotect_is_writable_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home_workspace(tmp_path, monkeypatch)
    entries = protected_entries(str(home), unprotect=(".bash_aliases", ".local"))
    assert _covered(".bash_aliases", entries) is None
    assert _covered(".local/lib/python3.12/site-packages/x.pth", entries) is None
    assert _covered(".bashrc", entries) is not None


def test_a_name_both_lists_hold_keeps_the_stricter_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace default .gitconfig may be created (git reads it only through a
    protected include); a home's must not be: when the home is the workspace, the home's
    entry wins."""
    home = _home_workspace(tmp_path, monkeypatch)
    default = {e.rel: e for e in DEFAULT_ENTRIES}
    assert not default[".gitconfig"].create  # control: the default alone may be created
    workspace = tmp_path / "ws"
    workspace.mkdir()
    assert not _entry(".gitconfig", protected_entries(str(workspace))).create
    both = {e.rel: e for e in protected_entries(str(home))}
    for rel in (".gitconfig", ".ripgreprc", ".npmrc", ".yarnrc.yml"):
        assert both[rel].create, rel


def test_the_names_the_anchors_protect_are_protected_at_the_workspace_root(
    tmp_path: Path,
) -> None:
    entries = protected_entries(str(tmp_path))
    missing = [n for n in ISSUE_DEFAULT_NAMES if _covered(n, entries) is None]
    assert not missing, f"not protected: {missing}"
    # a glob cannot be a placeholder: *.code-workspace is documented, not listed
    assert not any(e.rel.endswith(".code-workspace") for e in DEFAULT_ENTRIES)
    # in direct mode only at the root (the guarantee says partial)
    assert _covered("sub/.vscode", entries) is None


def test_the_default_entries_fit_the_ceiling_with_two_homes_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every missing entry costs a placeholder per command, and past MAX_ENTRIES a
    workspace is refused: the defaults and two homes' entries stay below it."""
    assert len(DEFAULT_ENTRIES) + 2 * len(HOME_ENTRIES) < MAX_ENTRIES
    assert sum(e.create for e in DEFAULT_ENTRIES) <= 32
    home = _home_workspace(tmp_path, monkeypatch)
    assert len(protected_entries(str(home))) <= MAX_ENTRIES


@pytest.mark.parametrize(
    "name",
    sorted(ENV_HOOKS) + [f"{prefix}PROBE" for prefix in sorted(ENV_HOOK_PREFIXES)],
)
def test_every_env_hook_in_the_table_is_refused_unless_allowed(name: str) -> None:
    why = env_hook_reason(name)
    assert why is not None
    with pytest.raises(PolicyError) as refused:
        policy_from_dict({"env": {name: "x"}})
    assert refused.value.field == f"env.{name}"
    assert "allow_env_hooks" in refused.value.reason
    assert why in refused.value.reason  # says which hook, and why
    allowed = policy_from_dict({"env": {name: "x"}, "allow_env_hooks": [name]})
    assert allowed.env[name] == "x"


def test_the_env_hook_table_holds_every_name_the_issue_lists() -> None:
    missing = [name for name in ISSUE_ENV_NAMES if not is_env_hook(name)]
    assert not missing, f"not refused: {missing}"
    for prefix in ("LD_", "DYLD_", "GIT_CONFIG_", "BASH_FUNC_"):
        assert prefix in ENV_HOOK_PREFIXES
    for why in (*ENV_HOOKS.values(), *ENV_HOOK_PREFIXES.values()):
        assert len(why) > 10  # every row says why


@pytest.mark.parametrize(
    "name", ["PATH", "LANG", "LC_ALL", "TERM", "TZ", "TMPDIR", "CC", "JAVA_HOME", "UV_CACHE_DIR"]
)
def test_ordinary_env_names_are_not_hooks(name: str) -> None:
    assert not is_env_hook(name)
    assert policy_from_dict({"env": {name: "x"}}).env[name] == "x"


@pytest.mark.parametrize(
    ("name", "words"),
    [("A=B", "'='"), ("A\x00B", "NUL"), ("", "empty"), ("=", "'='"), ("LD_PRELOAD=x", "'='")],
)
def test_an_env_name_with_equals_nul_or_nothing_is_refused_in_the_model(
    name: str, words: str
) -> None:
    with pytest.raises(PolicyError) as refused:
        policy_from_dict({"env": {name: "x"}})
    assert refused.value.field == f"env.{name}"
    assert words in refused.value.reason
    assert "\n" not in refused.value.reason
    with pytest.raises(PolicyError):  # allow_env_hooks cannot list one either
        policy_from_dict({"allow_env_hooks": [name]})
    with pytest.raises(PolicyError):  # nor can the constructor be used around the loader
        SandboxPolicy(env={name: "x"})


# ------------------------------------------------- a workspace inside a home's protected entry


def test_a_writable_root_inside_a_homes_protected_entry_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/.config`` or ``~/.local/bin`` as a workspace, without ``fs.allow_home``: none of
    its files would be protected, and they run at the next login or command."""
    home = tmp_path / "home"
    for rel in (".config/autostart", ".local/bin", "project"):
        (home / rel).mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert root_refusal(str(home / "project"), writable=True, allow_home=False) is None  # control
    for rel in (".config", ".config/autostart", ".local/bin"):
        for spelling in (str(home / rel), "/" + str(home / rel)):
            why = root_refusal(spelling, writable=True, allow_home=False)
            assert why is not None, spelling
            assert "must stay read-only" in why
        assert root_refusal(str(home / rel), writable=False, allow_home=False) is None


def test_entries_inside_another_or_repeated_are_dropped_and_the_stricter_repeat_wins() -> None:
    E = protect.Entry  # noqa: N806 - a short alias for a table of entries
    entries = [
        E("a/b/c", "file", "inside a/b"),
        E("a/b", "dir", "kept"),
        E("ab", "file", "a sibling that only shares a prefix"),
        E("x/y", "file", "may be made", create=False),
        E("x/y", "file", "must not be made"),
        E("a/b", "dir", "a repeat"),
        E("a/bc/d", "file", "beside a/b, not inside it"),
    ]
    kept = protect._dedupe(entries)  # pyright: ignore[reportPrivateUsage] - the rule itself
    assert [(e.rel, e.why) for e in kept] == [
        ("ab", "a sibling that only shares a prefix"),
        ("a/b", "kept"),
        ("x/y", "must not be made"),
        ("a/bc/d", "beside a/b, not inside it"),
    ]


# ------------------------------------------------- answers kept between commands, and found fast


def test_a_path_is_resolved_as_realpath_resolves_it_with_or_without_the_memo(
    tmp_path: Path,
) -> None:
    """`real_path` shares its lstat calls through the memo of one `protected_entries`
    call; it must still answer exactly as ``os.path.realpath`` does: a link anywhere on
    the way (absolute or relative), ``..``, a repeated or trailing slash, a missing part."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "l").symlink_to(tmp_path / "a")
    (tmp_path / "a" / "lb").symlink_to("b")
    (tmp_path / "a" / "up").symlink_to("..")
    spellings = [
        "/",
        "//etc",
        str(tmp_path / "a" / "b") + "/",
        str(tmp_path / "l" / "b"),
        str(tmp_path / "a" / "lb" / "new"),
        str(tmp_path / "a" / "up" / "l" / "lb"),
        str(tmp_path / "missing" / "x" / "y"),
        str(tmp_path / "a" / ".." / "a" / "b"),
        "/" + str(tmp_path / "a") + "//./b",
        "relative/x",
    ]
    st = tmp_path.stat()
    root = (st.st_dev, st.st_ino)
    for memo in (False, True):
        if memo:
            identity.remember_prefixes()
        try:
            for path in spellings:
                assert identity.real_path(path) == os.path.realpath(path), (path, memo)
                assert identity.lexists(path) == os.path.lexists(path), (path, memo)
            # Placed by identity after links: the link `l` is the directory `a`.
            assert within(str(tmp_path / "l" / "lb"), root) == "a/b"
            assert within(str(tmp_path / "a" / "up" / "a"), root) == "a"
        finally:
            if memo:
                identity.forget_prefixes()


def test_answers_kept_between_commands_follow_the_callers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's git configuration files, the places the caller runs code from and
    panday's state are kept from one command to the next while the caller's environment is
    the same: a variable set or removed in between is seen at the next command."""
    _clean_env(monkeypatch, tmp_path)
    config, hook = str(tmp_path / "global"), str(tmp_path / "startup.py")
    for _ in range(2):  # the second time from what was kept
        assert config not in protect.host_git_configs()  # control
        assert hook not in dict(hostpaths.caller_code_paths())  # control
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", config)
    monkeypatch.setenv("PYTHONSTARTUP", hook)
    assert config in protect.host_git_configs()
    assert hook in dict(hostpaths.caller_code_paths())
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert state_directories()[1] == str(tmp_path / "xdg" / "panday")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert config not in protect.host_git_configs()
    assert state_directories()[1] != str(tmp_path / "xdg" / "panday")


def test_the_callers_git_configuration_is_read_again_at_each_command(
    tmp_path: Path, host_git: Path
) -> None:
    """What the caller's git configuration says is kept by its text, never by its name:
    a hooksPath added, changed and removed between two commands is followed each time."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for text, expected in (
        ("[core]\n\thooksPath = one\n", {"HEAD", "one"}),
        ("[core]\n\thooksPath = two\n", {"HEAD", "two"}),
        ("[user]\n\tname = x\n", {"HEAD"}),
        ("[core]\n\thooksPath = one\n", {"HEAD", "one"}),
    ):
        host_git.write_text(text)
        assert _git_rels(ws) == expected, text


def test_a_fifo_where_the_callers_git_configuration_is_looked_for_does_not_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO at ~/.gitconfig (or where GIT_CONFIG_GLOBAL points) is read without waiting
    for a writer. Control: opening it the ordinary way waits (released by opening its
    other end, so nothing is left behind)."""
    fifo = tmp_path / "gitconfig"
    os.mkfifo(fifo)
    opened: list[int] = []
    waiter = threading.Thread(target=lambda: opened.append(os.open(fifo, os.O_RDONLY)))
    waiter.start()
    waiter.join(0.5)
    blocked = waiter.is_alive()
    writer = os.open(fifo, os.O_WRONLY)  # releases the control's open
    waiter.join(30)
    os.close(writer)
    for fd in opened:
        os.close(fd)
    assert blocked, "inconclusive: opening a FIFO without a writer did not wait"
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(fifo))
    ws = tmp_path / "ws"
    ws.mkdir()
    done: list[set[str]] = []
    reader = threading.Thread(target=lambda: done.append(_git_rels(ws)), daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():  # free the thread before failing (a writer ends its wait)
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
    assert len(done) == 1, "reading a FIFO as the caller's git configuration waited"
    assert "HEAD" in done[0]


def test_protected_entries_deduplicated_for_one_list_are_not_the_answer_for_another() -> None:
    """`_dedupe` keeps its last answer for the same entries; other entries get their own."""
    E = protect.Entry  # noqa: N806 - a short alias for a table of entries
    first = [E("a", "dir", "x"), E("a/b", "file", "inside")]
    second = [E("a/b", "file", "alone"), E("c", "file", "y")]
    for _ in range(2):
        for entries, expected in ((first, ["a"]), (second, ["c", "a/b"])):
            kept = protect._dedupe(entries)  # pyright: ignore[reportPrivateUsage] - the rule itself
            assert [e.rel for e in kept] == expected


@pytest.mark.skipif(os.geteuid() != 0, reason="real and effective ids that differ need root")
def test_existence_is_asked_with_the_effective_ids_as_lstat_does(tmp_path: Path) -> None:
    """`lexists` asks the kernel with the effective ids, as ``lstat`` searches: a process
    whose effective uid may not search a directory sees nothing in it, whatever its real
    uid may. Control: asked with the real ids, the file is there."""
    hidden = tmp_path / "root-only"
    hidden.mkdir(mode=0o700)
    (hidden / "file").write_text("")
    probe = (
        "import os, sys\n"
        "from panday_core import identity\n"
        "os.seteuid(65534)\n"
        "path = sys.argv[1]\n"
        "print(os.access(path, os.F_OK, follow_symlinks=False),"
        " os.path.lexists(path), identity.lexists(path))\n"
    )
    tmp_path.chmod(0o755)
    out = subprocess.run(
        [sys.executable, "-c", probe, str(hidden / "file")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert out[0] == "True", "inconclusive: the real ids do not see the file"
    assert out[1:] == ["False", "False"]


def test_a_threads_memo_of_the_file_system_is_its_own(tmp_path: Path) -> None:
    """The lstat memo of one listing belongs to the thread that listed: another thread's
    listing, begun while the first is still inside its own, asks the file system afresh.
    (One memo for all would live as long as some thread is inside a listing, and answer
    from a moment long past.) Control: inside one listing, the memo answers as it did."""
    made = tmp_path / "made-later"
    held, go = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        identity.remember_prefixes()
        try:
            seen["before"] = identity.lexists(str(made))
            held.set()
            go.wait(30)
            seen["again"] = identity.lexists(str(made))  # its own moment
        finally:
            identity.forget_prefixes()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert held.wait(30), "the first listing did not start"
        made.write_text("")
        identity.remember_prefixes()
        try:
            fresh = identity.lexists(str(made))
        finally:
            identity.forget_prefixes()
    finally:
        go.set()
        thread.join(30)
    assert seen == {"before": False, "again": False}, "inconclusive: the memo did not hold"
    assert fresh


@pytest.mark.skipif(not LINUX, reason="a bind mount in a new user and mount namespace: Linux")
def test_a_path_through_a_bind_mount_of_a_workspace_subtree_is_inside(tmp_path: Path) -> None:
    """A directory of the workspace bound elsewhere (its .venv at /opt/venv, say) is still
    the workspace's: a place the caller runs code from, spelled through that mount, is
    protected where it really lies, and no longer once the mount is gone (the kernel says
    the mount table changed). Control: before the mount, nothing is found there."""
    ws, alias = tmp_path / "ws", tmp_path / "alias"
    (ws / "sub" / "venv" / "bin").mkdir(parents=True)
    alias.mkdir()
    probe = f"""
import os, subprocess, sys
from panday_core import protect
from panday_core.identity import within
st = os.stat({str(ws)!r})
root = (st.st_dev, st.st_ino)
os.environ["PATH"] = "/usr/bin:/bin"
os.environ["VIRTUAL_ENV"] = {str(alias / "venv")!r}
def found():
    return (within({str(alias / "venv" / "bin")!r}, root),
            "sub/venv" in {{e.rel for e in protect.protected_entries({str(ws)!r})}})
before = found()
subprocess.run(["mount", "--bind", {str(ws / "sub")!r}, {str(alias)!r}], check=True)
during = found()
subprocess.run(["umount", {str(alias)!r}], check=True)
after = found()
print(before, during, after)
"""
    out = subprocess.run(
        ["unshare", "-Urm", "--propagation", "private", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    assert out == "(None, False) ('sub/venv/bin', True) (None, False)", out
