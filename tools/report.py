"""Write RUN-REPORT.md from the gates' own results (`uv run --locked nox -s report`).

The report says which commit the gates ran on (and whether the tree had uncommitted
changes), what that run verified (a verification line in the style of the seed's run
report, with any missed benchmark budget counted as a failure), what this host could not
verify and which CI job is its authority (and whether a CI run's results exist for it),
the guarantee table of each tier as it holds on this host, the benchmark ratios, and the
mutation-testing measurements (kill rate against floor per guard module, whether each still
matches today's module and tests, and every survivor with its reason). Its only inputs are
the result records the gates wrote (tools/results.py), the tiers' capability data,
benchmarks/results.json, the measurements `nox -s mutmut` saved in .nox/mutmut with the
committed floors and survivors, and, optionally, a CI run's results (``PANDAY_CI_RUN``, the
JSON of ``gh run view RUN --json headSha,url,jobs``).

A plain `nox` does not rewrite it (it is a committed file): `nox -s report` does, from the
newest run's records. `--check` (the `report_fresh` gate) fails when the committed report is
stale: it names no commit, was written from a dirty tree, or files other than itself
changed since the commit it names; when the working tree has uncommitted changes now (the
report can only describe committed code); and when the report is not what its records give.

The records a report was written from are kept at its end (an HTML comment, one JSON
record per gate), so `--check` regenerates the whole report from them (with the same inputs
the writer had: benchmarks/results.json, the tiers' data, the mutmut measurements) and
compares it with the committed text: a figure edited by hand ("1486 tests" -> "1999"), a
failure deleted ("benchmarks FAILED"), or records edited to match (they must equal what
this host recorded for that run, while it still holds them) all fail it. The date is the
newest record's, so regenerating never differs by the day it runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, cast

import mutmut_run
import results

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.capabilities import TierCapabilities

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "RUN-REPORT.md"
BENCH = REPO / "benchmarks" / "results.json"

# The order of the verification line: every default gate, as the seed's report listed them.
GATES = (
    "fmt", "lint", "typecheck", "tests", "escape", "schemas", "lock", "docs", "fields",
    "falsify", "sbom", "audit", "licenses", "actions", "build", "ray",
)  # fmt: skip
CI_RUN_ENV = "PANDAY_CI_RUN"
"""A CI run's results: the JSON of `gh run view RUN --json headSha,url,jobs`."""
COMMIT_PREFIX = "- Commit: "
HEADINGS = (
    "# Run report",
    "## Verification",
    "## Not verified on this host",
    "## Guarantees on this host",
    "## Benchmarks",
    "## Mutation testing",
)


def verification(
    records: dict[str, dict[str, object]], budgets: tuple[int, list[str]] | None = None
) -> tuple[str, list[str], list[str]]:
    """The verification line, the gates that failed and the gates this run did not run.

    `budgets` is (budgets checked, names of the missed ones) from benchmarks/results.json:
    a missed budget is a failure of the `benchmarks` entry, shown as such.
    """
    parts: list[str] = []
    failed: list[str] = []
    missing: list[str] = []
    for gate in GATES:
        record = records.get(gate)
        if record is None:
            missing.append(gate)
            continue
        if record.get("status") != "ok":
            failed.append(gate)
        parts.append(str(record.get("label", gate)))
    if budgets is not None:
        total, missed = budgets
        if missed:
            failed.append("benchmarks")
            parts.append(
                f"benchmarks FAILED ({total - len(missed)}/{total} budgets met; missed: "
                f"{', '.join(missed)})"
            )
        else:
            parts.append(f"benchmarks ({total}/{total} budgets met)")
    return " · ".join(parts), failed, missing


def _macos_probes() -> int:
    """How many macOS escape probes this host skipped (from the escape gate's JUnit file)."""
    count = 0
    for junit in sorted(results.RESULTS.glob("escape-*.xml")):
        for case in ET.parse(junit).getroot().iter("testcase"):  # noqa: S314 - pytest's report
            if "tier_macos" in case.get("classname", "") and any(c.tag == "skipped" for c in case):
                count += 1
        if count:
            break
    return count


def _cgroup_v2_controllers() -> bool:
    path = Path("/sys/fs/cgroup/cgroup.controllers")
    alt = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    for candidate in (path, alt):
        try:
            # The ceilings panday sets need these three; hugetlb alone (as here) is not v2.
            if {"memory", "pids", "cpu"} <= set(candidate.read_text(encoding="utf-8").split()):
                return True
        except OSError:
            continue
    return False


