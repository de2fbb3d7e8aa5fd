"""The gates: `uv run nox` runs every gate that applies to this host; `nox --list` shows them.

Every session runs tools installed exactly as uv.lock pins them (`uv sync --locked`), never
floating versions, and prints what it checked. A gate that finds nothing to check fails:
no files, no tests, no schemas, no SBOM components, no workflows.

Tags: `static` sessions run once per change (CI runs them on ubuntu); `matrix` sessions run
on every OS x Python pair in CI (`nox --tags matrix`). Slow or optional sessions are
declared with `default=False` so that a plain `nox` leaves them out.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

import nox

if TYPE_CHECKING:
    from collections.abc import Callable

nox.needs_version = ">=2025.5.1"
nox.options.default_venv_backend = "uv"
# Environments are kept between runs and re-synced from uv.lock at the start of every
# session, which is a no-op when nothing changed: fast, and still exactly the lockfile.
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_external_run = True

REPO = Path(__file__).resolve().parent
TOOLS = REPO / "tools"
sys.path.insert(0, str(TOOLS))
import results  # noqa: E402 - tools/results.py, importable once tools/ is on the path

# One id per `nox` invocation: every gate's result record carries it, so the run report
# never mixes figures from different runs. Tools inherit it through the environment.
os.environ.setdefault(results.RUN_ENV, f"{os.getpid()}-{int(time.time())}")


def _commit_state() -> str:
    """HEAD's commit, with ``+dirty`` when the tree has uncommitted changes (RUN-REPORT.md
    aside: it is the report's own output). Empty outside a git checkout."""
    import subprocess  # noqa: PLC0415 - only here

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    head = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--", ".", ":(exclude)RUN-REPORT.md")
    return f"{head}+dirty" if head and dirty else head


# Which commit (and whether a dirty tree) the gates of this run saw: the run report's stamp.
os.environ.setdefault(results.COMMIT_ENV, _commit_state())


def _gate(name: str) -> Callable[[Callable[[nox.Session], None]], Callable[[nox.Session], None]]:
    """Record the gate's outcome for the run report: failed if the session raised, else ok
    (with the figures the gate's tool recorded, or a bare record if it recorded none)."""

    def wrap(fn: Callable[[nox.Session], None]) -> Callable[[nox.Session], None]:
        @functools.wraps(fn)
        def run(session: nox.Session) -> None:
            try:
                fn(session)
            except BaseException:
                results.record(name, f"{name} FAILED", status="failed")
                raise
            if not results.recorded_this_run(name):
                results.record(name)

        return run

    return wrap


# The static gates share one environment (every tool of the `dev` group, every workspace
# package), synced once from uv.lock and re-synced as a no-op by each gate after the first:
# building, syncing and byte-compiling a separate copy per gate would cost more than most
# gates do. `tests` keeps a nox environment of its own, because CI runs it per Python.
SHARED_ENV = REPO / ".nox" / "_static"


def _venv(session: nox.Session) -> Path:
    return Path(session.virtualenv.location)


def _uv_sync(session: nox.Session, env_dir: Path, python: str, *groups: str) -> None:
    """Install exactly what uv.lock pins for `groups` and all workspace packages."""
    session.run_install(
        "uv", "sync", "--locked", "--no-default-groups", "--compile-bytecode", "--all-packages",
        "--python", python, *(f"--group={g}" for g in groups),
        env={"UV_PROJECT_ENVIRONMENT": str(env_dir)},
        external=True,
        silent=True,
    )  # fmt: skip


def _shared(session: nox.Session) -> Path:
    """Sync the shared static environment; return its bin directory."""
    _uv_sync(session, SHARED_ENV, sys.executable, "dev")
    return SHARED_ENV / "bin"


def _tool(session: nox.Session, script: str, *args: str, env: dict[str, str] | None = None) -> None:
    """Run a gate script from tools/ with the shared environment's Python (and its PATH)."""
    bin_dir = _shared(session)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    session.run(
        str(bin_dir / "python"), str(TOOLS / script), *args,
        env={"PATH": path, "VIRTUAL_ENV": str(SHARED_ENV), **(env or {})},
        external=True,
    )  # fmt: skip


