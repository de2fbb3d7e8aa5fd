"""Benchmark: a jailed /bin/true, raw bwrap against `exec` in an open T2 Linux session.

What each variant is, and why the ratio is fair, is in `DESCRIPTION` (rendered into
docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from typing import TYPE_CHECKING

import harness

from panday_core.execution import Supervisor, acollect, collect, spawn, stream
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_core.process import data_fd
from panday_core.types import ExecSpec, SessionSpec
from panday_tier_linux import wall
from panday_tier_linux.argv import build_options, jail_command
from panday_tier_linux.host import find_bwrap
from panday_tier_linux.sandbox import T2LinuxSandbox
from panday_tier_linux.session import LinuxSession, open_session

if TYPE_CHECKING:
    from collections.abc import Callable

    from panday_tier_linux.host import Bwrap

NAME = "t2_linux_startup"
DESCRIPTION = """\
- (a) raw bubblewrap: `bwrap --unshare-all --die-with-parent --ro-bind / / /bin/true` (the
  bwrap the session uses; the root bound read-only so /bin/true exists);
- (b) `exec` in an open T2 session with the default policy: the session jail (its holder
  bwrap and zygote made at the first command; each command started in new mount, pid and
  ipc namespaces of it, docs/tiers/linux.md): every namespace, no further user namespaces,
  no capability, the seccomp filter, the Landlock wall, the allowlisted read-only root, the
  protected entries, the command's cgroup; the synchronous path of the library;
- (c) the same through the async `Sandbox` protocol (`T2LinuxSandbox.exec`);
- (d) bwrap alone with (b)'s own options: the session's mount plan for this command (its
  protected entries, their placeholders made and removed as in (b)), its namespaces,
  seccomp program and Landlock wall, without the host-side work around the jail (no
  cgroup, no wait for the jail to be bounded, no status read);
- (e) (a) with as many extra read-only binds (of /dev/null, on a tmpfs) as (d) makes
  mounts: the cost of the mount count alone;
