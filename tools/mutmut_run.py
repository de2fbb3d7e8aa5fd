"""`nox -s mutmut` (not a default gate: slow; CI runs it): mutmut over the guard modules.

The named-guard gate (`falsify`) proves each guard we know about has a test; this one looks
for the ones we did not think of. For each module below, mutmut mutates it in a scratch copy
(every package's sources merged under ``src/``, the module's unit tests under ``tests/``)
and runs the tests that reach each mutant. Then, per module:

* the kill rate (killed / all mutants) is printed and must meet the module's floor in
  `tools/mutmut-floors.toml` (floors only go up: `--write` raises a floor to the measured
  rate, never lowers it);
* every surviving mutant must be listed in `tools/mutmut-survivors.toml` with the reason it
  survives (an equivalent mutant, or a behaviour no unit test can observe and which test
  covers it instead); an unlisted survivor fails the gate. Survivors are keyed by module,
  function and the changed lines, not by mutmut's numbering, so reasons survive edits
  elsewhere in the module. `--write` adds new survivors with the reason ``UNREVIEWED`` (which
  still fails) and drops listed ones that are now killed.

Re-measure after changing a module or its tests::

    uv run --locked nox -s mutmut -- --write            # every module
    uv run --locked nox -s mutmut -- --write argv        # one module
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Sequence

REPO = Path(__file__).resolve().parents[1]
LAST = REPO / ".nox" / "mutmut"
"""Each module's latest measurement (`--from-last` writes the files from these)."""
FLOORS = REPO / "tools" / "mutmut-floors.toml"
SURVIVORS = REPO / "tools" / "mutmut-survivors.toml"
UNREVIEWED = "UNREVIEWED"

# name -> (module file under the merged src/, its unit tests as repository paths)
MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "argv": (
        "panday_tier_linux/argv.py",
        ("packages/tier_linux/tests/test_argv.py",),
    ),
    "seccomp": (
        "panday_tier_linux/seccomp.py",
        (
            "packages/tier_linux/tests/test_seccomp.py",
            "packages/tier_linux/tests/test_seccomp_program.py",
        ),
    ),
    "cgroups": (
        "panday_tier_linux/cgroups.py",
        (
            "packages/tier_linux/tests/test_cgroups.py",
            "packages/tier_linux/tests/test_cgroups_apply.py",
            "packages/tier_linux/tests/test_cgroups_session.py",
        ),
    ),
    "etcview": (
        "panday_tier_linux/etcview.py",
        ("packages/tier_linux/tests/test_etcview.py",),
    ),
    "paths": (
        "panday_core/paths.py",
        (
            "packages/core/tests/test_paths.py",
            "packages/core/tests/test_paths_race.py",
            "packages/core/tests/test_t0_tools.py",
            "packages/core/tests/test_t0_properties.py",
        ),
    ),
    "egress.rules": (
        "panday_core/egress/rules.py",
        ("packages/core/tests/egress/test_rules.py",),
    ),
    "egress.addresses": (
        "panday_core/egress/addresses.py",
        ("packages/core/tests/egress/test_rules.py",),
    ),
    "profile": (
        "panday_tier_macos/profile.py",
        (
            "packages/tier_macos/tests/test_profile.py",
            "packages/tier_macos/tests/test_sandbox_exec_path.py",
        ),
    ),
}

CONFIG = """[tool.mutmut]
source_paths = ["src"]
only_mutate = {only}
pytest_add_cli_args_test_selection = {tests}
pytest_add_cli_args = ["-q", "-x", "-p", "no:cacheprovider"]
also_copy = ["tests"]

[tool.pytest.ini_options]
addopts = ["--import-mode=importlib"]
markers = ["linux", "macos", "escape", "slow"]
timeout = 120
"""


