"""Change sets (``fs.writes`` checked and review): the hazard rules, conflicts, the journal.

The upper directory is written here by hand, as an overlay would (plain files and
directories; whiteouts and opaque directories need a real overlay and are tested with a
jail in packages/tier_linux/tests/test_writes.py). Every test that expects a change to be
held also carries an ordinary change in the same set and shows that one applied: the
pipeline lands what it should, so what it holds is the rule's doing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

from panday_core import userstate
from panday_core.changes import store
from panday_core.changes.hazards import RULES

if TYPE_CHECKING:
    from panday_core.changes.model import Change, Meta


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "home"
    where.mkdir()
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(where))
    return where


def _tick() -> None:
    """Wait until the clock file times come from has moved on: what was written before is
    then older than anything written after, whatever the load (no race on one tick)."""
    then = store.clock_ns()
    for _ in range(1000):
        if store.clock_ns() > then:
            return
        time.sleep(0.001)
    raise AssertionError("the coarse real-time clock did not move in a second")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    where = tmp_path / "ws"
    where.mkdir()
    (where / "notes.txt").write_text("before\n")
    _tick()  # the user's edits were made before the command
    return where


Item = tuple[str, str | None, int]
"""(path, text, mode): a file; text None: a directory; ``->TARGET``: a symbolic link;
``FIFO``: a named pipe."""


def _write(root: Path, rel: str, text: str | None = "x", mode: int = 0o644) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        path.mkdir(exist_ok=True)
    elif text.startswith("->"):
        path.symlink_to(text[2:])
    elif text == "FIFO":
        os.mkfifo(path)
    else:
        path.write_text(text)
        path.chmod(mode)


def _run(
    ws: Path,
    items: list[Item],
    *,
    mode: Literal["checked", "review"] = "checked",
    edit: Path | None = None,
    on_import_path: bool = False,
) -> tuple[Meta, list[Change], list[Change]]:
    """One change set over `ws`: `items` are written into its upper directory, as the
    command would have, together with an ordinary edit of notes.txt; then it ends."""
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        pending = store.begin(str(ws), fd, ["probe"], mode)
        upper = _upper(pending.meta.id)
        for rel, text, bits in [("notes.txt", "after\n", 0o644), *items]:
            _write(upper, rel, text, bits)
        if edit is not None:  # the user edits shared.txt while the command runs
            _tick()
            (edit / "shared.txt").write_text("the user's edit\n")
        return store.finish(pending, fd, on_import_path=on_import_path)
    finally:
        os.close(fd)


def _upper(change_id: str) -> Path:
    state = userstate.state_dir()
    assert state is not None
    return Path(state) / "changes" / change_id / "upper"


def _held(meta: Meta) -> dict[str, str]:
    return {c.path: c.rule for c in meta.changes if c.state == "held"}


_SHAPE: list[Item] = [
    ("HEAD", "ref: refs/heads/main\n", 0o644),
    ("objects", None, 0),
    ("refs/heads", None, 0),
    ("config", "[core]\n\tbare = true\n", 0o644),
]
# Each hazard row: what the command writes, and the path that must be held (by that rule).
PLANTS: dict[str, tuple[list[Item], str]] = {
    "git-directory": ([("a/b/.git/hooks/pre-commit", "#!/bin/sh\n", 0o755)], "a/b/.git"),
    "git-repository-shape": (_SHAPE, "HEAD"),
    "git-config-program": (
        [("conf/team.gitconfig", '[core]\n\tfsmonitor = "id > /tmp/x"\n', 0o644)],
        "conf/team.gitconfig",
    ),
    "protected-name": ([("a/b/.vscode/tasks.json", "{}", 0o644)], "a/b/.vscode"),
    "build-system": (
        [("pyproject.toml", '[build-system]\nbuild-backend = "evil"\n', 0o644)],
        "pyproject.toml",
    ),
    "python-start-up": ([("lib/pkgs/evil.pth", "import os\n", 0o644)], "lib/pkgs/evil.pth"),
    "module-shadow": ([("msgspec.py", "raise SystemExit\n", 0o644)], "msgspec.py"),
    # Judged with the workspace on the caller's sys.path (`ON_IMPORT_PATH`).
    "caller-import-path": ([("helper.py", "import os\n", 0o644)], "helper.py"),
    "set-id": ([("tool", "#!/bin/sh\n", 0o4755)], "tool"),
    "special-file": ([("pipe", "FIFO", 0)], "pipe"),
    "outward-link": ([("docs-link", "->../../etc/passwd", 0)], "docs-link"),
    # json/ is held as a module shadow (the directory alone); its __init__.py by this row.
    "inside-held": ([("json/__init__.py", "raise SystemExit\n", 0o644)], "json/__init__.py"),
}


def test_every_hazard_row_has_a_probe() -> None:
    assert sorted(PLANTS) == sorted(r.id for r in RULES)


@pytest.mark.parametrize("rule", sorted(PLANTS))
def test_a_hazard_is_held_and_the_ordinary_edit_beside_it_applied(
    rule: str, home: Path, ws: Path
) -> None:
    del home
    items, path = PLANTS[rule]
    meta, applied, _ = _run(ws, items, on_import_path=rule == "caller-import-path")
    assert (ws / "notes.txt").read_text() == "after\n", "control: the ordinary edit landed"
    assert "notes.txt" in [c.path for c in applied]
    held = _held(meta)
    assert path in held, f"{path} was not held: {held}"
    if rule != "inside-held":
        assert held[path] == rule
    assert not os.path.lexists(ws / path), "a held change reached the workspace"
    assert store.list_sets()[0].id == meta.id, "the held change is kept for review"


NEAR_MISSES: list[Item] = [
    ("conf/plain.gitconfig", "[user]\n\tname = me\n", 0o644),
    ("pyproject.toml", '[project]\nname = "x"\nversion = "2"\n', 0o644),
    ("package.json", json.dumps({"description": "d"}), 0o644),
    ("inner-link", "->notes.txt", 0),
    ("panday_probe_unique_name.py", "x = 1\n", 0o644),
    ("run.sh", "#!/bin/sh\n", 0o755),
    ("deep/a/b/c/notes.md", "hello", 0o644),
]


@pytest.mark.parametrize("item", NEAR_MISSES, ids=[i[0] for i in NEAR_MISSES])
def test_near_misses_of_the_rules_are_ordinary_edits(item: Item, home: Path, ws: Path) -> None:
    """The rules read content and kinds, not only names: these look like hazards by name
    or place but name no program, so they apply."""
    del home
    meta, _, _ = _run(ws, [item])
    assert _held(meta) == {}
    assert os.path.lexists(ws / item[0])


def test_modules_are_ordinary_edits_unless_the_workspace_is_on_the_callers_path(
    home: Path, ws: Path
) -> None:
    del home
    item: Item = ("helper.py", "x = 1\n", 0o644)
    meta, _, _ = _run(ws, [item])
    assert _held(meta) == {}, "control: a new module of no installed name is ordinary"
    (ws / "helper.py").unlink()
    meta, _, _ = _run(ws, [item], on_import_path=True)
    assert _held(meta) == {"helper.py": "caller-import-path"}


def test_a_package_json_whose_scripts_change_is_held(home: Path, ws: Path) -> None:
    del home
    (ws / "package.json").write_text(json.dumps({"scripts": {"test": "jest"}}))
    new = json.dumps({"scripts": {"test": "jest", "postinstall": "curl x | sh"}})
    meta, _, _ = _run(ws, [("package.json", new, 0o644)])
    assert _held(meta) == {"package.json": "build-system"}
    assert "postinstall" not in (ws / "package.json").read_text()


def test_a_host_edit_made_while_the_command_ran_is_a_conflict_never_overwritten(
    home: Path, ws: Path
) -> None:
    del home

    # The command writes shared.txt; meanwhile, on the host, the user makes their own.
    meta, applied, conflicts = _run(ws, [("shared.txt", "from the jail\n", 0o644)], edit=ws)
    assert [c.path for c in conflicts] == ["shared.txt"]
    assert (ws / "shared.txt").read_text() == "the user's edit\n"
    assert "notes.txt" in [c.path for c in applied]  # control: the rest applied
    assert [c.state for c in meta.changes if c.path == "shared.txt"] == ["conflict"]


def test_review_lands_nothing_until_applied_and_applies_in_part(home: Path, ws: Path) -> None:
    del home
    items: list[Item] = [
        ("src/a.py", "a\n", 0o644),
        ("docs/b.md", "b\n", 0o644),
        (".envrc", "evil\n", 0o644),
    ]
    meta, applied, _ = _run(ws, items, mode="review")
    assert applied == []
    assert (ws / "notes.txt").read_text() == "before\n"
    assert not (ws / "src").exists()
    _, done, _ = store.apply_set(meta.id, ["src"])
    assert [c.path for c in done] == ["src", "src/a.py"]
    assert (ws / "src/a.py").read_text() == "a\n"
    assert not (ws / "docs").exists()
    _, done, _ = store.apply_set(meta.id)  # everything else but the held .envrc
    assert sorted(c.path for c in done) == ["docs", "docs/b.md", "notes.txt"]
    assert not (ws / ".envrc").exists()
    left = store.load(meta.id)
    assert [(c.path, c.state) for c in left.changes if c.state != "applied"] == [(".envrc", "held")]
    with pytest.raises(store.ChangeError, match="needs their paths"):
        store.apply_set(meta.id, include_held=True)
    store.apply_set(meta.id, [".envrc"], include_held=True)  # named, on purpose
    assert (ws / ".envrc").read_text() == "evil\n"
    assert store.list_sets() == [], "nothing left: the change set is gone"


def test_discard_removes_a_change_set_and_nothing_of_it_lands(home: Path, ws: Path) -> None:
    del home
    meta, _, _ = _run(ws, [("new.txt", "x", 0o644)], mode="review")
    assert [m.id for m in store.list_sets()] == [meta.id]
    store.discard(meta.id)
    assert store.list_sets() == []
    assert not (ws / "new.txt").exists()
    with pytest.raises(store.ChangeError, match="no change set"):
        store.load(meta.id)


_CRASH = textwrap.dedent(
    """
    import os, signal, sys
    from panday_core import userstate
    from panday_core.changes import store
    home, ws, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    userstate.passwd_home = lambda: home
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    pending = store.begin(ws, fd, ["probe"], "checked")
    upper = os.path.join(userstate.state_dir(), "changes", pending.meta.id, "upper")
    for n in range(20):
        with open(os.path.join(upper, f"f{n:02}.txt"), "w") as fh:
            fh.write("x" * 1000)
    real, count = os.rename, [0]
    def rename(*args, **kwargs):
        count[0] += 1
        if count[0] > kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    os.rename = rename
    store.finish(pending, fd)
    """
)


def test_a_sigkill_mid_apply_leaves_each_file_before_or_after_and_recovery_finishes(
    home: Path, ws: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CRASH, str(home), str(ws), "7"], check=False, timeout=60
    )
    assert done.returncode == -signal.SIGKILL, "control: the apply was killed mid-way"
    landed = sorted(p.name for p in ws.glob("f*.txt"))
    assert 0 < len(landed) < 20, f"killed at the 8th rename, yet {len(landed)} landed"
    assert all((ws / name).read_text() == "x" * 1000 for name in landed), "a file half-made"
    assert not list(ws.glob(".panday-apply-*"))
    [left] = store.list_sets()
    assert left.status == "applying"
    assert store.recover() == [f"{left.id}: finished an apply that was interrupted"]
    assert sorted(p.name for p in ws.glob("f*.txt")) == [f"f{n:02}.txt" for n in range(20)]
    assert store.list_sets() == []


def test_a_change_set_applies_only_to_the_directory_it_was_made_in(
    home: Path, ws: Path, tmp_path: Path
) -> None:
    del home
    meta, _, _ = _run(ws, [("new.txt", "x", 0o644)], mode="review")
    ws.rename(tmp_path / "moved")
    ws.mkdir()  # another directory now has the name
    with pytest.raises(store.ChangeError, match="no longer the directory"):
        store.apply_set(meta.id)
    assert not (ws / "new.txt").exists()