- (f) (b) with a bwrap of its own for each command (`PANDAY_T2_SESSION_JAIL=0`: what a
  command the session jail does not serve gets, and `panday run`'s one command).

All of them collect output through the same core machinery, so (b)/(a) is what a jailed
command costs beyond one bare bubblewrap run, (f)-(d) is panday's host-side work around a
bwrap of its own, and (d)-(a) is bwrap's work for the jail's plan. After the rounds, (b)
is also timed after a pause without commands (what an agent's sporadic commands meet).
Budget: (b)/(a) <= 1.5."""
BUDGET = 1.5

MOUNTS = ("--ro-bind", "--bind", "--dev-bind", "--ro-bind-fd", "--bind-fd", "--tmpfs", "--proc")
"""bwrap's options that each make a mount (a read-only one is remounted as well)."""


def _jail_alone(session: LinuxSession, bwrap: str) -> tuple[Callable[[], None], int]:
    """Variant (d), and how many mounts its options make. Descriptors are numbered as
    `jail.start` numbers them: 3 options, 4 seccomp, 5 status, [6 report, 7 wall], binds."""
    spec = session.spec
    first = 6 + spec.reports + spec.wall
    report_fd = 6 if spec.reports else None
    wall_fd = 6 + spec.reports if spec.wall else None
    command = jail_command(spec, ["/bin/true"], report_fd=report_fd, wall_fd=wall_fd)

    def options(binds_options: list[str]) -> list[str]:
        return build_options(
            spec, cwd=session.workspace, seccomp_fd=4, status_fd=5, binds=binds_options
        )

    def run() -> None:
        binds = session.roots.command_binds(overlay=None)
        given: list[int] = []
        try:
            words = b"".join(o.encode() + b"\0" for o in options(binds.options(first)))
            given += [data_fd(words), data_fd(session.program)]
            given += [os.open(os.devnull, os.O_WRONLY) for _ in range(1 + spec.reports)]
            given += [wall.memfd()] if spec.wall else []
            proc = spawn(
                [bwrap, "--args", "3", "--", *command], env={}, pass_fds=[*given, *binds.fds]
            )
            binds.spawned()
            result = collect(stream(proc, Supervisor()))
            if result.exit_code != 0:
                raise RuntimeError(f"bwrap with the jail's options failed: {result}")
        finally:
            for fd in given:
                os.close(fd)
            binds.close()

    with session.roots.command_binds(overlay=None) as binds:
        mounts = sum(o in MOUNTS for o in options(binds.options(first)))
    return run, mounts


def _with_binds(raw_argv: list[str], count: int) -> list[str]:
    """Variant (e): `raw_argv` with `count` read-only binds of /dev/null on a tmpfs."""
    tmp = "/tmp"  # noqa: S108 - the jail's own tmpfs, not the host's /tmp
    extra = ["--tmpfs", tmp]
    for i in range(count - 1):
        extra += ["--ro-bind", "/dev/null", f"{tmp}/m{i}"]
    return [*raw_argv[:-1], *extra, raw_argv[-1]]


def _run_argv(argv: list[str], what: str) -> Callable[[], None]:
    def run() -> None:
        result = collect(stream(spawn(argv, env={}), Supervisor()))
        if result.exit_code != 0:
            raise RuntimeError(f"{what} failed: {result}")

    return run


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
    per_command = _bwrap_per_command(policy, bwrap)
    try:
        with open_session(policy, bwrap=bwrap) as session:
            alone, mounts = _jail_alone(session, bwrap.path)
            binds_argv = _with_binds(raw_argv, mounts)

            def jailed() -> None:
                result = session.run(["/bin/true"])
                if result.exit_code != 0:
                    raise RuntimeError(f"session exec failed: {result}")

            def jailed_bwrap() -> None:
                result = per_command.run(["/bin/true"])
                if result.exit_code != 0:
                    raise RuntimeError(f"session exec (a bwrap per command) failed: {result}")

            def jailed_async() -> None:
                result = loop.run_until_complete(acollect(sandbox.exec(handle, spec)))
                if result.exit_code != 0:
                    raise RuntimeError(f"async exec failed: {result}")

            def binds_only() -> None:
                session.roots.command_binds(overlay=None).close()

            def cgroup_only() -> None:
                made = session.guard.new_exec()
                if made is not None:
                    made.remove()

            variants = [
                harness.Variant(
                    "raw_bwrap", "(a) raw bwrap --unshare-all", _run_argv(raw_argv, "raw")
                ),
                harness.Variant("t2_exec", "(b) T2 session exec (sync)", jailed),
                harness.Variant(
                    "t2_exec_async", "(c) T2 session exec (async protocol)", jailed_async
                ),
                harness.Variant("jail_alone", "(d) bwrap alone with (b)'s options", alone),
                harness.Variant(
                    "raw_bwrap_binds",
                    f"(e) (a) with {mounts} mounts",
                    _run_argv(binds_argv, "raw bwrap with binds"),
                ),
                harness.Variant(
                    "t2_exec_bwrap", "(f) T2 session exec, a bwrap per command", jailed_bwrap
                ),
            ]
            info = harness.host_info()
            harness.interleave(variants, rounds=rounds, warmup=warmup)
            steps = {
                "binds": harness.median_ms(binds_only),
                "cgroup": harness.median_ms(cgroup_only),
                **_after_idle(jailed),
            }
            cgroup = session.guard.session is not None
    finally:
        per_command.close()
        loop.run_until_complete(sandbox.destroy(handle))
        loop.close()
        shutil.rmtree(workspace, ignore_errors=True)
    summaries = {v.name: v.summary() for v in variants}
    med = {name: s["median_ms"] for name, s in summaries.items()}
    ratio = round(med["t2_exec"] / med["raw_bwrap"], 3)
    return {
        "title": "T2 Linux: a jailed /bin/true",
        "description": DESCRIPTION,
        "bwrap": shown,
        "host": {**info, "loadavg_1m_at_end": round(os.getloadavg()[0], 2)},
        "rounds": rounds,
        "variants": summaries,
        "labels": {v.name: v.label for v in variants},
        "ratio": ratio,
        "ratio_of": "(b) / (a), medians",
        "budget": BUDGET,
        "within_budget": ratio <= BUDGET,
        "where_the_time_goes": _where(med, steps, mounts, cgroup=cgroup),
    }


def _bwrap_per_command(policy: SandboxPolicy, bwrap: Bwrap) -> LinuxSession:
    """A session whose commands each get a bwrap of their own (the session jail is chosen,
    or not, at a session's first command)."""
    os.environ["PANDAY_T2_SESSION_JAIL"] = "0"
    session = open_session(policy, bwrap=bwrap)
    try:
        first = session.run(["/bin/true"]).exit_code
    except BaseException:
        session.close()
        raise
    finally:
        del os.environ["PANDAY_T2_SESSION_JAIL"]
    if first != 0:
        session.close()
        raise RuntimeError("a bwrap per command: /bin/true failed")
    return session


IDLE_S = 0.3
IDLE_PAIRS = 15


def _after_idle(run: Callable[[], None]) -> dict[str, float]:
    """(b) after `IDLE_S` without a command, and again right after it, `IDLE_PAIRS` times:
    medians in ms (the pauses are not timed)."""
    idle: list[float] = []
    warm: list[float] = []
    for _ in range(IDLE_PAIRS):
        time.sleep(IDLE_S)
        for times in (idle, warm):
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1000)
    return {"after_idle": statistics.median(idle), "right_after": statistics.median(warm)}


def _where(
    med: dict[str, float], steps: dict[str, float], mounts: int, *, cgroup: bool
) -> dict[str, object]:
    """The split of (b) from the variants' medians and two host-side steps timed alone."""
    raw, b, d, e = med["raw_bwrap"], med["t2_exec"], med["jail_alone"], med["raw_bwrap_binds"]
    f = med["t2_exec_bwrap"]
    host, binds = f - d, steps["binds"]
    per_mount = (e - raw) / mounts if mounts else 0.0
    rest = d - e - binds
    notes = [
        (
            f"(b) took {b:.2f} ms and raw bubblewrap (a) {raw:.2f} ms ({b / raw:.2f}x). The "
            "session built its jail once, at its first command (the holder), and started "
            "each command in it: per command, the protected entries' listing and "
            "placeholders, the command's cgroup, the command's mount, pid and ipc "
            "namespaces, its /tmp and protected binds, and its init (the wall's machine "
            "code, `wall -i`, spawned from its memfd: /proc and its masks, the seccomp "
            "program, no capability, then the command and its reaping): no copy of an "
            "interpreter is made per command. "
            f"The same command with a bwrap of its own, (f), took {f:.2f} ms "
            f"({f / raw:.2f}x): bwrap alone with its options, (d), {d:.2f} ms, is "
            f"{d - raw:.2f} ms more than (a), and panday's host-side work around it "
            f"adds {host:.2f} ms."
        ),
        (
            f"A bwrap of its own makes {mounts} mounts per command (the allowlisted root, "
            "/proc and its masked files, the devices, /tmp, the workspace and each of its "
            "protected entries). For each, bwrap binds, reads the whole mount table "
            "(/proc/self/mountinfo) again and remounts what it bound read-only: under "
            "strace the reads of that table, not the mounts, are its costliest calls. The "
            "same number "
            f"of read-only binds added to (a), (e), took {e:.2f} ms: {per_mount:.3f} ms per "
            f"mount, {e - raw:.2f} ms in all. The session jail makes the command's own "
            "mounts with the new mount API, from descriptors, without reading that table."
        ),
        (
            "Both (b) and (f) first open the workspace's roots and protected entries "
            f"(descriptors opened, placeholders made, and removed after): {binds:.2f} ms "
            f"timed alone. What is left of (d)-(a), {rest:.2f} ms (a difference of "
            "separate medians: near zero, it is within their noise), is the seccomp "
            "program, the Landlock wall's exec and the options. (f)-(d) is making and "
            "removing the "
            f"command's cgroup ({steps['cgroup']:.2f} ms timed alone"
            + ("" if cgroup else "; none here: the session has no ceilings")
            + "), moving the jail into it (which waits for bwrap's child, and can wait for "
            "a kernel RCU grace period) and reading the jail's status."
        ),
        (
            f"(b) is timed in a loop, each command right after another. After {IDLE_S} s "
            f"without a command, one took {steps['after_idle']:.2f} ms, and the next, right "
            f"after it, {steps['right_after']:.2f} ms (medians of {IDLE_PAIRS} pairs)"
            + (
                ". Most of the difference is the command's move into its cgroup: every "
                "move takes one global lock of the kernel, whose taker waits for an RCU "
                "grace period unless another took it less than one grace period ago (a "
                "first write to cgroup.procs took 11-22 ms here, the next ones under 0.1 "
                "ms), so a session whose commands are seconds apart (an agent's) pays it at "
                "every command. Taking the lock early, on a thread of its own, does not hide "
                "it: a waiting taker holds back every fork on the host (tried and measured, "
                "not kept). A command started inside its cgroup would not wait (clone3's "
                "CLONE_INTO_CGROUP on cgroup v2); this code does not do that."
                if cgroup
                else " (no cgroup here: the session has no ceilings)."
            )
        ),
    ]
    return {
        "notes": notes,
        "tables": [
            {
                "title": "part of (b), from the medians",
                "columns": ["ms"],
                "rows": [
                    ["raw bubblewrap, (a)", raw],
                    [f"the jail's {mounts} mounts, (e)-(a)", round(e - raw, 3)],
                    ["roots and protected entries, timed alone", binds],
                    ["the rest of (d): seccomp, the wall, the options", round(rest, 3)],
                    ["panday's host-side work around a bwrap, (f)-(d)", round(host, 3)],
                    ["(b), the session jail", b],
                    ["(f), a bwrap per command", f],
                ],
            }
        ],
    }
