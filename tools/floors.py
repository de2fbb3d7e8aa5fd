"""Test floors: how many tests each package's test directory must hold (tools/test-floors.toml).

A gate that counts only "N passed" passes when a whole directory of tests is deleted: the
remaining tests still pass. So the `tests` and `escape` gates count what pytest collected
per directory (from its JUnit report) and fail when a directory is below its committed
floor, or is not listed at all. Floors only go up: raise one when tests are added
(`python tools/floors.py --measure JUNIT...` prints the counts), lower one only together
with a reason in the commit that removes the tests.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

REPO = Path(__file__).resolve().parents[1]
FLOORS = REPO / "tools" / "test-floors.toml"


def load(table: str, path: Path = FLOORS) -> dict[str, int]:
    """The floors of one table (``tests`` or ``escape``): directory -> minimum count."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    raw = cast("dict[str, object]", doc.get(table, {}))
    floors: dict[str, int] = {}
    for directory, value in raw.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{path.name}: [{table}] {directory!r}: floor must be an integer >= 1")
        floors[directory] = value
    return floors


def counts(junit_files: Iterable[Path], directories: Iterable[str]) -> dict[str, int]:
    """Test cases collected per directory (skipped ones count: they exist)."""
    dotted = {d: d.replace("/", ".") + "." for d in directories}
    out = dict.fromkeys(dotted, 0)
    for junit in junit_files:
        for case in ET.parse(junit).getroot().iter("testcase"):  # noqa: S314 - pytest's own report
            name = case.get("classname", "") + "."
            # The longest matching directory wins (packages/x/tests/escape before .../tests).
            best = max((d for d, p in dotted.items() if name.startswith(p)), key=len, default=None)
            if best is not None:
                out[best] += 1
    return out


def check(found: Mapping[str, int], floors: Mapping[str, int]) -> list[str]:
    """One line per directory below its floor or missing from the floors file."""
    problems: list[str] = []
    for directory, count in sorted(found.items()):
        floor = floors.get(directory)
        if floor is None:
            problems.append(
                f"{directory}: {count} tests collected, but it has no floor in "
                f"{FLOORS.relative_to(REPO)}; add one"
            )
        elif count < floor:
            problems.append(
                f"{directory}: {count} tests collected, below its floor of {floor} "
                f"({FLOORS.relative_to(REPO)}): were tests deleted or left uncollected?"
            )
    problems.extend(
        f"{directory}: listed in {FLOORS.relative_to(REPO)} with a floor of {floors[directory]}, "
        "but no such test directory was run"
        for directory in sorted(set(floors) - set(found))
    )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print tests collected per directory")
    parser.add_argument("--measure", nargs="+", type=Path, required=True, metavar="JUNIT")
    parser.add_argument("--table", default="tests", choices=["tests", "escape"])
    args = parser.parse_args(argv)
    floors = load(args.table)
    found = counts(args.measure, floors)
    for directory, count in sorted(found.items()):
        print(f'"{directory}" = {count}  # floor now {floors.get(directory, "none")}')
    return 0


if __name__ == "__main__":
    sys.exit(main())
