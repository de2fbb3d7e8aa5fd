"""The actions gate: an unpinned action, a schema error or no workflow at all turns it red."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

import workflows
from gatelib import REPO

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import RunGate

CHECKOUT_SHA = "08c6903cd8c0fde910a37f88322edcfb5dd907a8"  # actions/checkout v5.0.0
WORKFLOW = """\
name: demo
on: [push]
permissions:
  contents: read
concurrency:
  group: demo-${{{{ github.ref }}}}
  cancel-in-progress: true
jobs:
  demo:
    name: demo
    runs-on: ubuntu-latest
    timeout-minutes: 5
    steps:
      - name: Check out
        uses: actions/checkout@{ref}
        with:
          persist-credentials: false
      - name: Say hello
        run: echo hello
"""

# Slow: each case runs zizmor and check-jsonschema (about 3 s in all). The `tests` gate
# leaves them to CI and to PANDAY_SLOW_TESTS=1 (.ci/run sets it).
pytestmark = pytest.mark.slow


def _lint(directory: Path, run_gate: RunGate) -> tuple[int, str]:
    return run_gate(workflows.main, [str(directory)])


def test_unpinned_action_turns_the_gate_red(tmp_path: Path, run_gate: RunGate) -> None:
    (tmp_path / "demo.yml").write_text(
        WORKFLOW.format(ref=f"{CHECKOUT_SHA} # v5.0.0"), encoding="utf-8"
    )
    code, out = _lint(tmp_path, run_gate)
    if code != 0:
        pytest.fail(f"inconclusive: control failed, the pinned workflow did not pass:\n{out}")
    (tmp_path / "demo.yml").write_text(WORKFLOW.format(ref="v5"), encoding="utf-8")
    code, out = _lint(tmp_path, run_gate)
    assert code == 1
    assert "unpinned-uses" in out


def test_schema_error_turns_the_gate_red(tmp_path: Path, run_gate: RunGate) -> None:
    text = WORKFLOW.format(ref=CHECKOUT_SHA).replace(
        "runs-on: ubuntu-latest", "runs_on: ubuntu-latest"
    )
    (tmp_path / "demo.yml").write_text(text, encoding="utf-8")
    code, out = _lint(tmp_path, run_gate)
    assert code == 1
    assert "check-jsonschema" in out
    assert "runs_on" in out


def test_no_workflows_is_red(tmp_path: Path, run_gate: RunGate) -> None:
    code, out = _lint(tmp_path, run_gate)
    assert code == 1
    assert "no workflow files" in out


def test_every_action_in_the_repository_is_pinned_to_a_sha_with_a_version_comment() -> None:
    uses = [
        line.strip()
        for path in sorted((REPO / ".github" / "workflows").glob("*.yml"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip().startswith(("uses:", "- uses:"))
    ]
    assert uses
    pinned = re.compile(r"uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+)*$")
    assert [u for u in uses if not pinned.search(u)] == []
