"""The SDK's face of ``fs.writes`` review (issue 24): `Session.changes()`, `ChangeSet`'s
summary, diff, partial apply and discard, and the same through `panday.aio`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import panday
from panday import aio
from panday_core import userstate
from panday_core.policy import FsPolicy, SandboxPolicy

pytestmark = pytest.mark.skipif(
    not Path("/proc/self").exists(), reason="fs.writes checked and review run on T2 Linux"
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "home"
    where.mkdir()
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(where))
    return where


def _policy(ws: Path) -> SandboxPolicy:
    return SandboxPolicy(fs=FsPolicy(workspace=str(ws), writes="review"))


def test_a_session_lists_reviews_and_applies_part_of_its_change_sets(
    tmp_path: Path, home: Path
) -> None:
    del home
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    with panday.open(_policy(ws), tier="t2-linux") as session:
        result = session.run(["sh", "-c", "echo two >> a.txt; mkdir b; echo b > b/c.txt"])
        assert result.writes is not None
        assert result.writes.pending == 3
        [change_set] = session.changes()
    assert change_set.id == result.writes.change_set
    assert "3 edit" in change_set.summary()
    assert "+two" in change_set.diff("a.txt")
    assert (ws / "a.txt").read_text() == "one\n", "review mode wrote into the workspace"
    done = change_set.apply(["b"])
    assert sorted(done.applied) == ["b", "b/c.txt"]
    assert done.left == 1
    assert (ws / "b" / "c.txt").read_text() == "b\n"
    assert (ws / "a.txt").read_text() == "one\n"
    change_set.discard()
    with panday.open(_policy(ws), tier="t2-linux") as again:
        assert again.changes() == []


def test_the_async_face_reports_and_applies_the_same(tmp_path: Path, home: Path) -> None:
    del home
    ws = tmp_path / "ws"
    ws.mkdir()

    async def main() -> None:
        async with aio.open(_policy(ws), tier="t2-linux") as session:
            result = await session.run(["sh", "-c", "echo x > new.txt"])
            assert result.writes is not None
            [change_set] = session.changes()
            await change_set.aapply()
        assert (ws / "new.txt").read_text() == "x\n"

    asyncio.run(main())
