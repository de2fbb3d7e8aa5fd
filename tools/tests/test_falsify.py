"""The falsify gate tells killed, survived and stale mutations apart."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import falsify

GUARD = "def allowed(host):\n    return host == 'ok.example'\n"
TEST = """from guard import allowed

def test_refuses_other_hosts():
    assert not allowed('evil.example')
"""
WEAK_TEST = (
    "from guard import allowed\n\ndef test_accepts_ok():\n    assert allowed('ok.example')\n"
)


def tiny_tree(root: Path, test_source: str) -> Path:
    (root / "packages/g/src").mkdir(parents=True)
    (root / "packages/g/tests").mkdir(parents=True)
    (root / "packages/g/src/guard.py").write_text(GUARD)
    (root / "packages/g/tests/test_guard.py").write_text(test_source)
    (root / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\naddopts = ['--import-mode=importlib']\n"
    )
    return root


def mutation(tests: tuple[str, ...], find: str = "return host == 'ok.example'") -> falsify.Mutation:
    return falsify.Mutation(
        name="guard inverted",
        file="packages/g/src/guard.py",
        find=find,
        replace="return True",
        tests=tests,
    )


def test_a_guarding_test_kills_the_mutation(tmp_path: Path) -> None:
    base = tiny_tree(tmp_path / "t", TEST)
    outcome = falsify.run_one(mutation(("packages/g/tests/test_guard.py",)), base)
    assert outcome.status == "killed", outcome.detail


def test_a_test_that_cannot_fail_lets_it_survive(tmp_path: Path) -> None:
    base = tiny_tree(tmp_path / "t", WEAK_TEST)
    outcome = falsify.run_one(mutation(("packages/g/tests/test_guard.py",)), base)
    assert outcome.status == "survived", outcome.detail


def test_a_moved_snippet_is_stale_not_skipped(tmp_path: Path) -> None:
    base = tiny_tree(tmp_path / "t", TEST)
    outcome = falsify.run_one(
        mutation(("packages/g/tests/test_guard.py",), find="no such code"), base
    )
    assert outcome.status == "stale"


ROOT = Path(__file__).resolve().parents[2]
WALL = "packages/tier_linux/src/panday_tier_linux/wall"


def test_a_mutant_of_the_walls_machine_code_is_assembled_into_its_bytes(tmp_path: Path) -> None:
    """The package runs the bytes wall.py holds, not the source: a mutant of the source
    that left them alone would survive every test without being tested."""
    for rel in ("tools/wall.py", f"{WALL}_x86_64.S", f"{WALL}.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((ROOT / rel).read_bytes())
    before = (tmp_path / f"{WALL}.py").read_text()
    mutant = falsify.Mutation(
        name="a message changed",
        file=f"{WALL}_x86_64.S",
        find='"landlock wall: init: capset failed"',
        replace='"landlock wall: init: capset FAILED"',
        tests=("unused",),
    )
    problem = falsify.apply(mutant, tmp_path)
    assert problem is None, problem
    after = (tmp_path / f"{WALL}.py").read_text()
    assert after != before
    assert b"capset FAILED".hex() in after.replace('"\n    "', "")


SLOW_TEST = """import time
from guard import allowed

def test_refuses_other_hosts():
    time.sleep(4)  # slower than the cut-off below, mutated or not: what a busy machine does
    assert not allowed('evil.example')
"""


def with_plugin(root: Path) -> Path:
    """The tree's tools/falsify.py: the mutation runs load it as their pytest plugin."""
    (root / "tools").mkdir()
    (root / "tools/falsify.py").write_text(Path(falsify.__file__).read_text())
    return root


def test_a_hang_the_unmutated_tests_do_not_share_is_a_kill(tmp_path: Path) -> None:
    base = with_plugin(tiny_tree(tmp_path / "t", TEST))
    hang = falsify.Mutation(
        name="guard hangs",
        file="packages/g/src/guard.py",
        find="return host == 'ok.example'",
        replace="return __import__('time').sleep(120)",
        tests=("packages/g/tests/test_guard.py",),
    )
    outcome = falsify.run_one(hang, base, timeout=3.0)
    assert outcome.status == "killed", outcome.detail
    assert "Timeout" in outcome.detail  # positive control: the cut-off gave this kill
    assert "the unmutated tests passed under the same 3 s cut-off" in outcome.detail


def test_a_cut_off_the_unmutated_tests_also_run_into_is_never_a_kill(tmp_path: Path) -> None:
    """The mutant and the unmutated tests both outlast the cut-off (as on a machine that
    got busier after the baseline): the clock gives no verdict; the mutant runs again
    without it, and its test's own assertion gives the verdict."""
    base = with_plugin(tiny_tree(tmp_path / "t", SLOW_TEST))
    tests = ("packages/g/tests/test_guard.py",)
    outcome = falsify.run_one(mutation(tests), base, timeout=1.0)
    assert outcome.status == "killed", outcome.detail
    assert falsify.UNCUT in outcome.detail, outcome.detail
    judged = outcome.detail.split(falsify.UNCUT)[0]
    assert "Timeout" not in judged, judged  # the assertion's kill, not the cut-off's
    # A mutation the slow test cannot see survives the same way: never a kill by the clock.
    blind = falsify.Mutation(
        name="guard reworded",
        file="packages/g/src/guard.py",
        find="return host == 'ok.example'",
        replace="return 'ok.example' == host",
        tests=tests,
    )
    survived = falsify.run_one(blind, base, timeout=1.0)
    assert survived.status == "survived", survived.detail
    assert falsify.UNCUT in survived.detail


