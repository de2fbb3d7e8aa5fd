"""Shared fixtures for the tests of the gate tools (pytest's `pythonpath` puts tools/ on
sys.path, so the tests import the scripts by module name)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

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
