"""The shared exec machinery, on real processes (no jail): streaming, caps, stdin, clocks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest

from panday_core.execution import (
    Breach,
    ChildProcess,
    Supervisor,
    acollect,
    astream,
    collect,
    spawn,
    stream,
    truncation_marker,
)
from panday_core.types import ExecExit, LimitKind, OutputChunk

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process machinery")

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C"}
SH = "/bin/sh"


def run(script: str, **kw: object) -> tuple[list[OutputChunk], ExecExit]:
    stdin_data = kw.pop("stdin_data", None)
    assert stdin_data is None or isinstance(stdin_data, bytes)
    proc = spawn([SH, "-c", script], env=ENV, stdin=stdin_data is not None)
    events = list(stream(proc, Supervisor(), stdin_data=stdin_data, **kw))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType] - test passes keyword options through
    chunks = [e for e in events if isinstance(e, OutputChunk)]
    exits = [e for e in events if isinstance(e, ExecExit)]
    assert len(exits) == 1
    assert events[-1] is exits[0]
    return chunks, exits[0]


def test_streams_stdout_and_stderr_and_the_exit_code() -> None:
    result = collect(
        stream(spawn([SH, "-c", "echo out; echo err >&2; exit 3"], env=ENV), Supervisor())
    )
    assert result.stdout == b"out\n"
    assert result.stderr == b"err\n"
    assert result.exit_code == 3
    assert result.signal is None
    assert result.breach is None


def test_stdin_is_fed_and_closed() -> None:
    data = os.urandom(300_000)  # larger than a pipe buffer: exercises partial writes
    proc = spawn(["/usr/bin/env", "cat"], env=ENV, stdin=True)
    result = collect(stream(proc, Supervisor(), stdin_data=data))
    assert result.stdout == data
    assert result.exit_code == 0


def test_no_stdin_means_dev_null() -> None:
    result = collect(stream(spawn(["/usr/bin/env", "cat"], env=ENV), Supervisor()))
    assert result.stdout == b""
    assert result.exit_code == 0


def test_output_beyond_the_cap_is_discarded_with_a_marker_and_a_breach() -> None:
    # 20 MB of output with a 4 KiB cap: the result stays small, the marker is there once.
    chunks, exit_ = run("head -c 20000000 /dev/zero; echo tail >&2", output_cap=4096)
    out = b"".join(c.data for c in chunks if c.stream == "stdout")
    marker = truncation_marker("stdout", 4096)
    assert out == b"\0" * 4096 + marker
    assert exit_.truncated_stdout
    assert not exit_.truncated_stderr
    assert exit_.breach is not None
    assert exit_.breach.kind is LimitKind.OUTPUT
    assert exit_.exit_code == 0


def test_without_a_cap_nothing_is_truncated() -> None:
    chunks, exit_ = run("head -c 300000 /dev/zero")
    assert sum(len(c.data) for c in chunks) == 300_000
    assert exit_.breach is None


def test_the_wall_clock_kills_the_process_group(tmp_path: Path) -> None:
    beat = tmp_path / "beat"
    # A background child keeps beating; the wall clock must kill it with its parent.
    script = f"(while :; do date +%s%N > {beat}; sleep 0.05; done) & sleep 6"
    started = time.monotonic()
    _, exit_ = run(script, timeout_ms=300)
    assert time.monotonic() - started < 5
    assert exit_.breach is not None
    assert exit_.breach.kind is LimitKind.WALL_CLOCK
    assert exit_.signal == signal.SIGKILL
    time.sleep(0.3)
    last = beat.read_text()
    time.sleep(0.4)
    assert beat.read_text() == last, "a child outlived the wall-clock kill"


def test_what_the_main_process_leaves_behind_is_killed_when_it_exits(tmp_path: Path) -> None:
    beat = tmp_path / "beat"
    script = f"(while :; do date +%s%N > {beat}; sleep 0.05; done) & sleep 0.3"
    _, exit_ = run(script)
    assert exit_.exit_code == 0
    time.sleep(0.3)
    last = beat.read_text()
    time.sleep(0.4)
    assert beat.read_text() == last


def test_a_signal_death_is_reported_as_a_signal() -> None:
    _, exit_ = run("kill -TERM $$")
    assert exit_.exit_code is None
    assert exit_.signal == signal.SIGTERM


def test_sigpipe_is_default_in_the_child() -> None:
    # Python ignores SIGPIPE; a child inheriting that would spin in `yes` forever.
    _, exit_ = run("yes | head -n 1", timeout_ms=10_000)
    assert exit_.breach is None
    assert exit_.exit_code == 0


def test_only_named_descriptors_are_inherited() -> None:
    leaked_r, leaked_w = os.pipe()
    # What a careless parent process might hand us: an inheritable descriptor, numbered
    # high so it cannot be confused with the ones the child is meant to see.
    os.dup2(leaked_r, 50, inheritable=True)
    os.close(leaked_r)
    leaked_r = 50
    passed_r, passed_w = os.pipe()
    try:
        os.write(passed_w, b"handed-over")
        os.close(passed_w)
        proc = spawn(
            [SH, "-c", "ls /proc/self/fd 2>/dev/null || ls /dev/fd; cat <&3"],
            env=ENV,
            pass_fds=[passed_r],
        )
        result = collect(stream(proc, Supervisor()))
    finally:
        for fd in (leaked_r, leaked_w, passed_r):
            os.close(fd)
    lines = result.stdout.decode().split()
    assert lines[-1] == "handed-over"
    fds = {int(x) for x in lines[:-1]}
    # 0-2, the handed-over 3, and the directory `ls` itself opened to list them.
    assert fds <= {0, 1, 2, 3, 4}


_CLOSED_STDIO = """
import os, sys
from panday_core.execution import Supervisor, collect, spawn, stream
out = sys.argv[1]
if sys.argv[2] == "closed":
    for fd in (0, 1, 2):
        os.close(fd)
