# Over 500 lines: roots, their ancestry and where a path lies share one mount table.
"""Deciding about a path by what was opened, never by how it is spelled (`panday_core.protect`).

A root is opened component by component from ``/`` without following a link (`open_root`);
what it is, and what lies above it, is its identity ``(st_dev, st_ino)`` and its ancestry
(`ancestry`: ``..`` from the descriptor, and where a bind-mounted subtree really lies);
whether a path lies inside a root is decided by the identities of the directories above it
(`within`). ``//etc``, ``/./etc`` and a bind alias of ``/etc`` are all ``/etc`` here.
"""

from __future__ import annotations

import _thread
import os
import select
import stat

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from collections.abc import Iterable


class RootRefused(Exception):
    """A workspace or staged path that cannot be a root of a jail; `reason` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


O_PATH = getattr(os, "O_PATH", 0)
# Without O_PATH (macOS) each component is opened for reading: O_NONBLOCK so that a FIFO a
# jail left where a later root is looked up cannot hang the caller.
LOOKUP = (O_PATH or (os.O_RDONLY | os.O_NONBLOCK)) | os.O_CLOEXEC | os.O_NOFOLLOW


def components(path: str) -> list[str]:
    return [part for part in path.split("/") if part and part != "."]


def normal_path(path: str) -> str:
    """`path` normalised the way the kernel reads it. ``os.path.normpath`` keeps a leading
    ``//`` (POSIX leaves its meaning to the system; Linux and macOS read it as ``/``), so
    ``//etc`` would pass every string comparison with ``/etc`` while opening it."""
    if not path:
        return path
    normal = os.path.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def fd_path(fd: int) -> str | None:
    """The path the kernel gives for an opened directory (Linux: ``/proc/self/fd``; macOS:
    ``F_GETPATH``): one spelling whatever the caller typed (``//``, ``/./``). None when the
    system cannot say, or the directory was removed."""
    try:
        if O_PATH:
            found = os.readlink(f"/proc/self/fd/{fd}")
        else:
            import fcntl

            raw = fcntl.fcntl(fd, getattr(fcntl, "F_GETPATH", 50), b"\0" * 1024)
            found = raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    except OSError:
        return None
    if not found.startswith("/") or found.endswith(" (deleted)"):
        return None
    return found


def open_root(path: str) -> int:
    """A descriptor on `path` (absolute), reached without following any symbolic link.

    On Linux the descriptor is ``O_PATH`` (no read permission needed, usable as a bind
    source through ``/proc/self/fd``); elsewhere a plain read-only descriptor. Raises
    `RootRefused` naming the first link (and where it points) or the component that
    cannot be opened.
    """
    if not path.startswith("/"):
        raise RootRefused(f"{path!r} is relative; give an absolute path")
    fd = os.open("/", LOOKUP | os.O_DIRECTORY)
    walked = ""
    problem: str | None = None
    for part in components(path):
        walked += "/" + part
        try:
            child = os.open(part, LOOKUP, dir_fd=fd)
        except OSError as exc:
            problem = _open_failure(path, walked, fd, part, exc)
            break
        os.close(fd)
        fd = child
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            problem = _link_message(path, walked)
            break
    if problem is not None:
        os.close(fd)
        raise RootRefused(problem)
    return fd


def _link_message(path: str, walked: str) -> str:
    try:
        target = os.readlink(walked)
    except OSError:
        target = "?"
    real = os.path.realpath(path)
    where = "is" if walked == path.rstrip("/") else f"passes through {walked!r}, which is"
    return (
        f"{path!r} {where} a symbolic link (to {target!r}); panday never follows a link to "
        f"choose what a jail sees, because a jail can plant one (give the real path: {real!r})"
    )


def _open_failure(path: str, walked: str, parent: int, name: str, exc: OSError) -> str:
    # Without O_PATH (macOS) O_NOFOLLOW on a link fails with ELOOP: name the link.
    try:
        if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
            return _link_message(path, walked)
    except OSError:
        pass
    return f"{path!r}: {walked!r}: {exc.strerror}"


# Places that are the jail's own mount points, or hold them: never a workspace or a staged
# path, in any access mode (mounting one would replace part of the jail itself, or expose
# every user's files at once). "/" is refused as the ancestor of everything.