@nox.session(venv_backend="none", tags=["static"])
@_gate("fmt")
def fmt(session: nox.Session) -> None:
    """ruff format --check over the whole repository."""
    ruff = str(_shared(session) / "ruff")
    out = session.run(ruff, "format", "--check", "--diff", ".", silent=True, external=True) or ""
    counts = re.findall(r"(\d+) files? (?:already formatted|would be reformatted)", str(out))
    total = sum(int(n) for n in counts)
    if total == 0:
        session.error(f"ruff format checked no files: {out!s}")
    print(f"fmt: {total} Python files checked, all formatted")


@nox.session(venv_backend="none", tags=["static"])
@_gate("lint")
def lint(session: nox.Session) -> None:
    """ruff check with every rule selected (config: pyproject.toml); any finding fails."""
    ruff = str(_shared(session) / "ruff")
    files = str(session.run(ruff, "check", "--show-files", ".", silent=True, external=True)).split()
    count = sum(1 for f in files if f.endswith((".py", ".pyi")))
    if count == 0:
        session.error("ruff found no files to lint")
    session.run(ruff, "check", "--no-fix", ".", external=True)
    print(f"lint: {count} Python files checked, 0 findings")


@nox.session(venv_backend="none", tags=["static"])
@_gate("typecheck")
def typecheck(session: nox.Session) -> None:
    """pyright, strict, over packages (with their tests), tools/ and this noxfile."""
    bin_dir = _shared(session)
    out = session.run(
        str(bin_dir / "pyright"), "--outputjson", "--pythonpath", str(bin_dir / "python"),
        silent=True, success_codes=[0, 1], external=True,
    )  # fmt: skip
    import json  # noqa: PLC0415 - only this session parses JSON here

    report = json.loads(str(out))
    summary = report["summary"]
    for diag in report["generalDiagnostics"]:
        line = diag.get("range", {}).get("start", {}).get("line", -1) + 1
        rule = diag.get("rule", "")
        print(f"{diag['file']}:{line}: {diag['severity']}: {diag['message']} {rule}".rstrip())
    files = summary["filesAnalyzed"]
    errors, warnings = summary["errorCount"], summary["warningCount"]
    if files == 0:
        session.error("pyright analysed no files")
    if errors or warnings:
        session.error(f"pyright: {errors} errors, {warnings} warnings in {files} files")
    print(f"typecheck: {files} files analysed by pyright {report['version']} (strict), 0 errors")
    results.record("typecheck", f"typecheck ({files} files)", files=files)


