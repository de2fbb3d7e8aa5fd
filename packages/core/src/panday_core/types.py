"""Value types shared by every tier: tiers, sessions, exec requests, output and results."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

import msgspec

from panday_core.errors import LimitExceeded
from panday_core.policy import SandboxPolicy

_MAX_ARGV_BYTES = 1024 * 1024


class SandboxTier(StrEnum):
    """panday's own tiers' names. A tier is known by its name (a plain string: a tier
    registered in `panday.tiers` needs no member here); these are the built-in ones."""

    T0 = "t0"
    T2_LINUX = "t2-linux"
    T2_MACOS = "t2-macos"


class LimitKind(StrEnum):
    """Which ceiling a command crossed."""

    MEMORY = "memory"
    PIDS = "pids"
    CPU = "cpu"
    WALL_CLOCK = "wall_clock"
    DISK = "disk"
    OUTPUT = "output"


class _Value(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Immutable value type."""


class SessionSpec(_Value, frozen=True, kw_only=True):
    """What `create` needs: the policy (with `fs.workspace` set) and an optional id."""

    policy: SandboxPolicy
    session_id: str | None = None


class SandboxHandle(_Value, frozen=True, kw_only=True):
    """An open session. Opaque to callers apart from its id and tier."""

    id: str
    tier: str
    """A `SandboxTier` for panday's own tiers; any registered tier's name (panday.tiers)."""
    workspace: str


class ExecSpec(_Value, frozen=True, kw_only=True):
    """One command to run in a session. `argv` is passed as a list; never through a shell."""

    argv: tuple[str, ...]
    cwd: str | None = None
    """Working directory: relative to the workspace, or absolute inside the sandbox."""
    stdin: bytes | None = None
    timeout_ms: int | None = None
    """Per-command wall clock; the stricter of this and `limits.wall_clock_ms` applies."""
    command_id: str | None = None

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("argv: the command is empty; give a program to run")
        if not self.argv[0]:
            raise ValueError("argv[0]: the program name is empty")
        size = 0
        for i, arg in enumerate(self.argv):
            if "\x00" in arg:
                raise ValueError(f"argv[{i}]: contains a NUL byte")
            size += len(arg.encode("utf-8", "surrogateescape")) + 1
        if size > _MAX_ARGV_BYTES:
            raise ValueError(f"argv: the command line is larger than {_MAX_ARGV_BYTES} bytes")
        if self.timeout_ms is not None and self.timeout_ms <= 0:
            raise ValueError(f"timeout_ms: {self.timeout_ms} must be positive")


class OutputChunk(_Value, frozen=True, kw_only=True):
    """A piece of a command's output, in the order it was read."""

    stream: Literal["stdout", "stderr"]
    data: bytes


class LimitBreach(_Value, frozen=True, kw_only=True):
    """A ceiling the command crossed, reported with the exit rather than only as a code."""

    kind: LimitKind
    detail: str

    def error(self) -> LimitExceeded:
        return LimitExceeded(self.kind.value, self.detail)


class HeldChange(_Value, frozen=True, kw_only=True):
    """A change of a ``checked`` command that was not applied, and why."""

    path: str
    """Relative to the workspace."""
    action: Literal["create", "modify", "delete", "mode"]
    rule: str
    """The hazard rule's id (docs/workspace.md), or ``conflict``."""
    reason: str


class WriteReport(_Value, frozen=True, kw_only=True):
    """What became of a command's writes under ``fs.writes`` ``checked`` or ``review``."""

    mode: Literal["checked", "review"]
    change_set: str | None
    """The change set that keeps what was not applied (`panday changes show ID`); None when
    everything was applied (or nothing was written)."""
    applied: int = 0
    held: tuple[HeldChange, ...] = ()
    """Held by a hazard rule, or in conflict with an edit made meanwhile."""
    pending: int = 0
    """Changes waiting for review (``review`` mode: every change)."""


class ExecExit(_Value, frozen=True, kw_only=True):
    """The last event of a command: how it ended."""

    exit_code: int | None
    """The exit status, or None when a signal ended the command."""
    signal: int | None = None
    wall_ms: float
    breach: LimitBreach | None = None
    truncated_stdout: bool = False
    truncated_stderr: bool = False
    writes: WriteReport | None = None
    """``fs.writes`` checked or review: what became of the command's writes."""


ExecEvent = OutputChunk | ExecExit


class ExecResult(_Value, frozen=True, kw_only=True):
    """A finished command with its (bounded) output."""

    stdout: bytes
    stderr: bytes
    exit_code: int | None
    signal: int | None = None
    wall_ms: float
    breach: LimitBreach | None = None
    truncated_stdout: bool = False
    truncated_stderr: bool = False
    writes: WriteReport | None = None
    """``fs.writes`` checked or review: what became of the command's writes."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.breach is None

    def raise_for_breach(self) -> None:
        """Raise `LimitExceeded` if a ceiling was crossed."""
        if self.breach is not None:
            raise self.breach.error()


class FileEntry(_Value, frozen=True, kw_only=True):
    """One file in a workspace snapshot."""

    path: str
    size: int
    mode: int
    sha256: str


class Snapshot(_Value, frozen=True, kw_only=True):
    """A content listing of the workspace at one moment (paths relative to the workspace)."""

    session_id: str
    entries: tuple[FileEntry, ...]
    truncated: bool = False
