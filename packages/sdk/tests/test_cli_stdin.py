"""`panday run --stdin` streams standard input into the command (issue 27, 1).

It used to read all of stdin before the command started: a pipe that stayed open held the
command back, a terminal waited for Ctrl-D, and 1 GiB of input took 1 GiB of panday's
memory. Each test is decided by what happens, not by a clock: panday exits while the
pipe's write end is still open (a reader of the whole input could not), the command's
answer arrives before its input ends, and a volume many times the read-ahead passes with
panday's peak memory far below it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="T2 Linux streams")


def _panday(exe: str, tmp_path: Path, *command: str) -> subprocess.Popen[bytes]:
    where = tmp_path / "cwd"
    where.mkdir(exist_ok=True)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "no-user-config")}
    return subprocess.Popen(
        [exe, "run", "--stdin", "--", *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=where,
        env=env,
    )


def test_panday_ends_with_the_command_while_stdin_stays_open(exe: str, tmp_path: Path) -> None:
    proc = _panday(exe, tmp_path, "true")
    assert proc.stdin is not None
    try:
        # The write end stays open the whole time: a panday that read stdin to its end
        # first would wait here until the timeout.
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.communicate(timeout=10)  # closes our ends of the pipes


def test_the_command_answers_before_its_input_ends(exe: str, tmp_path: Path) -> None:
    proc = _panday(exe, tmp_path, "sh", "-c", "read x; echo got $x")
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        proc.stdin.write(b"hello\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"got hello\n"  # input still open
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.communicate(timeout=10)  # closes our ends of the pipes


def test_a_large_input_streams_in_bounded_memory(
    exe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """128 MiB through ``wc -c``: all of it arrives, and panday's peak resident memory stays
    far below the input's size. The peak is the process's own high-water mark (``VmHWM``
    in /proc), read once every byte has been written and before the input ends, so panday
    is still running (``wc`` waits for the end); rusage would not do: a child started by
    vfork from a large test process inherits that process's peak."""
    size = 128 << 20
    r, w = os.pipe()
    out_r, out_w = os.pipe()
    where = tmp_path / "cwd"
    where.mkdir()
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "no-user-config")}
    monkeypatch.chdir(where)  # the default policy's workspace is the current directory
    pid = os.posix_spawn(
        exe,
        [exe, "run", "--stdin", "--", "wc", "-c"],
        env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_CLOSE, w),
            (os.POSIX_SPAWN_CLOSE, out_r),
        ],
    )
    os.close(r)
    os.close(out_w)
    try:
        block = b"z" * (1 << 20)
        for _ in range(size // len(block)):
            os.write(w, block)  # blocks until panday has taken what the pipe held
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        peak = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM:")).split()[1])
    finally:
        os.close(w)
    out = b""
    while chunk := os.read(out_r, 4096):
        out += chunk
    os.close(out_r)
    _pid, code = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(code) == 0
    assert out.split() == [str(size).encode()]
    assert peak << 10 < 96 << 20, f"panday held {peak >> 10} MiB while streaming {size >> 20} MiB"
