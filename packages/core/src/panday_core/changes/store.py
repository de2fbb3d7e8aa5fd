"""Where change sets live, and what a caller does with them: list, show, apply, discard.

Each change set is a directory under panday's per-user state (``<home>/.cache/panday/
changes/<id>``, 0700, reached without following a link; never visible in a jail:
`state_to_hide` covers the state directory in any root that holds it) with the overlay's
``upper`` and ``work`` directories and ``meta.json`` (`model.Meta`, written to a temporary
name, synced and renamed). A change set is locked (``flock``) while it is applied; one
left ``applying`` by a panday that died is finished by the next one (`recover`).
"""

# ruff: noqa: PTH116, PTH118, PTH208 - descriptor-relative calls (dir_fd): pathlib has no such calls

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
import time
from typing import TYPE_CHECKING

from panday_core import userstate
from panday_core.changes import apply as applying
from panday_core.changes.hazards import Context, judge
from panday_core.changes.model import Meta, decode, encode
from panday_core.changes.read import read_upper

if TYPE_CHECKING:
    from collections.abc import Generator, Sequence

    from panday_core.changes.model import Change, Mode
    from panday_core.protected_names import Entry

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
META = "meta.json"
_REALTIME_COARSE = 5
"""CLOCK_REALTIME_COARSE (Linux; the time module does not name it)."""
DEFAULT_MAX_AGE_S = 14 * 24 * 3600
"""Change sets older than this are collected when a session in checked or review mode opens."""


class ChangeError(Exception):
    """A change set cannot be used as asked (unknown id, in use, workspace gone)."""


def clock_ns() -> int:
    """The clock file timestamps are taken from (coarse real time): a file changed after
    this call has a ctime at or after its value."""
    return time.clock_gettime_ns(_REALTIME_COARSE)


def open_store(*, create: bool) -> int:
    """A descriptor on the change sets' directory (raises `ChangeError` when there is none)."""
    state = userstate.open_state(create=create)
    if state is None:
        raise ChangeError("panday's per-user state directory is missing or not private")
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir("changes", 0o700, dir_fd=state)
        try:
            fd = os.open("changes", _DIR, dir_fd=state)
        except FileNotFoundError:
            raise ChangeError("no change sets") from None
    finally:
        os.close(state)
    if not userstate.private_fd(fd):
        os.close(fd)
        raise ChangeError("the change sets' directory is not private to this user")
    return fd


def _save(store: int, meta: Meta) -> None:
    directory = os.open(meta.id, _DIR, dir_fd=store)
    try:
        tmp = META + ".tmp"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600, dir_fd=directory
        )
        try:
            os.write(fd, encode(meta))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, META, src_dir_fd=directory, dst_dir_fd=directory)
        os.fsync(directory)
    finally:
        os.close(directory)


def _load(store: int, change_id: str) -> Meta:
    if not change_id or "/" in change_id or change_id.startswith("."):
        raise ChangeError(f"{change_id!r} is not a change set id")
    try:
        fd = os.open(
            f"{change_id}/{META}", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=store
        )
    except OSError:
        raise ChangeError(f"no change set {change_id!r}") from None
    try:
        with os.fdopen(fd, "rb") as fh:
            return decode(fh.read(64 << 20))
    except ValueError as exc:
        raise ChangeError(f"change set {change_id!r} is unreadable: {exc}") from None


class Pending:
    """A change set being written by a running command: the overlay's directories, held open."""

    def __init__(self, store: int, meta: Meta, directory: int, upper: int, work: int) -> None:
        self.store = store
        self.meta = meta
        self.directory = directory
        """Locked (flock) while the command runs: `recover` leaves it alone."""
        self.upper = upper
        self.work = work

    def paths(self) -> tuple[str, str]:
        """(upper, work) as paths, for bwrap's ``--overlay`` (it takes no descriptors):
        checked to name the directories held open, with no link on the way."""
        state = userstate.state_dir()
        if state is None:
            raise ChangeError("panday's per-user state directory has no path")
        out: list[str] = []
        for name, fd in (("upper", self.upper), ("work", self.work)):
            path = os.path.join(state, "changes", self.meta.id, name)
            held = os.fstat(fd)
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError as exc:
                raise ChangeError(f"{path}: {exc.strerror}") from None
            if (st.st_dev, st.st_ino) != (held.st_dev, held.st_ino) or os.path.realpath(
                path
            ) != path:
                raise ChangeError(f"{path} is not the change set's directory (a link on the way?)")
            out.append(path)
        return out[0], out[1]

    def close(self) -> None:
        for fd in (self.upper, self.work, self.directory, self.store):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.upper = self.work = self.directory = self.store = -1


