"""Tests for the gate tools in tools/ (scripts, not a package: put them on sys.path)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))


GateMain = Callable[[list[str] | None], int]
RunGate = Callable[[GateMain, list[str]], tuple[int, str]]


@pytest.fixture
def run_gate(capsys: pytest.CaptureFixture[str]) -> RunGate:
    """Call a tool's `main(argv)`; return (exit code, everything it printed)."""

    def call(main: GateMain, argv: list[str]) -> tuple[int, str]:
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
        out = capsys.readouterr()
        return code, out.out + out.err

    return call
