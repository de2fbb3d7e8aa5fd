"""Shared fixtures of the T2 Linux tests (the escape suite's own are in escape/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["session-jail", "bwrap"])
def launch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a T2 command starts: the session jail, and a bwrap of its own (what every
    command the session jail does not serve gets). A guard of one path is falsified through
    its id (``test_x[bwrap]``): the other path would hide its mutation."""
    if request.param == "bwrap":
        monkeypatch.setenv("PANDAY_T2_SESSION_JAIL", "0")
    else:
        monkeypatch.delenv("PANDAY_T2_SESSION_JAIL", raising=False)
    return str(request.param)
