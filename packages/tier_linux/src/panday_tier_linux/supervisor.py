"""What a jailed command's exit means, in the session's words (exceptions and events).

The launch, the supervisor and the start check itself live in `jail` (one path for a
session and for ``panday run``'s cached plan); here a command that never ran becomes
`CommandNotFound`, `WorkspaceUnusable`, `TierUnavailable` or `Internal`, and bwrap's
setup lines are explained (a user-namespace restriction named).
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from panday_core.errors import CommandNotFound, Internal, TierUnavailable, WorkspaceUnusable
from panday_core.types import ExecExit, OutputChunk, SandboxTier
from panday_tier_linux import host
from panday_tier_linux.jail import STDERR_TAIL, JailSupervisor, Start, Status

if TYPE_CHECKING:
    from panday_core.execution import ChildProcess
    from panday_core.types import ExecEvent

__all__ = ["JailSupervisor", "StartCheck", "Status", "bwrap_error", "setup_failure"]

TIER = SandboxTier.T2_LINUX
_EXEC_MARK = "bwrap: execvp "
_CHDIR_MARK = "bwrap: Can't chdir to "
_MISSING = frozenset({os.strerror(errno.ENOENT), os.strerror(errno.ENOTDIR)})
"""Exec failures a shell reports as 127 (no such program); any other is 126."""
NOT_FOUND = 127
NOT_EXECUTABLE = 126


def bwrap_error(proc: ChildProcess, fallback: str) -> str:
    text = b""
    if proc.stderr is not None:
        try:
            text = os.read(proc.stderr, STDERR_TAIL)
        except OSError:
            text = b""
    return _explain(text.decode("utf-8", "replace").strip() or fallback)


def _explain(message: str) -> str:
    first = message.splitlines()[0] if message else message
    restriction = host.userns_restriction() if os.geteuid() != 0 else None
    if restriction is not None:
        return f"{first} (user namespaces are restricted on this host: {restriction})"
    return first


def _not_found(program: str, why: str) -> CommandNotFound:
    if why in _MISSING:
        return CommandNotFound(program, "not found inside the sandbox", exit_code=NOT_FOUND)
    return CommandNotFound(
        program, f"cannot be executed inside the sandbox ({why})", exit_code=NOT_EXECUTABLE
    )


class StartCheck:
    """`jail.Start` on the event stream of a session: output held and released by it, and a
    command that never ran raised as `CommandNotFound`, `WorkspaceUnusable`,
    `TierUnavailable` or `Internal` at its exit (what that start check found, in words)."""

    __slots__ = ("program", "start")

    def __init__(self, program: str, sup: JailSupervisor, *, relay: bool) -> None:
        self.program = program
        self.start = Start(sup, relay=relay)

    def feed(self, event: ExecEvent) -> list[ExecEvent]:
        """The events to pass on for `event` (raises at the exit of a command that never
        ran)."""
        if isinstance(event, ExecExit):
            self.settle(event)
            return [*(OutputChunk(stream=s, data=d) for s, d in self.start.release()), event]
        return [OutputChunk(stream=s, data=d) for s, d in self.start.feed(event.stream, event.data)]

    def settle(self, event: ExecExit) -> None:
        """Raise when the command never ran; return when this exit is the command's."""
        failure = self.start.failure(breach=event.breach, exit_code=event.exit_code)
        if failure is not None:
            raise setup_failure(self.program, failure, relay=self.start.relay)


def setup_failure(program: str, failure: tuple[str, str], *, relay: bool) -> Exception:
    """The error for a command that never ran (`jail.Start.failure`'s finding)."""
    kind, text = failure
    if kind == "relay-exec":
        number = int(text) if text.isdigit() else 0
        return _not_found(program, os.strerror(number) if number else "exec failed")
    if kind == "relay-setup":
        wall = text.removeprefix("landlock wall: ")
        if wall != text:  # the host's Landlock refused what `wall.unavailable_reason` saw
            return TierUnavailable(str(TIER), f"the Landlock wall could not be set up: {wall}")
        return Internal(f"the egress relay inside the jail failed: {text}")
    message = text or "bwrap failed without a message"
    first = message.splitlines()[0]
    if first.startswith(_EXEC_MARK) and not relay:
        return _not_found(program, first.rpartition(": ")[2])
    if first.startswith(_CHDIR_MARK):  # the directory, not the tier, is at fault
        where, _, why = first.removeprefix(_CHDIR_MARK).rpartition(": ")
        return WorkspaceUnusable(
            "cwd",
            where,
            f"cannot be entered inside the sandbox ({why}); the jail runs as the "
            "caller's uid without capabilities: choose a directory it can enter",
        )
    return TierUnavailable(str(TIER), _explain(message))
