"""Issue 30 on any OS: the parts of T2 macOS round two that need no Mac.

A writable root inside a home's persistence places is refused by identity; the missing
protected names a command's placeholders hold; the placeholders themselves (made, shared,
released, a real entry left alone); the per-user base of the sessions' temp dirs; and the
survivor sweep's fixpoint. What Seatbelt and the kernel do with them is the macOS escape
suite's job.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from panday_core.errors import Internal
from panday_core.policy import policy_from_dict
from panday_core.protect import open_root
from panday_tier_macos.placeholders import Kind, Placeholders
from panday_tier_macos.roots import HOME_PLACES, check_root, home_entry_refusal, open_roots
from panday_tier_macos.sandbox import TMP_BASE_NAME, session_tmp_base
from panday_tier_macos.survivors import sweep

# ------------------------------------------------------------------ issue 30, 1


def _refusal(path: Path, home: Path) -> str | None:
    fd = open_root(str(path))
    try:
        return home_entry_refusal(str(path), fd, [str(home)])
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "place",
    ["Library/LaunchAgents", ".config", ".config/fish", ".local/bin", "Library/Python/3.12"],
)
def test_a_writable_root_in_a_homes_persistence_place_is_refused(
    tmp_path: Path, place: str
) -> None:
    """~/Library/LaunchAgents as the workspace needs no fs.allow_home (it is not a home)
    and would get none of a home's protection: refused, by identity."""
    home = tmp_path / "home"
    (home / place).mkdir(parents=True)
    (home / "projects" / "p").mkdir(parents=True)
    assert _refusal(home / "projects" / "p", home) is None  # control: a project directory
    why = _refusal(home / place, home)
    assert why is not None
    assert "runs outside the jail" in why


def test_a_place_reached_by_another_spelling_is_the_same_place(tmp_path: Path) -> None:
    """Identity, not spelling: ~/.config a link to elsewhere makes elsewhere the place."""
    home = tmp_path / "home"
    home.mkdir()
    real = tmp_path / "dotfiles" / "config"
    (real / "git").mkdir(parents=True)
    (home / ".config").symlink_to(real)
    assert _refusal(real / "git", home) is not None


def test_check_root_refuses_a_writable_persistence_place_and_allows_it_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    agents = home / "Library" / "LaunchAgents"
    agents.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for allow_home in (False, True):
        got = check_root(
            "fs.workspace", str(agents), writable=True, allow_home=allow_home, homes=()
        )
        assert not isinstance(got, str), f"allow_home={allow_home}"
        assert got.field == "fs.workspace"
        assert "LaunchAgents" in got.reason
    got = check_root("fs.staged_ro[0]", str(agents), writable=False, allow_home=False, homes=())
    assert got == str(agents), "reading it is not writing it"


def test_the_macos_places_are_judged_on_every_os() -> None:
    rels = {e.rel for e in HOME_PLACES}
    assert {"Library/LaunchAgents", "Library/Python", "Library/Preferences"} <= rels
    assert {".config", ".local", ".ssh", "bin"} <= rels


# ------------------------------------------------------------------ issue 30, 2