def ci_run() -> dict[str, object] | None:
    """The CI run named by PANDAY_CI_RUN (`gh run view --json headSha,url,jobs`), if any."""
    path = os.environ.get(CI_RUN_ENV)
    if not path:
        return None
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"report: {CI_RUN_ENV}={path}: unreadable: {exc}") from None
    if not isinstance(doc, dict) or "jobs" not in doc:
        raise SystemExit(f"report: {CI_RUN_ENV}={path}: not the JSON of `gh run view --json jobs`")
    return cast("dict[str, object]", doc)


def ci_verdict(run: dict[str, object] | None, job_prefix: str) -> str:
    """What CI says about the jobs whose names start with `job_prefix`."""
    if run is None:
        return f"not yet run: no CI run's results are recorded here (set {CI_RUN_ENV})"
    jobs = [
        cast("dict[str, object]", j)
        for j in cast("list[object]", run.get("jobs", []))
        if isinstance(j, dict)
    ]
    mine = [j for j in jobs if str(j.get("name", "")).startswith(job_prefix)]
    where = f"CI run {run.get('url', '?')} (commit {str(run.get('headSha', '?'))[:12]})"
    if not mine:
        return f"not yet run: {where} has no job named {job_prefix}…"
    bad = [str(j.get("name")) for j in mine if j.get("conclusion") != "success"]
    if bad:
        return f"FAILED in {where}: {', '.join(bad)}"
    return f"passed in {where}: {len(mine)} jobs"


def not_verified(run: dict[str, object] | None = None) -> list[str]:
    """Each platform-gated module or suite this host could not run, with its authority."""
    rows: list[str] = []
    macos_job = "tests (macos-latest"
    macos_ci = "`ci.yml` job `tests (macos-latest, 3.11/3.12/3.13)` (`nox --tags matrix`)"
    linux_ci = "`ci.yml` job `tests (ubuntu-latest, 3.11/3.12/3.13)` (`nox --tags matrix`)"
    macos = f"{macos_ci}: {ci_verdict(run, macos_job)}"
    if sys.platform.startswith("linux"):
        probes = _macos_probes()
        suite = f"{probes} probes" if probes else "its probes"
        rows += [
            (
                "- The T2 macOS runner (`packages/tier_macos`: `sandbox-exec`, profile "
                f"application, rlimits, process-group kill) → macOS CI only, {macos}."
            ),
            (
                f"- The macOS escape suite (`packages/tier_macos/tests/escape`, {suite}, skipped "
                f"here with the reason) → macOS CI only, {macos}."
            ),
            (
                "- The macOS path of the shared exec machinery (`panday_core/execution.py`: "
                f"exit watch through kqueue) → macOS CI only, {macos}."
            ),
            (
                "- The macOS walk of the T0 path resolver (no openat2 there; the walk itself is "
                f"tested here by forcing it) → {macos}."
            ),
        ]
        if not _cgroup_v2_controllers():
            rows.append(
                "- cgroup v2 ceilings (this host's cgroup v2 holds no memory, pids or cpu "
                f"controller; its limits ran on cgroup v1) → {linux_ci}, whose runners use "
                f"cgroup v2: {ci_verdict(run, 'tests (ubuntu-latest')}."
            )
    elif sys.platform == "darwin":
        rows += [
            (
                "- The T2 Linux tier and its escape suite (bubblewrap, seccomp, cgroups), as root "
                f"and as an unprivileged user → {linux_ci} and `.ci/run` on Debian: "
                f"{ci_verdict(run, 'tests (ubuntu-latest')}."
            ),
        ]
    version = ".".join(str(v) for v in sys.version_info[:2])
    others = [v for v in ("3.11", "3.12", "3.13") if v != version]
    rows.append(
        f"- Python {' and '.join(others)} (this run used {version}) → the `ci.yml` test matrix: "
        f"{ci_verdict(run, 'tests (')}."
    )
    rows.append(
        "- Publishing (PyPI trusted publishing, provenance attestations) → `release.yml` on "
        "a version tag; it has never run from this host."
    )
    return rows


