"""The Landlock wall alone (wall.py): with a mount of the jail deliberately widened in this
test build, the write it would let through is still refused.

Each probe's control is the same widened jail with the wall switched off: the write must
succeed there (the widening is real), or the probe fails as inconclusive. Then the same
jail with the wall must refuse it with EACCES (Landlock's answer; a read-only mount says
EROFS), and the host file must be untouched. Runs as root and as the unprivileged user.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_tier_linux import argv, binds, wall

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

    from panday_tier_linux.argv import JailSpec


def _write(path: str) -> str:
    return f"""
try:
    with open({path!r}, "w") as f:
        f.write("planted")
except OSError as exc:
    blocked(err(exc))
ok("wrote " + {path!r})
"""


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the jail's /tmp (whatever is mounted beneath the jail's /tmp
    lies under its /tmp rule), staged read-only by the probes."""
    made = Path(tempfile.mkdtemp(prefix="panday-wall-", dir="/var/tmp"))
    made.chmod(0o777)  # the unprivileged pass's jail writes here only when widened
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _need_wall() -> None:
    reason = wall.unavailable_reason()
    if reason is not None:
        pytest.fail(f"this host has no Landlock wall for T2 Linux: {reason}")


def _switched(monkeypatch: pytest.MonkeyPatch, *, on: bool) -> None:
    monkeypatch.setattr(wall, "_REASON", [None if on else "switched off for the control"])


def test_a_staged_path_bound_writable_by_mistake_stays_read_only(
    esc: Escape, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need_wall()
    add = binds.CommandBinds.add

    def widened(self: binds.CommandBinds, option: str, fd: int, dest: str) -> None:
        add(self, "--bind-fd" if dest == str(outside) else option, fd, dest)

    monkeypatch.setattr(binds.CommandBinds, "add", widened)
    target = f"{outside}/planted"
    _switched(monkeypatch, on=False)
    esc.control(esc.inside(_write(target), staged=[outside]))
    Path(target).unlink()
    _switched(monkeypatch, on=True)
    outcome = esc.inside(_write(target), staged=[outside])
    esc.must_block(outcome)
    assert outcome.detail.strip() == "EACCES", outcome
    assert not Path(target).exists()


def test_a_root_left_writable_by_mistake_stays_read_only(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need_wall()
    build = argv.filesystem_args

    def widened(spec: JailSpec, binds: Sequence[str] = ()) -> list[str]:
        options = build(spec, binds)
        assert options[-2:] == ["--remount-ro", "/"]
        return options[:-2]

    monkeypatch.setattr(argv, "filesystem_args", widened)
    _switched(monkeypatch, on=False)
    esc.control(esc.inside(_write("/planted-in-root")))
    _switched(monkeypatch, on=True)
    outcome = esc.inside(_write("/planted-in-root"))
    esc.must_block(outcome)
    assert outcome.detail.strip() == "EACCES", outcome
