"""RUN-REPORT.md keeps a valid structure, and the report says what failed or did not run."""

from __future__ import annotations

import datetime as dt
import subprocess
from typing import TYPE_CHECKING

import report

if TYPE_CHECKING:
    from pathlib import Path

REPO_REPORT = report.OUT


def records(**labels: str) -> dict[str, dict[str, object]]:
    return {g: {"gate": g, "status": "ok", "label": label} for g, label in labels.items()}


SHA = "0123456789abcdef0123456789abcdef01234567"


def stamped(**labels: str) -> dict[str, dict[str, object]]:
    recs = records(**labels)
    for rec in recs.values():
        rec.update(commit=SHA, dirty=False)
    return recs


def test_the_committed_report_has_a_valid_structure() -> None:
    assert report.check_structure(REPO_REPORT.read_text(encoding="utf-8")) == []


def test_a_rendered_report_is_valid_and_keeps_the_gate_order() -> None:
    recs = stamped(
        tests="12 tests, 0 failed",
        fmt="fmt",
        lint="lint",
        escape="escape linux root 3/3 · escape linux user 3/3",
        falsify="falsify 2/2",
        sbom="sbom (1 SBOMs, up to 4 components)",
        audit="audit (offline snapshot 2024-10-10, 9 packages)",
    )
    text = report.render(recs, dt.date(2026, 1, 2))
    assert report.check_structure(text) == []
    line = text.split("## Verification\n\n", 1)[1].split("\n", 1)[0]
    assert line.startswith("fmt · lint · 12 tests, 0 failed · escape linux root 3/3")
    assert "Not run in this run: typecheck," in text
    assert "- Date: 2026-01-02" in text


def test_failed_gates_are_named() -> None:
    recs = records(fmt="fmt")
    recs["falsify"] = {"gate": "falsify", "status": "failed", "label": "falsify FAILED"}
    line, failed, missing = report.verification(recs)
    assert failed == ["falsify"]
    assert "falsify FAILED" in line
    assert "tests" in missing


def test_a_report_missing_a_section_is_invalid() -> None:
    text = report.render(records(fmt="fmt"), dt.date(2026, 1, 2))
    broken = text.replace("## Not verified on this host\n", "")
    assert "missing heading '## Not verified on this host'" in report.check_structure(broken)


def test_the_report_names_the_commit_and_whether_the_tree_was_dirty() -> None:
    text = report.render(stamped(fmt="fmt"), dt.date(2026, 1, 2))
    assert f"- Commit: {SHA} (clean)" in text
    assert report.stamped_commit(text) == (SHA, False)
    dirty = stamped(fmt="fmt")
    dirty["fmt"]["dirty"] = True
    text = report.render(dirty, dt.date(2026, 1, 2))
    assert report.stamped_commit(text) == (SHA, True)
    assert "dirty (uncommitted changes when the gates ran)" in text


def test_a_report_without_a_commit_is_invalid() -> None:
    text = report.render(records(fmt="fmt"), dt.date(2026, 1, 2))  # records name no commit
    assert report.stamped_commit(text) is None
    assert any("no commit line" in p for p in report.check_structure(text))


def test_a_missed_benchmark_budget_is_a_failure_in_the_verification_line() -> None:
    line, failed, _ = report.verification(records(fmt="fmt"), (3, []))
    assert "benchmarks (3/3 budgets met)" in line
    assert "benchmarks" not in failed
    line, failed, _ = report.verification(records(fmt="fmt"), (3, ["cli_startup"]))
    assert "benchmarks FAILED (2/3 budgets met; missed: cli_startup)" in line
    assert failed == ["benchmarks"]
    text = report.render(records(fmt="fmt"), dt.date(2026, 1, 2), bench=(3, ["cli_startup"]))
    assert "Failed: benchmarks." in text


def test_a_benchmark_that_only_judges_itself_is_still_counted() -> None:
    """An entry with a verdict but no row of its own (egress_round3, output_flood) was
    left out of the count, so its missed budget never reached the verification line."""
    rows: list[tuple[str, str, str, str]] = []
    results = {
        "output_flood": {"within_budget": False, "worst_flood_rss_mib": 80.0},
        "egress": {"budgets_met": {"a": True}, "within_budget": True},
        "t2_linux_startup": {"ratio": 1.2, "budget": 1.5, "within_budget": True},
        "writes": {
            "gib": {"ratio": 2.0, "budget": 1.3, "within_budget": False},
            "within_budget": False,
        },
    }
    report._ratios("", results, rows)  # noqa: SLF001  # pyright: ignore[reportPrivateUsage] - the rows are what is under test
    verdicts = {name: met for name, _, _, met in rows}
    assert verdicts == {
        "output_flood": "no",
        "egress: a": "yes",
        "t2_linux_startup": "yes",
        "writes.gib": "no",
    }