SHARED_SETUP = """import time
import pytest
from guard import allowed

@pytest.fixture(scope="session")
def cluster():
    time.sleep(1.5)  # a shared, slow set-up (as a Ray cluster's is)
    return True

def test_first(cluster):
    assert cluster

def test_refuses_other_hosts(cluster):
    assert not allowed('evil.example')
"""


def test_a_lone_run_is_given_the_shared_set_up_the_baseline_charged_elsewhere(
    tmp_path: Path,
) -> None:
    """A mutation naming only the second test runs it alone, so it pays the session
    fixture the baseline set up for the first: its cut-off must hold that set-up."""
    base = with_plugin(tiny_tree(tmp_path / "t", SHARED_SETUP))
    code, tail, durations = falsify.baseline(base, ["packages/g/tests/test_guard.py"], 1)
    assert code == 0, tail
    first = "packages/g/tests/test_guard.py::test_first"
    second = "packages/g/tests/test_guard.py::test_refuses_other_hosts"
    # Positive control: the baseline charged the set-up to the first test only.
    assert durations.setup[first] >= 1.5 > durations.total[second]
    lone = falsify.timeout_for(mutation((second,)), durations)
    assert lone >= falsify.TIMEOUT_FLOOR_S + durations.setup[first]


def test_the_registry_loads_and_every_entry_names_tests() -> None:
    mutations = falsify.load_registry()
    assert mutations
    assert all(m.tests for m in mutations)
    assert len({m.name for m in mutations}) == len(mutations)


def test_registry_rejects_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(
        '[[mutation]]\nname="x"\nfile="f"\nfind="a"\nreplace="b"\ntests=["t"]\ntypo=1\n'
    )
    with pytest.raises(ValueError, match="unknown keys"):
        falsify.load_registry(path)


def test_an_entry_may_name_the_extra_its_tests_need(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(
        '[[mutation]]\nname="x"\nfile="f"\nfind="a"\nreplace="b"\ntests=["t"]\nextra="ray"\n'
    )
    (entry,) = falsify.load_registry(path)
    assert entry.extra == "ray"
    assert falsify.python_for("") == sys.executable


def test_the_tree_key_covers_every_byte_and_the_interpreter(tmp_path: Path) -> None:
    one = tiny_tree(tmp_path / "one", TEST)
    two = tiny_tree(tmp_path / "two", TEST)
    key = falsify.tree_key(one, sys.executable)
    assert falsify.tree_key(two, sys.executable) == key  # the same bytes elsewhere
    (two / "packages/g/tests/test_guard.py").write_text(TEST + "\n")
    assert falsify.tree_key(two, sys.executable) != key  # one byte more in a test
    (tmp_path / "one" / "notes.txt").write_text("")
    assert falsify.tree_key(one, sys.executable) != key  # a new, empty file
    assert falsify.tree_key(tiny_tree(tmp_path / "three", TEST), "/other/python") != key


def test_a_mutation_key_changes_with_any_part_of_the_mutation() -> None:
    base = mutation(("packages/g/tests/test_guard.py",))
    key = falsify.mutation_key(base, "tree")
    assert falsify.mutation_key(base, "other tree") != key
    changed = (
        falsify.Mutation(base.name, base.file, base.find, "return False", base.tests),
        falsify.Mutation(base.name, base.file, base.find, base.replace, ("t.py",)),
        falsify.Mutation("renamed", base.file, base.find, base.replace, base.tests),
    )
    assert all(falsify.mutation_key(m, "tree") != key for m in changed)


def test_remembered_kills_round_trip_and_garbage_remembers_nothing(tmp_path: Path) -> None:
    path = tmp_path / ".nox" / "falsify-killed.json"
    assert falsify.remembered(path) == {}
    falsify.remember(["a", "b"], path)
    assert set(falsify.remembered(path)) == {"a", "b"}
    falsify.remember(["c"], path)  # only the current tree's keys are kept
    assert set(falsify.remembered(path)) == {"c"}
    for junk in ("not json", "[1, 2]", '{"a": 1}'):
        path.write_text(junk)
        assert falsify.remembered(path) == {}


def test_the_run_report_counts_only_for_mutations_whose_tests_read_it(tmp_path: Path) -> None:
    root = tiny_tree(tmp_path / "t", TEST)
    (root / "RUN-REPORT.md").write_text("one\n")
    tree = falsify.tree_key(root, sys.executable)
    plain = mutation(("packages/g/tests/test_guard.py",))
    reader = mutation(("tools/tests/test_report.py",))
    before = falsify.mutation_key(plain, tree, root), falsify.mutation_key(reader, tree, root)
    (root / "RUN-REPORT.md").write_text("two\n")
    assert falsify.tree_key(root, sys.executable) == tree
    assert falsify.mutation_key(plain, tree, root) == before[0]
    assert falsify.mutation_key(reader, tree, root) != before[1]
