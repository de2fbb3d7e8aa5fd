"""A spawned command: `spawn` it with exactly the descriptors it needs, and `ChildProcess`,
its pid, pidfd and pipes; plus the words the exec pumps use for what they cut or kill.

Split from `panday_core.execution` (which re-exports all of it, with the pumps) because
`panday run`'s cached-plan start-up (`panday.cli_fast`) spawns with it and pumps with its
own writer: without bytecode every start compiles each module it imports from source.

`os.posix_spawn` instead of `subprocess`: it is cheaper to import and to call, and it
places exactly the descriptors we name in the child. Every other descriptor our process
may have inherited without close-on-exec is closed in the child, so nothing leaks into a
jail by accident.
"""

from __future__ import annotations

import _signal  # pyright: ignore[reportMissingModuleSource] - signal without its enum (panday_core.startup)
import os
import select
import sys
import time

from panday_core.startup import suppress

TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Literal

    Stream = Literal["stdout", "stderr"]

READ_SIZE = 64 * 1024
"""Bytes read from a pipe per wake-up: one pipe buffer, so a chatty command is not starved."""

DRAIN_GRACE_S = 2.0
"""After the main process exits (and its tree was killed), how long we keep reading pipes
that some escaped holder still keeps open before closing them ourselves."""

FALLBACK_REAP_S = 0.02
"""Without a pidfd (macOS, old kernels) the exit is noticed by polling this often."""


def truncation_marker(stream: Stream, cap: int) -> bytes:
    """The chunk appended once when `stream` crosses its cap."""
    return f"\n[panday: {stream} exceeded {cap} bytes; the rest was discarded]\n".encode()


def output_breach_detail(stream: Stream, cap: int) -> str:
    """What an output breach says (the `LimitKind.OUTPUT` breach's detail)."""
    return f"{stream} exceeded limits.output_bytes={cap}; truncated"


def wall_clock_detail(timeout_ms: int | None) -> str:
    """What a wall-clock breach says (the `LimitKind.WALL_CLOCK` breach's detail)."""
    return f"still running after {timeout_ms} ms; the whole process tree was killed"


class _ExitWatch:
    """Says, without reaping it, whether a child has exited, where `os.waitid` is missing.

    CPython leaves `os.waitid` out on macOS, so WNOWAIT cannot be asked for there. A kqueue
    with EVFILT_PROC/NOTE_EXIT on the pid reports the exit and leaves the child a zombie, so
    its pid and process group stay reserved until `ChildProcess.reap`, as with waitid.
    """

    __slots__ = ("_close", "_poll", "_seen")

    def __init__(self, pid: int) -> None:
        self._seen = False
        self._poll: Callable[[], bool] = lambda: False
        self._close: Callable[[], None] = lambda: None
        if sys.platform != "linux" and sys.platform != "win32":
            kq = select.kqueue()
            note = select.kevent(
                pid,
                filter=select.KQ_FILTER_PROC,
                flags=select.KQ_EV_ADD | select.KQ_EV_ONESHOT,
                fflags=select.KQ_NOTE_EXIT,
            )
            try:
                kq.control([note], 0, 0)
            except ProcessLookupError:  # exited before it could be watched
                self._seen = True
            self._poll = lambda: bool(kq.control(None, 1, 0))
            self._close = kq.close

    def exited(self) -> bool:
        if not self._seen:
            self._seen = self._poll()  # the event fires once; remember it
        return self._seen

    def close(self) -> None:
        self._close()