def _tier_tables() -> list[tuple[str, str | None, TierCapabilities]]:
    from panday import tiers  # noqa: PLC0415 - tools import packages, never the reverse

    out: list[tuple[str, str | None, TierCapabilities]] = []
    for tier in tiers.ALL_TIERS:
        reason = tiers.unavailable_reason(tier)
        caps = tiers.declared(tier)
        if reason is None and tiers.entry(tier).runs_commands:
            caps = tiers.host_capabilities(tier)  # as probed here
        out.append((tier, reason, caps))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def guarantees() -> list[str]:
    lines: list[str] = []
    for tier, reason, caps in _tier_tables():
        lines.append(f"### {tier}")
        lines.append("")
        if reason is not None:
            lines.append(f"Not available on this host: {reason}. Its declared table follows.")
            lines.append("")
        lines += ["| guarantee | mechanism | support |", "|---|---|---|"]
        lines += [
            f"| {_cell(g.name)} | {_cell(g.mechanism)} | {g.support} |" for g in caps.guarantees
        ]
        refused = [f.field for f in caps.fields if f.support == "not-enforced"]
        lines.append("")
        lines.append(
            f"Policy fields refused here: {', '.join(f'`{f}`' for f in refused) or 'none'}."
        )
        lines.append("")
    return lines


def _ratios(name: str, node: object, out: list[tuple[str, str, str, str]]) -> None:
    if not isinstance(node, dict):
        return
    doc = cast("dict[str, object]", node)
    if "ratio" in doc and "budget" in doc:
        ok = doc.get("within_budget")
        verdict = "yes" if ok is True else "no" if ok is False else "?"
        out.append((name, str(doc["ratio"]), str(doc["budget"]), verdict))
        return
    met = doc.get("budgets_met")
    if isinstance(met, dict):
        for key, value in sorted(cast("dict[str, object]", met).items()):
            out.append((f"{name}: {key}", "see docs/benchmarks.md", "", "yes" if value else "no"))
        return
    before = len(out)
    for key, value in sorted(doc.items()):
        _ratios(f"{name}.{key}" if name else key, value, out)
    verdict = doc.get("within_budget")
    if name and isinstance(verdict, bool) and len(out) == before:
        # A benchmark that names no budget row of its own still judged itself: its
        # verdict is counted, so a missed budget can never vanish from the report.
        out.append((name, "see docs/benchmarks.md", "", "yes" if verdict else "no"))


def _bench_rows() -> list[tuple[str, str, str, str]] | None:
    if not BENCH.is_file():
        return None
    rows: list[tuple[str, str, str, str]] = []
    _ratios("", json.loads(BENCH.read_text(encoding="utf-8")), rows)
    return rows


def budgets() -> tuple[int, list[str]] | None:
    """(budgets checked, the missed ones) in benchmarks/results.json; None without it."""
    rows = _bench_rows()
    if rows is None:
        return None
    return len(rows), [name for name, _, _, met in rows if met != "yes"]


def benchmarks() -> list[str]:
    rows = _bench_rows()
    if rows is None:
        return ["No `benchmarks/results.json` yet: run `uv run --locked nox -s bench`."]
    lines = [
        (
            "From `benchmarks/results.json` (`uv run --locked nox -s bench`; details in "
            "docs/benchmarks.md). A missed budget counts as a failure in the verification line."
        ),
        "",
        "| benchmark | ratio | budget | within budget |",
        "|---|---|---|---|",
    ]
    lines += [f"| {_cell(a)} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return lines


def mutation_testing(last: Path = mutmut_run.LAST) -> list[str]:
    """Each guard module's latest `nox -s mutmut` measurement on this machine, its floor,
    whether it still matches today's module and tests, and every survivor with its reason.

    mutmut is not a default gate (CI's mutation job runs it), so this section reads the
    measurements it saved rather than this run's records, and says when each was taken."""
    floors = mutmut_run.load_floors()
    listed = mutmut_run.load_survivors()
    rows: list[str] = []
    survivors: list[str] = []
    for name in mutmut_run.MODULES:
        if not (last / f"{name}.json").is_file():
            rows.append(f"| {name} | not measured here | | | | | |")
            continue
        m = mutmut_run.load_last(name, last)
        floor = floors.get(name)
        meets = floor is not None and m.rate + 1e-9 >= floor
        current = "yes" if m.inputs == mutmut_run.inputs_digest(name) else "no: re-measure"
        unlisted = sum(
            1
            for x in m.survivors
            if listed.get(x.key) is None or listed[x.key].reason in {"", mutmut_run.UNREVIEWED}
        )
        rows.append(
            f"| {name} | {m.killed}/{m.total} | {m.rate:.1f}% | "
            f"{'none' if floor is None else f'{floor:.1f}%'}{'' if meets else ' (below)'} | "
            f"{len(m.survivors)}{f' ({unlisted} without a reason)' if unlisted else ''} | "
            f"{m.measured_at[:10] or 'undated'} | {current} |"
        )
        for x in m.survivors:
            entry = listed.get(x.key)
            reason = entry.reason if entry else "NOT LISTED"
            change = "<br>".join(f"`{_cell(line)}`" for line in x.change.splitlines())
            survivors.append(f"| {name} | {_cell(x.function)} | {change} | {_cell(reason)} |")
    return [
        (
            "`uv run --locked nox -s mutmut` mutates each guard module and runs its unit tests "
            "against every mutant (not a default gate: CI's mutation job runs it). Its latest "
            "measurements on this machine (`.nox/mutmut/`), against the committed floors "
            "(`tools/mutmut-floors.toml`, which only go up); *matches this tree* says whether "
            "the module and its tests are still the ones measured."
        ),
        "",
        "| module | killed | rate | floor | survivors | measured | matches this tree |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        (
            "<details><summary>Every surviving mutant and why it survives "
            f"({len(survivors)}, from <code>tools/mutmut-survivors.toml</code>)</summary>"
        ),
        "",
        "| module | function | change | reason |",
        "|---|---|---|---|",
        *survivors,
        "",
        "</details>",
    ]


