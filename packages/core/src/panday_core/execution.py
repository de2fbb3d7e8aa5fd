"""Running one command: spawn it, stream its output, bound what is kept, enforce a wall clock.

Every tier that executes commands shares this machinery; what differs per tier (the jail's
argv, how the whole process tree is killed, which counters reveal a memory or pid breach)
comes in through a `Supervisor`.

Design points, each a reason rather than a preference:

* Synchronous core, asynchronous face. `stream` is a plain generator driven by
  `select.poll`; `astream` drives the same state machine from an asyncio loop. The CLI's
  start-up path therefore never imports asyncio (≈40 ms here), and both faces behave alike.
* `os.posix_spawn` instead of `subprocess`: it is cheaper to import and to call, and it
  places exactly the descriptors we name in the child. Every other descriptor our process
  may have inherited without close-on-exec is closed in the child, so nothing leaks into a
  jail by accident.
* Bounded memory: output is passed on as it is read (the consumer's pace is the pipe's
  pace); with a cap, bytes beyond it are read and discarded, a marker chunk says so, and the
  exit carries a typed `LimitBreach`. Nothing accumulates here.
* The wall clock kills the *tree*, not the process: the supervisor decides how (a pid
  namespace, a cgroup, a process group), and the same kill runs when the main process exits
  so nothing it started outlives it.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import sys
import time
from typing import TYPE_CHECKING, Literal

from panday_core.types import ExecExit, ExecResult, LimitBreach, LimitKind, OutputChunk

if TYPE_CHECKING:
    from collections.abc import (
        AsyncIterable,
        AsyncIterator,
        Callable,
        Generator,
        Iterable,
        Mapping,
        Sequence,
    )

    from panday_core.types import ExecEvent

READ_SIZE = 64 * 1024
"""Bytes read from a pipe per wake-up: one pipe buffer, so a chatty command is not starved."""

DRAIN_GRACE_S = 2.0
"""After the main process exits (and its tree was killed), how long we keep reading pipes
that some escaped holder still keeps open before closing them ourselves."""

_FALLBACK_REAP_S = 0.02
"""Without a pidfd (macOS, old kernels) the exit is noticed by polling this often."""

Stream = Literal["stdout", "stderr"]


def truncation_marker(stream: Stream, cap: int) -> bytes:
    """The chunk appended once when `stream` crosses its cap."""
    return f"\n[panday: {stream} exceeded {cap} bytes; the rest was discarded]\n".encode()


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
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def close(self) -> None:
        for fd in (self.stdin, self.stdout, self.stderr, self.pidfd):
            if fd is not None:
                os.close(fd)
        self.stdin = self.stdout = self.stderr = self.pidfd = None
        if self.exit_watch is not None:
            self.exit_watch.close()
            self.exit_watch = None


class Supervisor:
    """A tier's hooks into one command's life. The base class suits a plain process group.

    `tick_s` asks for `check` to run that often while the command runs (CPU-time ceilings
    are polled); `kill` must kill the whole tree; `finished` turns counters read after the
    exit (an OOM kill, a refused fork) into a typed breach.
    """

    tick_s: float | None = None

    def started(self, proc: ChildProcess) -> None:
        """Called right after spawning (e.g. to move the jail into its cgroup)."""

    def check(self) -> LimitBreach | None:
        """Called every `tick_s` while the command runs; a breach ends it."""
        return None

    def kill(self, proc: ChildProcess) -> None:
        """Kill everything the command started. Must be idempotent and must not block long."""
        proc.signal_group(signal.SIGKILL)

    def finished(self, proc: ChildProcess) -> LimitBreach | None:  # noqa: ARG002 - hook signature
        """Called once after the command was reaped: which ceiling, if any, ended it."""
        return None


def _high(fd: int) -> int:
    """Move `fd` above the standard descriptors (a daemon may run with 0-2 closed)."""
    if fd > 2:  # noqa: PLR2004 - 0, 1 and 2 are stdin, stdout and stderr
        return fd
    import fcntl  # noqa: PLC0415 - only on this rare path

    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return new


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    return _high(r), _high(w)


def _inherited_fds(keep: set[int]) -> list[int]:
    """Our descriptors that would survive exec (no close-on-exec flag), except `keep`."""
    listing = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"  # noqa: PTH112 - os is loaded already
    found: list[int] = []
    for name in os.listdir(listing):  # noqa: PTH208 - pathlib costs start-up time here
        fd = int(name)
        if fd <= 2 or fd in keep:  # noqa: PLR2004 - the standard descriptors are replaced anyway
            continue
        try:
            if os.get_inheritable(fd):
                found.append(fd)
        except OSError:  # the listing's own descriptor, already closed
            continue
    return found


def _file_actions(
    stdin_fd: int | None, out_w: int, err_w: int, pass_fds: Sequence[int], ours: Sequence[int]
) -> list[tuple[int, ...] | tuple[int, int, str, int, int]]:
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
    if stdin_fd is None:
        actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
    else:
        actions.append((os.POSIX_SPAWN_DUP2, stdin_fd, 0))
    actions += [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
    # Hand-over in two hops (to slots above every source and target, then into place) so
    # that no dup2 overwrites a descriptor still to be moved. dup2 clears close-on-exec on
    # its target, which is what lets exactly these descriptors through exec.
    base = max([*pass_fds, *ours, 2 + len(pass_fds)]) + 1
    actions += [(os.POSIX_SPAWN_DUP2, fd, base + i) for i, fd in enumerate(pass_fds)]
    for i in range(len(pass_fds)):
        actions += [(os.POSIX_SPAWN_DUP2, base + i, 3 + i), (os.POSIX_SPAWN_CLOSE, base + i)]
    keep = {*pass_fds, *ours, *range(3, 3 + len(pass_fds))}
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
) -> ChildProcess:
    """Start `argv` (argv[0] an absolute path) in a new session, with pipes for its output.

    `pass_fds` are our descriptors to hand over; the child sees them as 3, 4, 5, ... in
    order. Its stdin is a pipe when `stdin` is true, else /dev/null. Signals Python ignores
    (SIGPIPE, SIGXFSZ) are reset to their defaults, so the command behaves as it would from
    a shell.
    """
    if not argv or not os.path.isabs(argv[0]):  # noqa: PTH117 - os is loaded already
        raise ValueError("spawn needs argv[0] to be an absolute path")
    in_r, in_w = _pipe() if stdin else (None, None)
    out_r, out_w = _pipe()
    err_r, err_w = _pipe()
    ours = [fd for fd in (in_r, in_w, out_r, out_w, err_r, err_w) if fd is not None]
    started = time.monotonic()
    try:
        actions = _file_actions(in_r, out_w, err_w, pass_fds, ours)
        pid = os.posix_spawn(
            argv[0],
            list(argv),
            env,
            file_actions=actions,
            setsid=True,
            setsigmask=(),
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    for fd in (in_r, out_w, err_w):
        if fd is not None:
            os.close(fd)
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


class _Pump:
    """One command's I/O and timers as a state machine; `stream` and `astream` drive it."""

    def __init__(
        self,
        proc: ChildProcess,
        supervisor: Supervisor,
        *,
        stdin_data: bytes | None,
        output_cap: int | None,
        timeout_ms: int | None,
    ) -> None:
        self.proc = proc
        self.sup = supervisor
        self.cap = output_cap
        self.pending = memoryview(stdin_data or b"")
        self.kept = {"stdout": 0, "stderr": 0}
        self.truncated = {"stdout": False, "stderr": False}
        self.output_breach: LimitBreach | None = None
        self.kill_breach: LimitBreach | None = None
        self.deadline = proc.started + timeout_ms / 1000 if timeout_ms is not None else None
        self.timeout_ms = timeout_ms
        self.next_tick = proc.started + supervisor.tick_s if supervisor.tick_s else None
        self.exited_at: float | None = None
        self.drain_until: float | None = None
        self.result: ExecExit | None = None
        self.streams: dict[int, Stream] = {}
        if proc.stdout is not None:
            self.streams[proc.stdout] = "stdout"
        if proc.stderr is not None:
            self.streams[proc.stderr] = "stderr"
        self.poller = select.poll()
        for fd in self.streams:
            self.poller.register(fd, select.POLLIN)
        if proc.stdin is not None:
            if self.pending:
                self.poller.register(proc.stdin, select.POLLOUT)
            else:
                self._close_stdin()
        if proc.pidfd is not None:
            self.poller.register(proc.pidfd, select.POLLIN)

    # -- what to wait for

    def read_fds(self) -> list[int]:
        fds = list(self.streams)
        if self.proc.pidfd is not None:
            fds.append(self.proc.pidfd)
        return fds

    def write_fds(self) -> list[int]:
        return [self.proc.stdin] if self.proc.stdin is not None else []

    def timeout(self) -> float | None:
        """Seconds until a timer is due (None: only I/O can wake us)."""
        now = time.monotonic()
        due: list[float] = []
        if self.exited_at is None:
            if self.deadline is not None and self.kill_breach is None:
                due.append(self.deadline)
            if self.next_tick is not None and self.kill_breach is None:
                due.append(self.next_tick)
            if self.proc.pidfd is None:
                due.append(now + _FALLBACK_REAP_S)
        elif self.drain_until is not None:
            due.append(self.drain_until)
        if not due:
            return None
        return max(0.0, min(due) - now)

    # -- one step

    def step(self, timeout: float | None) -> list[ExecEvent]:
        events: list[ExecEvent] = []
        if self.result is not None:
            return events
        wait_ms = None if timeout is None else int(timeout * 1000) + (timeout > 0)
        for fd, _mask in self.poller.poll(wait_ms):
            if fd in self.streams:
                self._read(fd, events)
            elif fd == self.proc.stdin:
                self._write()
            elif fd == self.proc.pidfd:
                self._main_exited()
        now = time.monotonic()
        if self.exited_at is None and self.proc.pidfd is None:
            self._main_exited(poll_only=True)
        if self.exited_at is None:
            self._timers(now)
        if self.exited_at is not None and (not self.streams or (self.drain_until or 0) <= now):
            self._finish(events)
        return events

    def _read(self, fd: int, events: list[ExecEvent]) -> None:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        stream = self.streams[fd]
        if not data:
            self._close_stream(fd)
            return
        if self.cap is None:
            events.append(OutputChunk(stream=stream, data=data))
            return
        room = self.cap - self.kept[stream]
        if room > 0:
            kept = data[:room]
            self.kept[stream] += len(kept)
            events.append(OutputChunk(stream=stream, data=kept))
        if len(data) > room and not self.truncated[stream]:
            self.truncated[stream] = True
            events.append(OutputChunk(stream=stream, data=truncation_marker(stream, self.cap)))
            if self.output_breach is None:
                detail = f"{stream} exceeded limits.output_bytes={self.cap}; truncated"
                self.output_breach = LimitBreach(kind=LimitKind.OUTPUT, detail=detail)

    def _write(self) -> None:
        fd = self.proc.stdin
        if fd is None:
            return
        try:
            sent = os.write(fd, self.pending[:READ_SIZE])
        except BlockingIOError:
            return
        except (BrokenPipeError, OSError):  # the command stopped reading; that is its choice
            sent = len(self.pending)
        self.pending = self.pending[sent:]
        if not self.pending:
            self._close_stdin()

    def _close_stream(self, fd: int) -> None:
        self.poller.unregister(fd)
        stream = self.streams.pop(fd)
        os.close(fd)
        if stream == "stdout":
            self.proc.stdout = None
        else:
            self.proc.stderr = None

    def _close_stdin(self) -> None:
        fd = self.proc.stdin
        if fd is None:
            return
        with contextlib.suppress(KeyError):
            self.poller.unregister(fd)
        os.close(fd)
        self.proc.stdin = None

    def _timers(self, now: float) -> None:
        if self.kill_breach is not None:
            return
        if self.deadline is not None and now >= self.deadline:
            detail = f"still running after {self.timeout_ms} ms; the whole process tree was killed"
            self._kill(LimitBreach(kind=LimitKind.WALL_CLOCK, detail=detail))
            return
        if self.next_tick is not None and now >= self.next_tick:
            breach = self.sup.check()
            tick = self.sup.tick_s or 0.0
            self.next_tick = now + tick
            if breach is not None:
                self._kill(breach)

    def _kill(self, breach: LimitBreach) -> None:
        self.kill_breach = breach
        self.sup.kill(self.proc)

    def _main_exited(self, *, poll_only: bool = False) -> None:
        # The main process is a zombie until reaped, so its pid (and process group) cannot
        # be reused yet: this is the one safe moment to kill whatever it left behind.
        if poll_only and not self.proc.exited():
            return
        self.sup.kill(self.proc)
        self.proc.reap(block=True)
        self.exited_at = time.monotonic()
        self.drain_until = self.exited_at + DRAIN_GRACE_S
        if self.proc.pidfd is not None:
            self.poller.unregister(self.proc.pidfd)
            os.close(self.proc.pidfd)
            self.proc.pidfd = None

    def _finish(self, events: list[ExecEvent]) -> None:
        for fd in list(self.streams):
            self._close_stream(fd)
        self._close_stdin()
        status = self.proc.status if self.proc.status is not None else 255 << 8
        code = os.waitstatus_to_exitcode(status)
        breach = self.kill_breach or self.sup.finished(self.proc) or self.output_breach
        exited = self.exited_at or time.monotonic()
        self.result = ExecExit(
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            wall_ms=(exited - self.proc.started) * 1000,
            breach=breach,
            truncated_stdout=self.truncated["stdout"],
            truncated_stderr=self.truncated["stderr"],
        )
        events.append(self.result)

    def abort(self) -> None:
        """The consumer stopped listening: kill the tree, reap, release every descriptor."""
        if self.result is None and self.proc.status is None:
            self.sup.kill(self.proc)
            self.proc.reap(block=True)
        self.proc.close()


