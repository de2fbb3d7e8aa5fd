"""Landlock through ctypes: the ABI probe, a ruleset, its rules, and restricting a thread.

Landlock needs no namespace and no privilege: a thread that has ``PR_SET_NO_NEW_PRIVS``
builds a ruleset (which rights it *handles*), adds rules (which of those rights are
allowed beneath a directory or file it holds open, and to which TCP ports), and
restricts itself with it. From then on the thread and everything it spawns can use a
handled right only where a rule allows it, forever (a domain is never lifted).

The three calls have the same numbers on x86-64 and aarch64 (444, 445, 446). The rights
known to each ABI are here, and `handled_fs(abi)` takes every one of them, so nothing
the kernel can rule is left unruled.
"""

from __future__ import annotations

import ctypes
import os
import struct

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2

# Filesystem rights, with the ABI that introduced each.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

# Network rights (ABI 4) and scopes (ABI 6).
BIND_TCP = 1 << 0
CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

FS_BY_ABI = {1: (1 << 13) - 1, 2: REFER, 3: TRUNCATE, 5: IOCTL_DEV}
"""The filesystem rights each ABI added (ABI 1: EXECUTE .. MAKE_SYM)."""

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The rights a rule on a non-directory may carry (the kernel refuses others there)."""

READ = EXECUTE | READ_FILE | READ_DIR
"""Read-only: read and run files, list directories."""

WRITE = (
    WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_SYM
    | REFER
    | TRUNCATE
)
"""What a writable place adds to `READ`: never device nodes (MAKE_CHAR, MAKE_BLOCK) nor
device ioctls, which stay handled and allowed nowhere."""

MIN_ABI = 3
"""Below ABI 3, truncate(2) is not ruled: a file under a read-only rule could be emptied."""
NET_ABI = 4
SCOPE_ABI = 6

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class LandlockError(OSError):
    """A Landlock call failed (errno and what was being done)."""


def _call(number: int, *args: object) -> int:
    result = int(_syscall(ctypes.c_long(number), *args))
    if result < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, os.strerror(err))
    return result


def abi() -> int | str:
    """The kernel's Landlock ABI version, or why there is none (a sentence)."""
    try:
        return _call(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except LandlockError as exc:
        reasons = {
            38: "this kernel has no Landlock (built without CONFIG_SECURITY_LANDLOCK), or a "
            "seccomp profile (a container runtime's) refuses landlock_create_ruleset",
            95: "Landlock is built in but not enabled at boot (add landlock to the lsm= "
            "kernel parameter)",
            1: "a seccomp profile (a container runtime's) refuses landlock_create_ruleset",
        }
        return reasons.get(exc.errno or 0, f"landlock_create_ruleset failed: {exc.strerror}")


def handled_fs(version: int) -> int:
    """Every filesystem right `version` knows."""
    rights = 0
    for since, added in FS_BY_ABI.items():
        if version >= since:
            rights |= added
    return rights


class Ruleset:
    """One ruleset being built: `allow` a path's rights, `allow_port`, then `restrict` (the
    calling thread only)."""

    __slots__ = ("fd", "fs", "net", "scoped")

    def __init__(self, version: int, *, scoped: bool = True) -> None:
        self.fs = handled_fs(version)
        self.net = BIND_TCP | CONNECT_TCP if version >= NET_ABI else 0
        self.scoped = (
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if scoped and version >= SCOPE_ABI else 0
        )
        if version >= SCOPE_ABI:
            attr = struct.pack("=QQQ", self.fs, self.net, self.scoped)
        elif version >= NET_ABI:
            attr = struct.pack("=QQ", self.fs, self.net)
        else:
            attr = struct.pack("=Q", self.fs)
        buf = ctypes.create_string_buffer(attr, len(attr))
        self.fd = _call(SYS_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))

    def allow_fd(self, fd: int, rights: int, *, is_dir: bool) -> None:
        """Allow `rights` (within what is handled) beneath the file or directory `fd`."""
        wanted = rights & self.fs & (~0 if is_dir else FILE_RIGHTS)
        if not wanted:
            return
        attr = ctypes.create_string_buffer(struct.pack("=Qi", wanted, fd), 12)
        _call(SYS_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(RULE_PATH_BENEATH), attr, 0)

    def allow_path(self, path: str, rights: int) -> bool:
        """`allow_fd` on `path` (its links followed: a system path such as /bin -> usr/bin
        is ruled where it leads); False when it does not exist."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            import stat

            self.allow_fd(fd, rights, is_dir=stat.S_ISDIR(os.fstat(fd).st_mode))
        finally:
            os.close(fd)
        return True

    def allow_port(self, port: int, rights: int) -> None:
        """Allow `rights` (BIND_TCP, CONNECT_TCP) on TCP `port`, to and from any address."""
        if not self.net:
            return
        attr = ctypes.create_string_buffer(struct.pack("=QQ", rights & self.net, port), 16)
        _call(SYS_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(RULE_NET_PORT), attr, 0)

    def restrict(self) -> None:
        """Restrict the calling thread (it must have no_new_privs, or CAP_SYS_ADMIN)."""
        _call(SYS_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_ABI: list[int | str] = []


def kernel_abi() -> int | str:
    """This kernel's Landlock ABI when T1 can use it, else why not (one sentence); asked
    of the kernel once per process."""
    if not _ABI:
        import sys

        found = (
            abi()
            if sys.platform.startswith("linux")
            else f"T1 Linux needs Linux; this host is {sys.platform}"
        )
        if isinstance(found, int) and found < MIN_ABI:
            found = (
                f"this kernel's Landlock ABI is {found}; T1 needs {MIN_ABI} (Linux 6.2), "
                "below which truncate(2) is not ruled"
            )
        _ABI.append(found)
    return _ABI[0]