def test_ci_rows_say_not_yet_run_until_a_ci_run_is_given() -> None:
    text = report.render(stamped(fmt="fmt"), dt.date(2026, 1, 2))
    section = text.split("## Not verified on this host\n", 1)[1].split("\n## ", 1)[0]
    ci_rows = [row for row in section.splitlines() if "ci.yml" in row]
    assert ci_rows
    assert all("not yet run" in row for row in ci_rows)
    assert "verified only on" not in section
    run: dict[str, object] = {
        "headSha": SHA,
        "url": "https://github.com/o/r/actions/runs/1",
        "jobs": [
            {"name": "tests (macos-latest, 3.11)", "conclusion": "success"},
            {"name": "tests (macos-latest, 3.12)", "conclusion": "failure"},
            {"name": "tests (ubuntu-latest, 3.11)", "conclusion": "success"},
        ],
    }
    assert report.ci_verdict(run, "tests (ubuntu-latest").startswith("passed in CI run")
    assert report.ci_verdict(run, "tests (macos-latest") == (
        "FAILED in CI run https://github.com/o/r/actions/runs/1 (commit 0123456789ab): "
        "tests (macos-latest, 3.12)"
    )


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_a_report_is_stale_once_anything_but_itself_changes(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "code")
    code = _git(tmp_path, "rev-parse", "HEAD")
    text = report.render(stamped(fmt="fmt"), dt.date(2026, 1, 2)).replace(SHA, code)
    (tmp_path / "RUN-REPORT.md").write_text(text)
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "report")
    # Control: only the report changed since the commit it names, so it is fresh.
    assert report.staleness(text, tmp_path) == []
    (tmp_path / "code.py").write_text("x = 2\n")
    _git(tmp_path, "commit", "-qam", "more code")
    (problem,) = report.staleness(text, tmp_path)
    assert problem.startswith(f"RUN-REPORT.md is stale: written at {code[:12]}, 2 commits behind")
    assert "1 files changed since (code.py)" in problem


def test_a_dirty_or_unstamped_report_is_stale(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "code")
    code = _git(tmp_path, "rev-parse", "HEAD")
    text = report.render(stamped(fmt="fmt"), dt.date(2026, 1, 2)).replace(SHA, code)
    dirty = text.replace(f"{code} (clean)", f"{code} (dirty (uncommitted changes))")
    assert "uncommitted changes: it describes no commit" in report.staleness(dirty, tmp_path)[0]
    unstamped = report.render(records(fmt="fmt"), dt.date(2026, 1, 2))
    assert report.staleness(unstamped, tmp_path) == [
        "RUN-REPORT.md names no commit: it cannot say what it verified"
    ]


def test_the_mutation_section_shows_each_measurement_against_its_floor_and_tree(
    tmp_path: Path,
) -> None:
    import mutmut_run  # noqa: PLC0415 - the tools directory is on the path only for tests

    def measured(name: str, inputs: str, survivors: list[mutmut_run.Survivor]) -> None:
        mutmut_run.save(
            mutmut_run.Measured(name, 90, 100, survivors, {}, inputs, "2026-11-30T10:00:00+00:00"),
        )

    listed = next(iter(mutmut_run.load_survivors().values()))  # a reviewed survivor
    unknown = mutmut_run.Survivor(listed.module, "nowhere", "-    a = 1\n+    a = 2")
    last = tmp_path / "last"
    original = mutmut_run.LAST
    mutmut_run.LAST = last  # where save() writes
    try:
        measured(listed.module, mutmut_run.inputs_digest(listed.module), [listed, unknown])
        other = next(n for n in mutmut_run.MODULES if n != listed.module)
        measured(other, "an older tree", [])
    finally:
        mutmut_run.LAST = original
    text = "\n".join(report.mutation_testing(last))
    floor = mutmut_run.load_floors()[listed.module]
    rows: dict[str, str] = {}  # the first row naming each module: the summary table's
    for line in text.splitlines():
        rows.setdefault(line.split(" | ")[0].removeprefix("| "), line)
    below = "" if floor <= 90.0 else " (below)"
    assert rows[listed.module] == (
        f"| {listed.module} | 90/100 | 90.0% | {floor:.1f}%{below} | 2 (1 without a reason) | "
        "2026-11-30 | yes |"
    )
    assert rows[other].endswith("| 0 | 2026-11-30 | no: re-measure |")
    never = next(n for n in mutmut_run.MODULES if n not in {listed.module, other})
    assert rows[never] == f"| {never} | not measured here | | | | | |"
    assert f"| {listed.module} | nowhere | `-    a = 1`<br>`+    a = 2` | NOT LISTED |" in text
    assert listed.reason.replace("|", "\\|").replace("\n", " ") in text
    assert "(2, from <code>tools/mutmut-survivors.toml</code>)" in text