def _names(items: list[str]) -> str:
    return ", ".join(items) or "none"


def git_state(repo: Path = REPO) -> tuple[str, bool] | None:
    """(HEAD's commit, whether the tree has uncommitted changes), None outside a checkout.

    The report itself and what the gates write under .nox/ and dist/ are not changes.
    """
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", f":(exclude){OUT.name}"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return head, bool(status.strip())


def _stamp(records: dict[str, dict[str, object]]) -> str:
    """The commit line: where the gates ran (their records say), clean or dirty."""
    commits = {str(r.get("commit")) for r in records.values() if r.get("commit")}
    dirty = any(r.get("dirty") for r in records.values())
    if len(commits) != 1:
        return f"{COMMIT_PREFIX}unknown (the gate records name {len(commits)} commits)"
    state = "dirty (uncommitted changes when the gates ran)" if dirty else "clean"
    return f"{COMMIT_PREFIX}{commits.pop()} ({state})"


def render(
    records: dict[str, dict[str, object]],
    today: dt.date,
    *,
    bench: tuple[int, list[str]] | None = None,
    run: dict[str, object] | None = None,
) -> str:
    line, failed, missing = verification(records, bench)
    who = "root" if hasattr(os, "geteuid") and os.geteuid() == 0 else "an ordinary user"
    lines = [
        HEADINGS[0],
        "",
        "Written by `uv run --locked nox -s report` from the results the gates of the last",
        "`uv run --locked nox` recorded; regenerating it changes only counts, dates and the",
        "commit. `nox -s report_fresh` fails when it is stale.",
        "",
        _stamp(records),
        f"- Date: {today.isoformat()}",
        (
            f"- Host: {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, run as {who}"
        ),
        "",
        HEADINGS[1],
        "",
        line or "(no gate results recorded: run `uv run --locked nox`)",
        "",
        f"Failed: {_names(failed)}. Not run in this run: {_names(missing)}.",
        "",
        HEADINGS[2],
        "",
        *not_verified(run),
        "",
        HEADINGS[3],
        "",
        "Each tier's guarantee table as it holds on this host (the data `panday doctor` shows).",
        "",
        *guarantees(),
        HEADINGS[4],
        "",
        *benchmarks(),
        "",
        HEADINGS[5],
        "",
        *mutation_testing(),
    ]
    return "\n".join(lines).rstrip() + "\n\n" + records_block(records)


RECORDS_OPEN = "<!-- gate records (`nox -s report_fresh` regenerates this report from them):"
RECORDS_CLOSE = "-->"


def records_block(records: dict[str, dict[str, object]]) -> str:
    """The records a report is written from, one JSON line per gate, as an HTML comment."""
    body = [json.dumps(records[g], sort_keys=True, ensure_ascii=True) for g in sorted(records)]
    return "\n".join([RECORDS_OPEN, *body, RECORDS_CLOSE]) + "\n"


