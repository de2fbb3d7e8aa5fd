"""Fault drill: plant hand-written faults in guards, one at a time, and see which gate sees each.

`nox -s falsify` asks "does each registered guard's named test fail when the guard goes?";
the drill asks the auditor's question instead: "if someone broke this guard the way people
break guards, would any gate notice?". Its faults (`tools/drill.toml`) are written as an
auditor plants them: a guard's line dropped, a condition made constant, an entry deleted
from a table, possibly several edits at once. Issue 28's audit is the list there: 26 faults,
14 of which every gate missed at the time.

For each fault the drill copies the tree (tracked and unignored files, as `falsify` does) to
a scratch directory, applies the fault's edits there (each `find` must occur exactly once:
a fault that no longer applies because the code moved is reported as NOT PLANTED with the
reason, never silently skipped), and runs the gates that should catch it, targeted:

* ``tests``: the named pytest node ids, with the scratch sources first on ``sys.path``;
  caught when pytest reports a failure (exit 1);
* ``fields``: ``tools/fields_lint.py`` on the scratch copy; caught when it fails;
* ``docs``: ``tools/gen_docs.py --check`` on the scratch copy; caught when it fails.

Before planting anything, the union of the named tests must pass on the unmutated copy (a
red test cannot catch anything: the drill says so and fails), and each tool gate used runs
there too: one that is red already (work in progress elsewhere left a generated table
stale) is reported, and then catches a fault only when the fault changes its report. A
fault whose tests need an optional extra (``extra = "ray"``) runs them in that extra's
environment.

The verdict line is ``drill: N/M caught``; the exit code is 0 only when every fault was
planted and caught. ``--only NAME`` runs some faults (repeatable), ``--list FILE`` another
list, ``--head`` drills the committed HEAD instead of the working tree (others' work in
progress, which may turn a gate red before anything is planted, left out). CI runs the
whole list weekly (`.github/workflows/drill.yml`); locally::

    uv run --locked python tools/drill.py                  # every fault (~1-3 min, 2 cores)
    uv run --locked python tools/drill.py --only "NAME"    # one fault
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import falsify

if TYPE_CHECKING:
    from collections.abc import Sequence

REPO = Path(__file__).resolve().parents[1]
LIST = REPO / "tools" / "drill.toml"
TOOL_GATES = {
    "fields": ("tools/fields_lint.py",),
    "docs": ("tools/gen_docs.py", "--check"),
}
TEST_TIMEOUT_S = 300
"""Each named test's timeout when a fault is planted (a fault that makes a test hang is
caught by the timeout, as in `falsify`)."""
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
}


@dataclass(frozen=True)
class Fault:
    name: str
    file: str
    edits: tuple[tuple[str, str], ...]
    tests: tuple[str, ...] = ()
    gates: tuple[str, ...] = ()
    extra: str = ""
    audit: str = ""
    """What the audit of issue 28 saw: ``missed`` or ``caught`` (for the record only)."""


@dataclass
class Verdict:
    fault: Fault
    status: str  # caught | missed | not-planted | error
    by: list[str] = field(default_factory=list[str])
    detail: str = ""
    seconds: float = 0.0


def load(path: Path = LIST) -> list[Fault]:
    """The faults of `path`; a malformed entry is an error, not a skip."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    raw = cast("list[dict[str, object]]", doc.get("fault", []))
    faults: list[Fault] = []
    for i, entry in enumerate(raw):
        unknown = set(entry) - {
            "name", "file", "find", "replace", "edit", "tests", "gates", "extra", "audit"
        }  # fmt: skip
        if unknown:
            raise ValueError(f"fault[{i}]: unknown keys {sorted(unknown)}")
        name = str(entry["name"])
        if any(f.name == name for f in faults):
            raise ValueError(f"fault {name!r} is listed twice")
        edits: list[tuple[str, str]] = []
        if "find" in entry:
            edits.append((str(entry["find"]), str(entry.get("replace", ""))))
        edits += [
            (str(edit["find"]), str(edit.get("replace", "")))
            for edit in cast("list[dict[str, object]]", entry.get("edit", []))
        ]
        if not edits:
            raise ValueError(f"fault {name!r} has no edit (find/replace or [[fault.edit]])")
        tests = tuple(str(t) for t in cast("list[object]", entry.get("tests", [])))
        gates = tuple(str(g) for g in cast("list[object]", entry.get("gates", [])))
        bad = [g for g in gates if g not in TOOL_GATES]
        if bad:
            raise ValueError(f"fault {name!r}: unknown gates {bad} (known: {sorted(TOOL_GATES)})")
        if not tests and not gates:
            raise ValueError(f"fault {name!r} names no gate that should catch it")
        faults.append(
            Fault(
                name,
                str(entry["file"]),
                tuple(edits),
                tests,
                gates,
                str(entry.get("extra", "")),
                str(entry.get("audit", "")),
            )
        )
    return faults


