"""Fixtures for the macOS escape suite (runs only on macOS; CI's macos-15 and macos-14 jobs run it).

Off macOS every test here is skipped with a visible reason. On macOS the suite does not
skip: if `sandbox-exec` cannot confine a command here, every test errors with the reason.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The probe modules import their shared helpers by name from this directory.
sys.path.insert(0, str(Path(__file__).parent))

from macos_escape_helpers import (
    HERE,
    MACOS,
    SECRETS,
    SKIP_REASON,
    Jail,
    Listener,
)

if TYPE_CHECKING:
    from collections.abc import Iterator


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    del config
    for item in items:
        if HERE not in item.path.parents:
            continue
        item.add_marker(pytest.mark.escape)
        item.add_marker(pytest.mark.macos)
        if not MACOS:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session", autouse=True)
def _sandbox_exec_confines() -> None:
    """On macOS, an unusable sandbox-exec fails the suite; it never skips it."""
    if not MACOS:
        return
    from panday_tier_macos import unavailable_reason  # noqa: PLC0415 - macOS only

    reason = unavailable_reason()
    if reason is not None:
        pytest.fail(f"sandbox-exec cannot confine commands on this Mac: {reason}", pytrace=False)


@pytest.fixture
def jail() -> Iterator[Jail]:
    j = Jail()
    try:
        yield j
    finally:
        j.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory full of canary secrets, made the runner's $HOME for the test."""
    home = tmp_path / "home"
    for rel in SECRETS:
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"CANARY-SECRET {rel}\n", encoding="utf-8")
    (home / "notes.txt").write_text("not a secret\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def tcp_listener() -> Iterator[Listener]:
    srv = Listener(socket.AF_INET, ("127.0.0.1", 0))
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def unix_listener() -> Iterator[tuple[Listener, str]]:
    # Unix socket paths are limited to 104 bytes on macOS: keep it short, under /tmp.
    short = tempfile.mkdtemp(prefix="pdy-", dir="/tmp")
    path = os.path.join(os.path.realpath(short), "s.sock")  # noqa: PTH118 - a plain string path
    srv = Listener(socket.AF_UNIX, path)
    try:
        yield srv, path
    finally:
        srv.close()
        with contextlib.suppress(OSError):
            os.unlink(path)  # noqa: PTH108 - as above
            os.rmdir(short)  # noqa: PTH106 - as above


@pytest.fixture
def sibling(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """An unsandboxed process of the same user whose environment holds a canary."""
    canary = "SIBLING-CANARY-" + os.urandom(6).hex()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", "import time; time.sleep(120)"],
        env={"PATH": "/usr/bin:/bin", "PANDAY_SIBLING_CANARY": canary},
        cwd=tmp_path,
    )
    try:
        yield proc.pid, canary
    finally:
        proc.kill()
        proc.wait(timeout=10)