@nox.session(tags=["matrix"])
@_gate("tests")
def tests(session: nox.Session) -> None:
    """pytest (+ hypothesis) over every package's tests and tools/tests.

    The escape suites (packages/*/tests/escape) are left to the `escape` session. Tests for
    another OS are skipped with a visible reason by the tests themselves; `-ra` lists them.
    """
    venv = _venv(session)
    _uv_sync(session, venv, str(venv / "bin" / "python"), "test", "supply-chain")
    dirs = [str(p.relative_to(REPO)) for p in sorted(REPO.glob("packages/*/tests"))]
    dirs.append(str((TOOLS / "tests").relative_to(REPO)))
    junit = venv / "junit.xml"
    # Tests marked `slow` (the gate tools' own red-case tests, which run pip-audit, zizmor...)
    # are left out of a local run to keep `nox` short; CI (CI=true) and .ci/run run them.
    everything = os.environ.get("CI") == "true" or os.environ.get("PANDAY_SLOW_TESTS") == "1"
    if not everything:
        print("tests: tests marked slow are deselected here (CI runs them; PANDAY_SLOW_TESTS=1)")
    common = [
        *dirs,
        "--ignore-glob=*/tests/escape",
        "--ignore-glob=*/tests/escape/*",
        "--ignore-glob=*/tests/ray",  # the `ray` session's, with Ray installed
        "--ignore-glob=*/tests/ray/*",
        "-p",
        "no:cacheprovider",
    ]
    slow = "" if everything else " and not slow"
    junits = [venv / "junit.xml", venv / "junit-serial.xml"]
    # Tests a -m expression leaves out still count toward the floors (tools/floors.py, as a
    # plugin, lists them): a floor means the same here as in CI, which runs the slow ones.
    deselected = venv / "deselected.txt"
    deselected.unlink(missing_ok=True)
    # One worker per core (pytest-xdist): most of these tests wait on a jail, a socket or a
    # clock, so two workers on two cores take ~0.55x the time of one. Tests marked `serial`
    # watch what any panday of this user changes on the host (a SIGKILLed panday's cgroups,
    # which the next session of any worker sweeps), so they run after, on their own.
    for junit, options in (
        (junits[0], ["--numprocesses=auto", "-m", f"not serial{slow}"]),
        (junits[1], ["-m", f"serial{slow}"]),
    ):
        session.run(
            "pytest",
            *common,
            f"--junitxml={junit}",
            "-p",
            "floors",
            *options,
            *session.posargs,
            success_codes=[0, 5],  # 5 (nothing collected) is turned into a failure below
            # The tools' tests call their `main`; without a run id they record nothing.
            env={results.RUN_ENV: "", "PANDAY_FLOORS_DESELECTED": str(deselected)},
        )
    totals = {
        k: sum(
            int(s.get(k, "0"))
            for junit in junits
            for s in ET.parse(junit).getroot().iter("testsuite")  # noqa: S314 - pytest's own report
        )
        for k in ("tests", "skipped", "failures", "errors")
    }
    if totals["tests"] == 0:
        session.error("pytest collected no tests: a gate that runs nothing fails")
    passed = totals["tests"] - totals["skipped"] - totals["failures"] - totals["errors"]
    skipped = f"{totals['skipped']} skipped" + (" (reasons above)" if totals["skipped"] else "")
    print(
        f"tests: {passed} passed, {skipped}, {totals['tests']} collected from {len(dirs)} "
        f"test directories on {sys.platform}"
    )
    failed = totals["failures"] + totals["errors"]
    floor_problems = _floors(session, "tests", junits, dirs, deselected=deselected)
    results.record(
        "tests",
        f"{totals['tests']} tests, {failed} failed" + (", below a floor" if floor_problems else ""),
        status="failed" if floor_problems else "ok",
        passed=passed,
        counts=totals,
    )
    if floor_problems:
        session.error(f"tests: {len(floor_problems)} test directories below their floor")


def _floors(
    session: nox.Session,
    table: str,
    junits: list[Path],
    dirs: list[str],
    *,
    deselected: Path | None = None,
) -> list[str]:
    """Check the tests collected per directory against tools/test-floors.toml: none below
    its floor, and every floor within 10% of its count (`nox -s floors -- --write`)."""
    import floors  # noqa: PLC0415 - tools/floors.py, on the path like results

    if session.posargs:
        print(f"{table}: floors not checked: arguments narrowed the run ({session.posargs})")
        return []
    found = floors.counts(junits, dirs)
    if deselected is not None:
        extra = floors.deselected_counts(deselected, junits, dirs)
        found = {d: n + extra.get(d, 0) for d, n in found.items()}
    problems = floors.check(found, floors.load(table))
    for problem in problems:
        print(f"{table}: FLOOR: {problem}")
    if not problems:
        shown = ", ".join(f"{d} {n}" for d, n in sorted(found.items()))
        print(f"{table}: every directory at or above its floor ({shown})")
    return problems


@nox.session(venv_backend="none", default=False)
def floors(session: nox.Session) -> None:
    """Test floors against the last `tests` and `escape` runs' reports; with `-- --write`,
    raise tools/test-floors.toml to those counts (floors only go up)."""
    tests_dir = REPO / ".nox" / "tests"
    who = "root" if hasattr(os, "geteuid") and os.geteuid() == 0 else "user"
    escape = sorted(results.RESULTS.glob(f"escape-{who}*.xml"))
    tables = [
        ("tests", [tests_dir / "junit.xml", tests_dir / "junit-serial.xml"]),
        ("escape", escape),
    ]
    for table, junits in tables:
        present = [j for j in junits if j.is_file()]
        if not present:
            session.error(f"floors: no {table} report here: run `nox -s {table}` first")
        extra = ["--deselected", str(tests_dir / "deselected.txt")] if table == "tests" else []
        _tool(
            session, "floors.py", "--table", table, "--measure", *map(str, present), *extra,
            *session.posargs,
        )  # fmt: skip


@nox.session(venv_backend="none", tags=["static"])
@_gate("schemas")
def schemas(session: nox.Session) -> None:
    """The committed JSON Schemas in schemas/ match what the code generates."""
    _tool(session, "schemas.py")


