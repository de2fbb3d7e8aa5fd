"""The synchronous face of panday: ``with panday.open() as session: session.run([...])``.

A tier whose registry entry has a synchronous opener (`panday.tiers.Tier.opener`: T2 Linux's
`LinuxSession`) is driven through it: no event loop and no asyncio import on this path (the
CLI's start-up cost). Other tiers implement only the async `Sandbox` protocol; their
sessions run it on a private event loop.

>>> import panday
>>> with panday.open() as session:
...     result = session.run(["sh", "-c", "echo hello; cat /etc/shadow"])
>>> result.stdout, result.exit_code
(b'hello\\n', 1)
>>> session.tier
't2-linux'
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, BinaryIO, Protocol, Self

from panday import tiers
from panday._shared import (
    DEFAULT_GET_BYTES,
    SessionInfo,
    StartGuard,
    exec_spec,
    resolve_policy,
)

if TYPE_CHECKING:
    import asyncio
    from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence

    from panday.aio import AsyncSession
    from panday.tiers import SyncSession
    from panday_core.egress.thread import ProxySettings
    from panday_core.policy import SandboxPolicy
    from panday_core.types import ExecEvent, ExecResult, ExecSpec, Snapshot
    from panday_tier_linux.enforcement import Enforcement


class _Backend(Protocol):
    """One open session of some tier, driven synchronously."""

    id: str
    workspace: str

    def events(
        self, spec: ExecSpec, source: int | None = None, tty: tuple[int, int] | None = None
    ) -> Iterator[ExecEvent]: ...
    def put(self, path: str, data: bytes) -> None: ...
    def get(self, path: str, *, max_bytes: int) -> bytes: ...
    def snapshot(self) -> Snapshot: ...
    def enforcement(self) -> Enforcement: ...
    def close(self) -> None: ...


class _Sync:
    """A tier's own synchronous session (no event loop)."""

    def __init__(self, session: SyncSession) -> None:
        self.session = session
        self.id = session.id
        self.workspace = session.workspace

    def events(
        self, spec: ExecSpec, source: int | None = None, tty: tuple[int, int] | None = None
    ) -> Iterator[ExecEvent]:
        if tty is not None:
            try:
                # T2 Linux's opener takes it; another tier's raises TypeError.
                return self.session.exec(spec, stdin_source=source, tty=tty)
            except TypeError:
                from panday_core.errors import Unsupported

                raise Unsupported("this tier runs no command with a terminal") from None
        if source is None:  # a tier's opener need not know about streamed stdin
            return self.session.exec(spec)
        return self.session.exec(spec, stdin_source=source)

    def put(self, path: str, data: bytes) -> None:
        self.session.put(path, data)

    def get(self, path: str, *, max_bytes: int) -> bytes:
        return self.session.get(path, max_bytes=max_bytes)

    def snapshot(self) -> Snapshot:
        return self.session.snapshot()

    def enforcement(self) -> Enforcement:
        read: Enforcement = self.session.enforcement()  # pyright: ignore[reportAssignmentType] - the tier's own read-back type
        return read

    def close(self) -> None:
        self.session.close()


