"""Git finds code in more places than ``.git``: a jail's writes must reach none of them.

Issue 22's reproductions, each checked with the host's real git after the session ends:
the workspace root made into a git directory (alone, and as a subdirectory of a real
repository, where git takes ``.`` before the parent's ``.git``), a global
``core.hooksPath`` that is relative, an ``include.path`` to a file in the workspace, an
absolute ``core.hooksPath`` inside it (spelled with ``//``), a ``.git`` file whose absolute
``gitdir:`` lies inside it, and a linked worktree's ``.git`` file.

Every probe first runs the same writes in a jail without the one bind that guards them
(`Escape.without_bind`) and shows that the host's next git command then runs the planted
command (a marker file appears): the positive control for both the write and the git
behaviour this host's git has. Then the real jail, whose writes must fail, and the same
git command, which must run nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

GIT = shutil.which("git") or "/usr/bin/git"

# Written inside the jail: remove what stands at `path` (a placeholder, when its bind is
# missing), then write `text` there, creating directories on the way.
_PLANT = """
import os
os.chdir({ws!r})
with open("notes.txt", "w") as fh:  # an ordinary write: works in every case
    fh.write("ordinary")
done = []
for path, text, mode in {plants!r}:
    try:
        parts = path.split("/")
        for depth in range(1, len(parts) + (1 if text is None else 0)):
            d = "/".join(parts[:depth])
            # An empty directory nobody may write: a placeholder (its bind missing in the
            # control): take it away, as a jail would.
            if os.path.isdir(d) and not os.path.islink(d) and not os.listdir(d):
                if not os.access(d, os.W_OK):
                    os.rmdir(d)
        if text is None:
            os.makedirs(path, exist_ok=True)
        else:
            if os.path.lexists(path):
                os.unlink(path)
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w") as fh:
                fh.write(text)
            os.chmod(path, mode)
        done.append(path)
    except OSError as exc:
        blocked(path + ": " + err(exc))
ok(",".join(done))
"""


def _git_env(esc: Escape, **extra: str) -> dict[str, str]:
    home = esc.tmp / "git-home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "probe",
        "GIT_AUTHOR_EMAIL": "probe@localhost",
        "GIT_COMMITTER_NAME": "probe",
        "GIT_COMMITTER_EMAIL": "probe@localhost",
        **extra,
    }


def _git(esc: Escape, where: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GIT, *args],
        cwd=where,
        env=_git_env(esc, **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _probe(
    esc: Escape,
    *,
    setup: Callable[[Path], None],
    plants: list[tuple[str, str | None, int]],
    guard: str,
    host: tuple[str, ...],
    where: str = "",
    workspace: Callable[[Path], Path] | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Control (the bind at `guard` missing: the plants land and `host` git runs one of
    them), then the jail (the plants fail and `host` git runs nothing)."""
    marker = esc.next_door / "pwned"
    env = env or {}
    for attempt in ("control", "jail"):
        shutil.rmtree(esc.ws)
        esc.ws.mkdir()
        marker.unlink(missing_ok=True)
        setup(esc.ws)
        ws = workspace(esc.ws) if workspace else esc.ws
        texts = [(p, t if t is None else t.replace("MARKER", str(marker)), m) for p, t, m in plants]
        code = _PLANT.format(ws=str(ws), plants=texts)
        if attempt == "control":
            esc.control(esc.without_bind(code, f"{ws}/{guard}", workspace=ws))
        else:
            esc.must_block(esc.inside(code, workspace=ws))
            assert (ws / "notes.txt").read_text() == "ordinary"
        ran = _git(esc, ws / where, *host, **env)
        if attempt == "control":
            assert marker.exists(), (
                f"inconclusive: this host's git ran nothing planted: {ran.stdout}{ran.stderr}"
            )
        else:
            assert not marker.exists(), f"ESCAPE: the host's git ran {marker.read_text()!r}"
    esc.held()


def _git_dir_plants(marker_config: str) -> list[tuple[str, str | None, int]]:
    return [
        ("HEAD", "ref: refs/heads/main\n", 0o644),
        ("objects", None, 0),
        ("refs/heads", None, 0),
        ("config", "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
         + marker_config, 0o644),
    ]  # fmt: skip


_ROOT_AS_GIT_DIR = _git_dir_plants('\tfsmonitor = "id > MARKER; echo"\n')


def test_the_workspace_root_cannot_become_a_git_directory(esc: Escape) -> None:
    _probe(
        esc,
        setup=lambda _ws: None,
        plants=_ROOT_AS_GIT_DIR,
        guard="HEAD",
        host=("status", "--short"),
    )


def test_a_workspace_inside_a_repository_cannot_become_its_git_directory(esc: Escape) -> None:
    """git takes ``.`` as the git directory before the parent's ``.git``."""

    def setup(ws: Path) -> None:
        assert _git(esc, ws, "init", "-q").returncode == 0
        (ws / "sub").mkdir()

    _probe(
        esc,
        setup=setup,
        plants=_ROOT_AS_GIT_DIR,
        guard="HEAD",
        host=("status", "--short"),
        workspace=lambda ws: ws / "sub",
    )


