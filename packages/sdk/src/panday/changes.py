"""Change sets in the SDK and CLI: what a ``checked`` or ``review`` command left for review.

>>> for change_set in session.changes():  # this session's workspace, oldest first
...     print(change_set.summary())
...     change_set.apply()  # or .apply(paths=["src/"]), .discard()

Every method reads and writes panday's per-user state (`panday_core.changes.store`); the
async forms run the same work in a thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
import difflib
import os
from typing import TYPE_CHECKING

from panday_core import userstate
from panday_core.changes import store

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.changes.model import Change, Meta

ChangeError = store.ChangeError

_SHOWN = 60
"""Characters of a command shown in a summary line."""
_RANKS = ("held", "conflict", "executable", "dotfile", "symlink", "delete", "edit")
"""The review order: what could run outside the jail first, ordinary edits last."""


def risk(change: Change) -> str:
    """Which of `_RANKS` a change is reviewed under."""
    if change.state in {"held", "conflict"}:
        return change.state
    if change.executable:
        return "executable"
    if any(part.startswith(".") for part in change.path.split("/")):
        return "dotfile"
    if change.kind == "symlink":
        return "symlink"
    if change.action == "delete":
        return "delete"
    return "edit"


def ranked(changes: Sequence[Change]) -> list[Change]:
    return sorted(changes, key=lambda c: (_RANKS.index(risk(c)), c.path))


class ApplyResult:
    """What `ChangeSet.apply` did: the paths applied and those in conflict (with why)."""

    __slots__ = ("applied", "conflicts", "left")

    def __init__(self, applied: list[str], conflicts: list[tuple[str, str]], left: int) -> None:
        self.applied = applied
        self.conflicts = conflicts
        self.left = left
        """Changes still in the change set (held, in conflict, or not selected)."""

    def __repr__(self) -> str:
        return (
            f"ApplyResult(applied={len(self.applied)}, conflicts={len(self.conflicts)}, "
            f"left={self.left})"
        )


class ChangeSet:
    """One change set: its command, its changes (each with its state), and what to do."""

    def __init__(self, meta: Meta) -> None:
        self.meta = meta

    @property
    def id(self) -> str:
        return self.meta.id

    @property
    def workspace(self) -> str:
        return self.meta.workspace

    @property
    def argv(self) -> tuple[str, ...]:
        return self.meta.argv

    @property
    def changes(self) -> list[Change]:
        """Every change, risk-ranked (held first, then executables, dotfiles, symlinks,
        deletions, then ordinary edits)."""
        return ranked([c for c in self.meta.changes if c.state != "applied"])

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys(_RANKS, 0)
        for change in self.changes:
            out[risk(change)] += 1
        return {k: v for k, v in out.items() if v}

    def summary(self) -> str:
        counts = ", ".join(f"{n} {k}" for k, n in self.counts().items()) or "nothing left"
        command = " ".join(self.argv)
        if len(command) > _SHOWN:
            command = command[: _SHOWN - 3] + "..."
        return f"{self.id}  {self.meta.mode}  {counts}  ({command})"

    def diff(self, path: str | None = None, *, max_bytes: int = 1 << 20) -> str:
        """A unified diff of the text changes (at or under `path`), each file read up to
        `max_bytes`; other changes are named on one line each."""
        out: list[str] = []
        for change in self.changes:
            if path is not None and not (
                change.path == path.strip("/") or change.path.startswith(path.strip("/") + "/")
            ):
                continue
            out.append(self._diff_one(change, max_bytes))
        return "".join(out)

    def _diff_one(self, change: Change, max_bytes: int) -> str:
        # Names are the jail's: inert in the headers (a newline in one would forge a line).
        from panday.terminal import inert

        name = inert(change.path)
        head = f"# {change.action} {change.kind} {name}"
        if change.reason:
            head += f"  [{change.state}: {change.rule or 'conflict'}]"
        if change.kind != "file" or change.action == "delete":
            extra = f" -> {inert(change.target)}" if change.target else ""
            return f"{head}{extra}\n"
        old = (
            _read(os.path.join(self.workspace, change.path), max_bytes)
            if change.action == "modify"
            else b""
        )
        new = _read(self._upper(change.path), max_bytes)
        if old is None or new is None or b"\0" in old or b"\0" in new:
            return f"{head} (binary or larger than {max_bytes} bytes)\n"
        lines = difflib.unified_diff(
            old.decode("utf-8", "replace").splitlines(keepends=True),
            new.decode("utf-8", "replace").splitlines(keepends=True),
            f"a/{name}",
            f"b/{name}",
        )
        return head + "\n" + "".join(lines)

    def _upper(self, rel: str) -> str:
        state = userstate.state_dir() or ""
        return os.path.join(state, "changes", self.id, "upper", rel)

    def apply(
        self, paths: Sequence[str] | None = None, *, include_held: bool = False
    ) -> ApplyResult:
        """Apply the pending changes (at or under `paths`; all when None). Held changes are
        applied only when named in `paths` with `include_held`; a change in conflict with
        an edit made meanwhile is never overwritten."""
        meta, applied, conflicts = store.apply_set(self.id, paths, include_held=include_held)
        self.meta = meta
        left = sum(1 for c in meta.changes if c.state != "applied")
        return ApplyResult([c.path for c in applied], [(c.path, c.reason) for c in conflicts], left)

    def discard(self) -> None:
        """Remove the change set: nothing more of it can be applied."""
        store.discard(self.id)

    async def aapply(
        self, paths: Sequence[str] | None = None, *, include_held: bool = False
    ) -> ApplyResult:
        return await asyncio.to_thread(self.apply, paths, include_held=include_held)

    async def adiscard(self) -> None:
        await asyncio.to_thread(self.discard)

    def __repr__(self) -> str:
        return f"ChangeSet({self.summary()!r})"


def _read(path: str, limit: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(limit)
    finally:
        os.close(fd)


def change_sets(workspace: str | None = None) -> list[ChangeSet]:
    """The change sets of `workspace` (by identity; all when None), oldest first."""
    ident: tuple[int, int] | None = None
    if workspace is not None:
        try:
            st = os.stat(workspace)
        except OSError:
            return []
        ident = (st.st_dev, st.st_ino)
    return [ChangeSet(m) for m in store.list_sets(ident)]


def get(change_id: str) -> ChangeSet:
    """The change set `change_id` (`ChangeError` when there is none)."""
    return ChangeSet(store.load(change_id))
