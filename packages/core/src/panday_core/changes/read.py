"""Read an overlay's upper directory as a list of changes to its lower directory.

The upper directory is the only thing the command could write, and it is data: it is
walked through descriptors without following a link, and only the overlay's own markers
(a 0/0 character device: a whiteout, i.e. a deletion; the ``user.overlay.opaque`` extended
attribute: a directory that replaced the one below it; ``user.overlay.origin``: copied up
from below) are interpreted. A jail cannot forge them: overlayfs refuses or escapes every
``user.overlay.*`` attribute set through it, and a user namespace cannot make devices.
Directory renames are not redirected (the kernel mounts an unprivileged overlay with
``redirect_dir=nofollow``: renaming a directory from below fails with EXDEV and tools copy).
"""

# ruff: noqa: PTH208 - descriptor-relative listing (dir_fd): pathlib has no such calls

from __future__ import annotations

import os
import stat
from contextlib import suppress

from panday_core.changes.model import Change, Kind

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

OPAQUE = "user.overlay.opaque"
ORIGIN = "user.overlay.origin"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


_STATX_BTIME = 0x800
_AT_SYMLINK_NOFOLLOW = 0x100
_STATX_BYTES = 256
_BTIME = slice(80, 88), slice(88, 92)
"""Where ``struct statx`` keeps stx_btime's seconds and nanoseconds."""


class _Statx:
    """libc's statx, found once (ctypes is loaded only when a change set is read)."""

    call: Callable[..., int] | None = None
    loaded = False

    @classmethod
    def get(cls) -> Callable[..., int] | None:
        if not cls.loaded:
            import ctypes

            cls.call = getattr(ctypes.CDLL(None, use_errno=True), "statx", None)
            cls.loaded = True
        return cls.call


def birth_ns(dir_fd: int, name: str) -> int:
    """When the entry `name` of the directory on `dir_fd` was made (statx's btime, from
    the clock file times come from); 0 when the file system does not record it. In an
    overlay's upper directory that is when the entry was copied up or created: a workspace
    entry changed at or after it was changed by someone else meanwhile."""
    call = _Statx.get()
    if call is None:
        return 0
    buf = bytearray(_STATX_BYTES)
    import ctypes

    raw = (ctypes.c_char * _STATX_BYTES).from_buffer(buf)
    if call(dir_fd, name.encode(), _AT_SYMLINK_NOFOLLOW, _STATX_BTIME, raw) != 0:
        return 0
    if not int.from_bytes(buf[0:4], "little") & _STATX_BTIME:
        return 0
    sec = int.from_bytes(buf[_BTIME[0]], "little", signed=True)
    return sec * 1_000_000_000 + int.from_bytes(buf[_BTIME[1]], "little")


def kind_of(mode: int) -> Kind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "special"


def _xattr(path: str, fd: int, name: str) -> bytes | None:
    try:
        return os.getxattr(path, name, follow_symlinks=False) if fd < 0 else os.getxattr(fd, name)
    except OSError:
        return None


def _lstat(name: str, dir_fd: int | None) -> os.stat_result | None:
    if dir_fd is None:
        return None
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _open_dir(name: str, dir_fd: int | None) -> int | None:
    if dir_fd is None:
        return None
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except OSError:
        return None


def read_upper(upper_fd: int, lower_fd: int) -> list[Change]:
    """Every change the upper directory on `upper_fd` makes to the directory on `lower_fd`,
    parents before their children (the order they apply in)."""
    out: list[Change] = []
    _walk(upper_fd, lower_fd, "", opaque=False, out=out)
    return out


def _walk(upper: int, lower: int | None, prefix: str, *, opaque: bool, out: list[Change]) -> None:
    names = sorted(os.listdir(upper))
    if opaque and lower is not None:
        # Everything below that the opaque directory hides is deleted.
        present = set(names)
        for name in sorted(os.listdir(lower)):
            st = _lstat(name, lower) if name not in present else None
            if st is not None:
                out.append(Change(path=prefix + name, action="delete", kind=kind_of(st.st_mode)))
    for name in names:
        st = os.stat(name, dir_fd=upper, follow_symlinks=False)
        below = _lstat(name, lower)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            if below is not None:  # a whiteout over nothing is the overlay's bookkeeping
                kind = kind_of(below.st_mode)
                since = birth_ns(upper, name)
                out.append(Change(path=prefix + name, action="delete", kind=kind, since_ns=since))
        elif stat.S_ISDIR(st.st_mode):
            _directory(upper, lower, prefix + name, st, below, opaque=opaque, out=out)
        else:
            out.append(_entry(upper, prefix + name, st, below))


def _directory(
    upper: int,
    lower: int | None,
    rel: str,
    st: os.stat_result,
    below: os.stat_result | None,
    *,
    opaque: bool,
    out: list[Change],
) -> None:
    name = rel.rpartition("/")[2]
    mode = stat.S_IMODE(st.st_mode)
    child = os.open(name, _DIR, dir_fd=upper)
    try:
        hides = _xattr("", child, OPAQUE) == b"y"
        below_dir = below is not None and stat.S_ISDIR(below.st_mode)
        if below is not None and below_dir and not hides and not opaque:
            if stat.S_IMODE(below.st_mode) != mode:
                out.append(Change(path=rel, action="mode", kind="dir", mode=mode))
        else:
            action = "modify" if below is not None else "create"
            replaces = below is not None and not below_dir
            out.append(Change(path=rel, action=action, kind="dir", mode=mode, replaces=replaces))
        sub = _open_dir(name, lower) if below_dir else None
        try:
            _walk(child, sub, rel + "/", opaque=opaque or hides, out=out)
        finally:
            if sub is not None:
                os.close(sub)
    finally:
        os.close(child)


def _entry(upper: int, rel: str, st: os.stat_result, below: os.stat_result | None) -> Change:
    name = rel.rpartition("/")[2]
    kind = kind_of(st.st_mode)
    target = os.readlink(name, dir_fd=upper) if kind == "symlink" else None
    copied = False
    if kind == "file":
        with suppress(OSError):
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(name, flags, dir_fd=upper)
            try:
                copied = _xattr("", fd, ORIGIN) is not None
            finally:
                os.close(fd)
    return Change(
        path=rel,
        action="modify" if below is not None else "create",
        kind=kind,
        mode=st.st_mode & 0o7777,
        size=st.st_size,
        target=target,
        copied_up=copied,
        replaces=below is not None and kind_of(below.st_mode) != kind,
        since_ns=birth_ns(upper, name) if below is not None else 0,
    )