def _repository(ws: Path, esc: Escape, config: str = "") -> None:
    assert _git(esc, ws, "init", "-q").returncode == 0
    if config:
        with (ws / ".git" / "config").open("a") as fh:
            fh.write(config)


def test_a_global_relative_hooks_path_cannot_be_filled(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's ``core.hooksPath = .githooks`` runs hooks from the top of every working
    tree: the workspace's own ``.githooks``."""
    global_config = esc.tmp / "global-gitconfig"
    global_config.write_text("[core]\n\thooksPath = .githooks\n")
    _probe_with_global_config(
        esc,
        monkeypatch,
        global_config,
        plants=[(".githooks/pre-commit", "#!/bin/sh\nid > MARKER\n", 0o755)],
        guard=".githooks",
        host=("commit", "-q", "--allow-empty", "-m", "probe"),
    )


def test_the_callers_global_git_config_inside_the_workspace_cannot_be_written(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GIT_CONFIG_GLOBAL`` naming a file in the workspace: a jail that wrote it would set
    the caller's ``core.fsmonitor``, run by the host's next git command anywhere."""
    _probe_with_global_config(
        esc,
        monkeypatch,
        esc.ws / "global-gitconfig",
        plants=[("global-gitconfig", '[core]\n\tfsmonitor = "id > MARKER; echo"\n', 0o644)],
        guard="global-gitconfig",
        host=("status", "--short"),
    )


def _probe_with_global_config(
    esc: Escape,
    monkeypatch: pytest.MonkeyPatch,
    config: Path,
    *,
    plants: list[tuple[str, str | None, int]],
    guard: str,
    host: tuple[str, ...],
) -> None:
    """`_probe` in a repository, with the caller's GIT_CONFIG_GLOBAL at `config` (for
    panday, which reads this process's environment, and for the host's git)."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    _probe(
        esc,
        setup=lambda ws: _repository(ws, esc),
        plants=plants,
        guard=guard,
        host=host,
        env={"GIT_CONFIG_GLOBAL": str(config)},
    )


def test_a_file_the_repository_config_includes_cannot_be_written(esc: Escape) -> None:
    _probe(
        esc,
        setup=lambda ws: _repository(ws, esc, "[include]\n\tpath = ../.gitconfig\n"),
        plants=[(".gitconfig", '[core]\n\tfsmonitor = "id > MARKER; echo"\n', 0o644)],
        guard=".gitconfig",
        host=("status", "--short"),
    )


def test_an_absolute_hooks_path_inside_the_workspace_cannot_be_filled(esc: Escape) -> None:
    """Spelled ``//<workspace>/hooks``: found by identity, not by comparing strings."""
    _probe(
        esc,
        setup=lambda ws: _repository(ws, esc, f"[core]\n\thooksPath = /{ws}/hooks\n"),
        plants=[("hooks/pre-commit", "#!/bin/sh\nid > MARKER\n", 0o755)],
        guard="hooks",
        host=("commit", "-q", "--allow-empty", "-m", "probe"),
    )


def test_a_git_file_pointing_inside_the_workspace_guards_what_it_points_to(esc: Escape) -> None:
    def setup(ws: Path) -> None:
        made = _git(esc, ws, "init", "-q", "--separate-git-dir", str(ws / "meta"), str(ws))
        assert made.returncode == 0, made.stderr
        assert (ws / ".git").read_text().startswith(f"gitdir: {ws}/meta")  # absolute

    _probe(
        esc,
        setup=setup,
        plants=[("meta/hooks/pre-commit", "#!/bin/sh\nid > MARKER\n", 0o755)],
        guard="meta",
        host=("commit", "-q", "--allow-empty", "-m", "probe"),
    )


def test_a_linked_worktrees_git_file_cannot_be_redirected(esc: Escape) -> None:
    def setup(ws: Path) -> None:
        _repository(ws, esc)
        assert _git(esc, ws, "commit", "-q", "--allow-empty", "-m", "base").returncode == 0
        added = _git(esc, ws, "worktree", "add", "-q", str(ws / "wt"))
        assert added.returncode == 0, added.stderr

    plants = [
        (f"evil/{path}", text, mode)
        for path, text, mode in _git_dir_plants('\tfsmonitor = "id > MARKER; echo"\n')
    ]
    # The worktree's .git now names a git directory the jail made.
    plants.append(("wt/.git", "gitdir: ../evil\n", 0o644))
    _probe(
        esc,
        setup=setup,
        plants=plants,
        guard="wt/.git",
        host=("status", "--short"),
        where="wt",
    )


def test_a_workspace_inside_a_git_directory_is_refused(esc: Escape) -> None:
    from panday_core.errors import PolicyViolation  # noqa: PLC0415 - as the suite's other refusals

    assert _git(esc, esc.ws, "init", "-q").returncode == 0
    with esc.open(workspace=esc.ws):  # control: the working tree is a workspace
        pass
    for inside in (esc.ws / ".git", esc.ws / ".git" / "hooks"):
        with pytest.raises(PolicyViolation) as refused:
            esc.open(workspace=inside)
        assert refused.value.field == "fs.workspace"
        assert "git directory" in refused.value.reason
        esc.held()
    with esc.open(workspace=esc.ws / ".git", access="ro"):  # read-only: nothing to plant
        pass
    assert (esc.ws / ".git" / "hooks").is_dir()
