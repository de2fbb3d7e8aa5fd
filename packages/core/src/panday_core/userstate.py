"""panday's per-user state, and the key that seals what it caches.

The state directory (cached seccomp programs, jail plans, /etc views, this key) is
``<home>/.cache/panday``, where the home is the password-file entry of the effective uid:
never ``$XDG_CACHE_HOME`` or ``$HOME``. Those are settings a project or CI script may point
into a workspace (``XDG_CACHE_HOME=$PWD/.cache`` is common), and a cache a jail can write
is code the next session runs.

Where it is is not what makes a cached file trusted, though: every cached plan and seccomp
program carries a MAC (keyed BLAKE2b) under a per-user key of 32 random bytes kept in the
state directory. A jail never sees the key: the state directory is refused as a writable
root, and hidden (an empty read-only tmpfs over it) in any root that holds it. A file whose
MAC does not verify is a miss, rewritten by the caller; a key file that is not a private
regular file of ours disables caching (nothing cached is trusted, nothing crashes).

On `panday run`'s start-up path: it imports only builtin modules.
"""

# ruff: noqa: PTH102, PTH118, PTH120 - os terms, not pathlib: on `panday run`'s start-up path (pathlib costs time)
from __future__ import annotations

import os
import pwd
import stat
from _blake2 import blake2b
from _operator import _compare_digest  # pyright: ignore[reportPrivateUsage] - hmac.compare_digest without hmac's imports

from panday_core.startup import suppress

KEY_NAME = "key"
KEY_BYTES = 32
MAC_BYTES = 32
PLAN = b"panday-plan"
SECCOMP = b"panday-seccomp"
"""Purposes (BLAKE2b personalisation): a MAC made for one kind of file never verifies
another."""

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def passwd_home() -> str | None:
    """The effective uid's home directory as the password file has it (None: no entry, or
    not an absolute path)."""
    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        return None
    return os.path.normpath(home) if home.startswith("/") else None


def state_dir() -> str | None:
    """``<passwd home>/.cache/panday``: panday's caches and its key."""
    home = passwd_home()
    return None if home is None else os.path.join(home, ".cache", "panday")


def config_dir() -> str | None:
    """``<passwd home>/.config/panday`` (the per-user policy's default place)."""
    home = passwd_home()
    return None if home is None else os.path.join(home, ".config", "panday")


def private_fd(fd: int) -> bool:
    """The directory open on `fd` is ours and nobody else may write it."""
    st = os.fstat(fd)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def open_state(*, create: bool) -> int | None:
    """A descriptor on `state_dir`: ``panday`` reached from ``<home>/.cache`` without
    following a link, a directory of ours nobody else may write; None if not (`create`:
    make what is missing, 0700)."""
    state = state_dir()
    if state is None:
        return None
    parent = os.path.dirname(state)
    fd = -1
    try:
        if create:
            with suppress(FileExistsError):
                os.mkdir(parent, 0o700)
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if create:
            with suppress(FileExistsError):
                os.mkdir("panday", 0o700, dir_fd=fd)
        child = os.open("panday", _DIR, dir_fd=fd)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    if not private_fd(child):
        os.close(child)
        return None
    return child


def _read_key(directory: int) -> bytes | None:
    """The key file's bytes, when it is a regular file of ours that nobody else may read
    or write and holds exactly `KEY_BYTES`; None otherwise (raises FileNotFoundError when
    there is none)."""
    fd = os.open(KEY_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None
        if st.st_size != KEY_BYTES:
            return None
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    return data if len(data) == KEY_BYTES else None


def _make_key(directory: int) -> bytes | None:
    """Write a fresh key under a temporary name (0600, O_EXCL) and link it into place, so
    that no reader ever sees half a key and two writers agree on one."""
    key = os.urandom(KEY_BYTES)
    tmp = f".key-{os.getpid()}-{os.urandom(4).hex()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=directory)
    try:
        try:
            os.write(fd, key)
        finally:
            os.close(fd)
        os.link(tmp, KEY_NAME, src_dir_fd=directory, dst_dir_fd=directory)
    except FileExistsError:
        return _read_key(directory)  # another process made it first: theirs is the key
    finally:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
    return key


def key(*, create: bool) -> bytes | None:
    """This user's cache key, or None: no private state directory, or a key file that is a
    link, not a regular file, not ours, readable or writable by anyone else, or the wrong
    size (`create`: make the directory and the key when missing)."""
    directory = open_state(create=create)
    if directory is None:
        return None
    try:
        try:
            return _read_key(directory)
        except FileNotFoundError:
            return _make_key(directory) if create else None
    except OSError:
        return None
    finally:
        os.close(directory)


def mac(secret: bytes, purpose: bytes, data: bytes) -> bytes:
    """The MAC of `data` for `purpose` under `secret` (`MAC_BYTES` long)."""
    return blake2b(data, key=secret, person=purpose, digest_size=MAC_BYTES).digest()


def verify(secret: bytes, purpose: bytes, data: bytes, tag: bytes) -> bool:
    """Whether `tag` is `data`'s MAC for `purpose` under `secret` (constant time)."""
    return len(tag) == MAC_BYTES and _compare_digest(mac(secret, purpose, data), tag)