@nox.session(venv_backend="none", tags=["static"])
@_gate("lock")
def lock(session: nox.Session) -> None:
    """uv.lock is what a fresh resolution of every pyproject.toml gives, and is committed.

    `uv run nox` (without ``--locked``) re-locks before any gate runs, so a stale lock
    would reach this gate already rewritten: the README, `.ci/run` and CI run
    ``uv run --locked nox``, which refuses a stale lock before nox starts, and this gate
    also fails when uv.lock differs from the committed one (a lock rewritten on the way in).
    """
    session.run("uv", "lock", "--check", external=True)
    packages = tomllib.loads((REPO / "uv.lock").read_text(encoding="utf-8")).get("package", [])
    if not packages:
        session.error("uv.lock lists no packages")
    if (REPO / ".git").exists():
        changed = session.run(
            "git", "status", "--porcelain", "--", "uv.lock", silent=True, external=True
        )
        if str(changed or "").strip():
            session.error(
                "uv.lock differs from the committed one (did `uv run` re-lock it? the gates "
                "run as `uv run --locked nox`): commit it, or restore it with "
                "`git checkout uv.lock`"
            )
    print(
        f"lock: uv.lock matches a fresh resolution of every pyproject.toml (uv lock --check) "
        f"and the committed file; it pins {len(packages)} packages"
    )


@nox.session(venv_backend="none", tags=["static"])
@_gate("sbom")
def sbom(session: nox.Session) -> None:
    """CycloneDX 1.6 SBOMs per package and for the workspace, validated and reproducible."""
    _tool(session, "sbom.py", "--check-reproducible")


@nox.session(venv_backend="none", tags=["static"])
@_gate("audit")
def audit(session: nox.Session) -> None:
    """pip-audit, strict, over every locked pin; offline when PANDAY_ADVISORY_DB is set."""
    db = os.environ.get("PANDAY_ADVISORY_DB")
    if db:
        print(f"audit: PANDAY_ADVISORY_DB={db}: auditing against that offline snapshot")
    _tool(session, "audit.py")


@nox.session(venv_backend="none", tags=["static"], requires=["sbom"])
@_gate("licenses")
def licenses(session: nox.Session) -> None:
    """The licence policy (tools/licenses.toml) over every SBOM component."""
    _tool(session, "licenses.py")


@nox.session(venv_backend="none", tags=["static"])
@_gate("actions")
def actions(session: nox.Session) -> None:
    """GitHub workflows: schema-valid and clean under zizmor's strictest persona (offline)."""
    _tool(session, "workflows.py")


@nox.session(venv_backend="none", tags=["static"])
@_gate("build")
def build(session: nox.Session) -> None:
    """sdists and wheels for every package; metadata checked; wheels run from outside the tree."""
    _tool(session, "artifacts.py")


@nox.session(venv_backend="none", tags=["static"])
@_gate("docs")
def docs(session: nox.Session) -> None:
    """The generated tables in docs/ (fields, enforcement, guarantees) match the code."""
    _tool(session, "gen_docs.py", "--check")


@nox.session(venv_backend="none", tags=["static"])
@_gate("fields")
def fields(session: nox.Session) -> None:
    """Every policy and manifest field is read, refused or n/a (with a reason) on every tier."""
    _tool(session, "fields_lint.py")


# Not tagged `static`: CI runs it in its own step as root (see ci.yml), because guards on
# cgroup ceilings can only be exercised by a caller that can create cgroups.
@nox.session(venv_backend="none", tags=["falsify"])
@_gate("falsify")
def falsify(session: nox.Session) -> None:
    """Every registered guard mutation turns its named tests red (tools/mutations.toml)."""
    _tool(session, "falsify.py", *session.posargs)


# ------------------------------------------------------------------ T2 Linux (issue 4)
# `escape`: every escape suite (packages/*/tests/escape) as the current user: the host's own
# runs and fails, never skips, when its jail cannot run; the other OS's is skipped with the
# reason. The root + unprivileged double run is tools/ci/escape-as-user.sh, which
# `.ci/run` calls as root (`escape_both` here does the same).
# `bench`: the benchmark harness, not a default session (slow; measures this machine):
# every benchmark side by side, results merged into benchmarks/results.json by name,
# docs/benchmarks.md and its charts rendered; fails when a budget (a ratio) is missed.