class ChildProcess:
    """A spawned command: its pid, a pidfd when the OS has one, and our ends of its pipes."""

    __slots__ = ("exit_watch", "pid", "pidfd", "started", "status", "stderr", "stdin", "stdout")

    def __init__(
        self,
        *,
        pid: int,
        pidfd: int | None,
        stdin: int | None,
        stdout: int,
        stderr: int,
        started: float,
        exit_watch: _ExitWatch | None = None,
    ) -> None:
        # Each descriptor is None once closed.
        self.pid = pid
        self.pidfd = pidfd
        self.exit_watch = exit_watch
        self.stdin: int | None = stdin
        self.stdout: int | None = stdout
        self.stderr: int | None = stderr
        self.started = started
        self.status: int | None = None
        """The raw wait status once reaped. After that the pid may be reused: never signal it."""

    def reap(self, *, block: bool) -> bool:
        """Collect the exit status; True once the process has been reaped."""
        if self.status is not None:
            return True
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler); status is lost
            self.status = 255 << 8
            return True
        if pid == 0:
            return False
        self.status = status
        return True

    def exited(self) -> bool:
        """Whether the process has exited, without reaping it (for hosts with no pidfd)."""
        if self.status is not None:
            return True
        if self.exit_watch is not None:
            return self.exit_watch.exited()
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # already reaped elsewhere
            return True
        return info is not None

    def signal_group(self, sig: int) -> None:
        """Signal the process group the child leads (it was spawned with `setsid`)."""
        if self.status is not None:
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def close(self) -> None:
        for fd in (self.stdin, self.stdout, self.stderr, self.pidfd):
            if fd is not None:
                os.close(fd)
        self.stdin = self.stdout = self.stderr = self.pidfd = None
        if self.exit_watch is not None:
            self.exit_watch.close()
            self.exit_watch = None


PIPE_CAPACITY = 65536
"""Bytes a fresh pipe holds without a reader (Linux's default): `data_fd`'s limit."""


