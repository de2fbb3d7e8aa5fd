"""Falsify gate: every guard must turn a named test red when it is removed or inverted.

The registry (`tools/mutations.toml`) lists named mutations: a file, an exact snippet that
must occur exactly once, its replacement (the guard removed or inverted), and the tests
that must fail. For each mutation this copies the tree to a scratch directory, applies the
edit, and runs the named tests there with the scratch sources first on ``sys.path``.

* killed: pytest reports failures (exit 1) -> good;
* survived: the named tests still pass -> the gate fails (the tests do not guard it);
* stale: the snippet is missing or ambiguous -> the gate fails (the code moved; update the
  registry rather than silently skipping);
* error: the tests could not run (collection error, no tests) -> the gate fails.

Before mutating anything, the union of the named tests must pass on the unmutated copy, so
a test that is already red cannot "kill" a mutation. That run (split over the jobs) also
times every named test: a mutation's tests then get a timeout of a few times their
unmutated duration (never under `TIMEOUT_FLOOR_S`), plus the longest fixture set-up timed in
their directory (a mutation's tests run alone, so the first of them pays the shared
fixtures, a cluster for instance, that the baseline charged to whichever test came first
there), so a mutation that makes a test hang
(a kill that never comes, a deadline that never fires) is killed by the timeout in seconds
rather than after the test's own minute-long wait. A cut-off is a clock, so it is checked:
the unmutated tests run again at once under the same cut-off, and only if they pass is it a
kill (otherwise the mutant runs again without the cut-off, and its tests' own assertions
and hang guards give the verdict). Mutations run
`--jobs` at a time, each in its own copy, and each prints its line as soon as it finishes.

A mutation killed before is remembered (`.nox/falsify-killed.json`) under a key that covers
every byte of the tree it ran on (each tracked or unignored file, `uv.lock` included), the
mutation itself, the interpreter, the kernel release, the caller's uid and the bwrap
binary, and the timeouts: a warm run on a byte-identical tree and host reports it as killed
without running it again, naming it "remembered". Any change to any file runs every
mutation again, and so does `--fresh` or `--only` (to watch a mutation fail, it must run).
A clean clone (CI) has nothing remembered. Survivors, stale entries and errors are never
remembered.

A mutation whose tests need an optional extra (``extra = "ray"``) runs only with
``--extra ray``, with the interpreter of an environment synced from uv.lock with that extra
(``.nox/_<extra>``, the one the extra's own nox session uses; `nox -s falsify_ray`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pytest

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "tools" / "mutations.toml"
MEMORY = REPO / ".nox" / "falsify-killed.json"
GATE_OUTPUT = "RUN-REPORT.md"
"""Written from the gates' results after a run: outside the tree key (committing it must not
make the next run forget), inside the key of a mutation whose tests read it."""
PYTEST_TIMEOUT_S = 900
TIMEOUT_FLOOR_S = 10.0
TIMEOUT_FACTOR = 3.0
TIMES_ENV = "PANDAY_FALSIFY_TIMES"
TIMEOUT_ENV = "PANDAY_FALSIFY_TIMEOUT"
"""Set for the baseline run: this module, loaded as a pytest plugin, appends each test's
duration to the file it names."""


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    extra: str = ""
    """An optional extra the tests need (``ray``): they run in that extra's environment."""


@dataclass(frozen=True)
class Outcome:
    mutation: Mutation
    status: str  # killed | survived | stale | error
    detail: str
    seconds: float


def load_registry(path: Path = REGISTRY) -> list[Mutation]:
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    raw = cast("list[dict[str, object]]", doc.get("mutation", []))
    mutations: list[Mutation] = []
    names: set[str] = set()
    for i, entry in enumerate(raw):
        unknown = set(entry) - {"name", "file", "find", "replace", "tests", "extra"}
        if unknown:
            msg = f"mutation[{i}]: unknown keys {sorted(unknown)}"
            raise ValueError(msg)
        name = str(entry["name"])
        if name in names:
            msg = f"mutation {name!r} is listed twice"
            raise ValueError(msg)
        names.add(name)
        tests = tuple(str(t) for t in cast("list[object]", entry["tests"]))
        if not tests:
            msg = f"mutation {name!r} names no tests"
            raise ValueError(msg)
        mutations.append(
            Mutation(
                name,
                str(entry["file"]),
                str(entry["find"]),
                str(entry["replace"]),
                tests,
                str(entry.get("extra", "")),
            )
        )
    return mutations


