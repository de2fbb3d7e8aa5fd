"""The examples run as tests: every script in packages/sdk/examples and every doctest in the
package's docstrings (their outputs are T2 Linux's, so they run where that tier does)."""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
DOCTESTED = ("panday", "panday.session", "panday.aio")

pytestmark = pytest.mark.usefixtures("linux_tier")


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,  # the default policy's workspace is the current directory
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout


@pytest.mark.parametrize("module", DOCTESTED)
def test_docstring_examples(module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    outcome = doctest.testmod(importlib.import_module(module), verbose=False, report=True)
    assert outcome.attempted > 0, f"{module} has no doctest"
    assert outcome.failed == 0