def begin(workspace: str, workspace_fd: int, argv: Sequence[str], mode: Mode) -> Pending:
    """A new change set for one command over the workspace open on `workspace_fd`."""
    store = open_store(create=True)
    try:
        change_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
        os.mkdir(change_id, 0o700, dir_fd=store)
        directory = os.open(change_id, _DIR, dir_fd=store)
        try:
            fcntl.flock(directory, fcntl.LOCK_EX)
            os.mkdir("upper", 0o755, dir_fd=directory)
            os.mkdir("work", 0o700, dir_fd=directory)
            upper = os.open("upper", _DIR, dir_fd=directory)
            work = os.open("work", _DIR, dir_fd=directory)
            ws = os.fstat(workspace_fd)
            os.fchmod(upper, stat.S_IMODE(ws.st_mode))  # the overlay's root takes the upper's mode
            same = os.fstat(upper).st_dev == ws.st_dev
        except BaseException:
            os.close(directory)
            raise
        meta = Meta(
            id=change_id,
            workspace=workspace,
            workspace_id=(ws.st_dev, ws.st_ino),
            argv=tuple(argv),
            mode=mode,
            started_ns=clock_ns(),
            same_device=same,
        )
        _save(store, meta)
    except BaseException:
        os.close(store)
        raise
    return Pending(store, meta, directory, upper, work)


def finish(
    pending: Pending,
    workspace_fd: int,
    *,
    anchored: Sequence[Entry] = (),
    unprotect: Sequence[str] = (),
    on_import_path: bool = False,
) -> tuple[Meta, list[Change], list[Change]]:
    """The command ended: read and judge its change set; in ``checked`` mode apply what
    passes. Returns (meta, applied, conflicts); a change set with nothing left to review
    is removed."""
    meta = pending.meta
    store = pending.store
    try:
        _read(
            meta,
            pending.upper,
            workspace_fd,
            anchored=anchored,
            unprotect=unprotect,
            on_import_path=on_import_path,
        )
        applying.remove_tree(pending.directory, "work", unlock=True)
        applied: list[Change] = []
        conflicts: list[Change] = []
        if meta.mode == "checked":
            applied, conflicts = applying.apply(
                meta, root=workspace_fd, upper=pending.upper, save=lambda m: _save(store, m)
            )
        else:
            _save(store, meta)
        if not any(c.state in {"pending", "held", "conflict"} for c in meta.changes):
            applying.remove_tree(store, meta.id, unlock=True)
    finally:
        pending.close()
    return meta, applied, conflicts


def _read(
    meta: Meta,
    upper: int,
    workspace_fd: int,
    *,
    anchored: Sequence[Entry] = (),
    unprotect: Sequence[str] = (),
    on_import_path: bool = False,
) -> None:
    meta.changes = read_upper(upper, workspace_fd)
    ctx = Context(
        upper_fd=upper,
        lower_fd=workspace_fd,
        workspace=meta.workspace,
        anchored=anchored,
        unprotect=unprotect,
        on_import_path=on_import_path,
    )
    judge(meta.changes, ctx)
    meta.ended_ns = time.time_ns()
    meta.status = "ready"


@contextlib.contextmanager
def _locked(store: int, change_id: str) -> Generator[int]:
    directory = os.open(change_id, _DIR, dir_fd=store)
    try:
        try:
            fcntl.flock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ChangeError(f"change set {change_id!r} is in use by another panday") from None
        yield directory
    finally:
        os.close(directory)


def _workspace(meta: Meta) -> int:
    try:
        fd = os.open(meta.workspace, _DIR)
    except OSError as exc:
        raise ChangeError(f"{meta.id}: workspace {meta.workspace!r}: {exc.strerror}") from None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != tuple(meta.workspace_id):
        os.close(fd)
        raise ChangeError(
            f"{meta.id}: {meta.workspace!r} is no longer the directory this change set was "
            "made in (another directory has that name now)"
        )
    return fd