def tracked_files(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    return [f for f in out.decode().split("\0") if f and (repo / f).is_file()]


def copy_tree(repo: Path, dest: Path) -> None:
    for rel in tracked_files(repo):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target)


def apply(mutation: Mutation, root: Path) -> str | None:
    """Apply in place; return why it does not apply, or None."""
    path = root / mutation.file
    if not path.is_file():
        return f"{mutation.file} does not exist"
    text = path.read_text(encoding="utf-8")
    count = text.count(mutation.find)
    if count != 1:
        return f"snippet occurs {count} times in {mutation.file} (must be exactly once)"
    path.write_text(text.replace(mutation.find, mutation.replace), encoding="utf-8")
    if path.suffix == ".S":
        # Machine code (the Landlock wall): the package runs the bytes wall.py holds, so
        # the mutant is assembled into them by the copy's own tools/wall.py.
        done = subprocess.run(
            [sys.executable, str(root / "tools/wall.py"), "--write"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            return f"the mutant does not assemble: {done.stderr.strip()[-300:]}"
    return None


def tree_key(root: Path, python: str) -> str:
    """What a mutation's outcome can depend on besides the mutation: every file of the copy
    (path and bytes), the interpreter, and the host facts the tests read (kernel release,
    uid, the bwrap binary)."""
    digest = hashlib.sha256()
    files = (str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    for rel in sorted(f for f in files if f != GATE_OUTPUT):
        digest.update(rel.encode() + b"\0")
        digest.update(hashlib.sha256((root / rel).read_bytes()).digest())
    bwrap = shutil.which("bwrap")
    bwrap_id = ""
    if bwrap is not None:
        st = Path(bwrap).stat()
        bwrap_id = f"{Path(bwrap).resolve()}:{st.st_size}:{st.st_mtime_ns}"
    host = [python, sys.version, platform.release(), str(os.geteuid()), bwrap_id]
    digest.update("\0".join(host).encode())
    digest.update(f"{TIMEOUT_FACTOR}:{TIMEOUT_FLOOR_S}".encode())
    return digest.hexdigest()


def mutation_key(mutation: Mutation, tree: str, root: Path | None = None) -> str:
    fields = [tree, mutation.name, mutation.file, mutation.find, mutation.replace]
    fields += [*mutation.tests, mutation.extra]
    output = None if root is None else root / GATE_OUTPUT
    if output is not None and output.is_file() and any("report" in t for t in mutation.tests):
        fields.append(hashlib.sha256(output.read_bytes()).hexdigest())
    return hashlib.sha256("\0".join(fields).encode()).hexdigest()


def remembered(path: Path = MEMORY) -> dict[str, str]:
    """Keys of mutations killed before -> when; an unreadable file remembers nothing."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    items = cast("dict[object, object]", data).items()
    return {k: v for k, v in items if isinstance(k, str) and isinstance(v, str)}


def remember(keys: Sequence[str], path: Path = MEMORY) -> None:
    """Add the keys of mutations just killed (the tree's older keys are dropped with it:
    only the current tree's are kept, so the file never grows past one registry)."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict.fromkeys(keys, when), indent=0) + "\n", encoding="utf-8")
    tmp.replace(path)


def _env(root: Path) -> dict[str, str]:
    src = [str(p) for p in sorted((root / "packages").glob("*/src"))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*src, str(root / "tools")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PANDAY_GATE_RUN", None)  # the mutated tests' tools must not record gate results
    return env


def python_for(extra: str) -> str:
    """The interpreter for tests that need `extra`: this one, or `.nox/_<extra>`'s, synced
    from uv.lock with the extra and the test group (the environment its nox session uses)."""
    if not extra:
        return sys.executable
    env_dir = REPO / ".nox" / f"_{extra}"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(env_dir)}
    env.pop("VIRTUAL_ENV", None)
    subprocess.run(
        [
            "uv", "sync", "--quiet", "--locked", "--no-default-groups", "--all-packages",
            "--python", sys.executable, "--group=test", f"--extra={extra}",
        ],
        cwd=REPO, env=env, check=True,
    )  # fmt: skip
    return str(env_dir / "bin" / "python")


def _without_hypothesis(root: Path, tests: Sequence[str]) -> list[str]:
    """``-p no:hypothesispytest`` when no named test's file mentions hypothesis: its pytest
    plugin imports all of hypothesis (about 1.1 s of CPU), once per pytest process, and a
    falsify run starts one per mutation (over 300 of them)."""
    for name in {t.split("::", 1)[0] for t in tests}:
        try:
            if "hypothesis" in (root / name).read_text(encoding="utf-8"):
                return []
        except OSError:
            return []
    return ["-p", "no:hypothesispytest"]


def run_tests(
    root: Path,
    tests: Sequence[str],
    *extra: str,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> tuple[int, str]:
    cmd = [
        python,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        *_without_hypothesis(root, tests),
        "--no-header",
        *extra,
        *tests,
    ]
    # Output goes to a file and the run is its own process group: a process the tests left
    # behind (a mutated guard that no longer kills) may hold a pipe open long after pytest
    # ended, and is killed with the group once pytest has exited.
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            env={**_env(root), **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=PYTEST_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = 124
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    if code == 124:  # noqa: PLR2004 - timeout(1)'s code for "timed out"
        return 124, f"timed out after {PYTEST_TIMEOUT_S}s"
    tail = "\n".join(text.strip().splitlines()[-3:])
    return code, tail


def _imports_from(root: Path, python: str = sys.executable) -> bool:
    """Guard against testing the installed tree instead of the mutated copy."""
    probe = "import panday_core, sys; sys.stdout.write(panday_core.__file__ or '')"
    out = subprocess.run(
        [python, "-c", probe],
        cwd=root,
        env=_env(root),
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return out.startswith(str(root))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Plugin hook (``-p falsify``, mutation runs): every test's timeout, overriding the
    tests' own ``timeout`` marks. The thread method ends the whole pytest process: the
    signal method only fails the test, whose cleanup can then wait out the very hang (a
    kill that never comes) for as long as the test would have."""
    seconds = os.environ.get(TIMEOUT_ENV)
    if not seconds:
        return
    import pytest  # noqa: PLC0415 - only inside pytest, where it is loaded already

    for item in items:
        item.add_marker(pytest.mark.timeout(float(seconds), method="thread"), append=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Plugin hook (``-p falsify``, baseline only): record each phase's duration."""
    out = os.environ.get(TIMES_ENV)
    if out:
        with Path(out).open("a", encoding="utf-8") as fh:
            fh.write(f"{report.nodeid}\t{report.when}\t{report.duration}\n")


@dataclass
class Durations:
    """The baseline's timings: each test's phases summed, and each one's set-up alone."""

    total: dict[str, float] = field(default_factory=dict[str, float])
    setup: dict[str, float] = field(default_factory=dict[str, float])

    def add(self, line: str) -> None:
        nodeid, when, seconds = line.rsplit("\t", 2)
        self.total[nodeid] = self.total.get(nodeid, 0.0) + float(seconds)
        if when == "setup":
            self.setup[nodeid] = float(seconds)


def baseline(
    root: Path, tests: Sequence[str], jobs: int, python: str = sys.executable
) -> tuple[int, str, Durations]:
    """Run `tests` unmutated, split over `jobs` processes; (exit code, tail, durations)."""
    chunks = [list(tests[i::jobs]) for i in range(jobs) if tests[i::jobs]]
    times = root / ".falsify-times"
    times.unlink(missing_ok=True)
    env = {TIMES_ENV: str(times)}

    def run(chunk: list[str]) -> tuple[int, str]:
        return run_tests(root, chunk, "-p", "falsify", env=env, python=python)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(chunks)) as pool:
        runs = list(pool.map(run, chunks))
    code = max(c for c, _ in runs)
    tail = "\n".join(t for c, t in runs if c != 0)
    durations = Durations()
    if times.is_file():
        for line in times.read_text(encoding="utf-8").splitlines():
            durations.add(line)
        times.unlink()
    return code, tail, durations


def timeout_for(mutation: Mutation, durations: Durations) -> float:
    """Each named test's timeout: TIMEOUT_FACTOR x the slowest of them unmutated, plus the
    longest set-up timed in their directories. The baseline runs every named test in one
    process, so a session or module fixture (a Ray cluster) is set up once, in the set-up
    of whichever test came first; a mutation's tests run alone and pay it again, inside
    their own cut-off."""
    slowest = max(
        (
            seconds
            for nodeid, seconds in durations.total.items()
            for test in mutation.tests
            if nodeid == test or nodeid.startswith((f"{test}[", f"{test}::"))
        ),
        default=0.0,
    )
    dirs = {_directory(test) for test in mutation.tests}
    shared = max(
        (s for nodeid, s in durations.setup.items() if _directory(nodeid) in dirs), default=0.0
    )
    return max(TIMEOUT_FLOOR_S, TIMEOUT_FACTOR * slowest) + shared


def _directory(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rpartition("/")[0]


def run_one(
    mutation: Mutation, base: Path, timeout: float | None = None, python: str = sys.executable
) -> Outcome:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="panday-falsify-") as tmp:
        root = Path(tmp)
        shutil.copytree(base, root, dirs_exist_ok=True, symlinks=True)
        problem = apply(mutation, root)
        if problem is not None:
            return Outcome(mutation, "stale", problem, time.monotonic() - start)
        if timeout is None:
            code, tail = run_tests(root, mutation.tests, python=python)
        else:
            env = {TIMEOUT_ENV: f"{timeout:.0f}"}
            code, tail = run_tests(root, mutation.tests, "-p", "falsify", env=env, python=python)
    seconds = time.monotonic() - start
    if code == 1 and timeout is not None and _hung(tail):
        return _confirm_hang(Outcome(mutation, "killed", tail, seconds), base, timeout, python)
    if code == 1:
        return Outcome(mutation, "killed", tail, seconds)
    if code == 0:
        return Outcome(mutation, "survived", tail, seconds)
    return Outcome(mutation, "error", f"pytest exit {code}: {tail}", seconds)


UNCUT = "judged without the cut-off"
"""In a verdict's detail: the hang was not confirmed, so the mutant ran again uncut."""


def _hung(detail: str) -> bool:
    """pytest-timeout's banner: a named test ran into the cut-off."""
    return "Timeout" in detail


def _confirm_hang(outcome: Outcome, base: Path, timeout: float, python: str) -> Outcome:
    """A kill by the cut-off is a clock's verdict: a machine busier during the mutant's run
    than during the baseline's gives it to a mutation that survives. So the unmutated tests
    run again at once under the same cut-off: only if they pass there is the hang the
    mutation's. Otherwise the mutant runs again without the cut-off, and that run's
    verdict (its tests' own assertions and hang guards) is the one given: never the
    clock's, and never an error that only a quieter machine would clear."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="panday-falsify-") as tmp:
        root = Path(tmp)
        shutil.copytree(base, root, dirs_exist_ok=True, symlinks=True)
        env = {TIMEOUT_ENV: f"{timeout:.0f}"}
        code, tail = run_tests(
            root, outcome.mutation.tests, "-p", "falsify", env=env, python=python
        )
    seconds = outcome.seconds + time.monotonic() - start
    if code == 0:
        detail = (
            f"{outcome.detail}\nthe unmutated tests passed under the same {timeout:.0f} s cut-off"
        )
        return Outcome(outcome.mutation, "killed", detail, seconds)
    # The cut-off cannot tell here: the mutant is judged again without it, by the tests'
    # own assertions and hang guards, as the test suite itself judges them.
    judged = run_one(outcome.mutation, base, None, python)
    detail = (
        f"{judged.detail}\n{UNCUT}: the unmutated tests did not pass under the "
        f"{timeout:.0f} s cut-off either (pytest exit {code}: {tail})"
    )
    return Outcome(outcome.mutation, judged.status, detail, seconds + judged.seconds)


def _via_control(outcome: Outcome) -> bool:
    return outcome.status == "killed" and "inconclusive" in outcome.detail


def _line(outcome: Outcome, done: int, total: int) -> str:
    mark = "killed  " if outcome.status == "killed" else outcome.status.upper().ljust(8)
    # A kill through a failed positive control still counts (the mutation broke the
    # permitted path too, e.g. an inverted allowlist), but it is named as such.
    how = " (through an inconclusive control)" if _via_control(outcome) else ""
    if UNCUT in outcome.detail:
        how += f" ({UNCUT}: unmutated, the tests outlast it here)"
    elif outcome.status == "killed" and _hung(outcome.detail):
        how += " (a named test hung until its timeout; unmutated, they passed under it)"
    line = f"falsify: [{done}/{total}] {mark} {outcome.mutation.name}{how} ({outcome.seconds:.1f}s)"
    if outcome.status != "killed":
        line += "\n" + f"          {outcome.detail}".replace("\n", "\n          ")
    return line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="apply each guard mutation; its tests must fail")
    parser.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--only", action="append", default=[], help="run only these names")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="run every mutation, also those killed before on a byte-identical tree",
    )
    parser.add_argument(
        "--extra",
        default="",
        help="run the mutations whose tests need this optional extra (e.g. ray), in its "
        "environment; without it, only those that need none",
    )
    args = parser.parse_args(argv)
    registry = load_registry()
    mutations = [m for m in registry if m.extra == args.extra]
    elsewhere = sorted({m.extra for m in registry if m.extra != args.extra})
    if args.only:
        mutations = [m for m in mutations if m.name in set(args.only)]
    if not mutations:
        print("falsify: no mutations to run; refusing to pass", file=sys.stderr)
        return 1
    jobs = max(1, args.jobs)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="panday-falsify-base-") as tmp:
        base = Path(tmp)
        copy_tree(REPO, base)
        python = python_for(args.extra)
        if not _imports_from(base, python):
            print(
                "falsify: the scratch copy does not shadow the installed packages", file=sys.stderr
            )
            return 1
        tree = tree_key(base, python)
        keys = {m.name: mutation_key(m, tree, base) for m in mutations}
        memory_path = MEMORY.with_name(
            f"falsify-killed{'-' + args.extra if args.extra else ''}.json"
        )
        memory = {} if args.fresh or args.only else remembered(memory_path)
        known = [m for m in mutations if keys[m.name] in memory]
        for done, m in enumerate(known, 1):
            outcomes.append(Outcome(m, "killed", "remembered", 0.0))
            print(
                f"falsify: [{done}/{len(mutations)}] killed   {m.name} (remembered: killed "
                f"on this byte-identical tree at {memory[keys[m.name]]})",
                flush=True,
            )
        mutations = [m for m in mutations if keys[m.name] not in memory]
        if not mutations:
            return _finish(
                outcomes,
                known,
                elsewhere=elsewhere,
                only=args.only,
                memory_path=memory_path,
                keys=keys,
            )
        union = sorted({t for m in mutations for t in m.tests})
        start = time.monotonic()
        code, tail, durations = baseline(base, union, jobs, python)
        if code != 0:
            print(
                f"falsify: the named tests do not pass unmutated (exit {code}):\n{tail}",
                file=sys.stderr,
            )
            return 1
        print(
            f"falsify: baseline: {len(union)} named tests pass on the unmutated tree "
            f"({time.monotonic() - start:.0f}s); {len(mutations)} mutations follow, {jobs} at "
            f"a time, each test timed out at {TIMEOUT_FACTOR:.0f}x its unmutated duration "
            f"(at least {TIMEOUT_FLOOR_S:.0f}s) plus the longest set-up in its directory",
            flush=True,
        )
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [
                pool.submit(run_one, m, base, timeout_for(m, durations), python) for m in mutations
            ]
            total = len(known) + len(mutations)
            for done, future in enumerate(concurrent.futures.as_completed(futures), len(known) + 1):
                outcome = future.result()
                outcomes.append(outcome)
                print(_line(outcome, done, total), flush=True)
    return _finish(
        outcomes, known, elsewhere=elsewhere, only=args.only, memory_path=memory_path, keys=keys
    )


def _finish(
    outcomes: list[Outcome],
    known: Sequence[Mutation],
    *,
    elsewhere: Sequence[str],
    only: Sequence[str],
    memory_path: Path,
    keys: dict[str, str],
) -> int:
    killed = sum(1 for o in outcomes if o.status == "killed")
    again = f" ({len(known)} remembered from this byte-identical tree)" if known else ""
    print(f"falsify: {killed}/{len(outcomes)} mutations killed{again}")
    if elsewhere and not only:
        others = " and ".join(f"--extra {e}" if e else "without --extra" for e in elsewhere)
        print(f"falsify: the other mutations run {others}")
    if not only:
        # Killed now or remembered: all under this tree's keys, so older trees' keys go.
        remember([keys[o.mutation.name] for o in outcomes if o.status == "killed"], memory_path)
    import results  # noqa: PLC0415 - tools/ is on sys.path when this script runs

    status = "ok" if killed == len(outcomes) else "failed"
    label = f"falsify {killed}/{len(outcomes)}{again}"
    results.record(
        "falsify", label, status=status, killed=killed, total=len(outcomes), remembered=len(known)
    )
    return 0 if killed == len(outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
