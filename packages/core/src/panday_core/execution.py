# Over 500 lines: the plain-value pump and its sync and async event faces, one state machine.
"""Running one command: spawn it, stream its output, bound what is kept, enforce a wall clock.

Every tier that executes commands shares this machinery; what differs per tier (the jail's
argv, how the whole process tree is killed, which counters reveal a memory or pid breach)
comes in through a `Supervisor`.

Design points, each a reason rather than a preference:

* Synchronous core, asynchronous face. `stream` is a plain generator driven by
  `select.poll`; `astream` drives the same state machine from an asyncio loop. The CLI's
  start-up path therefore never imports asyncio (≈40 ms here), and both faces behave alike.
* `os.posix_spawn` instead of `subprocess` (`panday_core.process`, re-exported here): it
  places exactly the descriptors we name in the child, and nothing else leaks into a jail.
* Bounded memory: output is passed on as it is read (the consumer's pace is the pipe's
  pace); with a cap, bytes beyond it are read and discarded, a marker chunk says so, and the
  exit carries a typed `LimitBreach`. Nothing accumulates here.
* The wall clock kills the *tree*, not the process: the supervisor decides how (a pid
  namespace, a cgroup, a process group), and the same kill runs when the main process exits
  so nothing it started outlives it.
"""

from __future__ import annotations

import _signal  # pyright: ignore[reportMissingModuleSource] - signal without its enum (panday_core.startup)
import errno
import io
import os
import select
import time

from panday_core.process import (
    DRAIN_GRACE_S,
    FALLBACK_REAP_S,
    READ_SIZE,
    ChildProcess,
    output_breach_detail,
    spawn,
    truncation_marker,
    wall_clock_detail,
)
from panday_core.startup import suppress

__all__ = [
    "DRAIN_GRACE_S",
    "READ_SIZE",
    "Breach",
    "ChildProcess",
    "Ended",
    "Pump",
    "Supervisor",
    "acollect",
    "astream",
    "collect",
    "exit_event",
    "output_breach_detail",
    "run_plain",
    "spawn",
    "stream",
    "truncation_marker",
    "wall_clock_detail",
]

# The value types need msgspec, which costs tens of milliseconds to import; `panday run`'s
# cached-plan start-up (panday.cli_fast) spawns and pumps with this module without them, so
# they are imported where an event is made.
TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator, Callable, Generator, Iterable

    from panday_core.process import Stream
    from panday_core.types import ExecEvent, ExecExit, ExecResult


Breach = tuple[str, str]
"""A crossed ceiling as plain values: (`panday_core.types.LimitKind` value, detail). The
pump and the supervisors speak this; `stream` and `astream` make `LimitBreach` of it."""


class Supervisor:
    """A tier's hooks into one command's life. The base class suits a plain process group.

    `tick_s` asks for `check` to run that often while the command runs (CPU-time ceilings
    are polled); `kill` must kill the whole tree; `finished` turns counters read after the
    exit (an OOM kill, a refused fork) into a breach.
    """

    tick_s: float | None = None

    def started(self, proc: ChildProcess) -> None:
        """Called right after spawning (e.g. to move the jail into its cgroup)."""

    def check(self) -> Breach | None:
        """Called every `tick_s` while the command runs; a breach ends it."""
        return None

    def kill(self, proc: ChildProcess) -> None:
        """Kill everything the command started. Must be idempotent and must not block long."""
        proc.signal_group(_signal.SIGKILL)

    def finished(self, proc: ChildProcess) -> Breach | None:  # noqa: ARG002 - hook signature
        """Called once after the command was reaped: which ceiling, if any, ended it."""
        return None


STDIN_BUFFER = 1 << 20
"""The most of a streamed stdin held at once (one read, written out before the next)."""


class Ended:
    """How a command ended, as plain values (what `ExecExit` is made of)."""

    __slots__ = ("breach", "exit_code", "signal", "truncated_stderr", "truncated_stdout", "wall_ms")

    def __init__(
        self,
        *,
        exit_code: int | None,
        signal: int | None,
        wall_ms: float,
        breach: Breach | None,
        truncated_stdout: bool,
        truncated_stderr: bool,
    ) -> None:
        self.exit_code = exit_code
        self.signal = signal
        self.wall_ms = wall_ms
        self.breach = breach
        self.truncated_stdout = truncated_stdout
        self.truncated_stderr = truncated_stderr


