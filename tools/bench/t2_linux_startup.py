"""Benchmark: a jailed /bin/true, raw bwrap against `exec` in an open T2 Linux session.

What each variant is, and why the ratio is fair, is in `DESCRIPTION` (rendered into
docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile

import harness

from panday_core.execution import Supervisor, acollect, collect, spawn, stream
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_core.types import ExecSpec, SessionSpec
from panday_tier_linux.host import find_bwrap
from panday_tier_linux.sandbox import T2LinuxSandbox
from panday_tier_linux.session import open_session

NAME = "t2_linux_startup"
DESCRIPTION = """\
- (a) raw bubblewrap: `bwrap --unshare-all --die-with-parent --ro-bind / / /bin/true` (the
  bwrap the session uses; the root bound read-only so /bin/true exists);
- (b) `exec` in an open T2 session with the default policy: every namespace,
  `--disable-userns`, `--cap-drop ALL`, the seccomp filter, the allowlisted read-only root,
  options through `--args`, the status descriptor; the synchronous path the CLI uses;
- (c) the same through the async `Sandbox` protocol (`T2LinuxSandbox.exec`).

All three spawn through the same core machinery (posix_spawn, output pipes collected), so
(b)/(a) is what the jail costs beyond bubblewrap itself. Budget: (b)/(a) <= 1.5."""
BUDGET = 1.5


def main(rounds: int, warmup: int) -> dict[str, object]:
    shown, raw_argv = harness.raw_bwrap(NAME)
    bwrap = find_bwrap()
    assert bwrap is not None  # noqa: S101 - raw_bwrap found it
    workspace = tempfile.mkdtemp(prefix="panday-bench-")
    policy = SandboxPolicy(fs=FsPolicy(workspace=workspace))
    loop = asyncio.new_event_loop()
    sandbox = T2LinuxSandbox(bwrap=bwrap)
    handle = loop.run_until_complete(sandbox.create(SessionSpec(policy=policy)))
    spec = ExecSpec(argv=("/bin/true",))
    try:
        with open_session(policy, bwrap=bwrap) as session:

            def raw() -> None:
                result = collect(stream(spawn(raw_argv, env={}), Supervisor()))
                if result.exit_code != 0:
                    raise RuntimeError(f"raw bwrap failed: {result}")

            def jailed() -> None:
                result = session.run(["/bin/true"])
                if result.exit_code != 0:
                    raise RuntimeError(f"session exec failed: {result}")

            def jailed_async() -> None:
                result = loop.run_until_complete(acollect(sandbox.exec(handle, spec)))
                if result.exit_code != 0:
                    raise RuntimeError(f"async exec failed: {result}")

            variants = [
                harness.Variant("raw_bwrap", "(a) raw bwrap --unshare-all", raw),
                harness.Variant("t2_exec", "(b) T2 session exec (sync)", jailed),
                harness.Variant(
                    "t2_exec_async", "(c) T2 session exec (async protocol)", jailed_async
                ),
            ]
            info = harness.host_info()
            harness.interleave(variants, rounds=rounds, warmup=warmup)
    finally:
        loop.run_until_complete(sandbox.destroy(handle))
        loop.close()
        shutil.rmtree(workspace, ignore_errors=True)
    summaries = {v.name: v.summary() for v in variants}
    ratio = round(summaries["t2_exec"]["median_ms"] / summaries["raw_bwrap"]["median_ms"], 3)
    return {
        "title": "T2 Linux: a jailed /bin/true",
        "description": DESCRIPTION,
        "bwrap": shown,
        "host": info,
        "rounds": rounds,
        "variants": summaries,
        "labels": {v.name: v.label for v in variants},
        "ratio": ratio,
        "ratio_of": "(b) / (a), medians",
        "budget": BUDGET,
        "within_budget": ratio <= BUDGET,
    }