@nox.session(venv_backend="none", tags=["matrix"])
@_gate("escape")
def escape(session: nox.Session) -> None:
    """The escape suites (must-fail probes, each with a positive control), -ra shows skips.

    Every suite runs as the current user; the host's own suite fails, never skips, when its
    jail cannot run, and the other OS's is skipped with the reason. On Linux as root, the
    Linux suite then runs again as an unprivileged user (tools/ci/escape-as-user.sh creates
    `panday-escape`), because the jail must hold for both kinds of caller. As an ordinary
    user the second pass cannot be made here, and the session says so.
    """
    bin_dir = _shared(session)
    suites = [str(p.relative_to(REPO)) for p in sorted(REPO.glob("packages/*/tests/escape"))]
    if not suites:
        session.error("no escape suite found: a gate that runs nothing fails")
    who = "root" if hasattr(os, "geteuid") and os.geteuid() == 0 else "user"
    host = "linux" if sys.platform.startswith("linux") else "macos"
    results.RESULTS.mkdir(parents=True, exist_ok=True)
    first = results.RESULTS / f"escape-{who}.xml"
    passes = [(f"escape {host} {who}", first)]
    # As root on Linux the unprivileged pass runs at the same time as the root pass, each
    # on a core of its own (they share nothing: other users, other directories, other
    # cgroups); its output is shown after the root pass's.
    second_pass: tuple[subprocess.Popen[bytes], Path] | None = None
    if host == "linux" and who == "root":
        second = results.RESULTS / "escape-unprivileged.xml"
        second.unlink(missing_ok=True)
        log = results.RESULTS / "escape-unprivileged.log"
        script = str(TOOLS / "ci" / "escape-as-user.sh")
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["bash", script, "--user-only", "--junit", str(second)],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        second_pass = (proc, log)
        passes.append((f"escape {host} user", second))
    elif host == "linux":
        print("escape: the root pass was not run (not root); CI runs both (see .ci/run)")
    # Each suite in a pytest process of its own, the host's first (its report keeps the name
    # escape-<who>.xml): a collection-time import failure in one suite cannot abort the
    # other, and every suite runs even when an earlier one failed.
    try:
        runs, failed = _escape_runs(session, bin_dir, suites, host=host, who=who, first=first)
    finally:
        if second_pass is not None:
            proc, log = second_pass
            proc.wait()
            print(log.read_text(encoding="utf-8", errors="replace"), end="")
    if second_pass is not None and second_pass[0].returncode != 0:
        session.error(f"escape: the unprivileged pass failed (exit {second_pass[0].returncode})")
    if failed:
        session.error(f"escape: failed: {', '.join(failed)}")
    labels: list[str] = []
    for label, junit in passes:
        passed, total = _junit_counts(junit, f"tier_{host}")
        if total == 0:
            session.error(f"{label}: no probe of the {host} suite ran")
        t1_passed, t1_total = _junit_counts(junit, "tests.escape.test_t1")  # T1 Linux's probes
        t1 = f" (T1 {t1_passed}/{t1_total})" if t1_total else ""
        labels.append(f"{label} {passed}/{total}{t1}")
    if _floors(session, "escape", [junit for _, junit in runs], suites):
        results.record("escape", " · ".join([*labels, "below a floor"]), status="failed")
        session.error("escape: an escape suite is below its floor")
    results.record("escape", " · ".join(labels))


def _escape_runs(
    session: nox.Session, bin_dir: Path, suites: list[str], *, host: str, who: str, first: Path
) -> tuple[list[tuple[str, Path]], list[str]]:
    """Run each escape suite in a pytest process of its own, the host's first (its report is
    `first`): (suite, JUnit report) for each, and the suites that failed."""
    from nox.command import CommandFailed  # noqa: PLC0415 - only this session catches it

    own = [s for s in suites if f"tier_{host}" in s] or suites[:1]
    runs = [(suite, first) for suite in own[:1]]
    runs += [(s, _other_junit(first, s)) for s in suites if s not in own[:1]]
    failed: list[str] = []
    for suite, junit in runs:
        print(f"=== escape suite {suite} as {who} ===")
        junit.unlink(missing_ok=True)  # a report left by an earlier run must not count
        try:
            session.run(
                str(bin_dir / "python"), "-m", "pytest", suite,
                "-q", "-ra", "-p", "no:cacheprovider", f"--junitxml={junit}", *session.posargs,
                env={
                    "VIRTUAL_ENV": str(SHARED_ENV),
                    # As root the cgroup ceilings must be there; an ordinary user gets them
                    # refused.
                    "PANDAY_ESCAPE_REQUIRE_CGROUPS": "1" if who == "root" else "0",
                },
                external=True,
            )  # fmt: skip
        except CommandFailed:
            failed.append(suite)
    if host == "linux" and not _bwrap_pass(session, bin_dir, who=who):
        failed.append("packages/tier_linux/tests/escape (a bwrap per command)")
    return runs, failed


