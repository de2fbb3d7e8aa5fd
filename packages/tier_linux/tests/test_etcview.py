"""The /etc view: a copy of the allowlist only, refreshed when a source changes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from panday_tier_linux import etcview
from panday_tier_linux.host import ETC_ALLOWLIST

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux host layout")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


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
