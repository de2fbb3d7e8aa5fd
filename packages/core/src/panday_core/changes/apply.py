"""Apply a change set's pending changes to its workspace: checked, journalled, per file atomic.

Before anything moves, every selected change is checked for a conflict: the workspace's
entry at that path must not have changed since the command took the path over (its ctime
is at or after the birth time of the change's entry in the upper directory: the overlay's
copy-up, whiteout or replacement, stamped by the same clock), and what existed then must
still exist. An edit made before the copy-up is in the copy the command changed, so only
edits after it could be lost. Where the upper file system keeps no birth time, the change
set's start is the reference (an edit in the same clock tick just before it then counts
as a conflict: held, never overwritten). A conflicting change is marked and skipped, never
overwritten. Then the journal (the change set's metadata, with status ``applying`` and the
paths to apply) is written and synced, and each change is made with one ``rename(2)``
from the upper directory (a copy to a temporary name and a rename when the upper directory
is on another file system): each file is either before or after. Every step is
idempotent, so a panday that finds a journal left ``applying`` by one that died simply
runs it again (`recover`).
"""

# ruff: noqa: PTH208 - descriptor-relative listing (dir_fd): pathlib has no such calls

from __future__ import annotations

import errno
import os
import shutil
import stat
from contextlib import suppress
from typing import TYPE_CHECKING

from panday_core.changes.hazards import CONFLICT

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from panday_core.changes.model import Change, Meta

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Conflict(Exception):
    """The workspace at a change's path is not what the change set was made against."""


def _parent(root: int, rel: str) -> tuple[int, str]:
    """A descriptor on `rel`'s directory beneath `root`, reached without following a link,
    and its last name (raises `Conflict` when a directory on the way is not one)."""
    fd = os.dup(root)
    parts = rel.split("/")
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                raise Conflict(f"{part!r} on the way is not a directory ({exc.strerror})") from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _lstat(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _changed_since(parent: int, name: str, started_ns: int) -> bool:
    """Whether anything at or beneath `name` has a ctime at or after `started_ns`."""
    st = _lstat(parent, name)
    if st is None:
        return False
    if st.st_ctime_ns >= started_ns:
        return True
    if not stat.S_ISDIR(st.st_mode):
        return False
    fd = os.open(name, _DIR, dir_fd=parent)
    try:
        return any(_changed_since(fd, child, started_ns) for child in os.listdir(fd))
    finally:
        os.close(fd)


def conflict(root: int, change: Change, started_ns: int, creating: frozenset[str]) -> str | None:
    """Why applying `change` would overwrite someone else's edit (None: it would not).
    `creating`: directories this apply makes (their insides cannot conflict)."""
    head = change.path.rpartition("/")[0]
    if head and (head in creating or any(head.startswith(c + "/") for c in creating)):
        return None
    try:
        parent, name = _parent(root, change.path)
    except Conflict as exc:
        return f"{CONFLICT}: {exc}"
    try:
        return _conflict_at(parent, name, change, change.since_ns or started_ns)
    finally:
        os.close(parent)


def _conflict_at(parent: int, name: str, change: Change, started_ns: int) -> str | None:
    st = _lstat(parent, name)
    existed = change.copied_up or change.action in {"modify", "delete", "mode"}
    why: str | None = None
    if st is None:
        if existed and change.action != "delete":
            why = f"{CONFLICT}: it was deleted"
    elif change.kind == "dir" and change.action in {"mode", "modify"} and not change.replaces:
        why = None  # its entries are checked one by one
    elif change.action == "delete" or change.replaces:
        if _changed_since(parent, name, started_ns):
            why = f"{CONFLICT}: something in it changed"
    elif st.st_ctime_ns >= started_ns:
        why = CONFLICT
    return why


def remove_tree(parent: int, name: str, *, unlock: bool = False) -> None:
    """Remove `name` beneath the directory on `parent`, a tree by descriptors (no link is
    followed); missing is done. `unlock`: make each directory searchable first (an
    overlay's work directory is mode 000)."""
    st = _lstat(parent, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    if unlock:
        with suppress(OSError):
            os.chmod(name, 0o700, dir_fd=parent, follow_symlinks=False)
    fd = os.open(name, _DIR, dir_fd=parent)
    try:
        for child in os.listdir(fd):
            remove_tree(fd, child, unlock=unlock)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _copy_in(upper_parent: int, parent: int, name: str, change: Change, token: str) -> None:
    """The cross-device path: a copy under a temporary name, then one rename."""
    tmp = f".panday-apply-{token}"
    with suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=parent)
    if change.kind == "symlink":
        os.symlink(os.readlink(name, dir_fd=upper_parent), tmp, dir_fd=parent)
    else:
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=upper_parent)
        try:
            dst = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=parent
            )
            try:
                with (
                    os.fdopen(src, "rb", closefd=False) as fin,
                    os.fdopen(dst, "wb", closefd=False) as fout,
                ):
                    shutil.copyfileobj(fin, fout, 1 << 20)
                os.fchmod(dst, change.mode & 0o777)
                os.fsync(dst)
            finally:
                os.close(dst)
        finally:
            os.close(src)
    os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    os.unlink(name, dir_fd=upper_parent)


