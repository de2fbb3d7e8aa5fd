"""The jail's seccomp filter: rules as data, compiled once by libseccomp, cached per user.

The rules are a deny list on top of the jail's other walls (no capabilities, no network
namespace, no host mounts): each entry closes kernel attack surface or an escape that
the namespaces alone leave open. Denied calls fail with EPERM (clone3 with ENOSYS, so
libc falls back to clone, whose flags the filter can inspect); a syscall from a foreign
ABI (32-bit ``int 0x80`` on x86-64) kills the process, because a filter for one ABI
cannot reason about another's numbers.

Compiling means loading libseccomp through ctypes (``pyseccomp``), which costs tens of
milliseconds; a jailed ``/bin/true`` costs a few. So the compiled program is cached in the
user's cache directory, keyed by the rules' canonical text (which includes the libseccomp
build, the architecture and this module's own size and mtime, so that editing the
compiler, not only the rules, compiles afresh). The cache file repeats that text and is
used only when it matches byte for byte, is a regular file owned by us and writable by
nobody else, and its MAC (under this user's cache key, `panday_core.userstate`, which no
jail can read) verifies over the text and the program: a stale, foreign, corrupt or
rewritten entry is recompiled, never trusted. Without a usable key nothing is cached.
The cache lies under the password file's home, never ``$XDG_CACHE_HOME``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat

from panday_core import userstate
from panday_core.errors import TierUnavailable
from panday_tier_linux.host import cache_dir, library_identity

CACHE_MAGIC = b"panday-seccomp-bpf 2\n"
"""Then the MAC of everything after it, the rules' text, the program."""
_MAX_CACHE_BYTES = 1 << 20

AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
AF_MAX = 46
"""One past the highest address family this kernel series defines (AF_MCTP = 45)."""
NO_NETWORK_FAMILIES = frozenset({AF_UNIX})
"""A session without ``net.allow``: unix sockets only."""
BRIDGE_FAMILIES = frozenset({AF_UNIX, AF_INET, AF_INET6})
"""A session with ``net.allow``: the egress relay listens on, and tools connect to, the
jail's own loopback; the namespace (``--unshare-net``) has nothing else to reach."""


def socket_families(*, bridge: bool) -> frozenset[int]:
    """The address families a jail may create sockets in: AF_INET/AF_INET6 only with the
    egress bridge (a non-empty ``net.allow``)."""
    return BRIDGE_FAMILIES if bridge else NO_NETWORK_FAMILIES


EPERM = 1
ENOSYS = 38

# Namespace flags of clone(2) and unshare(2): a process that could make a new user
# namespace would hold every capability inside it again.
CLONE_NEWTIME = 0x00000080
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = (
    ("CLONE_NEWUSER", CLONE_NEWUSER),
    ("CLONE_NEWNS", CLONE_NEWNS),
    ("CLONE_NEWPID", CLONE_NEWPID),
    ("CLONE_NEWNET", CLONE_NEWNET),
    ("CLONE_NEWIPC", CLONE_NEWIPC),
    ("CLONE_NEWUTS", CLONE_NEWUTS),
    ("CLONE_NEWCGROUP", CLONE_NEWCGROUP),
    ("CLONE_NEWTIME", CLONE_NEWTIME),
)

F_SETLEASE = 1024
PRIO_USER = 2
IOPRIO_WHO_USER = 3
SOCK_DGRAM = 2
SOCK_TYPE_MASK = 0xF
"""The type bits of socket(2)'s second argument (the rest are SOCK_NONBLOCK, SOCK_CLOEXEC)."""
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
PER_LINUX = 0
ENOTSUP = 95

