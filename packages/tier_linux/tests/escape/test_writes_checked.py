"""``fs.writes = "checked"``: what a jail writes is a proposal, judged before it lands.

Each probe of issue 24's hazard rows first plants the same files outside any sandbox, in a
fresh copy of the workspace, and shows that the host's next ordinary action then runs (or
reads) what was planted: the positive control. Then the command runs in a jail whose
workspace is an overlay: its writes succeed there, an ordinary edit beside them lands,
and every hazard is held in the change set, so the host's same action runs nothing. In
``review`` mode nothing lands at all until `apply`, and a blanket apply still holds them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from panday_core.changes import store

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

GIT = shutil.which("git") or "/usr/bin/git"

_PLANT = """
import os
os.chdir({ws!r})
with open("notes.txt", "w") as fh:  # an ordinary write: lands in every case
    fh.write("ordinary")
done = []
for path, text, mode in {plants!r}:
    try:
        if text is None:
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            if os.path.lexists(path):
                os.unlink(path)
            if text.startswith("->"):
                os.symlink(text[2:], path)
            else:
                with open(path, "w") as fh:
                    fh.write(text)
                os.chmod(path, mode)
        done.append(path)
    except OSError as exc:
        done.append(path + " refused: " + err(exc))
ok(",".join(done))
"""

Plant = tuple[str, str | None, int]


def _env(esc: Escape) -> dict[str, str]:
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
    }


def _host(esc: Escape, where: Path, *argv: str) -> None:
    subprocess.run(
        list(argv), cwd=where, env=_env(esc), capture_output=True, timeout=60, check=False
    )


def _probe(
    esc: Escape,
    *,
    plants: list[Plant],
    effect: Callable[[Path], bool],
    setup: Callable[[Path], None] = lambda _ws: None,
    host: Callable[[Path], None] = lambda _ws: None,
    sub: str = "",
    held_by_rule: bool = True,
) -> None:
    """Control: `plants` written outside, then `host` runs, and `effect` shows it worked.
    Then the jail (checked): the writes succeed inside, notes.txt lands, every plant is
    held, and after `host` runs again `effect` is false."""
    marker = esc.next_door / "pwned"
    for attempt in ("control", "jail"):
        shutil.rmtree(esc.ws)
        esc.ws.mkdir()
        marker.unlink(missing_ok=True)
        setup(esc.ws)
        ws = esc.ws / sub if sub else esc.ws
        texts = [(p, t if t is None else t.replace("MARKER", str(marker)), m) for p, t, m in plants]
        code = _PLANT.format(ws=str(ws), plants=texts)
        if attempt == "control":
            esc.control(esc.outside(code))
            host(ws)
            assert effect(ws), "inconclusive: the plant did nothing on this host"
            continue
        result = esc.run(esc.py(code), workspace=ws, writes="checked")
        assert result.exit_code == 0, result.stderr
        assert (ws / "notes.txt").read_text() == "ordinary", "the ordinary edit did not land"
        report = result.writes
        assert report is not None
        held = {h.path: h.rule for h in report.held}
        if held_by_rule:
            assert report.change_set is not None
            assert held, f"nothing was held: {report}"
            assert "conflict" not in held.values(), f"a conflict, not a rule: {report}"
        host(ws)
        assert not effect(ws), f"ESCAPE: the host ran or read what the jail wrote ({held})"
        if report.change_set is not None:
            store.discard(report.change_set)
    esc.held()


def _git_repo(esc: Escape, ws: Path, config: str = "") -> None:
    subprocess.run([GIT, "init", "-q"], cwd=ws, env=_env(esc), check=True)
    if config:
        with (ws / ".git" / "config").open("a") as fh:
            fh.write(config)


def _bare(marker_config: str) -> list[Plant]:
    return [
        ("HEAD", "ref: refs/heads/main\n", 0o644),
        ("objects", None, 0),
        ("refs/heads", None, 0),
        ("config", "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
         + marker_config, 0o644),
    ]  # fmt: skip


_FSMONITOR = '\tfsmonitor = "id > MARKER; echo"\n'


def _marker(esc: Escape) -> Callable[[Path], bool]:
    return lambda _ws: (esc.next_door / "pwned").exists()


def test_the_root_made_a_bare_repository_is_held(esc: Escape) -> None:
    _probe(
        esc,
        plants=_bare(_FSMONITOR),
        effect=_marker(esc),
        host=lambda ws: _host(esc, ws, GIT, "status", "--short"),
    )


def test_a_subdirectory_made_a_bare_repository_is_held(esc: Escape) -> None:
    """git takes ``.`` as the git directory before the parent's ``.git``."""

    def setup(ws: Path) -> None:
        _git_repo(esc, ws)
        (ws / "sub").mkdir()

    _probe(
        esc,
        setup=setup,
        sub="sub",
        plants=_bare(_FSMONITOR),
        effect=_marker(esc),
        host=lambda ws: _host(esc, ws, GIT, "status", "--short"),
    )