def plant(fault: Fault, root: Path) -> str | None:
    """Apply every edit in place; why the fault cannot be planted, or None."""
    path = root / fault.file
    if not path.is_file():
        return f"{fault.file} does not exist (the code moved)"
    text = path.read_text(encoding="utf-8")
    for n, (find, replace) in enumerate(fault.edits, 1):
        count = text.count(find)
        if count != 1:
            where = f"edit {n}: " if len(fault.edits) > 1 else ""
            first = find.strip().splitlines()[0] if find.strip() else find
            return (
                f"{where}its text occurs {count} times in {fault.file} (must be once; the code "
                f"moved): {first[:70]!r}"
            )
        text = text.replace(find, replace)
    path.write_text(text, encoding="utf-8")
    return None


def run_gate(root: Path, gate: str) -> tuple[int, str]:
    """One tool gate on the copy at `root`: (exit code, its output with the copy's path
    taken out, so two copies' reports compare)."""
    script, *args = TOOL_GATES[gate]
    done = subprocess.run(
        [sys.executable, str(root / script), *args],
        cwd=root,
        env=falsify._env(root),  # noqa: SLF001  # pyright: ignore[reportPrivateUsage] - falsify's scratch environment, shared
        capture_output=True,
        text=True,
        check=False,
        timeout=TEST_TIMEOUT_S,
    )
    return done.returncode, (done.stdout + done.stderr).replace(str(root), "<tree>").strip()


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-3:])


def gate_caught(gate: str, before: tuple[int, str], after: tuple[int, str]) -> str | None:
    """How `gate` caught a fault (None: it did not): red where it was green unmutated, or,
    when it was red already (others' work: a stale generated table), a report that
    changed, since the fault then added a finding of its own."""
    if before[0] == 0:
        return gate if after[0] != 0 else None
    return f"{gate} (red unmutated; the fault changed its report)" if after != before else None


def _tests_env(fault: Fault) -> dict[str, str]:
    env = {falsify.TIMEOUT_ENV: str(TEST_TIMEOUT_S)}
    return {**env, **RAY_ENV} if fault.extra == "ray" else env


def drill_one(
    fault: Fault,
    base: Path,
    pythons: dict[str, str],
    gates_before: dict[str, tuple[int, str]] | None = None,
) -> Verdict:
    start = time.monotonic()
    verdict = Verdict(fault, "missed")
    with tempfile.TemporaryDirectory(prefix="panday-drill-") as tmp:
        root = Path(tmp)
        shutil.copytree(base, root, dirs_exist_ok=True, symlinks=True)
        problem = plant(fault, root)
        if problem is not None:
            verdict.status, verdict.detail = "not-planted", problem
        else:
            details: list[str] = []
            if fault.tests:
                code, tail = falsify.run_tests(
                    root,
                    fault.tests,
                    "-p",
                    "falsify",
                    env=_tests_env(fault),
                    python=pythons[fault.extra],
                )
                if code == 1:
                    verdict.by.append("tests")
                elif code != 0:
                    verdict.status = "error"
                    details.append(f"tests: pytest exit {code}: {tail}")
            for gate in fault.gates:
                before = (gates_before or {}).get(gate, (0, ""))
                how = gate_caught(gate, before, run_gate(root, gate))
                if how is not None:
                    verdict.by.append(how)
            if verdict.by:
                verdict.status = "caught"
            verdict.detail = "\n".join(details)
    verdict.seconds = time.monotonic() - start
    return verdict


def baseline(
    faults: Sequence[Fault],
    base: Path,
    pythons: dict[str, str],
    jobs: int,
    gates_before: dict[str, tuple[int, str]],
) -> list[str]:
    """What is red on the unmutated copy among the tests the faults name (empty: none);
    each tool gate's unmutated result goes into `gates_before` (a red one is reported, and
    then catches a fault only by reporting something new)."""
    problems: list[str] = []
    for extra in sorted({f.extra for f in faults}):
        union = sorted({t for f in faults if f.extra == extra for t in f.tests})
        if not union:
            continue
        env = {**RAY_ENV} if extra == "ray" else {}
        chunks = [union[i::jobs] for i in range(jobs) if union[i::jobs]] if not extra else [union]

        def run(chunk: list[str], env: dict[str, str] = env, extra: str = extra) -> tuple[int, str]:
            return falsify.run_tests(base, chunk, env=env, python=pythons[extra])

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(chunks)) as pool:
            for code, tail in pool.map(run, chunks):
                if code != 0:
                    problems.append(
                        f"named tests{' (' + extra + ')' if extra else ''}: exit {code}: {tail}"
                    )
    for gate in sorted({g for f in faults for g in f.gates}):
        gates_before[gate] = run_gate(base, gate)
        code, text = gates_before[gate]
        if code != 0:
            print(
                f"drill: {gate} is red before any fault is planted (exit {code}): it can catch "
                "a fault only by a report of its own:\n          "
                + _tail(text).replace("\n", "\n          "),
                flush=True,
            )
    return problems


