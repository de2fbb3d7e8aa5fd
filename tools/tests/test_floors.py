"""The test floors fail a gate when a package's tests are deleted, and pass when they are all
there (tools/floors.py, used by the `tests` and `escape` sessions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import floors

if TYPE_CHECKING:
    from pathlib import Path

DIRS = ["packages/core/tests", "packages/tier_macos/tests", "tools/tests"]
FLOORS = {"packages/core/tests": 3, "packages/tier_macos/tests": 2, "tools/tests": 1}


def junit(tmp_path: Path, classnames: list[str]) -> Path:
    cases = "".join(f'<testcase classname="{c}" name="t{i}"/>' for i, c in enumerate(classnames))
    path = tmp_path / "junit.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    return path


FULL = [
    "packages.core.tests.test_policy",
    "packages.core.tests.test_policy",
    "packages.core.tests.egress.test_rules",
    "packages.tier_macos.tests.test_profile",
    "packages.tier_macos.tests.test_profile",
    "tools.tests.test_audit",
]


def test_every_directory_at_its_floor_passes(tmp_path: Path) -> None:
    found = floors.counts([junit(tmp_path, FULL)], DIRS)
    assert found == {"packages/core/tests": 3, "packages/tier_macos/tests": 2, "tools/tests": 1}
    assert floors.check(found, FLOORS) == []


def test_a_package_whose_tests_were_deleted_fails(tmp_path: Path) -> None:
    without_macos = [c for c in FULL if "tier_macos" not in c]
    found = floors.counts([junit(tmp_path, without_macos)], DIRS)
    (problem,) = floors.check(found, FLOORS)
    assert problem.startswith("packages/tier_macos/tests: 0 tests collected, below its floor of 2")


def test_a_directory_without_a_floor_fails(tmp_path: Path) -> None:
    found = floors.counts([junit(tmp_path, FULL)], DIRS)
    (problem,) = floors.check(found, {k: v for k, v in FLOORS.items() if k != "tools/tests"})
    assert problem.startswith("tools/tests: 1 tests collected, but it has no floor")


def test_a_floor_for_a_directory_that_did_not_run_fails(tmp_path: Path) -> None:
    found = floors.counts([junit(tmp_path, FULL)], DIRS)
    (problem,) = floors.check(found, {**FLOORS, "packages/sdk/tests": 5})
    assert problem.startswith("packages/sdk/tests: listed in tools/test-floors.toml")


def test_the_escape_suite_counts_apart_from_its_package(tmp_path: Path) -> None:
    names = ["packages.tier_linux.tests.escape.test_kernel", "packages.tier_linux.tests.test_argv"]
    found = floors.counts(
        [junit(tmp_path, names)], ["packages/tier_linux/tests", "packages/tier_linux/tests/escape"]
    )
    assert found == {"packages/tier_linux/tests": 1, "packages/tier_linux/tests/escape": 1}


def test_the_committed_floors_load() -> None:
    for table in ("tests", "escape"):
        assert floors.load(table)


def test_a_floor_below_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.toml"
    path.write_text('[tests]\n"x" = 0\n')
    with pytest.raises(ValueError, match="integer >= 1"):
        floors.load("tests", path)


# ------------------------------------------------- issue 28: floors within 10% of the counts


def test_a_floor_far_below_its_count_fails() -> None:
    # The audit's sdk directory: 222 tests over a floor of 104, 107 deletable unnoticed.
    (problem,) = floors.check({"packages/sdk/tests": 222}, {"packages/sdk/tests": 104})
    assert problem.startswith("packages/sdk/tests: 222 tests collected, more than 10% above")
    assert "nox -s floors -- --write" in problem
    # Control: within 10% of the count passes (tests added since, or CI's slow ones).
    assert floors.check({"packages/sdk/tests": 222}, {"packages/sdk/tests": 200}) == []


def test_write_raises_floors_to_the_counts_and_never_lowers_one() -> None:
    text = (
        "# comment kept\n\n[tests]\n"
        '"packages/core/tests" = 421\n"tools/tests" = 90\n\n[escape]\n"x/escape" = 3\n'
    )
    out = floors.raised(text, "tests", {"packages/core/tests": 629, "tools/tests": 80, "new": 5})
    assert out == (
        "# comment kept\n\n[tests]\n"
        '"packages/core/tests" = 629\n"tools/tests" = 90\n"new" = 5\n\n[escape]\n"x/escape" = 3\n'
    )


def test_write_then_check_passes_on_the_same_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "test-floors.toml"
    path.write_text(
        '[tests]\n"packages/core/tests" = 1\n"packages/tier_macos/tests" = 1\n"tools/tests" = 1\n'
    )
    monkeypatch.setattr(floors, "FLOORS", path)
    report = junit(tmp_path, FULL)
    assert floors.main(["--measure", str(report)]) == 1  # 3 over a floor of 1: too far below
    assert floors.main(["--measure", str(report), "--write"]) == 0
    assert floors.load("tests", path) == {
        "packages/core/tests": 3,
        "packages/tier_macos/tests": 2,
        "tools/tests": 1,
    }
    assert floors.main(["--measure", str(report)]) == 0


def test_tests_a_marker_left_out_still_count(tmp_path: Path) -> None:
    """Locally `-m "not slow"` leaves some out; they exist, and CI runs them: they count."""
    report = junit(tmp_path, FULL)
    listing = tmp_path / "deselected.txt"
    listing.write_text(
        "tools/tests/test_audit.py::test_slow_one\n"
        "tools/tests/test_audit.py::test_slow_one\n"  # deselected by both runs: once
        "tools/tests/test_audit.py::TestX::test_slow_two[a]\n"
        "packages/core/tests/test_policy.py::t0\n"  # ran in the other run: not extra
    )
    extra = floors.deselected_counts(listing, [report], DIRS)
    assert extra == {"packages/core/tests": 0, "packages/tier_macos/tests": 0, "tools/tests": 2}