def step(root: int, upper: int, change: Change, token: str) -> None:
    """Make `change` in the workspace on `root` from the upper directory on `upper`;
    idempotent (a repeated step finds its work done)."""
    parent, name = _parent(root, change.path)
    try:
        target = _lstat(parent, name)
        if change.action == "delete":
            remove_tree(parent, name)
            return
        if change.kind == "dir":
            if target is not None and not stat.S_ISDIR(target.st_mode):
                remove_tree(parent, name)
                target = None
            if target is None:
                os.mkdir(name, change.mode & 0o777, dir_fd=parent)
            os.chmod(name, change.mode & 0o777, dir_fd=parent, follow_symlinks=False)
            return
        upper_parent, _ = _parent(upper, change.path)
        try:
            if _lstat(upper_parent, name) is None:
                return  # moved already (a journal being finished)
            if target is not None and stat.S_ISDIR(target.st_mode):
                remove_tree(parent, name)
            try:
                os.rename(name, name, src_dir_fd=upper_parent, dst_dir_fd=parent)
            except OSError as exc:
                if exc.errno != errno.EXDEV:  # the upper directory is on another file system
                    raise
                _copy_in(upper_parent, parent, name, change, token)
        finally:
            os.close(upper_parent)
    finally:
        os.close(parent)


def select(changes: Sequence[Change], paths: Sequence[str] | None) -> list[Change]:
    """The pending changes at or under `paths` (all when None), with the directories they
    need made first."""
    pending = [c for c in changes if c.state == "pending"]
    if paths is None:
        return pending
    wanted = [p.strip("/") for p in paths]
    chosen = {
        c.path for c in pending if any(c.path == w or c.path.startswith(w + "/") for w in wanted)
    }
    for c in pending:
        if (
            c.kind == "dir"
            and c.action != "delete"
            and any(p.startswith(c.path + "/") for p in chosen)
        ):
            chosen.add(c.path)
    return [c for c in pending if c.path in chosen]


def apply(
    meta: Meta,
    *,
    root: int,
    upper: int,
    save: Callable[[Meta], None],
    paths: Sequence[str] | None = None,
) -> tuple[list[Change], list[Change]]:
    """Apply the pending changes of `meta` at or under `paths`: (applied, conflicts).
    `save` writes the journal durably (it is called before the first step and after the last)."""
    chosen = select(meta.changes, paths)
    creating = frozenset(
        c.path for c in chosen if c.kind == "dir" and c.action == "create" and not c.replaces
    )
    conflicts: list[Change] = []
    ready: list[Change] = []
    for change in chosen:
        why = conflict(root, change, meta.started_ns, creating)
        if why is None and any(change.path.startswith(c.path + "/") for c in conflicts):
            why = f"{CONFLICT}: its directory conflicts"
        if why is not None:
            change.state = "conflict"
            change.reason = why
            conflicts.append(change)
        else:
            ready.append(change)
    for change in ready:
        change.state = "applied"  # as the journal records it: finished by `recover` if we die
    meta.status = "applying"
    save(meta)
    run_steps(meta, root=root, upper=upper, changes=ready)
    meta.status = "ready"
    save(meta)
    return ready, conflicts


def run_steps(meta: Meta, *, root: int, upper: int, changes: Sequence[Change]) -> None:
    for n, change in enumerate(changes):
        step(root, upper, change, f"{meta.id}-{n}")