def embedded_records(text: str) -> dict[str, dict[str, object]] | None:
    """The records kept at the end of a report (None: it carries none, or they do not
    parse)."""
    start = text.rfind(f"\n{RECORDS_OPEN}\n")
    if start < 0:
        return None
    body = text[start + len(RECORDS_OPEN) + 2 :].split(f"\n{RECORDS_CLOSE}", 1)[0]
    out: dict[str, dict[str, object]] = {}
    try:
        for line in body.splitlines():
            doc = cast("dict[str, object]", json.loads(line))
            out[str(doc["gate"])] = doc
    except (ValueError, KeyError, TypeError):
        return None
    return out


def records_date(records: dict[str, dict[str, object]]) -> dt.date:
    """The day the newest record was written (UTC): the report's date, so that the same
    records always render the same report."""
    written = [float(cast("float", r.get("written", 0.0))) for r in records.values()]
    newest = max(written, default=0.0)
    if newest <= 0:
        return dt.datetime.now(tz=dt.UTC).date()
    return dt.datetime.fromtimestamp(newest, tz=dt.UTC).date()


def recorded_run(run_id: str, where: Path = results.RESULTS) -> dict[str, dict[str, object]]:
    """What this host holds of run `run_id`'s records: the copy `nox -s report` kept when it
    wrote the report (`reported/<run>.json`), else the gates' own files if no later run
    has overwritten them."""
    kept = where / "reported" / f"{run_id}.json"
    if run_id and kept.is_file():
        try:
            return cast("dict[str, dict[str, object]]", json.loads(kept.read_text("utf-8")))
        except (OSError, ValueError):
            pass
    out: dict[str, dict[str, object]] = {}
    for path in sorted(where.glob("*.json")) if where.is_dir() else []:
        try:
            doc = cast("dict[str, object]", json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        if doc.get("run") == run_id:
            out[str(doc["gate"])] = doc
    return out


def keep_records(records: dict[str, dict[str, object]], where: Path = results.RESULTS) -> None:
    """Keep the records a report was written from (`recorded_run` compares with them)."""
    runs = {str(r.get("run", "")) for r in records.values()}
    if len(runs) != 1 or not (run_id := runs.pop()):
        return
    (where / "reported").mkdir(parents=True, exist_ok=True)
    text = json.dumps(records, sort_keys=True, indent=1) + "\n"
    (where / "reported" / f"{run_id}.json").write_text(text, encoding="utf-8")


def regeneration(
    text: str,
    *,
    bench: tuple[int, list[str]] | None = None,
    run: dict[str, object] | None = None,
    where: Path = results.RESULTS,
) -> list[str]:
    """Why `text` is not the report its own records give (empty when it is)."""
    records = embedded_records(text)
    if not records:
        return [
            (
                "RUN-REPORT.md carries no gate records to regenerate it from (written before "
                "they were kept, or cut): run `uv run --locked nox`, then `nox -s report`"
            )
        ]
    problems: list[str] = []
    runs = {str(r.get("run", "")) for r in records.values()}
    held = recorded_run(runs.pop(), where) if len(runs) == 1 else {}
    if held and held != records:
        changed = sorted(g for g in set(held) | set(records) if held.get(g) != records.get(g))
        problems.append(
            "RUN-REPORT.md's records differ from the ones this host recorded for that run "
            f"(gates {', '.join(changed)}): edited by hand?"
        )
    expected = render(records, records_date(records), bench=bench, run=run)
    if expected != text:
        import difflib  # noqa: PLC0415 - only on a failure

        diff = [
            ln
            for ln in difflib.unified_diff(
                text.splitlines(),
                expected.splitlines(),
                "committed",
                "regenerated",
                n=0,
                lineterm="",
            )
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
        ]
        shown = "\n    ".join(d[:200] for d in diff[:12])
        problems.append(
            "RUN-REPORT.md is not what its records give (edited by hand, or its inputs "
            "changed since: regenerate it with `nox -s report`); regenerated, it differs in "
            f"{len(diff)} lines:\n    {shown}"
        )
    return problems


def dirty_tree(repo: Path = REPO) -> list[str]:
    """Uncommitted changes in the working tree (RUN-REPORT.md and untracked files included):
    the report can describe committed code only."""
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return []  # not a checkout: staleness() says the report names nothing it can find
    files = [ln[3:] for ln in done.stdout.splitlines() if ln.strip()]
    if not files:
        return []
    shown = ", ".join(files[:5]) + (", …" if len(files) > 5 else "")  # noqa: PLR2004 - a few names
    return [
        (
            f"the working tree has uncommitted changes ({len(files)} files: {shown}): the "
            "report describes committed code only; commit or remove them"
        )
    ]


def check_structure(text: str) -> list[str]:
    """What is wrong with a RUN-REPORT.md's structure (empty when it is valid)."""
    problems: list[str] = []
    positions = [
        text.find(f"\n{h}\n") if i else text.find(f"{h}\n") for i, h in enumerate(HEADINGS)
    ]
    for heading, pos in zip(HEADINGS, positions, strict=True):
        if pos < 0:
            problems.append(f"missing heading {heading!r}")
    found = [p for p in positions if p >= 0]
    if found != sorted(found):
        problems.append("headings are out of order")
    if stamped_commit(text) is None:
        problems.append(f"no commit line ({COMMIT_PREFIX}<sha> (clean|dirty ...))")
    section = text.split(f"{HEADINGS[1]}\n", 1)[-1].strip().split("\n", 1)[0]
    problems.extend(
        f"the verification line does not mention {gate}"
        for gate in ("fmt", "lint", "tests", "escape", "falsify", "sbom", "audit")
        if gate not in section
    )
    return problems


def stamped_commit(text: str) -> tuple[str, bool] | None:
    """(commit, dirty) from a report's commit line, None when it has none."""
    for line in text.splitlines():
        if line.startswith(COMMIT_PREFIX):
            sha, _, state = line.removeprefix(COMMIT_PREFIX).partition(" ")
            if len(sha) == 40 and all(c in "0123456789abcdef" for c in sha):  # noqa: PLR2004 - a SHA-1
                return sha, state.startswith("(dirty")
    return None


def staleness(text: str, repo: Path = REPO) -> list[str]:
    """Why a committed RUN-REPORT.md no longer describes HEAD (empty when it does)."""
    stamp = stamped_commit(text)
    if stamp is None:
        return ["RUN-REPORT.md names no commit: it cannot say what it verified"]
    sha, dirty = stamp
    problems: list[str] = []
    if dirty:
        problems.append(
            f"RUN-REPORT.md was written from {sha[:12]} with uncommitted changes: it describes "
            "no commit"
        )

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)

    if git("merge-base", "--is-ancestor", sha, "HEAD").returncode != 0:
        return [*problems, f"RUN-REPORT.md names {sha[:12]}, which is not an ancestor of HEAD"]
    changed = git("diff", "--name-only", sha, "HEAD", "--", ".", f":(exclude){OUT.name}")
    files = changed.stdout.split()
    if files:
        commits = git("rev-list", "--count", f"{sha}..HEAD").stdout.strip()
        shown = ", ".join(files[:5]) + (", …" if len(files) > 5 else "")  # noqa: PLR2004 - a few names
        problems.append(
            f"RUN-REPORT.md is stale: written at {sha[:12]}, {commits} commits behind HEAD, and "
            f"{len(files)} files changed since ({shown}); run `uv run --locked nox`, then "
            "`uv run --locked nox -s report`, and commit it"
        )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write RUN-REPORT.md from the gates' results")
    parser.add_argument(
        "--check", action="store_true", help="only check RUN-REPORT.md's structure and freshness"
    )
    args = parser.parse_args(argv)
    if args.check:
        text = OUT.read_text(encoding="utf-8")
        problems = check_structure(text) + staleness(text) + dirty_tree()
        problems += regeneration(text, bench=budgets(), run=ci_run())
        for problem in problems:
            print(f"report: {problem}", file=sys.stderr)
        if not problems:
            sha, _ = stamped_commit(text) or ("?", False)
            print(
                f"report: RUN-REPORT.md describes {sha[:12]}; nothing but itself changed since, "
                "the tree is clean, and it regenerates from its records as committed"
            )
        return 1 if problems else 0
    records = results.load()
    if not records:
        print("report: no gate results found; run `uv run --locked nox` first", file=sys.stderr)
        return 1
    bench = budgets()
    run = ci_run()
    OUT.write_text(render(records, records_date(records), bench=bench, run=run), encoding="utf-8")
    keep_records(records)
    line, failed, missing = verification(records, bench)
    print(f"report: wrote {OUT.name}: {line}")
    print(f"report: {_stamp(records).removeprefix('- ')}")
    if failed or missing:
        print(f"report: failed: {_names(failed)}; not run: {_names(missing)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