class Pump:
    """One command's I/O and timers as a state machine, in plain values: output goes to
    `write(stream, data)` as it is read (within the cap, then the marker), and `ended` is
    set once the command and its output are done. `stream` and `astream` drive it and
    make events of what it writes; `panday run`'s cached path drives it writing straight
    to its own output (`run_plain`), without the value types (msgspec)."""

    def __init__(
        self,
        proc: ChildProcess,
        supervisor: Supervisor,
        *,
        write: Callable[[Stream, bytes], None],
        stdin_data: bytes | None = None,
        stdin_source: int | None = None,
        output_cap: int | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        self.proc = proc
        self.sup = supervisor
        self.write = write
        self.cap = output_cap
        self.pending = memoryview(stdin_data or b"")
        self.source = stdin_source
        """A descriptor the command's stdin streams from (read one `STDIN_BUFFER` at a time
        and written out before the next read, so a command that stops reading holds back
        the source, not panday's memory); None: `stdin_data` or nothing."""
        self.kept = {"stdout": 0, "stderr": 0}
        self.truncated = {"stdout": False, "stderr": False}
        self.output_breach: Breach | None = None
        self.kill_breach: Breach | None = None
        self.deadline = proc.started + timeout_ms / 1000 if timeout_ms is not None else None
        self.timeout_ms = timeout_ms
        self.next_tick = proc.started + supervisor.tick_s if supervisor.tick_s else None
        self.exited_at: float | None = None
        self.drain_until: float | None = None
        self.ended: Ended | None = None
        self.streams: dict[int, Stream] = {}
        if proc.stdout is not None:
            self.streams[proc.stdout] = "stdout"
        if proc.stderr is not None:
            self.streams[proc.stderr] = "stderr"
        self.poller = select.poll()
        for fd in self.streams:
            self.poller.register(fd, select.POLLIN)
        if self.source is not None and proc.stdin is not None:
            self.poller.register(self.source, select.POLLIN)
        elif proc.stdin is not None:
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
        if self.source is not None and not self.pending:
            fds.append(self.source)
        return fds

    def write_fds(self) -> list[int]:
        if self.proc.stdin is None or (self.source is not None and not self.pending):
            return []
        return [self.proc.stdin]

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
                due.append(now + FALLBACK_REAP_S)
        elif self.drain_until is not None:
            due.append(self.drain_until)
        if not due:
            return None
        return max(0.0, min(due) - now)

    # -- one step

    def step(self, timeout: float | None) -> None:
        if self.ended is not None:
            return
        wait_ms = None if timeout is None else int(timeout * 1000) + (timeout > 0)
        for fd, _mask in self.poller.poll(wait_ms):
            if fd in self.streams:
                self._read(fd)
            elif fd == self.proc.stdin:
                self._write()
            elif fd == self.source:
                self._pull()
            elif fd == self.proc.pidfd:
                self._main_exited()
        now = time.monotonic()
        if self.exited_at is None and self.proc.pidfd is None:
            self._main_exited(poll_only=True)
        if self.exited_at is None:
            self._timers(now)
        if self.exited_at is not None and (not self.streams or (self.drain_until or 0) <= now):
            self._finish()

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            data = b""  # a pseudo-terminal's master once no slave is open: its end
        stream = self.streams[fd]
        if not data:
            self._close_stream(fd)
            return
        if self.cap is None:
            self.write(stream, data)
            return
        room = self.cap - self.kept[stream]
        if room > 0:
            kept = data[:room]
            self.kept[stream] += len(kept)
            self.write(stream, kept)
        if len(data) > room and not self.truncated[stream]:
            self.truncated[stream] = True
            self.write(stream, truncation_marker(stream, self.cap))
            if self.output_breach is None:
                self.output_breach = ("output", output_breach_detail(stream, self.cap))

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
            self._drop_source()
        self.pending = self.pending[sent:]
        if self.source is not None:
            self._arm()  # room again: read the source; nothing left: wait for it
        elif not self.pending:
            self._close_stdin()

    def _pull(self) -> None:
        """Read what the stdin source has (at most `STDIN_BUFFER`); its end closes the
        command's stdin (everything read before it was written: reads wait for that)."""
        source = self.source
        if source is None:
            return
        try:
            data = os.read(source, STDIN_BUFFER)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop_source()
            self._close_stdin()
            return
        self.pending = memoryview(data)
        self._arm()

    def _arm(self) -> None:
        """Wait for the source only when everything read was written, for the command's
        stdin only while there is something to write: at most one read (`STDIN_BUFFER`)
        is held, and neither a full pipe nor a silent source spins."""
        fd = self.proc.stdin
        if self.pending:
            if self.source is not None:
                with suppress(KeyError):
                    self.poller.unregister(self.source)
            if fd is not None:
                self.poller.register(fd, select.POLLOUT)
            return
        if fd is not None:
            with suppress(KeyError):
                self.poller.unregister(fd)
        if self.source is not None:
            self.poller.register(self.source, select.POLLIN)
        else:
            self._close_stdin()

    def _drop_source(self) -> None:
        """Stop reading the source (its end, a command that stopped reading, or the
        command's exit: panday ends when the command does, not when the source does)."""
        if self.source is not None:
            with suppress(KeyError):
                self.poller.unregister(self.source)
            self.source = None

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
        with suppress(KeyError):
            self.poller.unregister(fd)
        os.close(fd)
        self.proc.stdin = None

    def _timers(self, now: float) -> None:
        if self.kill_breach is not None:
            return
        if self.deadline is not None and now >= self.deadline:
            self._kill(("wall_clock", wall_clock_detail(self.timeout_ms)))
            return
        if self.next_tick is not None and now >= self.next_tick:
            breach = self.sup.check()
            tick = self.sup.tick_s or 0.0
            self.next_tick = now + tick
            if breach is not None:
                self._kill(breach)

    def _kill(self, breach: Breach) -> None:
        self.kill_breach = breach
        self.sup.kill(self.proc)

    def _main_exited(self, *, poll_only: bool = False) -> None:
        # The main process is a zombie until reaped, so its pid (and process group) cannot
        # be reused yet: this is the one safe moment to kill whatever it left behind.
        if poll_only and not self.proc.exited():
            return
        self._drop_source()
        self.sup.kill(self.proc)
        self.proc.reap(block=True)
        self.exited_at = time.monotonic()
        self.drain_until = self.exited_at + DRAIN_GRACE_S
        if self.proc.pidfd is not None:
            self.poller.unregister(self.proc.pidfd)
            os.close(self.proc.pidfd)
            self.proc.pidfd = None

    def _finish(self) -> None:
        for fd in list(self.streams):
            self._close_stream(fd)
        self._close_stdin()
        status = self.proc.status if self.proc.status is not None else 255 << 8
        code = os.waitstatus_to_exitcode(status)
        breach = self.kill_breach or self.sup.finished(self.proc) or self.output_breach
        exited = self.exited_at or time.monotonic()
        self.ended = Ended(
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            wall_ms=(exited - self.proc.started) * 1000,
            breach=breach,
            truncated_stdout=self.truncated["stdout"],
            truncated_stderr=self.truncated["stderr"],
        )

    def abort(self) -> None:
        """The consumer stopped listening: kill the tree, reap, release every descriptor."""
        if self.ended is None and self.proc.status is None:
            self.sup.kill(self.proc)
            self.proc.reap(block=True)
        self.proc.close()


def run_plain(
    proc: ChildProcess,
    supervisor: Supervisor,
    *,
    write: Callable[[Stream, bytes], None],
    output_cap: int | None = None,
    timeout_ms: int | None = None,
) -> Ended:
    """Pump one command to its end, writing its output to `write` (blocking, no asyncio,
    no value types); the tree is killed and every descriptor released whatever happens."""
    pump = Pump(proc, supervisor, write=write, output_cap=output_cap, timeout_ms=timeout_ms)
    try:
        while pump.ended is None:
            pump.step(pump.timeout())
        return pump.ended
    finally:
        pump.abort()


class _Events:
    """The event face of a `Pump`: what it writes, as `OutputChunk` events, then its end
    as one `ExecExit` (the value types are made here, one layer above the pump)."""

    def __init__(
        self,
        proc: ChildProcess,
        supervisor: Supervisor,
        *,
        stdin_data: bytes | None,
        output_cap: int | None,
        timeout_ms: int | None,
        stdin_source: int | None = None,
    ) -> None:
        from panday_core.types import OutputChunk

        self.chunk = OutputChunk
        self.events: list[ExecEvent] = []
        self.pump = Pump(
            proc,
            supervisor,
            write=self._write,
            stdin_data=stdin_data,
            stdin_source=stdin_source,
            output_cap=output_cap,
            timeout_ms=timeout_ms,
        )
        self.done = False

    def _write(self, stream: Stream, data: bytes) -> None:
        self.events.append(self.chunk(stream=stream, data=data))

    def step(self, timeout: float | None) -> list[ExecEvent]:
        self.pump.step(timeout)
        events, self.events = self.events, []
        ended = self.pump.ended
        if ended is not None and not self.done:
            self.done = True
            events.append(exit_event(ended))
        return events


def exit_event(ended: Ended) -> ExecExit:
    """The `ExecExit` of a plain `Ended`."""
    from panday_core.types import ExecExit, LimitBreach, LimitKind

    breach = ended.breach
    return ExecExit(
        exit_code=ended.exit_code,
        signal=ended.signal,
        wall_ms=ended.wall_ms,
        breach=None if breach is None else LimitBreach(kind=LimitKind(breach[0]), detail=breach[1]),
        truncated_stdout=ended.truncated_stdout,
        truncated_stderr=ended.truncated_stderr,
    )


def stream(
    proc: ChildProcess,
    supervisor: Supervisor,
    *,
    stdin_data: bytes | None = None,
    output_cap: int | None = None,
    timeout_ms: int | None = None,
    stdin_source: int | None = None,
) -> Generator[ExecEvent, None, None]:
    """Output chunks as they are read, then exactly one `ExecExit` (blocking, no asyncio).
    `stdin_source`: a descriptor the command's stdin streams from (`Pump.source`)."""
    face = _Events(
        proc,
        supervisor,
        stdin_data=stdin_data,
        output_cap=output_cap,
        timeout_ms=timeout_ms,
        stdin_source=stdin_source,
    )
    try:
        while not face.done:
            yield from face.step(face.pump.timeout())
    finally:
        face.pump.abort()


async def _wait(pump: Pump) -> None:
    """Sleep until one of the pump's descriptors is ready or its next timer is due."""
    import asyncio

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
    stdin_source: int | None = None,
) -> AsyncIterator[ExecEvent]:
    """`stream` for asyncio: the loop waits on the same descriptors; nothing blocks it."""
    face = _Events(
        proc,
        supervisor,
        stdin_data=stdin_data,
        output_cap=output_cap,
        timeout_ms=timeout_ms,
        stdin_source=stdin_source,
    )
    try:
        while True:
            for event in face.step(0):
                yield event
            if face.done:
                return
            await _wait(face.pump)
    finally:
        face.pump.abort()


class _Collector:
    """Gathers each stream into one growing buffer whose bytes become the result without a
    second copy (`io.BytesIO.getvalue` hands over its buffer): the caller holds each stream's
    kept output once, not once in chunks and again joined."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.err = io.BytesIO()
        self.exit: ExecExit | None = None

    def add(self, event: ExecEvent) -> None:
        from panday_core.types import OutputChunk

        if isinstance(event, OutputChunk):
            (self.out if event.stream == "stdout" else self.err).write(event.data)
        else:
            self.exit = event

    def result(self) -> ExecResult:
        from panday_core.types import ExecResult

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
            writes=e.writes,
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
