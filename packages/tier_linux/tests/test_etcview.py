"""The /etc view: a copy of the allowlist only, refreshed when a source changes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from panday_core import userstate
from panday_tier_linux import etcview
from panday_tier_linux.host import ETC_ALLOWLIST

# What of /etc the jail may show, written out here rather than read from ETC_ALLOWLIST: an
# entry added to the allowlist (say gshadow) must turn this red, not follow along.
EXPECTED = (
    "alternatives",
    "group",
    "hosts",
    "ld.so.cache",
    "localtime",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki/ca-trust/extracted",
    "pki/tls/certs",
    "ssl/certs",
)
NEVER = ("shadow", "gshadow", "shadow-", "gshadow-", "sudoers", "ssh", "machine-id", "ssl/private")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux host layout")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A password-file home of this test's own: its ``.cache`` holds panday's state."""
    home = tmp_path / "pwhome"
    (home / ".cache").mkdir(parents=True)
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(home))
    return home / ".cache"


def test_the_view_holds_the_allowlist_and_nothing_else(cache: Path) -> None:
    view = etcview.etc_view()
    assert view is not None
    assert view.startswith(str(cache))
    top = {name.split("/")[0] for name in ETC_ALLOWLIST}
    present = {p.name for p in Path(view).iterdir()}
    assert present <= top
    assert "shadow" not in present
    assert (Path(view) / "passwd").read_bytes() == Path("/etc/passwd").read_bytes()
    if Path("/etc/ssl").is_dir():
        assert {p.name for p in (Path(view) / "ssl").iterdir()} <= {
            "certs"
        }  # never /etc/ssl/private


def test_the_view_is_reused_and_replaced_when_a_source_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = etcview.etc_view()
    assert etcview.etc_view() == first
    monkeypatch.setattr(etcview, "view_key", lambda: "changed")
    second = etcview.etc_view()
    assert second is not None
    assert second != first
    assert first is not None
    assert not Path(first).exists()  # the stale view is pruned


def test_a_view_others_can_write_is_not_used() -> None:
    view = etcview.etc_view()
    assert view is not None
    Path(view).chmod(0o777)
    assert etcview.etc_view() is None


def shown(view: Path, relative: str = "") -> set[str]:
    """Every path of the view, down to the allowlisted entries (which are copied whole)."""
    out: set[str] = set()
    for child in sorted((view / relative).iterdir() if relative else view.iterdir()):
        path = f"{relative}/{child.name}" if relative else child.name
        out.add(path)
        if path not in EXPECTED and child.is_dir() and not child.is_symlink():
            out |= shown(view, path)
    return out


def test_the_view_is_exactly_the_expected_entries_that_exist_on_this_host() -> None:
    view = etcview.etc_view()
    assert view is not None
    present = {name for name in EXPECTED if os.path.lexists(f"/etc/{name}")}
    parents = {
        "/".join(name.split("/")[:i]) for name in present for i in range(1, name.count("/") + 1)
    }
    assert shown(Path(view)) == present | parents


def test_secrets_of_etc_are_not_in_the_view() -> None:
    # Control: the host has at least one of them, so their absence below means something.
    present = [name for name in NEVER if os.path.lexists(f"/etc/{name}")]
    if not present:
        pytest.fail(f"inconclusive: this host has none of {NEVER} in /etc")
    view = etcview.etc_view()
    assert view is not None
    for name in NEVER:
        assert not os.path.lexists(Path(view, name)), name


def test_the_allowlist_is_the_expected_one() -> None:
    # The same literal, against the table itself: a new entry needs this review too.
    assert set(ETC_ALLOWLIST) == set(EXPECTED)


def _walk(root: Path) -> list[Path]:
    """Every entry below `root` (symlinks not followed): what the copier copies one by one."""
    out: list[Path] = []
    for child in sorted(root.iterdir()):
        out.append(child)
        if child.is_dir() and not child.is_symlink():
            out.extend(_walk(child))
    return out


def test_the_view_lives_in_pandays_private_cache(cache: Path) -> None:
    # <cache>/panday is what a session binds read-only over a workspace that contains it;
    # the views are kept in one directory of their own below it, private to the caller.
    view = etcview.etc_view()
    assert view is not None
    assert Path(view).parent == cache / "panday" / "etc"
    assert Path(view).name.startswith("etc-")
    assert (cache / "panday" / "etc").stat().st_mode & 0o777 == 0o700


def test_modes_do_not_depend_on_the_callers_umask(cache: Path) -> None:
    # With umask 0 a directory made without an explicit mode is world-writable, and the
    # view would then (rightly) be refused: every mode below is set explicitly.
    old = os.umask(0)
    try:
        view = etcview.etc_view()
    finally:
        os.umask(old)
    assert view is not None
    assert (cache / "panday").stat().st_mode & 0o777 == 0o700
    assert (cache / "panday" / "etc").stat().st_mode & 0o777 == 0o700
    assert Path(view).stat().st_mode & 0o777 == 0o755
    for entry in _walk(Path(view)):
        if entry.is_symlink():
            continue
        expected = 0o755 if entry.is_dir() else 0o644
        assert entry.stat().st_mode & 0o777 == expected, entry


def test_a_cache_directory_others_can_write_is_not_used(cache: Path) -> None:
    assert etcview.etc_view() is not None  # control
    panday = cache / "panday"
    panday.chmod(0o777)
    try:
        assert etcview.etc_view() is None
    finally:
        panday.chmod(0o700)
    (panday / "etc").chmod(0o777)
    assert etcview.etc_view() is None


def test_a_view_just_within_the_limits_is_made_and_one_entry_or_byte_more_is_not(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = etcview.etc_view()
    assert reference is not None
    # What the copier counts: every entry it copies, not the directories made to hold a
    # nested allowlist entry (ssl for ssl/certs).
    holders = {"/".join(n.split("/")[:i]) for n in EXPECTED for i in range(1, n.count("/") + 1)}
    entries = [p for p in _walk(Path(reference)) if str(p.relative_to(reference)) not in holders]
    size = sum(p.stat().st_size for p in entries if p.is_file() and not p.is_symlink())
    assert size > 0

    def fresh() -> str | None:
        for child in (cache / "panday" / "etc").iterdir():
            import shutil  # noqa: PLC0415 - only here

            shutil.rmtree(child)
        return etcview.etc_view()

    monkeypatch.setattr(etcview, "MAX_ENTRIES", len(entries))
    monkeypatch.setattr(etcview, "MAX_BYTES", size)
    assert fresh() is not None  # exactly at both limits: made
    monkeypatch.setattr(etcview, "MAX_ENTRIES", len(entries) - 1)
    assert fresh() is None
    monkeypatch.setattr(etcview, "MAX_ENTRIES", len(entries))
    monkeypatch.setattr(etcview, "MAX_BYTES", size - 1)
    assert fresh() is None
    # A view that could not be made leaves nothing half-built behind.
    assert list((cache / "panday" / "etc").iterdir()) == []