def test_missing_names_that_must_not_be_created_are_listed_with_their_placeholder(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    policy = policy_from_dict({"fs": {"protect": ["deploy/prod/run.sh"]}}).with_workspace(str(ws))
    roots = open_roots(policy.fs, ())
    missing = {p[len(str(ws)) + 1 :]: kind for p, kind in roots.missing}
    assert ".vscode" in missing
    assert missing[".mcp.json"] == "file"
    assert missing["deploy"] == "dir", "a directory that would hold the entry"
    assert ".claude" not in missing, "it exists: its path rule protects it"
    assert ".envrc" not in missing, "may be created: no placeholder"
    assert {p for p, _ in roots.missing} <= set(roots.protected)
    ro = policy_from_dict({"fs": {"access": "ro"}}).with_workspace(str(ws))
    assert open_roots(ro.fs, ()).missing == ()


def test_placeholders_hold_a_name_and_the_last_holder_removes_them(tmp_path: Path) -> None:
    missing: tuple[tuple[str, Kind], ...] = (
        (str(tmp_path / ".vscode"), "dir"),
        (str(tmp_path / ".mcp.json"), "file"),
    )
    first = Placeholders.make(missing)
    assert (tmp_path / ".vscode").is_dir()
    assert (tmp_path / ".mcp.json").is_file()
    assert (tmp_path / ".mcp.json").stat().st_size == 0
    assert not (tmp_path / ".mcp.json").stat().st_mode & 0o222, "read-only"
    if sys.platform == "darwin":
        assert (tmp_path / ".mcp.json").stat().st_flags & stat.UF_IMMUTABLE
    first.release()
    assert not (tmp_path / ".vscode").exists()
    assert not (tmp_path / ".mcp.json").exists()


def test_a_placeholder_another_command_holds_stays_until_it_ends(tmp_path: Path) -> None:
    missing: tuple[tuple[str, Kind], ...] = ((str(tmp_path / ".mcp.json"), "file"),)
    first = Placeholders.make(missing)
    if sys.platform != "darwin":
        # Off macOS a placeholder carries no flag, so a second holder cannot tell it from
        # a user's file: it holds nothing, and the first holder removes it.
        second = Placeholders.make(missing)
        assert second.held == []
        first.release()
        assert not (tmp_path / ".mcp.json").exists()
        return
    second = Placeholders.make(missing)
    assert len(second.held) == 1
    first.release()
    assert (tmp_path / ".mcp.json").exists(), "still held by the second command"
    second.release()
    assert not (tmp_path / ".mcp.json").exists()


def test_a_real_entry_at_the_name_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text("{}", encoding="utf-8")
    missing: tuple[tuple[str, Kind], ...] = ((str(tmp_path / ".mcp.json"), "file"),)
    held = Placeholders.make(missing)
    assert held.held == []
    held.release()
    assert (tmp_path / ".mcp.json").read_text(encoding="utf-8") == "{}"


# ------------------------------------------------------------------ issue 30, 6


def test_the_sessions_temp_base_is_private_and_checked(tmp_path: Path) -> None:
    base = session_tmp_base(str(tmp_path))
    assert base == str(tmp_path.resolve() / TMP_BASE_NAME)
    assert stat.S_IMODE(os.lstat(base).st_mode) == 0o700
    assert session_tmp_base(str(tmp_path)) == base, "made once, then reused"
    Path(base).chmod(0o755)
    with pytest.raises(Internal):
        session_tmp_base(str(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    (other / TMP_BASE_NAME).symlink_to(tmp_path)
    with pytest.raises(Internal):
        session_tmp_base(str(other))


# ------------------------------------------------------------------ issue 30, 4


def test_the_sweep_kills_until_a_pass_finds_nothing() -> None:
    """A process killed while it forks leaves a child the next pass finds."""
    alive = {101, 102, 500}
    ours = {101, 102}
    children = {101: [103], 103: [104]}
    killed: list[int] = []

    def kill(pid: int) -> None:
        killed.append(pid)
        alive.discard(pid)
        for child in children.pop(pid, []):
            alive.add(child)
            ours.add(child)

    sent, done = sweep(lambda: sorted(alive), lambda p: p in ours, kill, pause=0)
    assert done
    assert sorted(killed) == [101, 102, 103, 104]
    assert sent == 4
    assert alive == {500}, "a process not under the session's profile is left alone"


def test_the_sweep_never_kills_itself_or_launchd_and_gives_up_loudly() -> None:
    killed: list[int] = []
    me = os.getpid()
    sent, done = sweep(lambda: [1, me, 7], lambda _: True, killed.append, rounds=3, pause=0)
    assert killed == [7, 7, 7]
    assert sent == 3
    assert not done, "a process that never dies is reported, not ignored"
