"""Run the benchmarks, merge their results into benchmarks/results.json, render the docs.

Usage: ``python tools/bench/run.py [--rounds N] [--only NAME] [--no-check]``. Runs the
harness's own benchmarks (`BENCHMARKS`) and every standalone ``bench_<name>.py`` script in
this directory (each records its own key and exits 1 over a budget). Exits 1 when any
benchmark is over its budget (unless ``--no-check``), so `nox -s bench` is a gate.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import harness

BENCHMARKS = ("t2_linux_startup", "cli_startup")
"""Modules in this directory with ``NAME`` and ``main(rounds, warmup) -> entry``."""
SCRIPTS = {
    p.stem.removeprefix("bench_"): p for p in sorted(Path(__file__).parent.glob("bench_*.py"))
}
"""Standalone benchmark scripts: name -> path."""


SETTLE_LOAD = 1.0
SETTLE_MAX_S = 90.0


def settle(name: str) -> None:
    """Wait (at most `SETTLE_MAX_S`) for the 1-minute load average to fall below
    `SETTLE_LOAD` before `name` starts. A benchmark that runs a cluster (Ray's) leaves the
    machine busy for a minute after it ends, and the next one measured in its wake gave
    ratios that said more about its place in the order than about itself (T1's start-up,
    always right after Ray's, at load 3.3-3.4). Each benchmark still records the load it
    started and ended at."""
    deadline = time.monotonic() + SETTLE_MAX_S
    load = os.getloadavg()[0]
    while load >= SETTLE_LOAD and time.monotonic() < deadline:
        time.sleep(2)
        load = os.getloadavg()[0]
    print(f"bench: {name}: starting at load {load:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run the panday benchmarks")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--only", action="append", default=[], choices=[*BENCHMARKS, *SCRIPTS])
    parser.add_argument(
        "--no-check", action="store_true", help="record without failing on a budget"
    )
    args = parser.parse_args(argv)
    over: list[str] = []
    chosen = args.only or [*BENCHMARKS, *SCRIPTS]
    for name in (n for n in chosen if n in SCRIPTS):
        settle(name)
        print(f"bench: {name}: running {SCRIPTS[name].name}")
        if subprocess.run([sys.executable, str(SCRIPTS[name])], check=False).returncode != 0:
            over.append(name)
    for name in (n for n in chosen if n in BENCHMARKS):
        settle(name)
        module = importlib.import_module(name)
        entry = cast("dict[str, object]", module.main(args.rounds, args.warmup))
        harness.record(name, entry)
        variants = cast("dict[str, dict[str, float]]", entry["variants"])
        for vname, summary in variants.items():
            median, p90 = summary["median_ms"], summary["p90_ms"]
            print(f"bench: {name}: {vname}: median {median:.2f} ms (p90 {p90:.2f})")
        print(f"bench: {name}: ratio {entry['ratio']} (budget {entry['budget']})")
        if not entry.get("within_budget", True):
            over.append(name)
    harness.render()
    wrote = [str(p.relative_to(harness.REPO)) for p in (harness.RESULTS, harness.DOC)]
    print(f"bench: wrote {' and '.join(wrote)}")
    if over and not args.no_check:
        print(f"bench: over budget: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