def data_fd(data: bytes) -> int:
    """A readable descriptor holding `data`, for a child to read once (bwrap's ``--args``
    and ``--seccomp``): a pipe when it fits, else a memfd (Linux only)."""
    if len(data) <= PIPE_CAPACITY:
        r, w = os.pipe()
        try:
            os.write(w, data)
        finally:
            os.close(w)
        return r
    fd = os.memfd_create("panday-args", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _high(fd: int) -> int:
    """Move `fd` above the standard descriptors (a daemon may run with 0-2 closed)."""
    if fd > 2:  # noqa: PLR2004 - 0, 1 and 2 are stdin, stdout and stderr
        return fd
    import fcntl

    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return new


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    return _high(r), _high(w)


def proc_stat(pid: int) -> tuple[str, str] | None:
    """Fields 3 and 22 of ``/proc/<pid>/stat``: the state and the start time (clock ticks
    since boot), which with the pid says which process a name written earlier means (pids
    are reused). None when it cannot be read: no such process, no /proc, or hidden."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:  # noqa: PTH123 - pathlib costs start-up time here
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), fields[19].decode()
    except (OSError, IndexError):
        return None


def _inherited_fds(keep: set[int]) -> list[int]:
    """Our descriptors above the standard ones, except `keep`, that the child is not to
    get. On Linux every open one: a close action on a descriptor that is close-on-exec
    anyway costs the child one close(2), less than asking each one's flag from here (an
    fcntl and a Python call apiece: 55 us for 28 descriptors, every command), and glibc
    and musl ignore EBADF from a close action (one closed since this listing). Elsewhere
    only those without close-on-exec (macOS fails the spawn on a close of a closed one)."""
    if _LINUX:
        try:
            names = os.listdir("/proc/self/fd")  # noqa: PTH208 - pathlib costs start-up time here
        except OSError:  # no /proc here: /dev/fd, as on other systems
            names = os.listdir("/dev/fd")  # noqa: PTH208 - pathlib costs start-up time here
        return [fd for fd in map(int, names) if fd > 2 and fd not in keep]  # noqa: PLR2004 - the standard descriptors are replaced anyway
    found: list[int] = []
    for name in os.listdir("/dev/fd"):  # noqa: PTH208 - pathlib costs start-up time here
        fd = int(name)
        if fd <= 2 or fd in keep:  # noqa: PLR2004 - the standard descriptors are replaced anyway
            continue
        try:
            if os.get_inheritable(fd):
                found.append(fd)
        except OSError:  # the listing's own descriptor, already closed
            continue
    return found


_LINUX = sys.platform == "linux"


def _file_actions(
    stdin_fd: int | None, out_w: int, err_w: int, pass_fds: Sequence[int], ours: Sequence[int]
) -> list[tuple[int, ...] | tuple[int, int, str, int, int]]:
    # Hand-over in two hops (to slots above every source and target, then into place) so
    # that no dup2 overwrites a descriptor still to be moved. The first hop comes before the
    # standard descriptors are replaced: in a caller that runs with 0-2 closed (a daemon),
    # pipe(2) hands out 0-2, so a descriptor to hand over may be one of them. dup2 clears
    # close-on-exec on its target, which is what lets exactly these descriptors through.
    base = max([*pass_fds, *ours, 2 + len(pass_fds)]) + 1
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
        (os.POSIX_SPAWN_DUP2, fd, base + i) for i, fd in enumerate(pass_fds)
    ]
    if stdin_fd is None:
        actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
    else:
        actions.append((os.POSIX_SPAWN_DUP2, stdin_fd, 0))
    actions += [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
    for i in range(len(pass_fds)):
        actions += [(os.POSIX_SPAWN_DUP2, base + i, 3 + i), (os.POSIX_SPAWN_CLOSE, base + i)]
    # The first hop's slots too: the second hop closes them already, and a close action
    # on a descriptor closed before is not ignored everywhere (`_inherited_fds`).
    keep = {*pass_fds, *ours, *range(3, 3 + len(pass_fds)), *range(base, base + len(pass_fds))}
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds(keep)]
    return actions


def _pidfd(pid: int) -> int | None:
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:  # kernels before 5.3
        return None


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin: bool = False,
    pass_fds: Sequence[int] = (),
    run_in: Callable[[Callable[[], int]], int] | None = None,
    tty: tuple[int, int] | None = None,
) -> ChildProcess:
    """Start `argv` (argv[0] an absolute path) in a new session, with pipes for its output.

    `tty` (master, slave of a pseudo-terminal the caller opened): the child's standard
    descriptors are the slave instead, and our ends of its stdin and stdout are copies of
    the master (its stderr is an empty pipe: a terminal has one output).

    `pass_fds` are our descriptors to hand over; the child sees them as 3, 4, 5, ... in
    order. Its stdin is a pipe when `stdin` is true, else /dev/null. Signals Python ignores
    (SIGPIPE, SIGXFSZ) are reset to their defaults, so the command behaves as it would from
    a shell. `run_in`, when given, makes the one ``posix_spawn`` call (T1 Linux makes it
    on a thread that has restricted itself, which the child inherits).
    """
    if not argv or not os.path.isabs(argv[0]):  # noqa: PTH117 - os is loaded already
        raise ValueError("spawn needs argv[0] to be an absolute path")
    if tty is not None:
        master, slave = tty
        in_r, in_w = slave, _high(os.dup(master))
        out_r, out_w = _high(os.dup(master)), slave
        err_r, empty = _pipe()
        os.close(empty)  # the command's stderr is the terminal too: this one only ends
        err_w = slave
        ours = [in_w, out_r, err_r]
    else:
        in_r, in_w = _pipe() if stdin else (None, None)
        out_r, out_w = _pipe()
        err_r, err_w = _pipe()
        ours = [fd for fd in (in_r, in_w, out_r, out_w, err_r, err_w) if fd is not None]
    started = time.monotonic()
    try:
        actions = _file_actions(in_r, out_w, err_w, pass_fds, [*ours, *(tty or ())])

        def call() -> int:
            return os.posix_spawn(
                argv[0],
                list(argv),
                env,
                file_actions=actions,
                setsid=True,
                setsigmask=(),
                setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ),
            )

        pid = call() if run_in is None else run_in(call)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    for fd in (in_r, out_w, err_w) if tty is None else ():
        if fd is not None:
            os.close(fd)  # (a terminal's slave stays the caller's, to close after the run)
    for fd in (in_w, out_r, err_r):
        if fd is not None:
            os.set_blocking(fd, False)
    pidfd = _pidfd(pid)
    watch = _ExitWatch(pid) if pidfd is None and not hasattr(os, "waitid") else None
    return ChildProcess(
        pid=pid,
        pidfd=pidfd,
        stdin=in_w,
        stdout=out_r,
        stderr=err_r,
        started=started,
        exit_watch=watch,
    )