def stream(
    proc: ChildProcess,
    supervisor: Supervisor,
    *,
    stdin_data: bytes | None = None,
    output_cap: int | None = None,
    timeout_ms: int | None = None,
) -> Generator[ExecEvent, None, None]:
    """Output chunks as they are read, then exactly one `ExecExit` (blocking, no asyncio)."""
    pump = _Pump(
        proc, supervisor, stdin_data=stdin_data, output_cap=output_cap, timeout_ms=timeout_ms
    )
    try:
        while pump.result is None:
            yield from pump.step(pump.timeout())
    finally:
        pump.abort()


async def _wait(pump: _Pump) -> None:
    """Sleep until one of the pump's descriptors is ready or its next timer is due."""
    import asyncio  # noqa: PLC0415 - only async callers pay for asyncio

    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    readers, writers = pump.read_fds(), pump.write_fds()
    for fd in readers:
        loop.add_reader(fd, wake)
    for fd in writers:
        loop.add_writer(fd, wake)
    delay = pump.timeout()
    timer = loop.call_later(delay, wake) if delay is not None else None
    try:
        await fut
    finally:
        if timer is not None:
            timer.cancel()
        for fd in readers:
            loop.remove_reader(fd)
        for fd in writers:
            loop.remove_writer(fd)


async def astream(
    proc: ChildProcess,
    supervisor: Supervisor,
    *,
    stdin_data: bytes | None = None,
    output_cap: int | None = None,
    timeout_ms: int | None = None,
) -> AsyncIterator[ExecEvent]:
    """`stream` for asyncio: the loop waits on the same descriptors; nothing blocks it."""
    pump = _Pump(
        proc, supervisor, stdin_data=stdin_data, output_cap=output_cap, timeout_ms=timeout_ms
    )
    try:
        while True:
            for event in pump.step(0):
                yield event
            if pump.result is not None:
                return
            await _wait(pump)
    finally:
        pump.abort()


