"""panday's own standard streams: repaired at start-up, written whole.

Used by the full CLI and by `panday run`'s cached start-up (`panday.cli_fast`) alike, so it
imports nothing at load time beyond what the interpreter has loaded already.
"""

from __future__ import annotations

import os
import sys


class OutputError(Exception):
    """panday could not write its own output (a full disk, an I/O error) or build its
    `--json` document: one line, exit 74, never a silently shortened result."""

    def __init__(self, fd: int, left: int, exc: OSError) -> None:
        where = {1: "standard output", 2: "standard error"}.get(fd, f"descriptor {fd}")
        super().__init__(
            f"cannot write {where}: {exc.strerror or exc}; {left} bytes were not written, "
            "so what was written is incomplete"
        )


def repair_std_fds() -> tuple[int, ...]:
    """Give each of descriptors 0, 1 and 2 that is closed or unusable /dev/null instead.

    A caller may start us with one closed (``panday run ... >&-``, a daemon's children) or
    opened the wrong way round (``1</dev/null``). Left alone, the next descriptor we open
    (a bwrap option pipe, a policy file) would take that number and be mistaken for a
    standard stream, and Python's own ``sys.stdout`` is None. So before anything else each
    one is checked with one ``fcntl`` (closed: EBADF; stdin must be readable, stdout and
    stderr writable; an ``O_PATH`` descriptor is neither) and replaced where it fails; a
    missing ``sys`` stream is rebuilt over the repaired descriptor. Returns the repaired
    numbers. Cheap: three system calls when nothing is wrong.
    """
    import fcntl

    repaired: list[int] = []
    for fd in (0, 1, 2):
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            flags = -1
        mode = flags & os.O_ACCMODE if flags >= 0 else -1
        usable = flags >= 0 and not flags & getattr(os, "O_PATH", 0)
        usable = usable and (mode in {os.O_RDONLY, os.O_RDWR} if fd == 0 else mode != os.O_RDONLY)
        if usable:
            continue
        new = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        if new != fd:
            os.dup2(new, fd)
            os.close(new)
        os.set_inheritable(fd, True)  # noqa: FBT003 - positional-only in os
        repaired.append(fd)
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if fd in repaired and getattr(sys, name) is None:
            errors = "backslashreplace" if fd == 2 else "strict"  # noqa: PLR2004 - stderr
            stream = open(  # noqa: SIM115 - a standard stream, kept for the process
                fd, "r" if fd == 0 else "w", encoding="utf-8", errors=errors, closefd=False
            )
            setattr(sys, name, stream)
    return tuple(repaired)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of `data` to `fd`, whatever its size: a write returns early at 2 GiB on
    Linux (and earlier on a pipe or a full disk), and a descriptor the caller left
    non-blocking answers EAGAIN rather than waiting. Nothing is dropped silently: a write
    that fails for good raises (`OutputError`, or BrokenPipeError when the reader left)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            _wait_writable(fd)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(fd, len(view), exc) from exc


def _wait_writable(fd: int) -> None:
    """Block until `fd` takes more. poll(2), not select(2): select cannot watch a
    descriptor numbered 1024 or above, and a caller of the library may hold that many."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    poller.poll()


def write_text(text: str, fd: int = 1) -> None:
    """`text` through Python's own stream for `fd` (1 or 2), flushed: a full disk or a
    broken device is `OutputError` (exit 74), never a traceback or "internal error"."""
    stream = sys.stdout if fd == 1 else sys.stderr
    try:
        stream.write(text)
        stream.flush()
    except OSError as exc:
        raise OutputError(fd, len(text.encode("utf-8", "surrogateescape")), exc) from exc


def sanitizing(flags: set[str] | frozenset[str], fd: int) -> bool:
    """Whether control sequences in what `panday run` writes to `fd` are made inert
    (`panday.terminal`): ``--no-sanitize`` never, ``--sanitize`` always, else when `fd` is a
    terminal. One rule for the full path and the cached start-up (`panday.cli_fast`)."""
    if "--no-sanitize" in flags:
        return False
    return "--sanitize" in flags or os.isatty(fd)
