"""Benchmark: ``fs.writes = "checked"`` side by side with ``direct``, in one run.

    python tools/bench/bench_writes.py [--rounds 60] [--file-rounds 5] [--gib-rounds 3]

Two sessions of T2 Linux over two workspaces with the same content, one per mode, opened
once; every workload alternates between them round by round (the order rotates), and each
budget is the ratio of the medians (issue 24):

* ``/bin/true``: checked within 1.15x direct (a change set is made, read and removed);
* a command that writes 10,000 small files, timed end to end (its run plus, in checked
  mode, reading, judging and applying them): within 1.5x;
* a command that writes one 1 GiB file, end to end: within 1.3x;
* this process's peak resident set (VmHWM) after all of it: at most 64 MiB (recorded with
  its growth over the run, the caller's own cost of change sets).

What the 1 GiB row measures beyond the write: when the command ends, its mount namespace
goes and the kernel unmounts the overlay, which syncs the upper file system (overlayfs
``sync_fs``) and so writes the 1 GiB back before the command's exit is seen; ``direct``
leaves it dirty in the page cache. Overlayfs's ``volatile`` option would skip that sync,
but bwrap 0.11's ``--overlay`` takes no mount options.

The files are removed between rounds, outside the timing, and the page cache's dirty
pages are written back (``sync``), so no round pays for another's writeback. The load
average is recorded before and after. The result goes to ``benchmarks/results.json``
under ``writes``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux.session import open_session

if TYPE_CHECKING:
    from collections.abc import Callable

    from panday_tier_linux.session import LinuxSession

ROOT = Path(__file__).resolve().parents[2]
SCRATCH = ROOT / "benchmarks" / "scratch" / "writes"
RESULTS = ROOT / "benchmarks" / "results.json"
BUDGETS = {"true": 1.15, "files_10k": 1.5, "gib": 1.3}
RSS_BUDGET_MIB = 64

FILES = (
    "import os\nos.makedirs('many', exist_ok=True)\n"
    "for i in range(10000):\n"
    "    with open(f'many/f{i:05}.txt', 'w') as fh:\n        fh.write('x' * 100)\n"
)
GIB = "dd if=/dev/zero of=big bs=1M count=1024 status=none"


def _hwm_kib() -> int:
    with Path("/proc/self/status").open() as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _time(session: LinuxSession, argv: list[str], clean: Callable[[], None]) -> float:
    start = time.perf_counter()
    result = session.run(argv, timeout_ms=600_000)
    took = time.perf_counter() - start
    if result.exit_code != 0 or (result.writes is not None and result.writes.held):
        msg = f"{argv}: exit {result.exit_code}, {result.writes}: {result.stderr[-500:]!r}"
        raise RuntimeError(msg)
    clean()
    return took


def _pair(
    sessions: dict[str, LinuxSession],
    workspaces: dict[str, Path],
    argv: list[str],
    rounds: int,
    leftover: str | None,
) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in sessions}
    names = list(sessions)
    for i in range(rounds + 1):  # the first round warms both up and is not counted
        for name in names[i % 2 :] + names[: i % 2]:
            ws = workspaces[name]

            def clean(ws: Path = ws) -> None:
                if leftover is not None:
                    target = ws / leftover
                    if target.is_dir():
                        shutil.rmtree(target)
                    else:
                        target.unlink(missing_ok=True)
                    os.sync()  # every round starts with nothing dirty to write back

            took = _time(sessions[name], argv, clean)
            if i:
                times[name].append(took)
    direct, checked = statistics.median(times["direct"]), statistics.median(times["checked"])
    return {
        "direct_median_ms": round(direct * 1000, 3),
        "checked_median_ms": round(checked * 1000, 3),
        "ratio": round(checked / direct, 3),
        "rounds": rounds,
    }


def bench(rounds: int, file_rounds: int, gib_rounds: int) -> dict[str, object]:
    if SCRATCH.exists():
        shutil.rmtree(SCRATCH)
    workspaces = {name: SCRATCH / name for name in ("direct", "checked")}
    for ws in workspaces.values():
        ws.mkdir(parents=True)
        (ws / "README.txt").write_text("a workspace\n")
    sessions = {
        name: open_session(
            SandboxPolicy(fs=FsPolicy(workspace=str(ws), writes=name))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType] - the names are the modes
        )
        for name, ws in workspaces.items()
    }
    load_before = os.getloadavg()
    before_kib = _hwm_kib()
    try:
        rows = {
            "true": _pair(sessions, workspaces, ["/bin/true"], rounds, None),
            "files_10k": _pair(
                sessions, workspaces, ["/usr/bin/python3", "-c", FILES], file_rounds, "many"
            ),
            "gib": _pair(sessions, workspaces, ["sh", "-c", GIB], gib_rounds, "big"),
        }
    finally:
        for session in sessions.values():
            session.close()
        shutil.rmtree(SCRATCH, ignore_errors=True)
    grown_mib = (_hwm_kib() - before_kib) / 1024
    out: dict[str, object] = {}
    for name, row in rows.items():
        row["budget"] = BUDGETS[name]
        row["within_budget"] = row["ratio"] <= BUDGETS[name]
        out[name] = row
    out["caller_peak_growth_mib"] = round(grown_mib, 1)
    out["caller_peak_mib"] = round(_hwm_kib() / 1024, 1)
    out["caller_peak_budget_mib"] = RSS_BUDGET_MIB
    out["load_before"] = [round(x, 2) for x in load_before]
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out["within_budget"] = _hwm_kib() / 1024 <= RSS_BUDGET_MIB and all(
        cast("dict[str, object]", out[n])["within_budget"] for n in BUDGETS
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description="fs.writes checked vs direct")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--file-rounds", type=int, default=5)
    parser.add_argument("--gib-rounds", type=int, default=5)
    args = parser.parse_args()
    result = bench(args.rounds, args.file_rounds, args.gib_rounds)
    existing: dict[str, object] = {}
    if RESULTS.exists():
        existing = cast("dict[str, object]", json.loads(RESULTS.read_text()))
    existing["writes"] = result
    RESULTS.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["within_budget"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