def _line(v: Verdict, done: int, total: int) -> str:
    mark = {
        "caught": "caught ",
        "missed": "MISSED ",
        "not-planted": "NOT PLANTED",
        "error": "ERROR  ",
    }
    by = f" (by {', '.join(v.by)})" if v.by else ""
    was = f" [audit: {v.fault.audit}]" if v.fault.audit else ""
    line = f"drill: [{done}/{total}] {mark[v.status]} {v.fault.name}{by}{was} ({v.seconds:.0f}s)"
    if v.status != "caught" and v.detail:
        line += "\n" + f"          {v.detail}".replace("\n", "\n          ")
    if v.status == "missed":
        gates = [*(["tests"] if v.fault.tests else []), *v.fault.gates]
        line += f"\n          every gate named stayed green: {', '.join(gates)}"
    return line


def _copy_base(base: Path, *, head: bool) -> None:
    """The tree every fault is planted in a copy of: the working tree, or HEAD."""
    if not head:
        falsify.copy_tree(REPO, base)
        return
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)


def _summary(verdicts: Sequence[Verdict], started: float, load_at_start: float) -> int:
    caught = sum(v.status == "caught" for v in verdicts)
    unplanted = [v for v in verdicts if v.status == "not-planted"]
    missed = [v.fault.name for v in verdicts if v.status == "missed"]
    errors = [v.fault.name for v in verdicts if v.status == "error"]
    minutes = (time.monotonic() - started) / 60
    end_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    print(
        f"drill: {caught}/{len(verdicts)} caught ({minutes:.1f} min, load {load_at_start:.1f} "
        f"at start, {end_load:.1f} at end)"
    )
    if unplanted:
        print(f"drill: {len(unplanted)} not planted (the code moved):")
        for v in unplanted:
            print(f"  - {v.fault.name}: {v.detail}")
    if missed:
        print(f"drill: missed by every gate named: {', '.join(missed)}")
    if errors:
        print(f"drill: could not run the gates of: {', '.join(errors)}")
    return 0 if caught == len(verdicts) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="plant faults one at a time; report caught/missed")
    parser.add_argument("--list", type=Path, default=LIST, help="the faults (tools/drill.toml)")
    parser.add_argument("--only", action="append", default=[], help="run only these names")
    parser.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument(
        "--head",
        action="store_true",
        help="drill the committed HEAD, not the working tree (others' edits in progress left out)",
    )
    args = parser.parse_args(argv)
    faults = load(args.list)
    if args.only:
        unknown = sorted(set(args.only) - {f.name for f in faults})
        if unknown:
            print(f"drill: no such fault: {unknown}", file=sys.stderr)
            return 2
        faults = [f for f in faults if f.name in set(args.only)]
    if not faults:
        print("drill: no faults to plant; refusing to pass", file=sys.stderr)
        return 1
    started = time.monotonic()
    load_at_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    with tempfile.TemporaryDirectory(prefix="panday-drill-base-") as tmp:
        base = Path(tmp)
        _copy_base(base, head=args.head)
        pythons = {extra: falsify.python_for(extra) for extra in {f.extra for f in faults}}
        gates_before: dict[str, tuple[int, str]] = {}
        problems = baseline(faults, base, pythons, max(1, args.jobs), gates_before)
        if problems:
            for problem in problems:
                print(f"drill: red before any fault was planted: {problem}", file=sys.stderr)
            return 1
        print(
            f"drill: baseline green; {len(faults)} faults follow, {args.jobs} at a time "
            f"(load {load_at_start:.1f})",
            flush=True,
        )
        verdicts: list[Verdict] = []
        # Faults needing an extra (Ray: each starts a cluster) run one at a time, after.
        plain = [f for f in faults if not f.extra]
        extras = [f for f in faults if f.extra]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(drill_one, f, base, pythons, gates_before) for f in plain]
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                verdicts.append(future.result())
                print(_line(verdicts[-1], done, len(faults)), flush=True)
        for fault in extras:
            verdicts.append(drill_one(fault, base, pythons, gates_before))
            print(_line(verdicts[-1], len(verdicts), len(faults)), flush=True)
    return _summary(verdicts, started, load_at_start)


if __name__ == "__main__":
    raise SystemExit(main())