def _bwrap_pass(session: nox.Session, bin_dir: Path, *, who: str) -> bool:
    """The Linux suite again with the session jail off: the path of every T2 command the
    session jail does not serve (the relay, an overlay, a terminal, a command beside
    another, a host where it cannot start). No report of its own: the run above counts."""
    from nox.command import CommandFailed  # noqa: PLC0415 - only this session catches it

    print(f"=== escape suite packages/tier_linux/tests/escape as {who}, a bwrap per command ===")
    try:
        session.run(
            str(bin_dir / "python"), "-m", "pytest", "packages/tier_linux/tests/escape",
            "-q", "-ra", "-p", "no:cacheprovider", *session.posargs,
            env={
                "VIRTUAL_ENV": str(SHARED_ENV),
                "PANDAY_ESCAPE_REQUIRE_CGROUPS": "1" if who == "root" else "0",
                "PANDAY_T2_SESSION_JAIL": "0",
            },
            external=True,
        )  # fmt: skip
    except CommandFailed:
        return False
    return True


def _other_junit(first: Path, suite: str) -> Path:
    """The JUnit report of an escape suite that is not the host's own, beside `first`."""
    tier = suite.split("/")[1] if suite.count("/") > 1 else suite.replace("/", "-")
    return first.with_name(f"{first.stem}-{tier}{first.suffix}")


def _junit_counts(path: Path, package: str) -> tuple[int, int]:
    """(passed, run) for one package's test cases in a JUnit report; skips do not count."""
    if not path.is_file():
        return 0, 0
    passed = total = 0
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314 - pytest's own report
        where = f"{case.get('classname', '')} {case.get('file', '')}"
        if package not in where.replace("/", ".").replace("-", "_"):
            continue
        outcomes = {child.tag for child in case}
        if "skipped" in outcomes:
            continue
        total += 1
        if not outcomes & {"failure", "error"}:
            passed += 1
    return passed, total


@nox.session(venv_backend="none", default=False)
def escape_both(session: nox.Session) -> None:
    """The escape suite as root and as an unprivileged user it creates (root, Linux)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        session.error("escape_both needs root on Linux (it creates an unprivileged user)")
    session.run("bash", str(TOOLS / "ci" / "escape-as-user.sh"), *session.posargs, external=True)


@nox.session(venv_backend="none", default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks side by side; budgets are ratios (results.json, docs/benchmarks.md)."""
    env_dir = REPO / ".nox" / "_bench"
    _uv_sync(session, env_dir, sys.executable, "bench")
    session.run(
        str(env_dir / "bin" / "python"), str(TOOLS / "bench" / "run.py"), *session.posargs,
        env={"VIRTUAL_ENV": str(env_dir)},
        external=True,
    )  # fmt: skip


@nox.session(venv_backend="none", default=False)
def mutmut(session: nox.Session) -> None:
    """mutmut over the policy, host-pattern and path modules; prints the kill rate (slow)."""
    env_dir = REPO / ".nox" / "_mutmut"
    _uv_sync(session, env_dir, sys.executable, "test", "mutation")
    session.run(
        str(env_dir / "bin" / "python"), str(TOOLS / "mutmut_run.py"), *session.posargs,
        env={"VIRTUAL_ENV": str(env_dir)},
        external=True,
    )  # fmt: skip


# ----------------------------------------------------------------------- Ray (issue 17)
# `ray`: panday.ray against a real Ray cluster this session's tests start on 127.0.0.1
# (a head and two worker raylets, plus nodes the tests add, kill or constrain). Ray is an
# optional extra: it is installed from uv.lock into this session's environment only, so no
# other gate (and no user without `panday[ray]`) carries it. In the default run: it takes
# about 45 s on this 2-core machine.


