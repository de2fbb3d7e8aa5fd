"""The fault drill (tools/drill.py): its list loads, each fault plants or says why not, and
a run reports caught, missed and not planted as such (and fails unless all are caught)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import drill

if TYPE_CHECKING:
    from pathlib import Path


def test_the_auditors_list_holds_26_faults_14_missed_then() -> None:
    faults = drill.load()
    assert len(faults) == 26  # issue 28's audit
    missed = [f for f in faults if f.audit.startswith("missed")]
    assert len(missed) == 14  # the ones every gate missed then
    for fault in faults:
        assert fault.tests or fault.gates, fault.name


def test_every_fault_of_the_list_applies_to_the_code_as_it_is(tmp_path: Path) -> None:
    """A fault whose text moved is reported by the drill; here it fails before any run."""
    stale: list[str] = []
    for fault in drill.load():
        root = tmp_path / str(abs(hash(fault.name)))
        target = root / fault.file
        target.parent.mkdir(parents=True)
        target.write_text((drill.REPO / fault.file).read_text(encoding="utf-8"), encoding="utf-8")
        if (why := drill.plant(fault, root)) is not None:
            stale.append(f"{fault.name}: {why}")
    assert not stale


def test_a_fault_that_no_longer_applies_says_why(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\nx = 1\n")
    moved = drill.Fault("moved", "m.py", (("y = 2", ""),), ("t",))
    twice = drill.Fault("twice", "m.py", (("x = 1", ""),), ("t",))
    gone = drill.Fault("gone", "nope.py", (("x", ""),), ("t",))
    assert "occurs 0 times" in (drill.plant(moved, tmp_path) or "")
    assert "occurs 2 times" in (drill.plant(twice, tmp_path) or "")
    assert "does not exist" in (drill.plant(gone, tmp_path) or "")
    both = drill.Fault("both", "m.py", (("x = 1\nx", "z"), ("z = 1", "w = 1")), ("t",))
    assert drill.plant(both, tmp_path) is None
    assert (tmp_path / "m.py").read_text() == "w = 1\n"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('name = "a"\nfile = "f"\nfind = "x"\n', "names no gate"),
        ('name = "a"\nfile = "f"\ntests = ["t"]\n', "has no edit"),
        ('name = "a"\nfile = "f"\nfind = "x"\ngates = ["lint"]\n', "unknown gates"),
        ('name = "a"\nfile = "f"\nfind = "x"\ntests = ["t"]\nwhy = 1\n', "unknown keys"),
    ],
)
def test_a_malformed_fault_is_an_error(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "drill.toml"
    path.write_text("[[fault]]\n" + entry)
    with pytest.raises(ValueError, match=message):
        drill.load(path)


SMALL = """
[[fault]]
name = "caught: the wildcard matches the apex"
file = "packages/core/src/panday_core/domains.py"
find = "return name.endswith(suffix) and len(name) > len(suffix)"
replace = "return name.endswith(suffix) or name == suffix[1:]"
tests = [
  "packages/core/tests/test_domains.py::test_wildcard_matches_subdomains_at_any_depth_but_never_the_apex",
]

[[fault]]
name = "missed: the same fault, but a test that does not look at it"
file = "packages/core/src/panday_core/domains.py"
find = "return name.endswith(suffix) and len(name) > len(suffix)"
replace = "return name.endswith(suffix) or name == suffix[1:]"
tests = ["packages/core/tests/test_policy.py::test_bad_input_names_the_field"]

[[fault]]
name = "not planted: text that is not there"
file = "packages/core/src/panday_core/domains.py"
find = "this text is not in domains.py"
tests = ["packages/core/tests/test_policy.py::test_bad_input_names_the_field"]
"""


@pytest.mark.slow
def test_a_run_reports_caught_missed_and_not_planted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "drill.toml"
    path.write_text(SMALL)
    assert drill.main(["--list", str(path), "--jobs", "2"]) == 1
    out = capsys.readouterr().out
    assert "caught  caught: the wildcard matches the apex (by tests)" in out
    assert "MISSED  missed: the same fault" in out
    assert "NOT PLANTED not planted: text that is not there" in out
    assert "drill: 1/3 caught" in out
    assert "occurs 0 times in packages/core/src/panday_core/domains.py" in out


def test_a_gate_red_before_planting_catches_only_by_a_report_of_its_own() -> None:
    green, red = (0, "docs: ok"), (1, "docs: architecture.md differs")
    assert drill.gate_caught("docs", green, (1, "docs: x differs")) == "docs"
    assert drill.gate_caught("docs", green, green) is None
    assert drill.gate_caught("docs", red, red) is None  # the same finding: not the fault's
    both = (1, "docs: architecture.md differs\ndocs: policy.md differs")
    assert drill.gate_caught("docs", red, both) == (
        "docs (red unmutated; the fault changed its report)"
    )