# File mode bits a jail must never set: a file it leaves setuid or setgid would run with
# the owner's privileges for whoever starts it later, outside the jail. A root caller's
# jail writes files as the host's root, so a setuid-root binary planted in the workspace
# would be a root shell for any local user. Device nodes are already refused by the kernel
# in a user namespace; the filter refuses them too, so neither wall depends on the other.
S_ISUID = 0o4000
S_ISGID = 0o2000
S_IFMT = 0o170000
S_IFCHR = 0o020000
S_IFBLK = 0o060000
MODE_ARG: tuple[tuple[str, int], ...] = (
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    # The mode of a file being created. libc wrappers pass 0 when the flags do not create
    # (glibc and musl both), so a set bit here is always a real request.
    ("open", 2),
    ("openat", 3),
    ("creat", 1),
    ("mknod", 1),
    ("mknodat", 2),
)
"""Calls that take a file mode, and which argument holds it."""

XATTR_WRITES = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat")
"""Setting extended attributes fails with ENOTSUP ("not supported here", which tools such
as cp -a and Python's shutil treat as nothing to copy): the filter cannot read an
attribute's name, and security.capability would give a file capabilities on the host."""

NEWER_SYSCALLS = {"fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "open_tree_attr": 467}
"""Numbers (one table for every architecture since Linux 5.1) of calls newer than some
libseccomp builds know by name: denied by number then, never skipped."""

NO_NAMESPACE_DENIED: tuple[tuple[str, str], ...] = (
    (
        "socket",
        "no network namespace: no socket of any family (Landlock rules no pathname socket)",
    ),
    *(
        (name, "System V IPC: no IPC namespace, objects of the uid's host processes")
        for name in (
            "shmget",
            "shmat",
            "shmctl",
            "msgget",
            "msgsnd",
            "msgrcv",
            "msgctl",
            "semget",
            "semop",
            "semtimedop",
            "semctl",
        )
    ),
    *(
        (name, "POSIX message queues: no IPC namespace, not ruled by Landlock")
        for name in (
            "mq_open",
            "mq_unlink",
            "mq_timedsend",
            "mq_timedreceive",
            "mq_notify",
            "mq_getsetattr",
        )
    ),
    *(
        (name, "mode and owner changes: Landlock does not rule them (any file of the uid)")
        for name in (
            "chmod",
            "fchmod",
            "fchmodat",
            "fchmodat2",
            "chown",
            "fchown",
            "lchown",
            "fchownat",
        )
    ),
    *(
        (name, "path-based time changes: Landlock does not rule them")
        for name in ("utime", "utimes", "futimesat")
    ),
    *(
        (name, "extended-attribute removal: Landlock does not rule it")
        for name in ("removexattr", "lremovexattr", "fremovexattr", "removexattrat")
    ),
)
"""What T1 Linux also denies (EPERM): what its missing namespaces would hide, and what
Landlock does not rule on files outside its rules."""

DENIED: tuple[tuple[str, str], ...] = (
    # Reading or writing other processes.
    ("ptrace", "tracing other processes"),
    ("process_vm_readv", "reading another process's memory"),
    ("process_vm_writev", "writing another process's memory"),
    ("pidfd_getfd", "stealing another process's descriptors"),
    # Kernel attack surface that sandboxed code has no business using.
    ("io_uring_setup", "io_uring bypasses syscall filtering"),
    ("io_uring_enter", "io_uring"),
    ("io_uring_register", "io_uring"),
    ("bpf", "loading eBPF programs"),
    ("perf_event_open", "performance counters (side channels, kernel bugs)"),
    ("userfaultfd", "userfaultfd (widens kernel race windows)"),
    ("keyctl", "the kernel keyring is shared with the host user"),
    ("add_key", "the kernel keyring"),
    ("request_key", "the kernel keyring"),
    ("kexec_load", "loading a new kernel"),
    ("kexec_file_load", "loading a new kernel"),
    ("init_module", "loading kernel modules"),
    ("finit_module", "loading kernel modules"),
    ("delete_module", "unloading kernel modules"),
    ("modify_ldt", "16-bit segments"),
    ("iopl", "port I/O"),
    ("ioperm", "port I/O"),
    ("open_by_handle_at", "opening files by handle, around mount boundaries"),
    ("lookup_dcookie", "kernel profiling"),
    ("syslog", "the kernel log"),
    ("acct", "process accounting"),
    ("quotactl", "disk quotas"),
    ("swapon", "swap"),
    ("swapoff", "swap"),
    ("reboot", "reboot"),
    ("settimeofday", "the clock"),
    ("clock_settime", "the clock"),
    ("clock_adjtime", "the clock"),
    ("vhangup", "terminals"),
    # Changing the file system view.
    ("mount", "mounting"),
    ("umount2", "unmounting"),
    ("pivot_root", "changing the root"),
    ("chroot", "changing the root"),
    ("move_mount", "the new mount API"),
    ("open_tree", "the new mount API"),
    ("fsopen", "the new mount API"),
    ("fsconfig", "the new mount API"),
    ("fsmount", "the new mount API"),
    ("fspick", "the new mount API"),
    ("mount_setattr", "the new mount API"),
    ("open_tree_attr", "the new mount API"),
    ("setns", "joining other namespaces"),
)
"""Syscalls denied outright (EPERM), with the reason each is denied."""


def _socket_family_rules(allowed: frozenset[int]) -> list[tuple[str, int, str, int, int]]:
    """Deny every address family outside `allowed`, using one comparison per rule.

    libseccomp allows only one comparison per argument in a rule, so "not in the set" is
    written as the gaps: below the smallest, each value between, and above the largest.
    A value with high bits set (the kernel truncates the int) lands above the largest.
    """
    values = sorted(allowed)
    rules: list[tuple[str, int, str, int, int]] = []
    for call in ("socket", "socketpair"):
        if values[0] > 0:
            rules.append((call, 0, "LT", values[0], 0))
        for low, high in itertools.pairwise(values):
            rules.extend((call, 0, "EQ", v, 0) for v in range(low + 1, high))
        rules.append((call, 0, "GT", values[-1], 0))
    return rules


class FilterSpec:
    """The rules, as canonical text (the cache key) and as rule tuples (for compiling)."""

    __slots__ = ("conditional", "denied", "text", "unsupported")

    def __init__(
        self, *, socket_families: frozenset[int] = NO_NETWORK_FAMILIES, namespaces: bool = True
    ) -> None:
        """`namespaces` False: the filter of T1 Linux, which has none, so it also denies
        what they would hide and Landlock does not rule (`NO_NAMESPACE_DENIED`: socket(2)
        of any family, `socket_families` then ruling socketpair(2) alone; System V and
        POSIX IPC; mode, owner and extended-attribute changes; path-based time changes)."""
        if not socket_families or any(not 0 <= f < AF_MAX for f in socket_families):
            raise ValueError(
                f"socket_families: {sorted(socket_families)} must be within 0..{AF_MAX - 1}"
            )
        extra = () if namespaces else tuple(name for name, _why in NO_NAMESPACE_DENIED)
        self.denied = tuple(name for name, _why in DENIED) + extra
        # (syscall, argument index, comparison, value, mask-or-second-value) -> EPERM
        conditional: list[tuple[str, int, str, int, int]] = []
        for call in ("clone", "unshare"):
            conditional.extend(
                (call, 0, "MASKED_EQ", flag, flag) for _name, flag in NAMESPACE_FLAGS
            )
        # The kernel reads the ioctl request as 32 bits; comparing all 64 would let a
        # request with high bits set through (CVE-2019-10063).
        conditional += [
            ("ioctl", 1, "MASKED_EQ", 0xFFFFFFFF, TIOCSTI),
            ("ioctl", 1, "MASKED_EQ", 0xFFFFFFFF, TIOCLINUX),
            ("personality", 0, "NE", PER_LINUX, 0),
        ]
        conditional += _socket_family_rules(socket_families)
        if not namespaces:
            # A path-based time change is not ruled by Landlock; futimens(2) (a null path:
            # the descriptor's file, opened through Landlock) is kept.
            conditional.append(("utimensat", 1, "NE", 0, 0))
            # A lease on a file it may read (a staged file, a root caller's /etc/passwd)
            # would hold up every host process that opens it for writing.
            # (The kernel reads the command as 32 bits: compared on those, as ioctl's.)
            conditional.append(("fcntl", 1, "MASKED_EQ", 0xFFFFFFFF, F_SETLEASE))
            # No pid namespace: another process of the uid (the caller itself) is reachable
            # by pid. Its limits, priority and scheduling are changed only for the calling
            # process itself (pid 0); never a whole uid's (PRIO_USER, IOPRIO_WHO_USER).
            conditional += [
                (call, 0, "NE", 0, 0)
                for call in (
                    "prlimit64",
                    "sched_setaffinity",
                    "sched_setscheduler",
                    "sched_setparam",
                    "sched_setattr",
                )
            ]
            conditional += [
                ("setpriority", 0, "MASKED_EQ", 0xFFFFFFFF, PRIO_USER),
                ("setpriority", 1, "NE", 0, 0),
                ("ioprio_set", 0, "MASKED_EQ", 0xFFFFFFFF, IOPRIO_WHO_USER),
                ("ioprio_set", 1, "NE", 0, 0),
            ]
            # With no network namespace, a datagram socketpair could sendto(2) any host
            # unix datagram socket by path (/dev/log, journald): stream and seqpacket
            # pairs are connected to each other and nothing else.
            conditional.append(("socketpair", 1, "MASKED_EQ", SOCK_TYPE_MASK, SOCK_DGRAM))
        for call, arg in MODE_ARG:
            if call in self.denied:  # denied outright already (T1)
                continue
            conditional += [
                (call, arg, "MASKED_EQ", S_ISUID, S_ISUID),
                (call, arg, "MASKED_EQ", S_ISGID, S_ISGID),
            ]
        for call, arg in (("mknod", 1), ("mknodat", 2)):
            conditional += [
                (call, arg, "MASKED_EQ", S_IFMT, S_IFCHR),
                (call, arg, "MASKED_EQ", S_IFMT, S_IFBLK),
            ]
        self.conditional = tuple(conditional)
        self.unsupported = XATTR_WRITES
        lines = [
            "panday seccomp v1",
            f"compiler {_compiler_identity()}",
            f"arch {_machine()}",
            f"libseccomp {library_identity() or 'unknown'}",
            "default allow",
            "badarch kill-process",
            "clone3 errno ENOSYS",
            # openat2 carries its mode in a struct the filter cannot read: ENOSYS, so libc
            # and programs fall back to openat, whose mode it can.
            "openat2 errno ENOSYS",
            *(f"deny {name} errno ENOTSUP" for name in XATTR_WRITES),
            *(f"deny {name} errno EPERM" for name in self.denied),
            *(
                f"deny {c} a{a} {op} {x:#x} {y:#x} errno EPERM"
                for c, a, op, x, y in self.conditional
            ),
        ]
        self.text = "\n".join(lines) + "\n"


def _compiler_identity() -> str:
    """This module's own size and mtime: an edited compiler never reuses an old program."""
    st = os.stat(__file__)
    return f"{st.st_size} {st.st_mtime_ns}"


def _machine() -> str:
    return os.uname().machine


def _crc(text: str) -> str:
    import zlib

    return f"{zlib.crc32(text.encode()):08x}"


def _safe_dir(path: str) -> bool:
    """Create `path` (0700) if needed; True when it is ours and nobody else can write it."""
    try:
        # Both levels with an explicit mode (makedirs gives intermediate ones the umask's).
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        os.makedirs(path, mode=0o700, exist_ok=True)
        for p in (os.path.dirname(path), path):
            st = os.lstat(p)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
                return False
    except OSError:
        return False
    return True


def _read_cache(path: str, text: bytes, secret: bytes) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        if st.st_size > _MAX_CACHE_BYTES:
            return None
        # Its size, not the most allowed: CPython allocates what a read asks for first,
        # and a MiB is an mmap and a munmap (a grown file fails the MAC check below).
        blob = os.read(fd, st.st_size + 1)
    finally:
        os.close(fd)
    return _unseal(blob, text, secret)


def _unseal(blob: bytes, text: bytes, secret: bytes) -> bytes | None:
    """The program in a cache file's bytes, when they hold `text` and a MAC that verifies."""
    at = len(CACHE_MAGIC) + userstate.MAC_BYTES
    tag, sealed = blob[len(CACHE_MAGIC) : at], blob[at:]
    if not blob.startswith(CACHE_MAGIC) or not sealed.startswith(text):
        return None
    if not userstate.verify(secret, userstate.SECCOMP, sealed, tag):
        return None
    program = sealed[len(text) :]
    return program if program and not len(program) % 8 else None


def seal(secret: bytes, text: bytes, program: bytes) -> bytes:
    """A cache file's bytes: the magic, the MAC of the text and program, the text, the
    program."""
    sealed = text + program
    return CACHE_MAGIC + userstate.mac(secret, userstate.SECCOMP, sealed) + sealed


def _write_cache(directory: str, path: str, data: bytes) -> None:
    tmp = os.path.join(directory, f".tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def compile_program(spec: FilterSpec) -> bytes:
    """Compile `spec` with libseccomp (slow: loads the library through ctypes)."""
    try:
        import pyseccomp as sc  # pyright: ignore[reportMissingTypeStubs] - heavy, only on a cache miss; typed inline, no stub package
    except (ImportError, RuntimeError, OSError) as exc:
        raise TierUnavailable(
            "t2-linux",
            f"libseccomp is unavailable ({exc}); install libseccomp2 (Debian/Ubuntu) or "
            "libseccomp (Fedora/Arch) — the jail will not run without its syscall filter",
        ) from None
    import tempfile

    ops = {"NE": sc.NE, "LT": sc.LT, "GT": sc.GT, "EQ": sc.EQ, "MASKED_EQ": sc.MASKED_EQ}
    filt = sc.SyscallFilter(sc.ALLOW)
    filt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    # A binary tree of syscall numbers rather than a linear list: the same verdicts, fewer
    # instructions on each call's path. That is most of what loading the program costs
    # (the kernel runs it once per syscall number to cache the always-allowed ones: about
    # 0.1 ms less per command here) and what every syscall in the jail pays. libseccomp
    # before 2.5 has no such option: the linear program is as strict.
    with contextlib.suppress(OSError):
        filt.set_attr(sc.Attr.CTL_OPTIMIZE, 2)

    def number(name: str) -> int | str:
        # A name this libseccomp does not know resolves to a negative number; the calls
        # concerned have one number on every architecture (NEWER_SYSCALLS).
        if sc.resolve_syscall(sc.Arch.NATIVE, name) < 0 and name in NEWER_SYSCALLS:
            return NEWER_SYSCALLS[name]
        return name

    filt.add_rule(sc.ERRNO(ENOSYS), "clone3")
    filt.add_rule(sc.ERRNO(ENOSYS), "openat2")
    for name in spec.unsupported:
        filt.add_rule(sc.ERRNO(ENOTSUP), number(name))
    for name in spec.denied:
        filt.add_rule(sc.ERRNO(EPERM), number(name))
    for call, arg, op, a, b in spec.conditional:
        filt.add_rule(sc.ERRNO(EPERM), number(call), sc.Arg(arg, ops[op], a, b))
    with tempfile.TemporaryFile() as fh:
        filt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


def program(spec: FilterSpec) -> bytes:
    """The compiled BPF program for `spec`, from the per-user cache when it holds it."""
    if library_identity() is None:
        # Either libseccomp is missing (compiling will say so) or it lives where only the
        # dynamic linker finds it; either way the cache cannot be keyed safely.
        return compile_program(spec)
    directory = cache_dir()
    text = spec.text.encode()
    secret = userstate.key(create=True)
    if directory is None or secret is None or not _safe_dir(directory):
        return compile_program(spec)
    path = os.path.join(directory, f"{_machine()}-{_crc(spec.text)}.bpf")
    cached = _read_cache(path, text, secret)
    if cached is not None:
        return cached
    compiled = compile_program(spec)
    _write_cache(directory, path, seal(secret, text, compiled))
    return compiled