class _Collector:
    """Gathers each stream into one growing buffer whose bytes become the result without a
    second copy (`io.BytesIO.getvalue` hands over its buffer): the caller holds each stream's
    kept output once, not once in chunks and again joined."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.err = io.BytesIO()
        self.exit: ExecExit | None = None

    def add(self, event: ExecEvent) -> None:
        if isinstance(event, OutputChunk):
            (self.out if event.stream == "stdout" else self.err).write(event.data)
        else:
            self.exit = event

    def result(self) -> ExecResult:
        if self.exit is None:
            raise RuntimeError("the command's event stream ended without an ExecExit")
        e = self.exit
        stdout, stderr = self.out.getvalue(), self.err.getvalue()
        self.out = self.err = io.BytesIO()
        return ExecResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=e.exit_code,
            signal=e.signal,
            wall_ms=e.wall_ms,
            breach=e.breach,
            truncated_stdout=e.truncated_stdout,
            truncated_stderr=e.truncated_stderr,
        )


def collect(events: Iterable[ExecEvent]) -> ExecResult:
    """Gather a finished command's output. Memory is bounded only by `limits.output_bytes`."""
    c = _Collector()
    for event in events:
        c.add(event)
    return c.result()


async def acollect(events: AsyncIterable[ExecEvent]) -> ExecResult:
    """`collect` for an async event stream."""
    c = _Collector()
    async for event in events:
        c.add(event)
    return c.result()