_SURVIVORS_SCRIPT = """
import json
from mutmut.__main__ import SourceFileMutationData, status_by_exit_code, walk_mutatable_files
from mutmut.mutation.diff_apply import get_diff_for_mutant
out = []
for path in walk_mutatable_files():
    data = SourceFileMutationData(path=path)
    data.load()
    for key, code in data.exit_code_by_key.items():
        if status_by_exit_code[code] == "survived":
            out.append((key, get_diff_for_mutant(key, path=data.path)))
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Survivor:
    module: str
    function: str
    change: str
    """The mutant's changed lines (``-old`` / ``+new``), which identify it across runs."""
    reason: str = UNREVIEWED
    flaky: bool = False
    """Killed in some runs only (a race in the test decides): kept listed when a run kills
    it, and counted as surviving when `--write` raises the floor, so an unlucky run in CI
    does not fall below a floor a lucky run set."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.module, self.function, self.change)


@dataclass
class Measured:
    name: str
    killed: int
    total: int
    survivors: list[Survivor]
    other: dict[str, int]
    """Mutants neither killed nor survived (timeouts count as killed; see `_stats`)."""
    inputs: str = ""
    """`inputs_digest` of the module and its tests when measured ("" if not recorded)."""
    measured_at: str = ""
    """When (UTC, ISO 8601) the measurement started ("" if not recorded)."""

    @property
    def rate(self) -> float:
        return 100.0 * self.killed / self.total if self.total else 0.0


def inputs_digest(name: str) -> str:
    """SHA-256 over the module's source and its unit tests: what decides a measurement.

    (The other modules are copied too, but a change there moves no mutant of this one
    unless a test of this one reaches it.) A saved measurement whose digest differs from
    today's files describes an older module or older tests: re-measure it."""
    module, tests = MODULES[name]
    sources = sorted(REPO.glob(f"packages/*/src/{module}"))
    digest = hashlib.sha256()
    for path in [*sources, *(REPO / t for t in tests)]:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"(missing)\0")
    return digest.hexdigest()


def _scratch(root: Path, module: str, tests: Sequence[str]) -> None:
    """Every package's sources under src/, the test directories under tests/<package>/."""
    for src in sorted((REPO / "packages").glob("*/src")):
        for package in src.iterdir():
            if package.is_dir() and not package.name.endswith(".egg-info"):
                shutil.copytree(package, root / "src" / package.name)
    ignore = shutil.ignore_patterns("escape", "__pycache__")
    for tests_dir in sorted((REPO / "packages").glob("*/tests")):
        shutil.copytree(tests_dir, root / "tests" / tests_dir.parent.name, ignore=ignore)
    selection = [f"tests/{t.removeprefix('packages/').replace('/tests/', '/', 1)}" for t in tests]
    (root / "pyproject.toml").write_text(
        CONFIG.format(only=json.dumps([f"src/{module}"]), tests=json.dumps(selection)),
        encoding="utf-8",
    )


