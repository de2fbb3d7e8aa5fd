"""Benchmark: T0 grep against GNU grep over the same generated tree, side by side in one run.

Budget (issue 3): T0's grep within 2x of ``grep -r``. The tree (~50,000 files, ~1 GB of
code-like text, 1 in 1000 files binary) is generated under a gitignored scratch directory and
deleted afterwards. Both sides search the same pattern, report file, line number and line,
and skip binary files (``grep -rnIE``, LC_ALL=C); their match counts must agree or the run is
void. Runs alternate, after one warm-up each, so both read from a warm page cache; the ratio
of medians is reported. The result goes to ``benchmarks/results.json`` under ``t0_grep``.

    python tools/bench/bench_t0_grep.py [--files 50000] [--bytes 1000000000] [--repeats 5]

The `bench` nox session can call `bench()` and merge its dict into its own report.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import cast

from panday_core.policy import FsPolicy, SandboxPolicy
from panday_core.t0 import T0Session

PATTERN = "needle_[0-9]+"
BUDGET = 2.0
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SCRATCH = ROOT / "benchmarks" / "scratch"
DEFAULT_RESULTS = ROOT / "benchmarks" / "results.json"


def generate_tree(root: Path, files: int, total_bytes: int, seed: int = 7) -> int:
    """Write `files` files of code-like text totalling about `total_bytes`; return the total.

    Files sit 100 to a directory, two levels deep; every 97th holds a ``needle_<n>`` line,
    every 1000th starts with NUL bytes (binary).
    """
    rng = random.Random(seed)  # noqa: S311 - benchmark data, not cryptography
    letters = "abcdefghijklmnopqrstuvwxyz_"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(5000)]

    def line() -> str:
        indent = "    " * rng.randint(0, 3)
        return indent + " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "\n"

    chunks = ["".join(line() for _ in range(64)).encode() for _ in range(512)]
    average = total_bytes // files
    written = 0
    for i in range(files):
        directory = root / f"d{i // 10000:02d}" / f"e{(i // 100) % 100:02d}"
        if i % 100 == 0:
            directory.mkdir(parents=True, exist_ok=True)
        size = rng.randint(average // 4, average * 7 // 4)
        parts: list[bytes] = []
        n = 0
        while n < size:
            chunk = chunks[rng.randrange(len(chunks))]
            parts.append(chunk)
            n += len(chunk)
        body = b"".join(parts)[:size]
        if i % 97 == 0:
            cut = body.rfind(b"\n", 0, len(body) // 2) + 1
            body = body[:cut] + b"x = needle_%d(arg)\n" % i + body[cut:]
        if i % 1000 == 1:
            body = b"\x00\x01binary needle_1\n" + body
        (directory / f"f{i}.txt").write_bytes(body)
        written += len(body)
    return written


def _t0_grep(tree: Path) -> tuple[float, int]:
    session = T0Session(SandboxPolicy(fs=FsPolicy(workspace=str(tree), access="ro")))
    try:
        start = time.perf_counter()
        result = session.grep(PATTERN, ".", max_matches=10_000)
        elapsed = time.perf_counter() - start
    finally:
        session.close()
    if result.truncated:
        msg = "T0 grep was truncated; raise max_matches"
        raise RuntimeError(msg)
    return elapsed, len(result.matches)


def _gnu_grep(tree: Path, grep: str) -> tuple[float, int]:
    # Output to a pipe, not /dev/null: GNU grep stops at the first match when it sees that
    # its output is /dev/null, which would not be the same work.
    env = {**os.environ, "LC_ALL": "C"}
    start = time.perf_counter()
    proc = subprocess.run(
        [grep, "-rnIE", PATTERN, "."], cwd=tree, env=env, capture_output=True, check=False
    )
    elapsed = time.perf_counter() - start
    if proc.returncode not in {0, 1}:
        msg = f"grep failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}"
        raise RuntimeError(msg)
    return elapsed, proc.stdout.count(b"\n")


def bench(
    *,
    files: int = 50_000,
    total_bytes: int = 1_000_000_000,
    repeats: int = 5,
    scratch: Path = DEFAULT_SCRATCH,
    keep: bool = False,
) -> dict[str, object]:
    """Generate the tree, time both sides alternately, delete the tree; return the result."""
    grep = shutil.which("grep")
    if grep is None:
        msg = "GNU grep is not on PATH"
        raise RuntimeError(msg)
    version = subprocess.run([grep, "--version"], capture_output=True, text=True, check=True)
    tree = scratch / "t0-grep-tree"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    try:
        size = generate_tree(tree, files, total_bytes)
        _t0_grep(tree)  # warm-up: both sides then read from the page cache
        _gnu_grep(tree, grep)
        t0_times: list[float] = []
        gnu_times: list[float] = []
        counts: set[tuple[int, int]] = set()
        for _ in range(repeats):
            t0_s, t0_n = _t0_grep(tree)
            gnu_s, gnu_n = _gnu_grep(tree, grep)
            t0_times.append(t0_s)
            gnu_times.append(gnu_s)
            counts.add((t0_n, gnu_n))
        if len(counts) != 1 or len({n for pair in counts for n in pair}) != 1:
            msg = f"T0 and GNU grep disagree on the matches: {sorted(counts)}"
            raise RuntimeError(msg)
        ratio = statistics.median(t0_times) / statistics.median(gnu_times)
        return {
            "pattern": PATTERN,
            "files": files,
            "bytes": size,
            "matches": counts.pop()[0],
            "repeats": repeats,
            "t0_median_s": round(statistics.median(t0_times), 4),
            "gnu_grep_median_s": round(statistics.median(gnu_times), 4),
            "ratio": round(ratio, 3),
            "budget": BUDGET,
            "within_budget": ratio <= BUDGET,
            "gnu_grep": version.stdout.splitlines()[0],
            "cpus": os.cpu_count(),
        }
    finally:
        if not keep:
            shutil.rmtree(tree, ignore_errors=True)


def write_result(result: dict[str, object], path: Path = DEFAULT_RESULTS) -> None:
    """Merge `result` into the shared results file under this benchmark's own key."""
    existing: dict[str, object] = {}
    if path.exists():
        loaded: object = json.loads(path.read_text())
        if isinstance(loaded, dict):
            existing = cast("dict[str, object]", loaded)
    existing["t0_grep"] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description="T0 grep vs GNU grep benchmark")
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--bytes", type=int, default=1_000_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scratch", type=Path, default=DEFAULT_SCRATCH)
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the generated tree")
    args = parser.parse_args()
    result = bench(
        files=args.files,
        total_bytes=args.bytes,
        repeats=args.repeats,
        scratch=args.scratch,
        keep=args.keep,
    )
    write_result(result, args.results)
    print(json.dumps(result, indent=2))
    verdict = "within" if result["within_budget"] else "OVER"
    print(f"t0 grep / GNU grep = {result['ratio']}x ({verdict} the {BUDGET}x budget)")
    return 0 if result["within_budget"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
