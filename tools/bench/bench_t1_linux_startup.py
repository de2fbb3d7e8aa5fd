"""Benchmark: T1 Linux's start-up beside a bare posix_spawn, T2's session, and the CLI's.

Issue 25's budgets, side by side in one run (variants interleaved, rotating order):

- (a) a bare ``posix_spawn`` of /bin/true and ``waitpid`` (no pipes, no pump);
- (a') the same through core's `spawn` and `stream` (pipes and the pump every tier uses);
- (b) ``session.run(["/bin/true"])`` in an open T1 session with the default policy (the
  command's Landlock rules recorded, the writable workspace's entries listed, the spawn
  made by the command thread that restricted itself with the same rules for the command
  before, the host's rlimits);
- (c) the same in an open T2 session (bwrap, cgroups where they can be made);
- (d) ``panday run --tier t1-linux -- /bin/true`` (T1's cached plan, after the warm-up);
- (e) ``panday run --tier t2-linux -- /bin/true`` (T2's cached plan, after one warm-up).

Budgets: (b)/(a) <= 1.5, (d) <= (e). Records ``t1_linux_startup`` in
``benchmarks/results.json`` unless ``--no-record``; exits 1 over a budget.

    python tools/bench/bench_t1_linux_startup.py [--rounds 100] [--cli-rounds 20] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import cast

import harness

from panday_core.execution import Supervisor, collect, spawn, stream
from panday_core.policy import FsPolicy, SandboxPolicy

NAME = "t1_linux_startup"
BUDGET = 1.5


def _panday() -> str:
    found = Path(sys.executable).parent / "panday"
    if not found.exists():
        raise SystemExit(f"{NAME}: no panday script beside {sys.executable}")
    return str(found)


def bench(rounds: int, cli_rounds: int) -> dict[str, object]:
    from panday_tier_linux.session import open_session as open_t2  # noqa: PLC0415 - Linux only
    from panday_tier_linux.t1.launch import CommandThread, Restrictions  # noqa: PLC0415 - Linux only
    from panday_tier_linux.t1.session import open_session as open_t1  # noqa: PLC0415 - Linux only

    workspace = tempfile.mkdtemp(prefix="panday-bench-t1-")
    policy = SandboxPolicy(fs=FsPolicy(workspace=workspace))
    panday = _panday()

    def bare() -> None:
        pid = os.posix_spawn("/bin/true", ["/bin/true"], {})
        os.waitpid(pid, 0)

    def pumped() -> None:
        collect(stream(spawn(["/bin/true"], env={}), Supervisor()))

    def cli(tier: str) -> None:
        argv = [panday, "run", "--tier", tier, "--workspace", workspace, "--", "/bin/true"]
        subprocess.run(argv, check=True, cwd=workspace)

    try:
        with open_t1(policy) as t1, open_t2(policy) as t2:
            spawns = [
                harness.Variant("bare_posix_spawn", "(a) bare posix_spawn + waitpid", bare),
                harness.Variant("core_spawn_stream", "(a') core spawn + stream", pumped),
                harness.Variant("t1_run", "(b) T1 session.run", lambda: _ok(t1.run(["/bin/true"]))),
                harness.Variant("t2_run", "(c) T2 session.run", lambda: _ok(t2.run(["/bin/true"]))),
            ]
            info = harness.host_info()
            harness.interleave(spawns, rounds=rounds, warmup=max(rounds // 10, 5))
            jail = t1.jail

            def new_thread() -> None:
                """What a command whose rules differ from the last one's pays on top: a new
                command thread, started by the session's spawner, restricting itself (and
                ended at once, spawning nothing)."""
                rules = jail.rules()
                try:
                    ruleset = rules.build(jail.abi)
                finally:
                    rules.close()
                try:
                    restrictions = Restrictions(ruleset=ruleset, root=os.geteuid() == 0)
                    thread = CommandThread(restrictions, key=None)
                    thread.start(jail.spawner)
                    thread.end()
                finally:
                    ruleset.close()

            steps = {
                "rules": harness.median_ms(lambda: jail.rules().close()),
                "entries": harness.median_ms(jail.roots.entries),
                "new_thread": harness.median_ms(new_thread),
            }
        clis = [
            harness.Variant(
                "cli_t1", "(d) panday run --tier t1-linux (cached)", lambda: cli("t1-linux")
            ),
            harness.Variant(
                "cli_t2", "(e) panday run --tier t2-linux (cached)", lambda: cli("t2-linux")
            ),
        ]
        harness.interleave(clis, rounds=cli_rounds, warmup=3)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    variants = [*spawns, *clis]
    summaries = {v.name: v.summary() for v in variants}
    ratio = round(summaries["t1_run"]["median_ms"] / summaries["bare_posix_spawn"]["median_ms"], 3)
    cli_ratio = round(summaries["cli_t1"]["median_ms"] / summaries["cli_t2"]["median_ms"], 3)
    return {
        "title": "T1 Linux: a /bin/true beside a bare spawn, T2 and the CLI",
        "description": __doc__.split("\n\n", 2)[1] if __doc__ else "",
        "host": info,
        "rounds": rounds,
        "variants": summaries,
        "labels": {v.name: v.label for v in variants},
        "ratio": ratio,
        "ratio_of": "(b) / (a), medians",
        "cli_ratio": cli_ratio,
        "cli_ratio_of": "(d) / (e), medians; budget 1.0",
        "budget": BUDGET,
        "within_budget": ratio <= BUDGET and cli_ratio <= 1.0,
        "where_the_time_goes": _where(summaries, steps),
    }


def _where(summaries: dict[str, dict[str, float]], steps: dict[str, float]) -> dict[str, object]:
    """The split of (b) from the variants' medians and T1's steps timed alone."""
    bare, pumped, t1 = (
        summaries[n]["median_ms"] for n in ("bare_posix_spawn", "core_spawn_stream", "t1_run")
    )
    rules, entries, new_thread = steps["rules"], steps["entries"], steps["new_thread"]
    rest = t1 - pumped - rules
    notes = [
        (
            f"(b) took {t1:.2f} ms, a bare posix_spawn (a) {bare:.2f} ms ({t1 / bare:.2f}x) "
            f"and core's own spawn and pump (a') {pumped:.2f} ms ({pumped / bare:.2f}x of "
            f"(a)): the budget leaves (b) {BUDGET * bare:.2f} ms, of which the pipes and the "
            "pump every tier uses take most."
        ),
        (
            f"Of (b)-(a'), {t1 - pumped:.2f} ms, timed alone: recording the command's "
            f"Landlock rules {rules:.2f} ms, of which listing the workspace's protected "
            f"entries (again for every command, so that one made meanwhile is kept "
            f"read-only) {entries:.2f} ms. The rest, {rest:.2f} ms, is handing the spawn to "
            "the command thread that restricted itself with the same rules for an earlier "
            "command, the command's PATH lookup and the host's rlimits set on the child. A "
            "command whose rules differ from the last one's (an entry made or removed "
            "meanwhile) pays a new command thread on top, started by the session's "
            "spawning thread and restricting itself (unshare of its file-system "
            f"attributes, capabilities cleared as root, the ruleset built and applied): "
            f"{new_thread:.2f} ms."
        ),
    ]
    return {
        "notes": notes,
        "tables": [
            {
                "title": "part of (b), from the medians",
                "columns": ["ms"],
                "rows": [
                    ["core's spawn and pump, (a')", pumped],
                    ["the protected entries, timed alone", entries],
                    ["the rest of the Landlock rules, timed alone", round(rules - entries, 3)],
                    ["the rest: the hand-over, the PATH lookup, the rlimits", round(rest, 3)],
                    ["(not in (b)) a new command thread, when the rules differ", new_thread],
                ],
            }
        ],
    }


def _ok(result: object) -> None:
    if getattr(result, "exit_code", None) != 0:
        raise RuntimeError(f"/bin/true failed: {result}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--cli-rounds", type=int, default=20)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        raise SystemExit(f"{NAME}: needs Linux; this host is {sys.platform}")
    entry = bench(args.rounds, args.cli_rounds)
    variants = cast("dict[str, dict[str, float]]", entry["variants"])
    for name, summary in variants.items():
        print(f"{NAME}: {name}: median {summary['median_ms']:.2f} ms (p90 {summary['p90_ms']:.2f})")
    print(
        f"{NAME}: T1 run / bare posix_spawn = {entry['ratio']} (budget {BUDGET}); "
        f"panday run T1 / T2 cached = {entry['cli_ratio']} (budget 1.0); "
        f"load {entry['host']}"
    )
    if not args.no_record:
        harness.record(NAME, entry)
        harness.render()
    return 0 if entry["within_budget"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
