"""Test floors: how many tests each package's test directory must hold (tools/test-floors.toml).

A gate that counts only "N passed" passes when a whole directory of tests is deleted: the
remaining tests still pass. So the `tests` and `escape` gates count what pytest collected
per directory (from its JUnit report) and fail when a directory is below its committed
floor, or is not listed at all. Floors only go up: raise one when tests are added
(`python tools/floors.py --measure JUNIT...` prints the counts), lower one only together
with a reason in the commit that removes the tests.

A floor far below its count guards nothing (issue 28: 107 sdk tests could be deleted with
`tests` green), so a floor must also be within `SLACK` (10%) of the count: a directory
whose count is more than 10% above its floor fails too, until the floors are raised.
`--write` raises them to the counts of the last run's JUnit reports (never lowers one), as
`nox -s mutmut -- --write` raises the kill-rate floors::

    uv run --locked nox -s floors -- --write       # after `nox -s tests` and `nox -s escape`
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    import pytest

REPO = Path(__file__).resolve().parents[1]
FLOORS = REPO / "tools" / "test-floors.toml"


SLACK = 0.10
"""How far below its count a floor may sit (10%): tests added since it was set, or tests
only CI runs (those marked ``slow``), without every test addition touching this file."""


DESELECTED_ENV = "PANDAY_FLOORS_DESELECTED"
"""Set by the `tests` gate: this module, loaded as a pytest plugin (``-p floors``), appends
the node id of every test a ``-m`` expression deselected to the file it names, so the tests
only CI runs (``slow``) count here too and a floor means the same locally and in CI."""


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    """Plugin hook: record deselected tests (see `DESELECTED_ENV`)."""
    out = os.environ.get(DESELECTED_ENV)
    if out:
        with open(out, "a", encoding="utf-8") as fh:  # noqa: PTH123 - a plain append
            fh.writelines(f"{item.nodeid}\n" for item in items)


def deselected_counts(
    listing: Path, junit_files: Iterable[Path], directories: Iterable[str]
) -> dict[str, int]:
    """Per directory, the tests deselected in every run (listed in `listing`) that ran in
    none of the JUnit reports: what ``-m "not slow"`` left out."""
    dirs = list(directories)
    ran: set[str] = set()
    for junit in junit_files:
        for case in ET.parse(junit).getroot().iter("testcase"):  # noqa: S314 - pytest's own report
            ran.add(case.get("classname", "") + "::" + case.get("name", ""))
    out = dict.fromkeys(dirs, 0)
    lines = listing.read_text(encoding="utf-8").splitlines() if listing.is_file() else []
    for nodeid in set(lines):
        path, _, name = nodeid.partition("::")
        dotted = path.removesuffix(".py").replace("/", ".") + "::" + name.rsplit("::", 1)[-1]
        classed = path.removesuffix(".py").replace("/", ".")
        if "::" in name:  # a test in a class: JUnit's classname carries the class
            classed += "." + name.rsplit("::", 1)[0].replace("::", ".")
            dotted = classed + "::" + name.rsplit("::", 1)[-1]
        if dotted in ran:
            continue
        best = max((d for d in dirs if path.startswith(d + "/")), key=len, default=None)
        if best is not None:
            out[best] += 1
    return out


def _shown() -> str:
    return str(FLOORS.relative_to(REPO)) if FLOORS.is_relative_to(REPO) else str(FLOORS)


def load(table: str, path: Path | None = None) -> dict[str, int]:
    """The floors of one table (``tests`` or ``escape``): directory -> minimum count."""
    path = FLOORS if path is None else path
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
                f"{directory}: {count} tests collected, but it has no floor in {_shown()}; add one"
            )
        elif count < floor:
            problems.append(
                f"{directory}: {count} tests collected, below its floor of {floor} "
                f"({_shown()}): were tests deleted or left uncollected?"
            )
        elif floor < count * (1 - SLACK):
            problems.append(
                f"{directory}: {count} tests collected, more than {SLACK:.0%} above its floor "
                f"of {floor}: so many could be deleted unnoticed; raise it "
                "(`uv run --locked nox -s floors -- --write`)"
            )
    problems.extend(
        f"{directory}: listed in {_shown()} with a floor of {floors[directory]}, "
        "but no such test directory was run"
        for directory in sorted(set(floors) - set(found))
    )
    return problems


def raised(text: str, table: str, found: Mapping[str, int]) -> str:
    """`text` (test-floors.toml) with each of `table`'s floors raised to its count (never
    lowered; a directory not listed yet is added); comments and layout are kept."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == f"[{table}]"), None)
    if start is None:
        lines += ["", f"[{table}]"]
        start = len(lines) - 1
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines)
    )
    seen: set[str] = set()
    for i in range(start + 1, end):
        key, eq, value = lines[i].partition("=")
        directory = key.strip().strip('"')
        if eq and directory in found and value.strip().isdigit():
            seen.add(directory)
            lines[i] = f'"{directory}" = {max(int(value), found[directory])}'
    new = [f'"{d}" = {n}' for d, n in sorted(found.items()) if d not in seen]
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    lines[end:end] = new
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="test counts per directory, and their floors")
    parser.add_argument("--measure", nargs="+", type=Path, required=True, metavar="JUNIT")
    parser.add_argument("--table", default="tests", choices=["tests", "escape"])
    parser.add_argument(
        "--write", action="store_true", help="raise the table's floors to these counts"
    )
    parser.add_argument(
        "--deselected", type=Path, help="the tests gate's list of deselected tests (they count)"
    )
    args = parser.parse_args(argv)
    floors = load(args.table)
    missing = [str(p) for p in args.measure if not p.is_file()]
    if missing:
        print(f"floors: no such JUnit report: {', '.join(missing)}", file=sys.stderr)
        return 1
    found = counts(args.measure, floors)
    if args.deselected is not None:
        extra = deselected_counts(args.deselected, args.measure, floors)
        found = {d: n + extra.get(d, 0) for d, n in found.items()}
    if args.write:
        found = {d: n for d, n in found.items() if n > 0}
        FLOORS.write_text(raised(FLOORS.read_text(encoding="utf-8"), args.table, found), "utf-8")
    now = load(args.table)
    for directory, count in sorted(found.items()):
        before = floors.get(directory, "none")
        print(
            f'floors: [{args.table}] "{directory}" = {now.get(directory, "none")}  '
            f"# {count} collected, floor was {before}"
        )
    problems = check(found, now) if not args.write else []
    for problem in problems:
        print(f"floors: FLOOR: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
