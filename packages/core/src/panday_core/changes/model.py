"""The change set's value types: one `Change` per path, the set's `Meta` (kept as JSON)."""

from __future__ import annotations

from typing import Literal

import msgspec

Action = Literal["create", "modify", "delete", "mode"]
Kind = Literal["file", "dir", "symlink", "special"]
State = Literal["pending", "held", "applied", "discarded", "conflict"]
Mode = Literal["checked", "review"]


class Change(msgspec.Struct, kw_only=True):
    """One path the command changed, relative to the workspace."""

    path: str
    action: Action
    kind: Kind
    mode: int = 0
    """The permission bits (with set-id bits) of what the command left there."""
    size: int = 0
    target: str | None = None
    """A symbolic link's target."""
    copied_up: bool = False
    """The overlay copied it up from the workspace: it existed when the command started."""
    replaces: bool = False
    """It stands where the workspace had something else (or something of another kind)."""
    since_ns: int = 0
    """When the command took this path over (its upper entry's birth time: the copy-up, the
    whiteout, the replacement); a workspace entry changed at or after it is a conflict. 0:
    unknown (the file system keeps no birth time): the change set's start is used."""
    state: State = "pending"
    reason: str = ""
    """Why it is held (a hazard rule's reason), or what the conflict was."""
    rule: str = ""
    """The id of the hazard rule that held it."""

    @property
    def executable(self) -> bool:
        return self.kind == "file" and bool(self.mode & 0o111)


class Meta(msgspec.Struct, kw_only=True):
    """A change set: which workspace, which command, when, and every change with its state."""

    id: str
    workspace: str
    workspace_id: tuple[int, int]
    """(st_dev, st_ino) of the workspace directory the overlay was over."""
    argv: tuple[str, ...]
    mode: Mode
    started_ns: int
    """CLOCK_REALTIME_COARSE before the command started (the clock file times are taken
    from): a workspace entry whose ctime is at or after it was changed by someone else
    while or after the command ran: a conflict."""
    ended_ns: int = 0
    status: Literal["running", "ready", "applying", "done"] = "running"
    changes: list[Change] = msgspec.field(default_factory=list[Change])
    same_device: bool = True
    """The upper directory is on the workspace's file system: applying is rename(2)."""


def encode(meta: Meta) -> bytes:
    return msgspec.json.encode(meta)


def decode(data: bytes) -> Meta:
    return msgspec.json.decode(data, type=Meta)