def list_sets(workspace_id: tuple[int, int] | None = None) -> list[Meta]:
    """Every change set (of one workspace, by identity, when given), oldest first."""
    try:
        store = open_store(create=False)
    except ChangeError:
        return []
    try:
        out: list[Meta] = []
        for name in sorted(os.listdir(store)):
            with contextlib.suppress(ChangeError):
                meta = _load(store, name)
                if workspace_id is None or tuple(meta.workspace_id) == workspace_id:
                    out.append(meta)
        return sorted(out, key=lambda m: (m.started_ns, m.id))
    finally:
        os.close(store)


def load(change_id: str) -> Meta:
    store = open_store(create=False)
    try:
        return _load(store, change_id)
    finally:
        os.close(store)


def apply_set(
    change_id: str, paths: Sequence[str] | None = None, *, include_held: bool = False
) -> tuple[Meta, list[Change], list[Change]]:
    """Apply change set `change_id` (the changes at or under `paths`; all when None).
    Held changes are applied only with `include_held` and only those named by `paths`:
    a held change is never applied by a blanket request."""
    store = open_store(create=False)
    try:
        with _locked(store, change_id) as directory:
            meta = _load(store, change_id)
            if meta.status == "running":
                raise ChangeError(f"change set {change_id!r} is still being written by its command")
            if meta.status == "applying":
                _finish_journal(store, meta, directory)
            if include_held:
                if not paths:
                    raise ChangeError("naming held changes to apply needs their paths")
                for c in meta.changes:
                    if c.state in {"held", "conflict"} and any(
                        c.path == p.strip("/") or c.path.startswith(p.strip("/") + "/")
                        for p in paths
                    ):
                        c.state = "pending"
            root = _workspace(meta)
            upper = os.open("upper", _DIR, dir_fd=directory)
            try:
                applied, conflicts = applying.apply(
                    meta, root=root, upper=upper, paths=paths, save=lambda m: _save(store, m)
                )
            finally:
                os.close(upper)
                os.close(root)
        if not any(c.state in {"pending", "held", "conflict"} for c in meta.changes):
            applying.remove_tree(store, change_id, unlock=True)
        return meta, applied, conflicts
    finally:
        os.close(store)


def discard(change_id: str) -> Meta:
    store = open_store(create=False)
    try:
        with _locked(store, change_id):
            meta = _load(store, change_id)
        applying.remove_tree(store, change_id, unlock=True)
        return meta
    finally:
        os.close(store)


def _finish_journal(store: int, meta: Meta, directory: int) -> None:
    root = _workspace(meta)
    upper = os.open("upper", _DIR, dir_fd=directory)
    try:
        applying.run_steps(
            meta, root=root, upper=upper, changes=[c for c in meta.changes if c.state == "applied"]
        )
    finally:
        os.close(upper)
        os.close(root)
    meta.status = "ready"
    _save(store, meta)


def recover(*, max_age_s: int | None = DEFAULT_MAX_AGE_S) -> list[str]:
    """Finish every journal a panday that died left ``applying`` (its lock is free), and
    collect change sets older than `max_age_s`. Returns what it did, one line each."""
    try:
        store = open_store(create=False)
    except ChangeError:
        return []
    done: list[str] = []
    now = time.time_ns()
    try:
        for name in sorted(os.listdir(store)):
            try:
                with _locked(store, name) as directory:
                    meta = _load(store, name)
                    if meta.status == "applying":
                        _finish_journal(store, meta, directory)
                        done.append(f"{name}: finished an apply that was interrupted")
                        if not any(
                            c.state in {"pending", "held", "conflict"} for c in meta.changes
                        ):
                            applying.remove_tree(store, name, unlock=True)
                            continue
                    if meta.status == "running":
                        # Unlocked: the panday that ran its command died before reading it.
                        # Kept for review (nothing of it is applied without a request).
                        root = _workspace(meta)
                        upper = os.open("upper", _DIR, dir_fd=directory)
                        try:
                            _read(meta, upper, root)
                        finally:
                            os.close(upper)
                            os.close(root)
                        applying.remove_tree(directory, "work", unlock=True)
                        _save(store, meta)
                        done.append(f"{name}: kept for review (its panday died while it ran)")
                    if max_age_s is not None and now - meta.started_ns > max_age_s * 10**9:
                        applying.remove_tree(store, name, unlock=True)
                        done.append(f"{name}: collected (older than {max_age_s // 86400} days)")
            except (ChangeError, OSError):
                continue
        return done
    finally:
        os.close(store)
