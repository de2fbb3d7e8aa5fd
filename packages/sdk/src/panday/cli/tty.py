"""`panday run --tty` and `panday shell`: a jailed command with a terminal of its own.

A new pseudo-terminal pair is made for the command (never the caller's terminal: TIOCSTI
or a stolen controlling terminal inside reaches only that pty, and seccomp refuses TIOCSTI
anyway). In the jail, setsid makes the command the leader of a session whose controlling
terminal is the pty, so job control works. Here, this process's terminal is put in raw
mode and relayed both ways: keys (Ctrl-C, Ctrl-Z included) go to the pty, whose line
discipline signals the jailed foreground job; what the command writes comes back through
`panday.terminal.AppFilter` (an editor's cursor movement passes, clipboard writes, title
changes and requests that make the terminal answer do not); a window-size change is
passed on (SIGWINCH -> TIOCSWINSZ on the master: the jailed job gets its own SIGWINCH).
The caller's terminal mode is restored on every way out (the command's exit, a breach,
an error, a signal to panday that Python sees).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from panday import exitcodes
from panday.stdio import write_all

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from panday.session import Session
    from panday_core.types import ExecExit

_DEFAULT_SIZE = (24, 80)


def _size(fd: int) -> bytes | None:
    import fcntl
    import termios

    try:
        return fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
    except OSError:
        return None


def _set_size(master: int, size: bytes | None) -> None:
    import fcntl
    import struct
    import termios

    if size is None:
        size = struct.pack("HHHH", *_DEFAULT_SIZE, 0, 0)
    fcntl.ioctl(master, termios.TIOCSWINSZ, size)


def run_tty(session: Session, argv: Sequence[str], exit_code_of: Callable[[ExecExit], int]) -> int:
    """Run `argv` in `session` with a terminal of its own; the exit code as `panday run`."""
    import signal
    import termios
    import tty

    from panday.terminal import AppFilter
    from panday_core.types import OutputChunk

    master, slave = os.openpty()
    ours = 0 if os.isatty(0) else None
    _set_size(master, _size(0) if ours is not None else _size(1))
    saved = termios.tcgetattr(ours) if ours is not None else None

    def resized(signum: int, frame: object) -> None:
        del signum, frame
        _set_size(master, _size(ours if ours is not None else 1))

    before = signal.signal(signal.SIGWINCH, resized)
    screen = AppFilter() if os.isatty(1) else None
    events = session.stream(argv, stdin=0, tty=(master, slave))
    try:
        if ours is not None:
            tty.setraw(ours)
        for event in events:
            if isinstance(event, OutputChunk):
                write_all(1, event.data if screen is None else screen.feed(event.data))
                continue
            if screen is not None:
                write_all(1, screen.flush())
            _restore(ours, saved)
            if event.breach is not None:
                sys.stderr.write(f"\npanday: limit exceeded: {event.breach.kind.value}\n")
            return exit_code_of(event)
    finally:
        events.close()
        _restore(ours, saved)
        signal.signal(signal.SIGWINCH, before)
        for fd in (master, slave):
            os.close(fd)
    return exitcodes.INTERNAL


def _restore(fd: int | None, saved: list[int | list[bytes | int]] | None) -> None:
    """Put the caller's terminal back as it was (idempotent)."""
    if fd is None or saved is None:
        return
    import contextlib
    import termios

    with contextlib.suppress(OSError, termios.error):
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
