"""RUN-REPORT.md keeps a valid structure, and the report says what failed or did not run."""

from __future__ import annotations

import datetime as dt

import report

REPO_REPORT = report.OUT


def records(**labels: str) -> dict[str, dict[str, object]]:
    return {g: {"gate": g, "status": "ok", "label": label} for g, label in labels.items()}


def test_the_committed_report_has_a_valid_structure() -> None:
    assert report.check_structure(REPO_REPORT.read_text(encoding="utf-8")) == []


def test_a_rendered_report_is_valid_and_keeps_the_gate_order() -> None:
    recs = records(
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
