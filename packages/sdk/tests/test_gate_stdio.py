"""Gates round three (issue 28): an ``O_PATH`` descriptor on 0, 1 or 2 is no stream.

``O_PATH`` opens a file for its identity only: reading or writing it fails with EBADF, yet
its access mode reads as ``O_RDONLY``, so a check of the mode alone takes it for a usable
stdin. Kills "sdk: an O_PATH standard descriptor passes as usable".
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(not hasattr(os, "O_PATH"), reason="O_PATH is Linux's")

PROBE = """
import os
from panday.stdio import repair_std_fds
before = os.fstat(0).st_ino
repaired = repair_std_fds()
print(repaired, os.read(0, 16), os.fstat(0).st_ino != before)
"""


def test_an_o_path_stdin_is_replaced_and_reads_as_empty(tmp_path: Path) -> None:
    secret = tmp_path / "input"
    secret.write_bytes(b"not for reading")
    fd = os.open(secret, os.O_PATH)
    try:
        # Control: on an O_PATH descriptor a read fails (EBADF): it is no stream.
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.read(fd, 1)
        done = subprocess.run(
            [sys.executable, "-c", PROBE], stdin=fd, capture_output=True, text=True, check=False
        )
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(0,) b'' True", done.stdout


def test_a_readable_stdin_is_left_alone(tmp_path: Path) -> None:
    data = tmp_path / "input"
    data.write_bytes(b"kept")
    with data.open("rb") as fh:
        done = subprocess.run(
            [sys.executable, "-c", PROBE], stdin=fh, capture_output=True, text=True, check=False
        )
    assert done.stdout.strip() == "() b'kept' False", (done.stdout, done.stderr)