# ------------------------------------------- issue 28: report_fresh regenerates and compares

BENCH = (9, ["egress: throughput_ratio"])


def _written() -> dict[str, dict[str, object]]:
    recs = stamped(tests="1486 tests, 0 failed", fmt="fmt", falsify="falsify 207/207")
    for rec in recs.values():
        rec.update(run="77-1", written=1_790_000_000.0)
    return recs


def test_a_report_regenerates_from_its_own_records(tmp_path: Path) -> None:
    recs = _written()
    text = report.render(recs, report.records_date(recs), bench=BENCH)
    assert report.embedded_records(text) == recs
    assert "benchmarks FAILED" in text
    assert report.regeneration(text, bench=BENCH, where=tmp_path) == []


def test_a_figure_edited_by_hand_fails_regeneration(tmp_path: Path) -> None:
    recs = _written()
    text = report.render(recs, report.records_date(recs), bench=BENCH)
    for edited in (
        text.replace("1486 tests", "1999 tests", 1),  # the line, not the records
        text.replace(
            " · benchmarks FAILED (8/9 budgets met; missed: egress: throughput_ratio)", ""
        ),
    ):
        assert edited != text
        (problem,) = report.regeneration(edited, bench=BENCH, where=tmp_path)
        assert "is not what its records give" in problem


def test_records_edited_to_match_differ_from_what_this_host_recorded(tmp_path: Path) -> None:
    recs = _written()
    for gate, rec in recs.items():  # what the gates recorded on this host for run 77-1
        (tmp_path / f"{gate}.json").write_text(report.json.dumps(rec))
    forged = {g: dict(r) for g, r in recs.items()}
    forged["tests"]["label"] = "1999 tests, 0 failed"
    text = report.render(forged, report.records_date(forged), bench=BENCH)
    problems = report.regeneration(text, bench=BENCH, where=tmp_path)
    assert problems == [
        (
            "RUN-REPORT.md's records differ from the ones this host recorded for that run "
            "(gates tests): edited by hand?"
        )
    ]
    # Control: the true records, also held here, regenerate.
    true = report.render(recs, report.records_date(recs), bench=BENCH)
    assert report.regeneration(true, bench=BENCH, where=tmp_path) == []


def test_a_report_without_records_cannot_be_regenerated(tmp_path: Path) -> None:
    text = report.render(_written(), dt.date(2026, 1, 2), bench=BENCH)
    cut = text.split(f"\n{report.RECORDS_OPEN}\n", 1)[0] + "\n"
    (problem,) = report.regeneration(cut, bench=BENCH, where=tmp_path)
    assert "carries no gate records" in problem


def test_a_dirty_working_tree_fails_the_check(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "code")
    assert report.dirty_tree(tmp_path) == []  # control: a clean tree
    (tmp_path / "code.py").write_text("x = 2\n")
    (problem,) = report.dirty_tree(tmp_path)
    assert "uncommitted changes (1 files: code.py)" in problem
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "new.py").write_text("")
    assert "new.py" in report.dirty_tree(tmp_path)[0]


def test_records_kept_at_writing_catch_a_consistent_forgery_after_later_runs(
    tmp_path: Path,
) -> None:
    recs = _written()
    report.keep_records(recs, tmp_path)  # `nox -s report` keeps them; later runs overwrite
    forged = report.render(recs, report.records_date(recs), bench=BENCH).replace(
        "1486 tests",
        "1999 tests",  # the line and the records alike
    )
    (problem,) = report.regeneration(forged, bench=BENCH, where=tmp_path)
    assert "differ from the ones this host recorded for that run (gates tests)" in problem
