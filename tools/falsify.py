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
a test that is already red cannot "kill" a mutation.

A mutation whose tests need an optional extra (``extra = "ray"``) runs them with the
interpreter of an environment synced from uv.lock with that extra (``.nox/_<extra>``, the
one its own nox session uses); those run one at a time, after the rest, since each starts
a cluster of its own.
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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Sequence

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "tools" / "mutations.toml"
PYTEST_TIMEOUT_S = 900


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    extra: str = ""


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
    return None


def _env(root: Path) -> dict[str, str]:
    src = [str(p) for p in sorted((root / "packages").glob("*/src"))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*src, str(root / "tools")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PANDAY_GATE_RUN", None)  # the mutated tests' tools must not record gate results
    return env


def python_for(extra: str) -> str:
    """The interpreter for tests that need `extra`: this one, or `.nox/_<extra>`'s, synced
    from uv.lock with the extra and the test group."""
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


def run_tests(root: Path, tests: Sequence[str], python: str = sys.executable) -> tuple[int, str]:
    cmd = [
        python,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "--no-header",
        *tests,
    ]
    try:
        proc = subprocess.run(
            cmd,
            cwd=root,
            env=_env(root),
            capture_output=True,
            text=True,
            timeout=PYTEST_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {PYTEST_TIMEOUT_S}s"
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
    return proc.returncode, tail


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


def run_one(mutation: Mutation, base: Path, python: str = sys.executable) -> Outcome:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="panday-falsify-") as tmp:
        root = Path(tmp)
        shutil.copytree(base, root, dirs_exist_ok=True, symlinks=True)
        problem = apply(mutation, root)
        if problem is not None:
            return Outcome(mutation, "stale", problem, time.monotonic() - start)
        code, tail = run_tests(root, mutation.tests, python)
    seconds = time.monotonic() - start
    if code == 1:
        return Outcome(mutation, "killed", tail, seconds)
    if code == 0:
        return Outcome(mutation, "survived", tail, seconds)
    return Outcome(mutation, "error", f"pytest exit {code}: {tail}", seconds)


def _via_control(outcome: Outcome) -> bool:
    return outcome.status == "killed" and "inconclusive" in outcome.detail


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="apply each guard mutation; its tests must fail")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", action="append", default=[], help="run only these names")
    args = parser.parse_args(argv)
    mutations = load_registry()
    if args.only:
        mutations = [m for m in mutations if m.name in set(args.only)]
    if not mutations:
        print("falsify: no mutations to run; refusing to pass", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="panday-falsify-base-") as tmp:
        base = Path(tmp)
        copy_tree(REPO, base)
        pythons = {m.extra: python_for(m.extra) for m in mutations}
        if not all(_imports_from(base, python) for python in pythons.values()):
            print(
                "falsify: the scratch copy does not shadow the installed packages", file=sys.stderr
            )
            return 1
        for extra, python in sorted(pythons.items()):
            union = sorted({t for m in mutations if m.extra == extra for t in m.tests})
            code, tail = run_tests(base, union, python)
            if code != 0:
                print(
                    f"falsify: the named tests do not pass unmutated (exit {code}):\n{tail}",
                    file=sys.stderr,
                )
                return 1
            print(f"falsify: baseline: {len(union)} named tests pass on the unmutated tree")
        plain = [m for m in mutations if not m.extra]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            outcomes = list(pool.map(run_one, plain, [base] * len(plain)))
        outcomes += [run_one(m, base, pythons[m.extra]) for m in mutations if m.extra]
    killed = 0
    for outcome in outcomes:
        mark = "killed  " if outcome.status == "killed" else outcome.status.upper().ljust(8)
        # A kill through a failed positive control still counts (the mutation broke the
        # permitted path too, e.g. an inverted allowlist), but it is named as such.
        how = " (through an inconclusive control)" if _via_control(outcome) else ""
        print(f"falsify: {mark} {outcome.mutation.name}{how} ({outcome.seconds:.1f}s)")
        if outcome.status == "killed":
            killed += 1
        else:
            print(f"          {outcome.detail}".replace("\n", "\n          "))
    print(f"falsify: {killed}/{len(outcomes)} mutations killed")
    import results  # noqa: PLC0415 - tools/ is on sys.path when this script runs

    status = "ok" if killed == len(outcomes) else "failed"
    label = f"falsify {killed}/{len(outcomes)}"
    results.record("falsify", label, status=status, killed=killed, total=len(outcomes))
    return 0 if killed == len(outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
