"""Every process a session's commands left behind, found and killed (issue 30, 4).

The wall clock and the end of a command kill the command's process group, but a process
that calls ``setsid`` (or ``setpgid``) leaves the group, and a double fork hands it to
launchd, so neither its process group nor its parent leads back to the session. Such a
survivor would keep ``file-write*`` on the workspace after the user reviewed the diff, and
``(remote tcp "localhost:PORT")`` after the egress proxy closed its port.

What a process cannot leave is its sandbox: a Seatbelt profile is inherited by every
child, across ``setsid``, ``exec`` and reparenting, and cannot be dropped or replaced. So a
session's processes are found by asking the kernel about *each* process of the user
(``proc_listallpids``): is it sandboxed (``sandbox_check(pid, NULL, 0)``), and may it
create a file in this session's private temp dir (``sandbox_check(pid,
"file-write-create", SANDBOX_FILTER_PATH, tmpdir)``)? Only a process under this session's
profile answers yes to both: an unsandboxed process is not sandboxed, and every other
profile (another session's, an App Sandbox app's) is denied this session's temp dir. The
search is repeated, killing what it finds, until one pass finds nothing (a process that
forks while being killed leaves a child the next pass finds), within `MAX_ROUNDS`.

`sweep` is pure (its three functions are given) and is tested on every OS; `host_sweep`
binds it to libproc and libsandbox on macOS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

MAX_ROUNDS: Final = 64
"""Passes before giving up on a process tree that forks faster than it is killed."""

PAUSE_S: Final = 0.01
"""Between passes: time for a killed process to be gone from the listing."""

SANDBOX_FILTER_PATH: Final = 1
SANDBOX_CHECK_NO_REPORT: Final = 0x40000000
"""Ask without a log line per process (the answer is expected to be "denied" for most)."""


def sweep(
    list_pids: Callable[[], Iterable[int]],
    is_ours: Callable[[int], bool],
    kill: Callable[[int], None],
    *,
    rounds: int = MAX_ROUNDS,
    pause: float = PAUSE_S,
) -> tuple[int, bool]:
    """Kill every process `is_ours` accepts until a pass finds none: (how many kills were
    sent, whether the last pass found none). This process is never a candidate."""
    me = os.getpid()
    sent = 0
    for _ in range(rounds):
        found = [pid for pid in list_pids() if pid > 1 and pid != me and is_ours(pid)]
        if not found:
            return sent, True
        for pid in found:
            kill(pid)
            sent += 1
        time.sleep(pause)
    return sent, False


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def host_sweep(tmpdir: str) -> tuple[int, bool]:
    """`sweep` over this Mac's processes for the session whose private temp dir is
    `tmpdir`. (0, True) off macOS, where no Seatbelt session exists."""
    import sys  # noqa: PLC0415 - the check is all this needs

    if sys.platform != "darwin":
        return 0, True
    import ctypes  # noqa: PLC0415 - macOS only, and only when a session ends

    libproc = ctypes.CDLL("/usr/lib/libproc.dylib", use_errno=True)
    libsandbox = ctypes.CDLL("/usr/lib/libsandbox.1.dylib", use_errno=True)
    libproc.proc_listallpids.argtypes = [ctypes.c_void_p, ctypes.c_int]
    libproc.proc_listallpids.restype = ctypes.c_int
    check = libsandbox.sandbox_check
    # Variadic: the fixed arguments are declared, the path is passed as one more
    # (ctypes calls it as variadic on Apple arm64 because more arguments than argtypes
    # are given).
    check.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    check.restype = ctypes.c_int
    path = tmpdir.encode()

    def list_pids() -> list[int]:
        size = 4096
        while True:
            buf = (ctypes.c_int * size)()
            n = libproc.proc_listallpids(buf, ctypes.sizeof(buf))
            if n < size:
                return list(buf[: max(n, 0)])
            size *= 2

    def is_ours(pid: int) -> bool:
        if check(pid, None, 0) != 1:  # not sandboxed (or gone)
            return False
        how = SANDBOX_FILTER_PATH | SANDBOX_CHECK_NO_REPORT
        return check(pid, b"file-write-create", how, ctypes.c_char_p(path)) == 0

    return sweep(list_pids, is_ours, _kill)
