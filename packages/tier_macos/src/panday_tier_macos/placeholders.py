"""Read-only, immutable placeholders that hold a missing protected name for a command's lifetime
(issue 30, 2).

Why a deny rule alone is not enough: Seatbelt compares path *strings*, and the default
macOS volume ignores case and Unicode normalisation. For a name that does not exist yet
(``.vscode``, ``.mcp.json``, ``.claude``), a create is judged by the spelling the command
gave, so ``mkdir .VSCODE`` or an NFD spelling of a protected name may slip past a rule
written for ``.vscode`` while VS Code, looking up ``.vscode``, finds it (public reports
disagree on whether it does; this makes the answer not matter). T2 Linux holds such names
with placeholders; this tier does the same, and makes them impossible to remove from inside:

* Before each command, each missing protected name that must not be created
  (`panday_tier_macos.roots`, `Roots.missing`) is created by the runner as an empty file
  (mode 0444) or an empty directory (0555), and given the user-immutable flag
  (``chflags uchg``). The name now exists, so *every* spelling of it finds the
  placeholder: ``mkdir .VSCODE`` fails with EEXIST, ``.VSCODE/settings.json`` with ENOTDIR
  (a file) or EPERM (an immutable directory), in any case and normalisation, whatever
  Seatbelt makes of the spelling.
* The flag is what holds it: the kernel refuses to unlink, rename over, write or fill an
  immutable file by its vnode, not by a path, and the profile denies ``file-write-flags``
  on every file, so no command can clear it. The path rule (``file-write*`` denied on the
  protected path) stays as a second wall.
* After the command, each placeholder is removed by the runner unless another command
  (of this or another session) still holds it: every holder keeps a shared ``flock`` on it,
  and the remover needs the exclusive one. A placeholder left by a panday that crashed
  (empty, immutable, owned by the user) is taken over and removed the same way.

A name that appears between the check at `create` and the command (a user's editor made
``.vscode``) is left alone: it exists, so its own path rule protects it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from collections.abc import Sequence

_UF_IMMUTABLE: Final = getattr(stat, "UF_IMMUTABLE", 0x2)
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Kind = Literal["dir", "file"]


def _set_flags(path: str, flags: int) -> bool:
    """``lchflags`` where the OS has it (macOS, the BSDs); False elsewhere."""
    lchflags = getattr(os, "lchflags", None)
    if lchflags is None:
        return False
    lchflags(path, flags)
    return True


def _is_placeholder(st: os.stat_result, kind: Kind) -> bool:
    """An entry that only a runner could have made: empty, the user's own, and immutable
    (a command cannot set a file flag)."""
    flags = getattr(st, "st_flags", 0)
    shaped = stat.S_ISDIR(st.st_mode) if kind == "dir" else stat.S_ISREG(st.st_mode)
    empty = kind == "dir" or st.st_size == 0
    return shaped and empty and st.st_uid == os.geteuid() and bool(flags & _UF_IMMUTABLE)


class _Held:
    __slots__ = ("fd", "ident", "path")

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd
        st = os.fstat(fd)
        self.ident = (st.st_dev, st.st_ino)


class Placeholders:
    """The placeholders one command holds; `release` after it ends."""

    def __init__(self) -> None:
        self.held: list[_Held] = []

    @classmethod
    def make(cls, missing: Sequence[tuple[str, Kind]]) -> Placeholders:
        """Hold every name of `missing` (absolute, resolved paths whose parent exists)."""
        out = cls()
        try:
            for path, kind in missing:
                held = _hold(path, kind)
                if held is not None:
                    out.held.append(held)
        except BaseException:
            out.release()
            raise
        return out

    def release(self) -> None:
        """Remove each placeholder nobody else holds (deepest first); close every lock."""
        for held in sorted(self.held, key=lambda h: h.path.count("/"), reverse=True):
            try:
                _remove_if_last(held)
            finally:
                os.close(held.fd)
        self.held = []


def _hold(path: str, kind: Kind) -> _Held | None:
    parent, name = os.path.split(path)
    try:
        parent_fd = os.open(parent, _DIR_FLAGS)
    except OSError:
        return None  # the directory above went away: nothing to hold there
    try:
        for _ in range(3):  # made, or adopted, or (it was removed meanwhile) again
            fd = _create(parent_fd, name, kind)
            if fd is None:
                fd = _adopt(parent_fd, name, kind)
                if fd is None:
                    return None  # a real entry: its own path rule protects it
            fcntl.flock(fd, fcntl.LOCK_SH)
            now = _lstat(parent_fd, name)
            st = os.fstat(fd)
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                if not getattr(st, "st_flags", 0) & _UF_IMMUTABLE:
                    # A volume without file flags (FAT, some network shares) keeps the
                    # placeholder without them: it still holds the name, and its path rule
                    # still denies writes.
                    with contextlib.suppress(OSError):
                        _set_flags(path, _UF_IMMUTABLE)
                return _Held(path, fd)
            os.close(fd)  # removed by its last holder between our open and our lock
        return None
    finally:
        os.close(parent_fd)


def _create(parent_fd: int, name: str, kind: Kind) -> int | None:
    try:
        if kind == "dir":
            os.mkdir(name, 0o555, dir_fd=parent_fd)
            return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        return os.open(
            name,
            os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o444,
            dir_fd=parent_fd,
        )
    except FileExistsError:
        return None


def _adopt(parent_fd: int, name: str, kind: Kind) -> int | None:
    st = _lstat(parent_fd, name)
    if st is None or not _is_placeholder(st, kind):
        return None
    flags = _DIR_FLAGS if kind == "dir" else os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=parent_fd)
    except OSError:
        return None


def _lstat(parent_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError:
        return None


def _remove_if_last(held: _Held) -> None:
    try:
        fcntl.flock(held.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another command still holds it; the last one removes it
    parent, name = os.path.split(held.path)
    try:
        parent_fd = os.open(parent, _DIR_FLAGS)
    except OSError:
        return
    try:
        now = _lstat(parent_fd, name)
        if now is None or (now.st_dev, now.st_ino) != held.ident:
            return
        with contextlib.suppress(OSError):
            _set_flags(held.path, 0)
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(now.st_mode):
                os.rmdir(name, dir_fd=parent_fd)
            else:
                os.unlink(name, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)
