"""Benchmark: the caller's memory while a command floods its output (2 GB) under the
default policy, on the SDK's and the CLI's paths.

Budget (issue 13): the caller's peak RSS stays at most 64 MiB on every path, whatever the
command writes. The default policy keeps 16 MiB of each stream (the model's default
`limits.output_bytes`); the rest is read and discarded after a marker, so the flood costs
time, not memory. Each variant is its own process, measured by its peak resident set
(``ru_maxrss``):

- (a) the SDK, idle: ``panday.open()`` and ``session.run(["true"])`` (the floor);
- (b) the SDK collecting: ``session.run(["head", "-c", "2000000000", "/dev/zero"])``;
- (c) the SDK streaming: the same through ``session.stream(...)``, chunks dropped;
- (d) the CLI streaming: ``panday run -- head -c 2000000000 /dev/zero > /dev/null``;
- (e) the CLI, ``--json``: the same command, one JSON document (printable output, ``yes``,
  so the document is the kept bytes and not six times them in ``\\u0000`` escapes).

Variants are interleaved round by round. The result goes to ``benchmarks/results.json``
under ``output_flood`` with the load average at the start and the end.

    python tools/bench/bench_output_flood.py [--rounds 3] [--bytes 2000000000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Callable

Sample = tuple[float, float, int, bool]
"""(seconds, peak RSS in MiB, bytes kept or written, output breach) of one run."""

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RESULTS = ROOT / "benchmarks" / "results.json"
BUDGET_MIB = 64.0

_SDK = """
import resource, sys
import panday
argv, how = sys.argv[1:-1], sys.argv[-1]
with panday.open() as session:
    if how == "run":
        result = session.run(argv)
        kept, breach = len(result.stdout), result.breach
    else:
        kept, breach = 0, None
        for event in session.stream(argv):
            data = getattr(event, "data", None)
            if data is not None:
                kept += len(data)
            else:
                breach = event.breach
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, kept, breach is not None)
"""


def _flood(size: int, *, printable: bool = False) -> list[str]:
    if printable:
        return ["/bin/sh", "-c", f"yes | head -c {size}"]
    return ["head", "-c", str(size), "/dev/zero"]


def _sdk(argv: list[str], how: str, cwd: Path) -> tuple[float, float, int, bool]:
    """(seconds, peak RSS in MiB, bytes kept, breached) of one SDK process."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-P", "-c", _SDK, *argv, how],  # -P: the workspace is not on sys.path
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
        timeout=900,
    )
    elapsed = time.perf_counter() - start
    rss_kib, kept, breached = out.stdout.split()
    return elapsed, int(rss_kib) / 1024, int(kept), breached == "True"


def _cli(exe: str, args: list[str], cwd: Path) -> tuple[float, float, int, bool]:
    """(seconds, peak RSS in MiB, bytes written by panday, exit 86) of one CLI process."""
    with tempfile.TemporaryFile() as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [exe, "run", *args],
            stdout=subprocess.DEVNULL if "--json" not in args else sink,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env={**os.environ, "XDG_CONFIG_HOME": str(cwd / "no-user-config")},
        )
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - start
        written = sink.tell()
    return elapsed, usage.ru_maxrss / 1024, written, proc.returncode == 86  # noqa: PLR2004 - output breach


def bench(*, rounds: int, size: int) -> dict[str, object]:
    exe = str(Path(sys.executable).with_name("panday"))
    load_start = os.getloadavg()[0]
    variants: dict[str, tuple[str, Callable[[Path], Sample]]] = {
        "a_sdk_idle": ("(a) SDK, session.run(['true'])", lambda cwd: _sdk(["true"], "run", cwd)),
        "b_sdk_run": (
            "(b) SDK, session.run(2 GB of output)",
            lambda cwd: _sdk(_flood(size), "run", cwd),
        ),
        "c_sdk_stream": (
            "(c) SDK, session.stream(2 GB of output)",
            lambda cwd: _sdk(_flood(size), "stream", cwd),
        ),
        "d_cli_stream": (
            "(d) panday run -- (2 GB of output) > /dev/null",
            lambda cwd: _cli(exe, ["--", *_flood(size)], cwd),
        ),
        "e_cli_json": (
            "(e) panday run --json -- (2 GB of output)",
            lambda cwd: _cli(exe, ["--json", "--", *_flood(size, printable=True)], cwd),
        ),
    }
    samples: dict[str, list[Sample]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory(prefix="panday-flood-") as tmp:
        cwd = Path(tmp)
        names = list(variants)
        for i in range(rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                samples[name].append(variants[name][1](cwd))
    load_end = os.getloadavg()[0]
    result: dict[str, object] = {
        "title": "Output flood: the caller's peak RSS while a command writes 2 GB",
        "bytes_written_by_the_command": size,
        "rounds": rounds,
        "budget_mib": BUDGET_MIB,
        "loadavg_1m_at_start": round(load_start, 2),
        "loadavg_1m_at_end": round(load_end, 2),
        "cpus": os.cpu_count(),
        "paths": {},
    }
    worst = 0.0
    for name, (label, _run) in variants.items():
        rows = samples[name]
        rss = max(r[1] for r in rows)
        if name != "a_sdk_idle":
            worst = max(worst, rss)
        cast("dict[str, object]", result["paths"])[name] = {
            "label": label,
            "peak_rss_mib_max": round(rss, 1),
            "peak_rss_mib_median": round(statistics.median(r[1] for r in rows), 1),
            "seconds_median": round(statistics.median(r[0] for r in rows), 2),
            "kept_or_written_bytes": rows[-1][2],
            "output_breach": rows[-1][3],
        }
    idle = max(r[1] for r in samples["a_sdk_idle"])
    result["worst_flood_rss_mib"] = round(worst, 1)
    result["ratio_worst_flood_to_idle"] = round(worst / idle, 2)
    result["within_budget"] = worst <= BUDGET_MIB
    return result


def write_result(result: dict[str, object], path: Path = DEFAULT_RESULTS) -> None:
    """Merge `result` into the shared results file under this benchmark's own key."""
    existing: dict[str, object] = {}
    if path.exists():
        loaded: object = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            existing = cast("dict[str, object]", loaded)
    existing["output_flood"] = result
    path.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description="caller memory under an output flood")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bytes", type=int, default=2_000_000_000)
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        print(f"output_flood: needs Linux; this host is {sys.platform}", file=sys.stderr)
        return 1
    result = bench(rounds=args.rounds, size=args.bytes)
    write_result(result, args.results)
    print(json.dumps(result, indent=2))
    verdict = "within" if result["within_budget"] else "OVER"
    print(
        f"output flood: worst caller peak RSS {result['worst_flood_rss_mib']} MiB "
        f"({verdict} the {BUDGET_MIB:.0f} MiB budget; load {result['loadavg_1m_at_start']})"
    )
    return 0 if result["within_budget"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