def test_a_file_the_repository_config_includes_is_held(esc: Escape) -> None:
    _probe(
        esc,
        setup=lambda ws: _git_repo(esc, ws, "[include]\n\tpath = ../team.gitconfig\n"),
        plants=[("team.gitconfig", "[core]\n" + _FSMONITOR, 0o644)],
        effect=_marker(esc),
        host=lambda ws: _host(esc, ws, GIT, "status", "--short"),
    )


def test_a_linked_worktrees_git_file_rewrite_is_held(esc: Escape) -> None:
    def setup(ws: Path) -> None:
        _git_repo(esc, ws)
        subprocess.run(
            [GIT, "commit", "-q", "--allow-empty", "-m", "b"], cwd=ws, env=_env(esc), check=True
        )
        subprocess.run(
            [GIT, "worktree", "add", "-q", str(ws / "wt")], cwd=ws, env=_env(esc), check=True
        )

    plants = [(f"evil/{p}", t, m) for p, t, m in _bare(_FSMONITOR)]
    plants.append(("wt/.git", "gitdir: ../evil\n", 0o644))
    _probe(
        esc,
        setup=setup,
        plants=plants,
        effect=_marker(esc),
        host=lambda ws: _host(esc, ws / "wt", GIT, "status", "--short"),
    )


def test_editor_tasks_at_depth_three_are_held(esc: Escape) -> None:
    """VS Code runs ``.vscode/tasks.json`` (``runOn: folderOpen``) of the folder opened:
    any folder, at any depth. The effect checked is that the file exists on the host."""
    tasks = '{"version": "2.0.0", "tasks": [{"label": "x", "command": "id > MARKER"}]}'
    path = "a/b/.vscode/tasks.json"
    _probe(esc, plants=[(path, tasks, 0o644)], effect=lambda ws: (ws / path).exists())


def test_a_build_backend_edit_is_held(esc: Escape) -> None:
    """pip and uv run the build backend a pyproject.toml names when the project is built."""
    old = '[project]\nname = "p"\nversion = "1"\n'
    new = '[build-system]\nrequires = []\nbuild-backend = "evil"\nbackend-path = ["."]\n' + old

    def setup(ws: Path) -> None:
        (ws / "pyproject.toml").write_text(old)

    _probe(
        esc,
        setup=setup,
        plants=[("pyproject.toml", new, 0o644), ("evil.py", "import os\n", 0o644)],
        effect=lambda ws: "evil" in (ws / "pyproject.toml").read_text(),
    )


def test_a_module_that_shadows_an_installed_one_is_held(esc: Escape) -> None:
    """``python -c`` in the workspace puts it first on sys.path: a ``msgspec.py`` there
    runs instead of the installed msgspec (which panday imports)."""
    code = "open('MARKER', 'w').write('shadow')\n"
    _probe(
        esc,
        plants=[("msgspec.py", code, 0o644)],
        effect=_marker(esc),
        host=lambda ws: _host(esc, ws, sys.executable, "-c", "import msgspec"),
    )


def test_a_setuid_file_never_lands(esc: Escape) -> None:
    """Seccomp refuses the mode inside (the first wall); were it let through, the set-id
    rule holds it (packages/core/tests/test_changes.py, the rule alone)."""

    def setuid(ws: Path) -> bool:
        path = ws / "tool"
        return path.exists() and bool(path.stat().st_mode & 0o4000)

    _probe(esc, plants=[("tool", "#!/bin/sh\nid\n", 0o4755)], effect=setuid, held_by_rule=False)


def test_a_symlink_out_of_the_workspace_is_held(esc: Escape) -> None:
    def reads_next_door(ws: Path) -> bool:
        link = ws / "docs"
        return link.is_symlink() and (link / "secret.txt").exists()

    def setup(_ws: Path) -> None:
        (esc.next_door / "secret.txt").write_text("secret")

    _probe(
        esc,
        setup=setup,
        plants=[("docs", f"->{esc.next_door}", 0)],
        effect=reads_next_door,
    )


def test_review_lands_nothing_and_a_blanket_apply_still_holds_the_hazards(esc: Escape) -> None:
    code = _PLANT.format(ws=str(esc.ws), plants=[(".envrc", "id > /tmp/x\n", 0o644)])
    esc.control(esc.outside(code))  # control: the writes work outside
    assert (esc.ws / ".envrc").exists()
    shutil.rmtree(esc.ws)
    esc.ws.mkdir()
    result = esc.run(esc.py(code), writes="review")
    assert result.exit_code == 0, result.stderr
    assert result.writes is not None
    assert result.writes.change_set is not None
    assert not (esc.ws / "notes.txt").exists(), "review mode wrote into the workspace"
    assert not (esc.ws / ".envrc").exists()
    store.apply_set(result.writes.change_set)
    assert (esc.ws / "notes.txt").read_text() == "ordinary"
    assert not (esc.ws / ".envrc").exists(), "ESCAPE: a blanket apply applied a held change"
    store.discard(result.writes.change_set)
    esc.held()