def ident(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def chain_of(path: str) -> tuple[list[tuple[int, int]], bool]:
    """The identities of ``/`` and of each existing component of `path` (absolute,
    normalised), opened one by one without following a link, and whether the whole path
    was reached. A component that cannot be opened for lookup (macOS, no read permission)
    is looked at with ``lstat`` instead; a link or a missing component ends the chain."""
    out: list[tuple[int, int]] = []
    fd = os.open("/", LOOKUP | os.O_DIRECTORY)
    walked = ""
    try:
        out.append(ident(os.fstat(fd)))
        for part in components(path):
            walked += "/" + part
            try:
                child = os.open(part, LOOKUP, dir_fd=fd)
            except OSError:
                try:
                    st = os.lstat(walked)
                except OSError:
                    return out, False
                if stat.S_ISLNK(st.st_mode):
                    return out, False
                out.append(ident(st))
                continue  # fd stays on an ancestor: later components fail and lstat too
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                return out, False
            out.append(ident(st))
        return out, True
    finally:
        os.close(fd)


def ancestry(fd: int) -> list[tuple[int, int]]:
    """The identity of the directory `fd` first, then of every directory above it: through
    ``..`` from the descriptor itself (never from a path) up to ``/``, and, where one of
    them is a bind mount of a subtree (``mount --bind /etc/ssl x``: its ``..`` is the
    mount point's parent), the ancestry of the place that subtree really is, so an alias
    of a directory beneath ``/etc`` is beneath ``/etc``."""
    out = [ident(os.fstat(fd))]
    aliases: list[str] = []
    current = os.dup(fd)
    mount = _mount_id(current)
    try:
        for _ in range(4096):  # deeper than any real tree; a loop cannot be made with ..
            try:
                parent = os.open("..", LOOKUP | os.O_DIRECTORY, dir_fd=current)
            except OSError:
                break
            parent_mount = _mount_id(parent)
            if mount is not None and parent_mount != mount:
                aliases += _bind_source(mount)
            os.close(current)
            current, mount = parent, parent_mount
            here = ident(os.fstat(current))
            if here == out[-1]:
                break  # "/" is its own parent
            out.append(here)
    finally:
        os.close(current)
    for real in aliases:
        out += chain_of(real)[0]
    return out


def _mount_id(fd: int) -> int | None:
    """The mount a descriptor is on (Linux's ``/proc/self/fdinfo``), None elsewhere."""
    if not O_PATH:
        return None
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as fh:
            for line in fh.read().splitlines():
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


_MOUNT_DEVICE, _MOUNT_ROOT, _MOUNT_POINT = 2, 3, 4
"""Columns of ``/proc/self/mountinfo``."""


def _bind_source(mount: int) -> list[str]:
    """Where the subtree that mount `mount` shows lies, as paths of this mount namespace:
    for a bind mount of ``/etc/ssl`` (its root field in ``/proc/self/mountinfo``), the
    mount point of each mount of the whole file system plus that root. [] for a mount of
    a whole file system, or one whose file system is mounted nowhere else here."""
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            rows = [line.split(b" ") for line in fh.read().splitlines()]
    except OSError:
        return []

    # Fields: mount id, parent id, major:minor, root within the file system, mount point.
    rows = [r for r in rows if len(r) > _MOUNT_POINT]
    mine = next((r for r in rows if r[0] == str(mount).encode()), None)
    if mine is None or mine[_MOUNT_ROOT] == b"/":
        return []
    root = _mountinfo_text(mine[_MOUNT_ROOT])
    return [
        normal_path(_mountinfo_text(r[_MOUNT_POINT]) + root)
        for r in rows
        if r[_MOUNT_DEVICE] == mine[_MOUNT_DEVICE] and r[_MOUNT_ROOT] == b"/" and r[0] != mine[0]
    ]


def identities(paths: tuple[str, ...] | frozenset[str] | list[str]) -> dict[tuple[int, int], str]:
    """The identity of each existing path (links followed: ``/lib`` may be ``/usr/lib``)."""
    out: dict[tuple[int, int], str] = {}
    for path in sorted(paths):
        try:
            out.setdefault(ident(os.stat(path)), path)
        except (OSError, ValueError):
            continue
    return out


def path_identity(path: str) -> tuple[int, int] | None:
    """The identity of `path` (links followed), None when it does not exist."""
    try:
        return ident(os.stat(path))
    except (OSError, ValueError):
        return None


def within(path: str, root: tuple[int, int], *, resolved: bool = False) -> str | None:
    """`path` (absolute; links in it are resolved first, as the tools that use it will)
    relative to the directory whose identity is `root`, when it lies strictly inside it,
    else None. Decided by the identity of each directory above `path`, not by spelling:
    the workspace may have been named ``//ws``, or be a bind-mount alias of it.
    `resolved`: `path` has no link in it already (the caller resolved it)."""
    try:
        real = path if resolved else real_path(path)
    except (OSError, ValueError):
        return None
    memo = _memo()
    rel = _within_spelled(real, root, memo)
    return rel if rel is not None else _within_aliases(real, root, memo)


def _within_aliases(real: str, root: tuple[int, int], memo: _Memo | None) -> str | None:
    """`within` for `real` spelled through bind mounts of subtrees: the directories above
    that spelling are not the ones above it (a workspace's .venv bound at /opt/venv is
    inside the workspace, though /opt is not). Placed again where it really lies."""
    subtrees = _memo_subtrees(memo)
    seen = {real}
    todo = [real]
    while todo:
        spelled = todo.pop()
        for prefix, sources in subtrees:
            if not (spelled + "/").startswith(prefix):
                continue
            for source in sources:
                moved = normal_path(source + spelled[len(prefix) - 1 :])
                if moved in seen or len(seen) >= _MAX_ALIASES:
                    continue
                seen.add(moved)
                rel = _within_spelled(moved, root, memo)
                if rel is not None:
                    return rel
                todo.append(moved)
    return None


def listing_subtree_mounts() -> list[tuple[str, list[str]]]:
    """`subtree_mounts`, asked once per listing (this thread's memo keeps it)."""
    return _memo_subtrees(_memo())


def _memo_subtrees(memo: _Memo | None) -> list[tuple[str, list[str]]]:
    if memo is None:
        return subtree_mounts()
    if memo.subtrees is None:
        memo.subtrees = subtree_mounts()
    return memo.subtrees


def listing_extra() -> dict[str, object] | None:
    """This thread's memo's room for other answers that hold for one listing (the
    caller's state, `hostpaths.caller_state`), or None outside a listing."""
    memo = _memo()
    return None if memo is None else memo.extra


_MAX_ALIASES = 16
"""Spellings of one path `within` follows through bind mounts (a mount of a mount of ...)."""


def _within_spelled(real: str, root: tuple[int, int], memo: _Memo | None) -> str | None:
    parts = components(real)
    top = ""
    for depth in range(len(parts)):
        here = _lstat_memo(top or "/", memo)
        if here is None:
            return None
        if here[0] == root:
            return "/".join(parts[depth:])
        top += "/" + parts[depth]
    return None


def subtree_mounts() -> list[tuple[str, list[str]]]:
    """Each mount here that shows a subtree of its file system (a bind mount of a
    directory), as (its mount point with a trailing slash, where that subtree lies: a
    mount point of the whole file system plus the subtree's root, for each). Read from
    /proc/self/mountinfo, and read again only when the kernel says the mount table
    changed (the file polls POLLPRI then): every listing asks. [] without /proc (macOS
    has no bind mounts). One thread at a time: the descriptor is closed and opened again
    on a change, and a thread polling it meanwhile could close another's."""
    with _SUBTREES_LOCK:
        return _subtree_mounts()


_SUBTREES_LOCK = _thread.allocate_lock()


def _subtree_mounts() -> list[tuple[str, list[str]]]:
    kept = _SUBTREES[0] if _SUBTREES else None
    if kept is not None and kept[0] == os.getpid():
        try:
            changed = select.poll()
            changed.register(kept[1], select.POLLPRI)
            if not changed.poll(0):
                return kept[2]
        except OSError:
            pass
    if kept is not None and kept[0] == os.getpid():
        os.close(kept[1])  # changed: read afresh from a new descriptor (and a new event)
    _SUBTREES[:] = []
    try:
        fd = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        table = _subtrees(b"".join(chunks))
    except OSError:
        os.close(fd)
        return []
    _SUBTREES[:] = [(os.getpid(), fd, table)]
    return table


_SUBTREES: list[tuple[int, int, list[tuple[str, list[str]]]]] = []
"""(pid, the open mountinfo, its subtree mounts): kept per process (a forked child that
polled the parent's descriptor would take the parent's change event)."""


def _subtrees(mountinfo: bytes) -> list[tuple[str, list[str]]]:
    rows = [line.split(b" ") for line in mountinfo.splitlines()]
    rows = [r for r in rows if len(r) > _MOUNT_POINT]
    wholes = [r for r in rows if r[_MOUNT_ROOT] == b"/"]
    out: list[tuple[str, list[str]]] = []
    for row in rows:
        if row[_MOUNT_ROOT] == b"/":
            continue
        sub = _mountinfo_text(row[_MOUNT_ROOT])
        sources = [
            normal_path(_mountinfo_text(w[_MOUNT_POINT]).rstrip("/") + sub)
            for w in wholes
            if w[_MOUNT_DEVICE] == row[_MOUNT_DEVICE]
        ]
        if sources:
            out.append((normal_path(_mountinfo_text(row[_MOUNT_POINT])).rstrip("/") + "/", sources))
    return out


def _mountinfo_text(raw: bytes) -> str:
    """A path field of /proc/self/mountinfo (it escapes space, tab, newline, backslash)."""
    for code, char in ((b"\\040", b" "), (b"\\011", b"\t"), (b"\\012", b"\n")):
        raw = raw.replace(code, char)
    return raw.replace(b"\\134", b"\\").decode("utf-8", "surrogateescape")


def real_path(path: str) -> str:
    """``os.path.realpath(path)``, with the ``lstat`` of each component shared through the
    memo `remember_prefixes` starts (the same directories are looked at by every path
    `protected_entries` places): a path with a link or ``..`` in it is left to
    ``os.path.realpath``. Like it, a missing component ends the walk, the rest kept as
    spelled."""
    parts = components(path)
    if not path.startswith("/") or ".." in parts:
        return os.path.realpath(path)
    top = ""
    memo = _memo()
    for part in parts:
        top += "/" + part
        found = _lstat_memo(top, memo)
        if found is None:
            return "/" + "/".join(parts)
        if found[1]:
            return os.path.realpath(path)
    return top or "/"


def lexists(path: str) -> bool:
    """``os.path.lexists``, shared through the memo `remember_prefixes` starts (asked of
    the kernel with ``faccessat(F_OK, AT_SYMLINK_NOFOLLOW | AT_EACCESS)``: no stat to
    build; the effective ids, as ``lstat`` searches the directories on the way)."""
    return lexists_all((path,))[0]


def lexists_all(paths: Iterable[str]) -> tuple[bool, ...]:
    """`lexists` of each of `paths` (this thread's memo looked up once)."""
    memo = _memo()
    if not _ACCESS_NOFOLLOW:
        return tuple(_lstat_memo(path, memo) is not None for path in paths)
    known = memo.exists if memo is not None else {}
    out: list[bool] = []
    for path in paths:
        found = known.get(path)
        if found is None:
            try:
                found = os.access(path, os.F_OK, effective_ids=True, follow_symlinks=False)
            except ValueError:  # a NUL in it
                found = False
            known[path] = found
        out.append(found)
    return tuple(out)


_ACCESS_NOFOLLOW = (
    os.access in os.supports_follow_symlinks and os.access in os.supports_effective_ids
)


class _Memo:
    """While `protected_entries` runs: what ``lstat`` said of each path `within`,
    `real_path` and `lexists` looked at (its identity and whether it is a link, or None),
    so twenty paths under one ``.venv`` cost one ``lstat`` per directory, not twenty, and a
    path both resolved and placed costs one; and what `lexists` asked (sys.path's entries
    are asked twice)."""

    __slots__ = ("exists", "extra", "lstat", "subtrees")

    def __init__(self) -> None:
        self.lstat: dict[str, tuple[tuple[int, int], bool] | None] = {}
        self.exists: dict[str, bool] = {}
        self.subtrees: list[tuple[str, list[str]]] | None = None
        """`subtree_mounts`, asked once per listing."""
        self.extra: dict[str, object] = {}
        """`listing_extra`."""


_MEMOS: dict[int, list[_Memo]] = {}
"""Each thread's memos, innermost last. Per thread: a session used from several threads
lists its entries in each at once, and a memo shared between them could outlive every
call that made it (one thread always inside a listing), answering from a moment long
past."""


def remember_prefixes() -> None:
    """Start a memo of ``lstat`` answers for this thread (`forget_prefixes` ends it);
    inside another of the same thread, the same memo: one moment of the file system."""
    stack = _MEMOS.setdefault(_thread.get_ident(), [])
    stack.append(stack[-1] if stack else _Memo())


def forget_prefixes() -> None:
    me = _thread.get_ident()
    stack = _MEMOS[me]
    stack.pop()
    if not stack:
        del _MEMOS[me]


def _memo() -> _Memo | None:
    stack = _MEMOS.get(_thread.get_ident())
    return stack[-1] if stack else None


def _lstat_memo(path: str, memo: _Memo | None) -> tuple[tuple[int, int], bool] | None:
    """``lstat``'s answer for `path`, from and into `memo` (this thread's, `_memo`)."""
    if memo is not None and path in memo.lstat:
        return memo.lstat[path]
    try:
        st = os.lstat(path)
        found: tuple[tuple[int, int], bool] | None = (
            (st.st_dev, st.st_ino),
            stat.S_ISLNK(st.st_mode),
        )
    except (OSError, ValueError):
        found = None
    if memo is not None:
        memo.lstat[path] = found
    return found


def real_dir(path: str) -> str | None:
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    return real if os.path.exists(real) else None
