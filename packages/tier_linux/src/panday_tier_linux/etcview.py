"""The jail's /etc as one read-only directory: a per-user copy of the allowlisted entries.

Every bind mount costs a jail's start-up time (about 0.3 ms each here; a jailed /bin/true
costs a few ms in all), and the /etc allowlist is most of a jail's mounts. So the
allowlisted entries are copied once into ``<cache>/panday/etc-<key>/`` (files copied,
symlinks recreated, the few allowlisted directories copied the same way) and bound as /etc
with one mount. The key is built from every source's type, size, mtime and inode (for a
directory, its own mtime, which changes whenever an entry is added, removed or replaced by
rename, which is how packages update them), so a changed host file makes a new view at the
next session; a view is never edited in place.

A view is used only when it is a directory owned by the caller that nobody else may write.
When no view can be made (no home, a source too large), the argv builder binds the entries
one by one instead: the same allowlist, only slower.
"""

from __future__ import annotations

import contextlib
import os
import stat

from panday_tier_linux.host import ETC_ALLOWLIST, cache_dir, private_dir
from panday_tier_linux.host import etc_view_key as view_key

MAX_BYTES = 32 << 20
"""A view larger than this is not made (binding entries one by one still works)."""
MAX_ENTRIES = 20_000


class _TooLarge(Exception):
    pass


def _safe(path: str) -> bool:
    return private_dir(path)


class _Copier:
    def __init__(self) -> None:
        self.bytes = 0
        self.entries = 0

    def copy(self, src: str, dst: str) -> None:
        self.entries += 1
        if self.entries > MAX_ENTRIES:
            raise _TooLarge
        st = os.lstat(src)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(src), dst)
        elif stat.S_ISDIR(st.st_mode):
            os.mkdir(dst, 0o755)
            for entry in sorted(os.listdir(src)):
                self.copy(os.path.join(src, entry), os.path.join(dst, entry))
        elif stat.S_ISREG(st.st_mode):
            self.bytes += st.st_size
            if self.bytes > MAX_BYTES:
                raise _TooLarge
            import shutil

            try:
                shutil.copyfile(src, dst, follow_symlinks=False)
            except PermissionError:
                return  # unreadable to this user: it would be unreadable inside too
            os.chmod(dst, 0o644)


def _build(target: str) -> bool:
    parent = os.path.dirname(target)
    tmp = os.path.join(parent, f".tmp-etc-{os.getpid()}-{os.urandom(4).hex()}")
    os.mkdir(tmp, 0o755)
    copier = _Copier()
    try:
        for name in ETC_ALLOWLIST:
            src = f"/etc/{name}"
            if not os.path.lexists(src):
                continue
            dst = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(dst), mode=0o755, exist_ok=True)
            copier.copy(src, dst)
        os.rename(tmp, target)
    except (OSError, _TooLarge):
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        return os.path.isdir(target)  # another process may have made it meanwhile
    return True


def _prune(parent: str, keep: str) -> None:
    import shutil

    for entry in os.listdir(parent):
        if entry.startswith("etc-") and entry != keep:
            with contextlib.suppress(OSError):
                shutil.rmtree(os.path.join(parent, entry))


def etc_view() -> str | None:
    """The directory to bind as the jail's /etc, or None to bind entry by entry."""
    base = cache_dir()
    if base is None:
        return None
    parent = os.path.join(os.path.dirname(base), "etc")
    try:
        # Both levels with an explicit mode: makedirs gives the ones it adds on the way the
        # umask's default, which under umask 0 would be writable by everyone.
        os.makedirs(os.path.dirname(parent), mode=0o700, exist_ok=True)
        os.makedirs(parent, mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not (_safe(os.path.dirname(parent)) and _safe(parent)):
        return None
    name = f"etc-{view_key()}"
    target = os.path.join(parent, name)
    if not os.path.isdir(target):
        if not _build(target):
            return None
        _prune(parent, name)
    return target if _safe(target) else None