def _change(diff: str) -> str:
    """The changed lines of `mutmut show`'s unified diff."""
    changed = [
        line
        for line in diff.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    return "\n".join(changed)


def _function(mutant: str) -> str:
    """``panday_core.paths.x_resolve__mutmut_3`` -> ``resolve``; methods keep their class."""
    tail = mutant.rsplit(".", 1)[-1].split("__mutmut_", 1)[0]
    return tail.removeprefix("x_").replace("ǁ", ".").strip(".")


def _stats(root: Path, mutmut: str) -> dict[str, int]:
    subprocess.run([mutmut, "export-cicd-stats"], cwd=root, check=True, capture_output=True)
    return cast(
        "dict[str, int]",
        json.loads((root / "mutants" / "mutmut-cicd-stats.json").read_text(encoding="utf-8")),
    )


def measure(name: str, jobs: int) -> Measured:
    module, tests = MODULES[name]
    inputs = inputs_digest(name)
    started = dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix=f"panday-mutmut-{name}-") as tmp:
        root = Path(tmp)
        _scratch(root, module, tests)
        mutmut = str(Path(sys.executable).with_name("mutmut"))
        proc = subprocess.run(
            [mutmut, "run", "--max-children", str(jobs)],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise SystemExit(f"mutmut: {name}: mutmut run failed (exit {proc.returncode}):\n{tail}")
        stats = _stats(root, mutmut)
        # One process for every survivor's diff (`mutmut show` per mutant costs a second).
        found = subprocess.run(
            [sys.executable, "-c", _SURVIVORS_SCRIPT],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        survivors = [
            Survivor(name, _function(mutant), _change(diff))
            for mutant, diff in cast("list[tuple[str, str]]", json.loads(found))
        ]
    killed = stats.get("killed", 0) + stats.get("timeout", 0)
    total = stats.get("total", 0)
    other = {
        k: v for k, v in stats.items() if k not in {"killed", "timeout", "survived", "total"} and v
    }
    return Measured(name, killed, total, survivors, other, inputs, started)


def save(m: Measured) -> None:
    LAST.mkdir(parents=True, exist_ok=True)
    doc = {
        "killed": m.killed,
        "total": m.total,
        "other": m.other,
        "inputs": m.inputs,
        "measured_at": m.measured_at,
        "survivors": [[s.function, s.change] for s in m.survivors],
    }
    (LAST / f"{m.name}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def load_last(name: str, last: Path = LAST) -> Measured:
    path = last / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"mutmut: {name}: no saved measurement ({path}); run it first")
    doc = cast("dict[str, object]", json.loads(path.read_text(encoding="utf-8")))
    survivors = [
        Survivor(name, function, change)
        for function, change in cast("list[list[str]]", doc["survivors"])
    ]
    return Measured(
        name,
        cast("int", doc["killed"]),
        cast("int", doc["total"]),
        survivors,
        cast("dict[str, int]", doc["other"]),
        str(doc.get("inputs", "")),
        str(doc.get("measured_at", "")),
    )


# ------------------------------------------------------------------ committed files


def load_floors(path: Path = FLOORS) -> dict[str, float]:
    doc = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return {k: float(v["floor"]) for k, v in cast("dict[str, dict[str, float]]", doc).items()}


def write_floors(
    measured: Sequence[Measured],
    listed: dict[tuple[str, str, str], Survivor] | None = None,
    path: Path = FLOORS,
) -> None:
    doc = cast(
        "dict[str, dict[str, object]]",
        tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {},
    )
    for m in measured:
        old = float(cast("float", doc.get(m.name, {}).get("floor", 0.0)))
        survived = {s.key for s in m.survivors}
        lucky = sum(
            1
            for s in (listed or {}).values()
            if s.module == m.name and s.flaky and s.key not in survived
        )
        sure = 100.0 * (m.killed - lucky) / m.total if m.total else 0.0
        doc[m.name] = {
            "floor": max(old, _floor_of(sure)),
            "killed": m.killed,
            "total": m.total,
        }
    lines = [
        "# Kill-rate floors of `nox -s mutmut` (tools/mutmut_run.py), per module, in percent.",
        "# Floors only go up: `uv run --locked nox -s mutmut -- --write` raises a floor to the",
        "# measured rate (rounded down to 0.1) and records the counts it measured.",
        "",
    ]
    for name in sorted(doc):
        entry = doc[name]
        lines += [
            f'["{name}"]' if "." in name else f"[{name}]",
            f"floor = {float(cast('float', entry['floor'])):.1f}",
            f"killed = {entry['killed']}",
            f"total = {entry['total']}",
            "",
        ]
    path.write_text("\n".join(lines), encoding="utf-8")


def _floor_of(rate: float) -> float:
    return int(rate * 10) / 10


def load_survivors(path: Path = SURVIVORS) -> dict[tuple[str, str, str], Survivor]:
    if not path.is_file():
        return {}
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    out: dict[tuple[str, str, str], Survivor] = {}
    for raw in cast("list[dict[str, str | bool]]", doc.get("survivor", [])):
        s = Survivor(
            str(raw["module"]),
            str(raw["function"]),
            str(raw["change"]),
            str(raw["reason"]),
            flaky=raw.get("flaky") is True,
        )
        out[s.key] = s
    return out


def _toml_string(text: str) -> str:
    if "\n" in text or '"' in text or "\\" in text:
        return "'''\n" + text.replace("'''", "' ' '") + "'''"
    return json.dumps(text)


def write_survivors(
    measured: Sequence[Measured],
    listed: dict[tuple[str, str, str], Survivor],
    path: Path = SURVIVORS,
) -> None:
    names = {m.name for m in measured}
    keep = [s for s in listed.values() if s.module not in names or s.flaky]
    kept = {s.key for s in keep}
    keep.extend(listed.get(s.key, s) for m in measured for s in m.survivors if s.key not in kept)
    lines = [
        "# Mutants that survive `nox -s mutmut` (tools/mutmut_run.py), each with its reason.",
        "# A survivor not listed here fails the gate; so does one whose reason is UNREVIEWED.",
        "# `uv run --locked nox -s mutmut -- --write` adds new survivors as UNREVIEWED and drops",
        "# listed ones that are now killed (except those marked `flaky = true`: killed only when",
        "# a race in the test goes one way); then write each reason by hand.",
        "",
    ]
    for s in sorted(keep, key=lambda s: s.key):
        lines += [
            "[[survivor]]",
            f"module = {json.dumps(s.module)}",
            f"function = {json.dumps(s.function)}",
            f"change = {_toml_string(s.change)}",
            f"reason = {_toml_string(s.reason)}",
            *(["flaky = true"] if s.flaky else []),
            "",
        ]
    path.write_text("\n".join(lines), encoding="utf-8")


# ------------------------------------------------------------------ the gate


def verdict(
    m: Measured, floors: dict[str, float], listed: dict[tuple[str, str, str], Survivor]
) -> list[str]:
    """Why module `m` fails the gate (empty when it passes)."""
    problems: list[str] = []
    floor = floors.get(m.name)
    if m.total == 0:
        problems.append(f"{m.name}: mutmut generated no mutants")
    if floor is None:
        problems.append(f"{m.name}: no floor in {FLOORS.name}; run with --write to record one")
    elif m.rate + 1e-9 < floor:
        problems.append(f"{m.name}: kill rate {m.rate:.1f}% is below its floor of {floor:.1f}%")
    for s in m.survivors:
        entry = listed.get(s.key)
        where = f"{m.name}: {s.function}: {s.change.replace(chr(10), ' | ')}"
        if entry is None:
            problems.append(f"survivor not in {SURVIVORS.name}: {where}")
        elif entry.reason.strip() in {"", UNREVIEWED}:
            problems.append(f"survivor without a reason in {SURVIVORS.name}: {where}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("modules", nargs="*", metavar="MODULE", help=f"of {', '.join(MODULES)}")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--write", action="store_true", help="raise the floors and update the survivors file"
    )
    parser.add_argument(
        "--from-last",
        action="store_true",
        help="do not run mutmut: judge (and with --write, record) the last saved measurements",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.modules) - set(MODULES))
    if unknown:
        parser.error(f"unknown modules {unknown}; known: {', '.join(MODULES)}")
    floors, listed = load_floors(), load_survivors()
    measured: list[Measured] = []
    problems: list[str] = []
    for name in args.modules or list(MODULES):
        m = load_last(name) if args.from_last else measure(name, args.jobs)
        if not args.from_last:
            save(m)
        measured.append(m)
        floor = floors.get(m.name)
        shown = "none" if floor is None else f"{floor:.1f}%"
        extra = "".join(f", {v} {k}" for k, v in sorted(m.other.items()))
        print(
            f"mutmut: {name}: {m.killed}/{m.total} killed ({m.rate:.1f}%, floor {shown}), "
            f"{len(m.survivors)} survived{extra}",
            flush=True,
        )
        if args.from_last and m.inputs != inputs_digest(name):
            print(
                f"mutmut: {name}: NOTE the module or its tests changed since this measurement "
                f"({m.measured_at or 'undated'}): re-measure with `nox -s mutmut -- {name}`",
                flush=True,
            )
        for s in m.survivors:
            entry = listed.get(s.key)
            reason = entry.reason if entry else "NOT LISTED"
            print(f"  {name}: survived: {s.function}: {s.change.replace(chr(10), ' | ')}")
            print(f"    reason: {reason.splitlines()[0] if reason else '-'}")
        problems += verdict(m, floors, listed)
    total = sum(m.total for m in measured)
    killed = sum(m.killed for m in measured)
    if total == 0:
        print("mutmut: no mutants generated; refusing to report a rate", file=sys.stderr)
        return 1
    rate = 100 * killed / total
    print(f"mutmut: kill rate {killed}/{total} ({rate:.1f}%) over {len(measured)} modules")
    if args.write:
        write_floors(measured, listed)
        write_survivors(measured, listed)
        print(f"mutmut: wrote {FLOORS.name} and {SURVIVORS.name}; review each UNREVIEWED one")
    for problem in problems:
        print(f"mutmut: FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