first_r, first_w = os.pipe()
second_r, second_w = os.pipe()
numbers = f"{first_r} {second_r}"
os.write(first_w, b"first ")
os.write(second_w, b"second")
os.close(first_w)
os.close(second_w)
env = {"PATH": "/usr/bin:/bin"}
proc = spawn(["/bin/sh", "-c", "cat <&3; cat <&4"], env=env, pass_fds=[first_r, second_r])
result = collect(stream(proc, Supervisor()))
with open(out, "w") as fh:
    fh.write(numbers + "|" + result.stdout.decode())
"""


@pytest.mark.parametrize("stdio", ["open", "closed"])
def test_descriptors_handed_over_from_a_caller_with_stdio_closed_arrive(
    stdio: str, tmp_path: Path
) -> None:
    # With 0-2 open (the control) the pipes are numbered above them; with 0-2 closed, as a
    # daemon may run, pipe(2) returns 0-3 (read ends 0 and 2), which the child's own stdin
    # and stderr replace: they must be moved away before that, or the child reads those.
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-c", _CLOSED_STDIO, str(out), stdio], check=True, timeout=60)
    numbers, _, seen = out.read_text().partition("|")
    if stdio == "closed":
        assert numbers == "0 2"  # the case under test did arise
    else:
        assert min(int(n) for n in numbers.split()) > 2
    assert seen == "first second"


class _Breaching(Supervisor):
    tick_s = 0.02

    def __init__(self) -> None:
        self.calls = 0

    def check(self) -> Breach | None:
        self.calls += 1
        if self.calls >= 3:
            return ("cpu", "test ceiling")
        return None


def test_a_supervisor_breach_ends_the_command() -> None:
    sup = _Breaching()
    result = collect(stream(spawn([SH, "-c", "sleep 30"], env=ENV), sup))
    assert result.breach is not None
    assert result.breach.kind is LimitKind.CPU
    assert sup.calls == 3


def test_closing_the_stream_early_kills_and_reaps() -> None:
    proc = spawn([SH, "-c", "echo first; exec sleep 30"], env=ENV)
    events = stream(proc, Supervisor())
    first = next(events)
    assert isinstance(first, OutputChunk)
    events.close()
    assert proc.status is not None
    assert proc.stdout is None
    assert proc.stderr is None


def test_async_face_matches_the_sync_one() -> None:
    async def main() -> tuple[bytes, int | None]:
        proc = spawn([SH, "-c", "cat; echo done >&2"], env=ENV, stdin=True)
        result = await acollect(astream(proc, Supervisor(), stdin_data=b"abc"))
        return result.stdout + result.stderr, result.exit_code

    out, code = asyncio.run(main())
    assert out == b"abcdone\n"
    assert code == 0


def test_async_wall_clock() -> None:
    async def main() -> ExecExit:
        proc = spawn([SH, "-c", "sleep 30"], env=ENV)
        last: ExecExit | None = None
        async for event in astream(proc, Supervisor(), timeout_ms=200):
            if isinstance(event, ExecExit):
                last = event
        assert last is not None
        return last

    exit_ = asyncio.run(main())
    assert exit_.breach is not None
    assert exit_.breach.kind is LimitKind.WALL_CLOCK


def test_spawn_needs_an_absolute_program() -> None:
    with pytest.raises(ValueError, match="absolute"):
        spawn(["sh", "-c", "true"], env=ENV)


def test_a_missing_program_raises_and_leaks_nothing() -> None:
    before: set[str] = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()  # noqa: PTH112, PTH208 - mirrors the module
    with pytest.raises(OSError):  # noqa: PT011 - which errno depends on the OS
        spawn(["/nonexistent/program"], env=ENV)
    if before:
        assert set(os.listdir("/proc/self/fd")) == before  # noqa: PTH208 - as above


def test_child_process_reap_is_idempotent() -> None:
    proc: ChildProcess = spawn([SH, "-c", "exit 0"], env=ENV)
    collect(stream(proc, Supervisor()))
    assert proc.reap(block=True)
    assert proc.reap(block=False)


@pytest.mark.timeout(60)
def test_without_a_pidfd_the_exit_is_noticed_and_the_group_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path macOS always takes (no pidfd; no os.waitid in CPython there: a kqueue)."""

    def no_pidfd(pid: int) -> int | None:
        del pid
        return None

    monkeypatch.setattr("panday_core.process._pidfd", no_pidfd)
    pidfile = tmp_path / "bg.pid"
    # The background child outlives the main process unless the group kill reaches it.
    proc = spawn([SH, "-c", f"sleep 30 & echo $! > {pidfile}; echo main"], env=ENV)
    assert proc.pidfd is None
    result = collect(stream(proc, Supervisor(), timeout_ms=20_000))
    assert result.exit_code == 0
    assert result.stdout == b"main\n"
    assert result.wall_ms < 10_000, "the exit was not noticed without a pidfd"
    bg = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(bg, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(bg, signal.SIGKILL)
        pytest.fail("the background child outlived its command")


# ------------------------------------------------------------------ a streamed stdin


def _fed(data: bytes, *, close: bool) -> tuple[int, threading.Thread, int]:
    """A pipe whose read end is the source, fed `data` by a thread (closing the write end
    after it when `close`): (read end, the feeder, write end or -1 once closed)."""
    r, w = os.pipe()

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            view = memoryview(data)
            while view:
                view = view[os.write(w, view[: 1 << 16]) :]
        if close:
            os.close(w)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return r, thread, -1 if close else w


def test_a_streamed_stdin_reaches_the_command_before_its_source_ends() -> None:
    """The command reads a line and answers while the source stays open; the run ends with
    the command, not with the source (which is never closed here)."""
    r, thread, w = _fed(b"hello\n", close=False)
    try:
        proc = spawn([SH, "-c", "read x; echo got $x"], env=ENV, stdin=True)
        result = collect(stream(proc, Supervisor(), stdin_source=r, timeout_ms=30_000))
        assert result.stdout == b"got hello\n"
        assert result.breach is None  # ended by itself, not by the wall clock
    finally:
        thread.join(timeout=10)
        os.close(r)
        os.close(w)


def test_a_streamed_stdin_passes_everything_and_its_end_through() -> None:
    size = 24 << 20  # many times the read-ahead: back-pressure, not one big read
    r, thread, _w = _fed(b"x" * size, close=True)
    try:
        proc = spawn(["/usr/bin/env", "wc", "-c"], env=ENV, stdin=True)
        result = collect(stream(proc, Supervisor(), stdin_source=r, timeout_ms=60_000))
        assert result.stdout.split() == [str(size).encode()]  # cat's EOF came: wc ended
    finally:
        thread.join(timeout=10)
        os.close(r)


def test_a_command_that_never_reads_its_streamed_stdin_still_ends() -> None:
    r, thread, w = _fed(b"y" * (4 << 20), close=False)
    try:
        proc = spawn([SH, "-c", "exit 7"], env=ENV, stdin=True)
        result = collect(stream(proc, Supervisor(), stdin_source=r, timeout_ms=30_000))
        assert (result.exit_code, result.breach) == (7, None)
    finally:
        os.close(r)  # the feeder's next write fails and it stops
        thread.join(timeout=10)
        os.close(w)