_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray then stays on 127.0.0.1
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",  # workers: this interpreter, not `uv run`
}


@nox.session(venv_backend="none", tags=["ray"])
@_gate("ray")
def ray(session: nox.Session) -> None:
    """panday.ray on a real local Ray cluster (every node, refusals per node, faults, close)."""
    env_dir = REPO / ".nox" / "_ray"
    session.run_install(
        "uv", "sync", "--locked", "--no-default-groups", "--compile-bytecode", "--all-packages",
        "--python", sys.executable, "--group=test", "--extra=ray",
        env={"UV_PROJECT_ENVIRONMENT": str(env_dir)},
        external=True,
        silent=True,
    )  # fmt: skip
    results.RESULTS.mkdir(parents=True, exist_ok=True)
    junit = results.RESULTS / "ray.xml"
    junit.unlink(missing_ok=True)
    session.run(
        str(env_dir / "bin" / "python"), "-m", "pytest", "packages/sdk/tests/ray",
        "-q", "-ra", "-p", "no:cacheprovider", f"--junitxml={junit}", *session.posargs,
        env={**_RAY_ENV, "VIRTUAL_ENV": str(env_dir)},
        external=True,
    )  # fmt: skip
    passed, total = _junit_counts(junit, "tests.ray")
    if total == 0:
        session.error("ray: no test of packages/sdk/tests/ray ran")
    # The Ray falsify entries run here, in the default run (each starts a cluster, one at a
    # time; a byte-identical tree remembers its kills). Their count is this gate's, not
    # the `falsify` gate's: the tool runs outside the run's record (no run id) and its
    # summary line is read back.
    bin_dir = _shared(session)
    out = session.run(
        str(bin_dir / "python"), str(TOOLS / "falsify.py"), "--extra", "ray", "--jobs", "1",
        env={**_RAY_ENV, "VIRTUAL_ENV": str(SHARED_ENV), results.RUN_ENV: ""},
        external=True,
        silent=True,
        success_codes=[0, 1],
    )  # fmt: skip
    text = out if isinstance(out, str) else ""
    print(text, end="")
    summary = next((ln for ln in text.splitlines() if " mutations killed" in ln), "")
    killed, _, rest = summary.removeprefix("falsify: ").partition("/")
    runs = rest.split(" ", 1)[0]
    if not (killed.isdigit() and runs.isdigit()) or killed != runs:
        results.record("ray", f"ray {passed}/{total}; falsify (ray) FAILED", status="failed")
        session.error(f"ray: the Ray falsify entries did not all fail their tests: {summary!r}")
    results.record(
        "ray",
        f"ray {passed}/{total} on a local multi-node cluster; falsify (ray) {killed}/{runs} killed",
        passed=passed,
        killed=int(killed),
    )


@nox.session(venv_backend="none", default=False, tags=["ray"])
@_gate("falsify_ray")
def falsify_ray(session: nox.Session) -> None:
    """The falsify entries whose tests need Ray (`extra = "ray"`) alone, one at a time in
    the ray environment (the `ray` gate runs them too, after its tests)."""
    _tool(session, "falsify.py", "--extra", "ray", "--jobs", "1", env=_RAY_ENV)


# ---------------------------------------------------------------------------- run report
# RUN-REPORT.md is a committed file, so a plain `nox` never rewrites it: `nox -s report`
# does, from the newest run's records (`uv run --locked nox`, then `... nox -s report`).
# `report_fresh` is a default gate (not `static`: a pull request changes code, and CI cannot
# write this host's report): it fails when the committed report names no commit, was written
# from a dirty tree, anything but itself changed since the commit it names, the working tree
# is dirty now, or the report is not what its own records (kept at its end) regenerate.


@nox.session(venv_backend="none", default=False)
def report(session: nox.Session) -> None:
    """Write RUN-REPORT.md from the newest run's gate results (then commit it)."""
    _tool(session, "report.py")


@nox.session(venv_backend="none")
def report_fresh(session: nox.Session) -> None:
    """RUN-REPORT.md describes HEAD: its commit is HEAD's or only the report changed since,
    the working tree is clean, and the report regenerates from its records as committed."""
    _tool(session, "report.py", "--check")
