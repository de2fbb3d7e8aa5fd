"""`nox -s mutmut`'s bookkeeping: floors only go up, and a mutant a race kills only
sometimes neither leaves the survivors file nor lifts the floor when a run kills it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import mutmut_run
from mutmut_run import Measured, Survivor

if TYPE_CHECKING:
    from pathlib import Path

RACE = Survivor("paths", "walk", "-    a\n+    b", "a race only", flaky=True)
PLAIN = Survivor("paths", "walk", "-    c\n+    d", "equivalent")


def _write(tmp_path: Path, m: Measured, listed: list[Survivor]) -> tuple[str, str]:
    floors, survivors = tmp_path / "floors.toml", tmp_path / "survivors.toml"
    index = {s.key: s for s in listed}
    mutmut_run.write_floors([m], index, floors)
    mutmut_run.write_survivors([m], index, survivors)
    return floors.read_text(encoding="utf-8"), survivors.read_text(encoding="utf-8")


def test_a_killed_flaky_survivor_stays_listed_and_counts_as_surviving_for_the_floor(
    tmp_path: Path,
) -> None:
    # Control: a run in which the race let it survive lists it and floors at 90/100.
    survived = Measured("paths", 90, 100, [RACE, PLAIN], {})
    floors, survivors = _write(tmp_path, survived, [RACE, PLAIN])
    assert "floor = 90.0" in floors
    assert survivors.count("[[survivor]]") == 2
    assert "flaky = true" in survivors
    # A lucky run killed it: still listed (flag kept), and the floor stays where an unlucky
    # run would meet it.
    (tmp_path / "floors.toml").unlink()
    lucky = Measured("paths", 91, 100, [PLAIN], {})
    floors, survivors = _write(tmp_path, lucky, [RACE, PLAIN])
    assert "floor = 90.0" in floors
    assert survivors.count("[[survivor]]") == 2
    assert mutmut_run.load_survivors(tmp_path / "survivors.toml")[RACE.key].flaky


def test_a_killed_plain_survivor_is_dropped_and_lifts_the_floor(tmp_path: Path) -> None:
    killed = Measured("paths", 91, 100, [RACE], {})
    floors, survivors = _write(tmp_path, killed, [RACE, PLAIN])
    assert "floor = 91.0" in floors
    assert survivors.count("[[survivor]]") == 1
    assert PLAIN.change not in survivors


def test_floors_never_go_down(tmp_path: Path) -> None:
    (tmp_path / "floors.toml").write_text("[paths]\nfloor = 95.0\nkilled = 95\ntotal = 100\n")
    floors, _ = _write(tmp_path, Measured("paths", 80, 100, [], {}), [])
    assert "floor = 95.0" in floors
    assert "killed = 80" in floors