class _Loop:
    """Any tier's async session, run on a private event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, session: AsyncSession) -> None:
        self.loop = loop
        self.session = session
        self.id = session.id
        self.workspace = session.workspace

    def events(
        self, spec: ExecSpec, source: int | None = None, tty: tuple[int, int] | None = None
    ) -> Iterator[ExecEvent]:
        if tty is not None:
            from panday_core.errors import Unsupported

            raise Unsupported("this tier runs no command with a terminal (T2 Linux does)")
        if source is not None:
            # The async protocol takes stdin as bytes: through it (T2 macOS) a streamed
            # stdin is read whole before the command starts; T2 Linux streams it.
            import msgspec

            spec = msgspec.structs.replace(spec, stdin=_read_all(source))
        events = self.session.sandbox.exec(self.session.handle, spec)
        try:
            while True:
                step = self.loop.create_task(_next(events))
                try:
                    event = self.loop.run_until_complete(step)
                except BaseException:
                    # Interrupted inside the loop (Ctrl-C): cancel the step, which ends the
                    # tier's generator where it waits, and its cleanup kills the command.
                    step.cancel()
                    with contextlib.suppress(BaseException):
                        self.loop.run_until_complete(step)
                    raise
                if event is None:
                    return
                yield event
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                with contextlib.suppress(RuntimeError):
                    self.loop.run_until_complete(close())

    def put(self, path: str, data: bytes) -> None:
        self.loop.run_until_complete(self.session.put(path, data))

    def get(self, path: str, *, max_bytes: int) -> bytes:
        return self.loop.run_until_complete(self.session.get(path, max_bytes=max_bytes))

    def snapshot(self) -> Snapshot:
        return self.loop.run_until_complete(self.session.snapshot())

    def enforcement(self) -> Enforcement:
        return self.loop.run_until_complete(self.session.enforcement())

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.session.close())
        finally:
            self.loop.close()


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


async def _next(events: AsyncIterator[ExecEvent]) -> ExecEvent | None:
    try:
        return await anext(events)
    except StopAsyncIteration:
        return None


class Session(SessionInfo):
    """One open session on one tier (synchronous). Close it, or use it in ``with``.

    Closing kills every command still running and removes what the session created
    (cgroups, temporary directories); it also happens when the ``with`` block ends through
    an exception or KeyboardInterrupt. After that every operation (run, stream, put, get,
    snapshot, enforcement) raises `SessionClosed` when called, as the async session does.
    """

    def __init__(self, backend: _Backend, *, tier: str, policy: SandboxPolicy) -> None:
        super().__init__(
            session_id=backend.id, tier=tier, workspace=backend.workspace, policy=policy
        )
        self._backend = backend
        self.closed = False

    def run(
        self,
        cmd: Sequence[str],
        *,
        stdin: bytes | str | BinaryIO | int | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        tty: bool = False,
    ) -> ExecResult:
        """Run `cmd` (a list; never a shell line) to completion.

        The result holds stdout and stderr (each kept up to ``limits.output_bytes``), the
        exit code (on T2 Linux a command killed by signal N reports 128 + N, as bubblewrap
        passes it on), the wall time and, when a ceiling was crossed, a typed
        `LimitBreach` in ``result.breach``. `timeout` is in seconds; the stricter of it and
        ``limits.wall_clock_ms`` applies. `stdin` is data, or a binary file (anything with
        ``fileno()``) or a descriptor the command's stdin streams from as it reads (T2
        Linux: with back-pressure, and the command's exit ends the run, not the file's end;
        T2 macOS reads it whole first). `tty`: the command's stdin, stdout and stderr are a
        pseudo-terminal of its own (24 x 80; its output arrives as stdout, with the
        terminal's CR LF line ends); T2 Linux only. Raises `CommandNotFound` when the
        program cannot be started inside the sandbox.
        """
        from panday_core.execution import collect

        if not tty:
            return collect(self.stream(cmd, stdin=stdin, cwd=cwd, timeout=timeout))
        # A terminal of the command's own, 24 x 80 (`stream(tty=...)` to drive one yourself):
        # for programs that behave otherwise when their output is a terminal.
        import fcntl
        import struct
        import termios

        master, slave = os.openpty()
        try:
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            pair = (master, slave)
            return collect(self.stream(cmd, stdin=stdin, cwd=cwd, timeout=timeout, tty=pair))
        finally:
            os.close(master)
            os.close(slave)

    def stream(
        self,
        cmd: Sequence[str],
        *,
        stdin: bytes | str | BinaryIO | int | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        tty: tuple[int, int] | None = None,
    ) -> Generator[ExecEvent, None, None]:
        """`OutputChunk`s as the command writes them, then exactly one `ExecExit`.

        Nothing is buffered beyond one read. Leaving the loop early (break, an exception,
        KeyboardInterrupt) kills the command's whole process tree. `stdin` as for `run`.
        `tty`: (master, slave) of a pseudo-terminal you opened (`os.openpty`): it is the
        command's controlling terminal (job control works; set its size on the master
        with TIOCSWINSZ, and the command gets SIGWINCH); what the command writes to it
        arrives as stdout chunks, and `stdin` streams into it. T2 Linux only
        (`Unsupported` elsewhere). `panday run --tty` drives it from a terminal.
        """
        self._require_open()
        source: int | None = None
        if isinstance(stdin, int):
            source, stdin = stdin, None
        elif stdin is not None and not isinstance(stdin, bytes | str):
            source, stdin = stdin.fileno(), None
        spec = exec_spec(cmd, stdin=stdin, cwd=cwd, timeout=timeout)
        return self._events(spec, source, tty)

    def _require_open(self) -> None:
        if self.closed:
            from panday_core.errors import SessionClosed

            raise SessionClosed(self.id)

    def _events(
        self, spec: ExecSpec, source: int | None, tty: tuple[int, int] | None = None
    ) -> Generator[ExecEvent, None, None]:
        self._require_open()  # closed between stream() and the first next()
        guard = StartGuard(self.policy, spec, self.tier)
        events = self._backend.events(spec, source, tty)
        try:
            for event in events:
                yield from guard.feed(event)
        except BaseException as exc:
            failure = guard.failure(exc)
            if failure is exc:
                raise
            raise failure from None
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def put(self, path: str, data: bytes | str) -> None:
        """Write a workspace file (relative to the workspace; it cannot leave it)."""
        self._require_open()
        self._backend.put(path, data.encode() if isinstance(data, str) else data)

    def get(self, path: str, *, max_bytes: int = DEFAULT_GET_BYTES) -> bytes:
        """A whole file of the workspace or a staged path (`LimitExceeded` past `max_bytes`)."""
        self._require_open()
        return self._backend.get(path, max_bytes=max_bytes)

    def snapshot(self) -> Snapshot:
        """The workspace's files with sizes, modes and SHA-256 digests."""
        self._require_open()
        return self._backend.snapshot()

    def enforcement(self) -> Enforcement:
        """What the kernel reports a jail of this session actually has (T2 Linux: namespaces,
        capabilities, NoNewPrivs, seccomp, mounts, cgroup ceilings), read inside a jail
        built exactly like the session's commands. `Unsupported` on tiers that cannot read
        it back yet."""
        self._require_open()
        return self._backend.enforcement()

    def close(self) -> None:
        """End the session (idempotent): running commands killed, cgroups and temporary
        files removed."""
        if not self.closed:
            self.closed = True
            self._backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(  # noqa: A001 - the public API's name: panday.open
    policy: SandboxPolicy | Mapping[str, object] | str | os.PathLike[str] | None = None,
    *,
    tier: str = "auto",
    egress: ProxySettings | None = None,
) -> Session:
    """Open a session that enforces `policy`, or refuse before anything is spawned.

    `policy`: None for the embedded default (docs/policy.md), a `SandboxPolicy`, a policy
    document as a mapping, or the path of a ``.toml``/``.json`` policy file. A policy that
    leaves ``fs.workspace`` out gets the current directory. On Linux, the embedded default
    over a current directory that is on this Python's import path (a script saved in the
    project it sandboxes) has ``fs.writes = "checked"``: its Python modules are held for
    review rather than run by this process's next import (docs/workspace.md).

    `tier`: ``"auto"`` picks the strongest tier this OS has that runs commands and can
    enforce the whole policy; a named tier (``"t2-linux"``, ``"t2-macos"``, ``"t0"``) is
    used as named and never replaced by another.

    `egress`: how the session's egress proxy is made beyond the policy (an audit sink, a
    resolver); passed through to tiers with a synchronous opener (T2 Linux), and refused
    (`Unsupported`) on another tier rather than dropped.

    Raises `PolicyError` (malformed policy), `PolicyViolation` (a field the tier cannot
    enforce here: every such field is named, with the reason), `TierUnavailable` (the
    tier cannot run on this host, and why).
    """
    resolved = resolve_policy(policy)
    name = tiers.choose(resolved, tiers.check_name(tier))
    opened = tiers.open_sync(name, resolved, egress)
    if opened is not None:
        return Session(_Sync(opened), tier=name, policy=resolved)
    import asyncio

    from panday.aio import open_session as aopen

    loop = asyncio.new_event_loop()
    try:
        asession = loop.run_until_complete(aopen(resolved, name))
    except BaseException:
        loop.close()
        raise
    return Session(_Loop(loop, asession), tier=name, policy=resolved)
