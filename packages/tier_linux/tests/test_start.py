"""Whether a command ran is decided by what only panday's side writes, never by its output.

`StartCheck` reads bwrap's status descriptor (``exit-code`` is there exactly when bwrap's
exec of the command succeeded) and the relay's report pipe. These tests drive it with real
pipes holding what bwrap and the relay write; the end-to-end cases (real jails, with and
without the relay) are in test_bridge.py.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

import pytest

from panday_core.errors import CommandNotFound, Internal, TierUnavailable, WorkspaceUnusable
from panday_core.types import ExecExit, LimitBreach, LimitKind, OutputChunk
from panday_tier_linux.supervisor import JailSupervisor, StartCheck, Status

if TYPE_CHECKING:
    from collections.abc import Iterator

CHILD = b'{ "child-pid": 4242 }\n'
RAN = CHILD + b'{ "exit-code": 125 }\n'


def _pipe(data: bytes) -> int:
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    os.set_blocking(r, False)
    return r


@pytest.fixture
def made() -> Iterator[list[JailSupervisor]]:
    sups: list[JailSupervisor] = []
    yield sups
    for sup in sups:
        sup.close()


def check(
    made: list[JailSupervisor], status: bytes, report: bytes | None = None, *, program: str = "x"
) -> StartCheck:
    sup = JailSupervisor(
        cgroup=None,
        cpu_ms=None,
        disk_bytes=None,
        status=Status(_pipe(status)),
        report_fd=None if report is None else _pipe(report),
    )
    made.append(sup)
    return StartCheck(program, sup, relay=report is not None)


def out(stream: str, data: bytes) -> OutputChunk:
    return OutputChunk(stream=stream, data=data)  # pyright: ignore[reportArgumentType] - test data


def end(code: int | None = 1) -> ExecExit:
    return ExecExit(exit_code=code, wall_ms=1.0)


BWRAP_LINE = b"bwrap: execvp x: No such file or directory\n"


def test_bwrap_status_without_an_exit_code_is_an_exec_failure(made: list[JailSupervisor]) -> None:
    start = check(made, CHILD, program="nosuch")
    # bwrap's line, in pieces, is held back and then dropped: it is not the command's.
    assert start.feed(out("stderr", BWRAP_LINE[:2])) == []
    assert start.feed(out("stderr", BWRAP_LINE[2:])) == []
    with pytest.raises(CommandNotFound) as info:
        start.feed(end(1))
    assert (info.value.program, info.value.exit_code) == ("nosuch", 127)
    denied = check(made, CHILD, program="/etc")
    denied.feed(out("stderr", b"bwrap: execvp /etc: Permission denied\n"))
    with pytest.raises(CommandNotFound) as info:
        denied.feed(end(1))
    assert (info.value.exit_code, info.value.reason) == (
        126,
        "cannot be executed inside the sandbox (Permission denied)",
    )
    other = check(made, CHILD)
    other.feed(
        out("stderr", b"bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n")
    )
    with pytest.raises(TierUnavailable, match="mount proc"):
        other.feed(end(1))


def test_with_an_exit_code_the_same_words_are_the_commands_output(
    made: list[JailSupervisor],
) -> None:
    # Control above: without "exit-code" those words end in CommandNotFound. With it, the
    # command ran, printed them and exited 1: that is its result, passed on in order.
    start = check(made, CHILD + b'{ "exit-code": 1 }\n')
    assert start.feed(out("stderr", BWRAP_LINE)) == []
    exit_event = end(1)
    assert start.feed(exit_event) == [out("stderr", BWRAP_LINE), exit_event]


def test_the_relay_report_decides_with_the_relay(made: list[JailSupervisor]) -> None:
    line = b"bwrap: execvp x: No such file or directory\n"
    # Reported exec failure: CommandNotFound from the errno, whatever stderr says.
    failed = check(made, RAN, b"E%d\n" % errno.ENOENT, program="x")
    failed.feed(out("stderr", line))
    with pytest.raises(CommandNotFound) as info:
        failed.feed(end(125))
    assert info.value.exit_code == 127
    denied = check(made, RAN, b"E%d\n" % errno.EACCES)
    with pytest.raises(CommandNotFound) as info:
        denied.feed(end(125))
    assert info.value.exit_code == 126
    setup = check(made, RAN, b"Scannot listen on 127.0.0.1 inside the jail: busy\n")
    with pytest.raises(Internal, match="relay inside the jail failed: cannot listen"):
        setup.feed(end(125))
    # Nothing reported: the command was exec'd; the same words and 125 are its own.
    ran = check(made, RAN, b"")
    assert ran.feed(out("stderr", line)) == []
    assert ran.feed(out("stderr", b"panday-relay: x\n")) == [
        out("stderr", line),
        out("stderr", b"panday-relay: x\n"),
    ]
    exit_event = end(125)
    assert ran.feed(exit_event) == [exit_event]


def test_only_what_may_be_one_setup_line_is_held(made: list[JailSupervisor]) -> None:
    follow_ups = (out("stdout", b"o"), out("stderr", b"more\n"))
    for follow in follow_ups:
        start = check(made, RAN)
        assert start.feed(out("stderr", b"bwrap: looks like it\n")) == []
        assert start.feed(follow) == [out("stderr", b"bwrap: looks like it\n"), follow]
    start = check(made, RAN)
    assert start.feed(out("stderr", b"bwrap: a\nb")) == [out("stderr", b"bwrap: a\nb")]
    assert start.feed(out("stderr", b"x")) == [out("stderr", b"x")]
    start = check(made, RAN)
    assert start.feed(out("stderr", b"warning\n")) == [out("stderr", b"warning\n")]
    start = check(made, RAN)
    big = b"bwrap: " + b"x" * 5000
    assert start.feed(out("stderr", big)) == [out("stderr", big)]  # held only while short


def test_a_kill_of_ours_is_a_breach_not_a_setup_failure(made: list[JailSupervisor]) -> None:
    start = check(made, CHILD)
    breach = LimitBreach(kind=LimitKind.WALL_CLOCK, detail="killed")
    killed = ExecExit(exit_code=None, signal=9, wall_ms=1.0, breach=breach)
    assert start.feed(killed) == [killed]


def test_a_directory_bwrap_cannot_enter_is_a_fault_of_the_directory(
    made: list[JailSupervisor],
) -> None:
    start = check(made, CHILD)
    start.feed(out("stderr", b"bwrap: Can't chdir to /w/sub: Permission denied\n"))
    with pytest.raises(WorkspaceUnusable) as info:
        start.feed(end(1))
    assert (info.value.field, info.value.path) == ("cwd", "/w/sub")
    assert "Permission denied" in info.value.reason
