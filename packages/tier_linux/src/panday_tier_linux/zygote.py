# Over 500 lines: the launcher is one standalone program (it may import nothing of panday).
"""A session jail's launcher: forks each command into namespaces made once per session.

    python3 -I -S -B zygote.py   (descriptor 3: the control socket; 4-10: the namespaces)

Why: a T2 command cost a whole bubblewrap run, about 47 mounts made again for every
command (bwrap reads the whole mount table after each), 2.5-3.5x a bare bwrap. The jail's
namespaces and its mount tree do not change between commands; only the command's own
parts do (its pid namespace, /proc, /tmp, the placeholders of the workspace's protected
entries). So the session starts one bwrap (the holder, which only waits) and this program
once. It runs on the host, as the caller, in no jail of its own: it joins the holder's user
namespace (the outer one bwrap made; the caller owns it, so it holds every capability
there and none on the host), then its mount, network, ipc, uts, cgroup and pid namespaces.
It never reads a file after that (its imports are done first; `sys.meta_path` is emptied,
so a stray import fails instead of reading the jail's files).

Per command, on a request from the session (one SOCK_SEQPACKET message, JSON and
descriptors), the server (forked once, inside the jail's pid namespace: a process that
joined a pid namespace cannot make one below it):

1. takes a mount, pid and ipc namespace of its own (a copy of the session's tree, made
   private: nothing mounted there reaches the session or another command), binds each
   protected entry onto itself, found beneath the workspace without following a link and
   only when it is the inode the session holds (`st_dev`, `st_ino`; else the command is
   refused and gets a bwrap of its own), covers panday's state and mounts the command's
   /tmp; then it starts the command's init (`spawn_init`: the wall's other use, machine
   code spawned from its memfd; a fork of this interpreter, `_command`, where there is no
   wall), sends the session the init's pidfd and goes back to the session's namespaces
   (or dies);
2. the init is pid 1 of the command's pid namespace: it mounts a /proc for it (the host's
   kernel files masked, read-only), waits for the seccomp program as bwrap does (the
   session bounds it first: cgroup, rlimits), joins the holder's inner user namespace (no
   further user namespaces), drops every capability, sets ``no_new_privs`` and the seccomp
   program, and spawns the command (a new session, its descriptors, environment and
   working directory); it reaps what is re-parented to it and exits with the command's
   code, and the kernel kills whatever the command left in its pid namespace;
3. the server reaps the init and writes ``{"exit-code": N, "wait-status": S}`` on the
   status descriptor, as bwrap's ``--json-status-fd`` does, only when the command was
   exec'd.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import warnings  # noqa: F401  # pyright: ignore[reportUnusedImport] - loaded before imports end: a warning raised later needs it
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    class Request(TypedDict):
        """One command, as the session sends it (JSON)."""

        argv: list[str]
        env: dict[str, str]
        cwd: str
        workspace: str
        protect: list[tuple[str, bool]]
        hidden: list[str]
        proc_masked: list[str]
        tmp_bytes: int | None
        under_tmp: list[str]
        fd_map: dict[str, int]
        init: NotRequired[int]  # the wall's number among the command's descriptors


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NS_GET_USERNS = 0xB701

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000

# Syscalls numbered alike on every architecture (424 and above).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_OPENAT2, SYS_MOUNT_SETATTR, SYS_PIDFD_OPEN = (
    428,
    429,
    437,
    442,
    434,
)
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 0x1, 0o2000000
AT_EMPTY_PATH, AT_RECURSIVE = 0x1000, 0x8000
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x02, 0x04, 0x08

PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 24, 38, 22
PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN = 47, 2, 21
SECCOMP_MODE_FILTER = 2
CAP_LAST_CAP_MAX = 63
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_CapPair = _CapData * 2


def _warm() -> None:
    """What each command's init would otherwise do first, and so again in every init (a
    fork copies only what was done before it): libc's symbols looked up, ctypes's types
    and conversions made, once, here."""
    for name in ("capset", "prctl", "setns", "unshare", "mount", "syscall"):
        getattr(_libc, name)
    buf = ctypes.create_string_buffer(b"\0" * 8, 8)
    _Fprog(1, ctypes.cast(buf, ctypes.c_void_p))
    ctypes.byref(_CapPair())


def keep_admin_across_exec() -> bool:
    """CAP_SYS_ADMIN (of the jail's outer user namespace) made ambient, so the init this
    process spawns (`spawn_init`) keeps it across its exec: a process that is not root in
    that namespace loses every capability at an exec otherwise, and the init must mount
    the command's /proc (it joins the inner user namespace, which clears the ambient set,
    and drops everything before the command exists). False when the kernel says no: the
    init is then a fork of this interpreter."""
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = _CapPair()
    if _libc.capget(ctypes.byref(header), data) < 0:
        return False
    data[0].inheritable |= 1 << CAP_SYS_ADMIN
    if _libc.capset(ctypes.byref(header), data) < 0:
        return False
    return _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0) == 0


class SetupError(Exception):
    """A step of a command's set-up failed: the command does not run."""


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")
    return result


def _setns(fd: int, kind: int, what: str) -> None:
    _check(_libc.setns(fd, kind), f"setns {what}")


def join(fds: dict[str, int]) -> int:
    """Join the holder's namespaces (descriptors by name); return the inner user namespace's
    descriptor, which each command's init joins last."""
    outer = fcntl.ioctl(fds["mnt"], NS_GET_USERNS)
    _setns(outer, CLONE_NEWUSER, "user (outer)")
    os.close(outer)
    for name, kind in (
        ("mnt", CLONE_NEWNS),
        ("net", CLONE_NEWNET),
        ("ipc", CLONE_NEWIPC),
        ("uts", CLONE_NEWUTS),
        ("cgroup", CLONE_NEWCGROUP),
        ("pid", CLONE_NEWPID),
    ):
        _setns(fds[name], kind, name)
        os.close(fds[name])
    os.chdir("/")
    return fds["user"]


def _openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    how = _OpenHow(flags, 0, resolve)
    return _check(
        _libc.syscall(SYS_OPENAT2, dirfd, path.encode(), ctypes.byref(how), ctypes.sizeof(how)),
        f"open {path}",
    )


def _same(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _bind_onto_self(fd: int, what: str, *, attrs: int) -> None:
    """Bind the file or directory `fd` names onto itself with `attrs` (recursively)."""
    _bind(fd, fd, what, attrs=attrs, recursive=True)


def _bind(source: int, target: int, what: str, *, attrs: int, recursive: bool) -> None:
    """A copy of the mount at `source` (a descriptor) with `attrs`, mounted on `target`
    (a descriptor): the new mount API, no path looked up again, no mount table read."""
    deep = AT_RECURSIVE if recursive else 0
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | deep
    tree = _check(_libc.syscall(SYS_OPEN_TREE, source, b"", flags), f"clone for {what}")
    try:
        attr = _MountAttr(attrs, 0, 0, 0)
        size = ctypes.sizeof(attr)
        setattr_flags = AT_EMPTY_PATH | deep
        _check(
            _libc.syscall(SYS_MOUNT_SETATTR, tree, b"", setattr_flags, ctypes.byref(attr), size),
            f"make {what} read-only",
        )
        move = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
        _check(_libc.syscall(SYS_MOVE_MOUNT, tree, b"", target, b"", move), f"bind {what}")
    finally:
        os.close(tree)


def _mount(
    source: bytes | None, target: str, fstype: bytes | None, flags: int, data: bytes | None
) -> None:
    _check(_libc.mount(source, target.encode(), fstype, flags, data), f"mount {target}")


def command_mounts(
    request: Request, workspace_fd: int, entries: list[tuple[tuple[str, bool], int]]
) -> None:
    """Step 1's mounts, in C's own mount namespace."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    workspace = str(request["workspace"])
    resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
    here = _openat2(-100, workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, resolve)
    try:
        if not _same(here, workspace_fd):
            raise SetupError(f"the workspace at {workspace} is not the session's")
        for (rel, read_only), held in entries:
            fd = _openat2(
                here, rel, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, resolve | RESOLVE_BENEATH
            )
            try:
                if not _same(fd, held):
                    raise SetupError(f"{rel} is not the entry the session holds")
                attrs = (
                    MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if read_only else 0)
                )
                _bind_onto_self(fd, rel, attrs=attrs)
            finally:
                os.close(fd)
        # panday's state directory, wherever a root shows it: an empty read-only tmpfs,
        # after the binds (one may be inside it), found without following a link.
        for dest in [str(d) for d in request.get("hidden", [])]:
            fd = _openat2(-100, dest, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, resolve)
            try:
                _mount(
                    b"tmpfs",
                    f"/proc/self/fd/{fd}",
                    b"tmpfs",
                    MS_NOSUID | MS_NODEV | MS_RDONLY,
                    b"size=4k,mode=0755",
                )
            finally:
                os.close(fd)
    finally:
        os.close(here)
    _tmp(request)


def _tmp(request: Request) -> None:
    """A fresh /tmp for the command, with what the session bound beneath /tmp bound again
    on top of it (the workspace, staged paths: cloned before the tmpfs hides them)."""
    under = [str(p) for p in request.get("under_tmp", [])]
    clones: list[tuple[str, int, bool]] = []
    for path in under:
        tree = _check(
            _libc.syscall(
                SYS_OPEN_TREE,
                -100,
                path.encode(),
                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE,
            ),
            f"clone {path}",
        )
        clones.append((path, tree, os.path.isdir(path)))
    size = request.get("tmp_bytes")
    data = b"mode=0755" + (f",size={size}".encode() if size is not None else b"")
    _mount(b"tmpfs", "/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, data)  # noqa: S108 - the jail's own
    for path, tree, is_dir in clones:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if is_dir:
            os.makedirs(path, exist_ok=True)  # /tmp itself is there already
        else:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        _check(
            _libc.syscall(SYS_MOVE_MOUNT, tree, b"", -100, path.encode(), MOVE_MOUNT_F_EMPTY_PATH),
            f"bind {path}",
        )
        os.close(tree)


_MASK = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
"""A mask's own flags, set by a remount of the bind."""


def proc_mounts(masked: list[str]) -> None:
    """I's /proc: the command's pid namespace, the host's kernel files masked, read-only.

    The masks are made by path with mount(2), two calls each (a bind of /dev/null, then
    its flags): the /proc just mounted belongs to this pid namespace, where nothing else
    runs yet, so no name in it can have been replaced. (The new mount API takes five calls
    per mask.)"""
    _mount(b"proc", "/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    for name in masked:
        target = f"/proc/{name}".encode()
        if _libc.mount(b"/dev/null", target, None, MS_BIND, None) < 0:
            if ctypes.get_errno() == errno.ENOENT:
                continue  # this kernel has no such file
            raise SetupError(f"mask /proc/{name}: {os.strerror(ctypes.get_errno())}")
        _check(_libc.mount(None, target, None, _MASK, None), f"mask /proc/{name} read-only")
    _mount(
        None,
        "/proc",
        None,
        MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
        None,
    )


def drop_privileges(inner_userns: int) -> None:
    """Join the inner user namespace; no capability in any set; no new privileges."""
    _setns(inner_userns, CLONE_NEWUSER, "user (inner)")
    for cap in range(CAP_LAST_CAP_MAX + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last one
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = _CapPair()
    _check(_libc.capset(ctypes.byref(header), data), "drop capabilities")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _read_program(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


MAX_FDS = 253
"""The kernel's most descriptors in one message (SCM_MAX_FD)."""
FD_NAMES = ("stdin", "stdout", "stderr", "reply", "program", "status", "workspace")


def _command(request: Request, fds: dict[str, int], received: list[int], exec_w: int) -> None:
    """The command's init, pid 1 of its own pid namespace: never returns.

    It makes the command's /proc, waits for the seccomp program (the session bounds it
    first), joins the inner user namespace and drops every capability, takes the command's
    descriptors (0-2, and the fronts' report pipe and memfd) at their numbers, its working
    directory and its seccomp program, and spawns the command (posix_spawn: a fork of this
    interpreter would copy its pages again); then it reaps whatever is re-parented to it,
    as bwrap's init does (a command's orphans, the relay's loop, are no children of the
    command), and exits with the command's code: its end takes everything left in the
    namespace with it. One byte goes on `exec_w` only when the command was not exec'd: a
    failed set-up or exec is then no exit of the command's."""
    err = received[2]  # the command's stderr, at 2 once the descriptors are placed
    try:
        proc_mounts([str(n) for n in request["proc_masked"]])
        program = _read_program(fds["program"])
        if not program or len(program) % 8:
            os.write(exec_w, b"F")
            os._exit(1)  # no program (the session died or refused): nothing runs
        drop_privileges(fds["inner"])
        wanted = {int(k): received[int(v)] for k, v in request["fd_map"].items()}
        high = {t: fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, 512) for t, src in wanted.items()}
        for target, src in high.items():
            os.dup2(src, target, inheritable=True)
        start = 0
        for fd in sorted([*wanted, exec_w]):
            if fd > start:
                os.closerange(start, fd)
            start = fd + 1
        os.closerange(start, 65536)
        err = 2
        buf = ctypes.create_string_buffer(program, len(program))
        prog = _Fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
        os.chdir(str(request["cwd"]))
        env = {str(k): str(v) for k, v in request["env"].items()}
        argv = [str(a) for a in request["argv"]]
        _check(
            _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp"
        )
        try:
            command = os.posix_spawnp(
                argv[0],
                argv,
                env,
                setsid=True,
                setsigmask=(),
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGCHLD),
            )
        except OSError as exc:
            os.write(exec_w, b"F")
            os.write(err, f"bwrap: execvp {argv[0]}: {exc.strerror}\n".encode())
            os._exit(1)
        for fd in [*wanted, exec_w]:
            os.close(fd)  # the command's own copies end its pipes
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == command:
                code = os.waitstatus_to_exitcode(status)
                os._exit(128 - code if code < 0 else code)
    except BaseException as exc:  # noqa: BLE001 - the one line bwrap would print, then exit
        with suppress(OSError):
            os.write(exec_w, b"F")
            os.write(err, f"bwrap: {exc!r}\n".encode())
    os._exit(1)


def spawn_init(
    request: Request, fds: dict[str, int], received: list[int], exec_w: int, wall: int
) -> int:
    """The command's init as the wall's other use (wall_x86_64.S, ``wall -i``), spawned
    from its memfd (`wall`: its number among the command's descriptors) into the pid
    namespace made for the command, instead of a fork of this interpreter (`_command`,
    where there is no wall): a fork copies the interpreter's page tables, writes about a
    megabyte of its pages and ends a quarter of a millisecond slower, on every command.
    Its descriptors: 0-2 and 6-7 as the command gets them, 3 the program's pipe, 4 the
    inner user namespace, 5 `exec_w`; it closes every other one itself."""
    given = {int(k): received[int(v)] for k, v in request["fd_map"].items()}
    given |= {3: fds["program"], 4: fds["inner"], 5: exec_w}
    # Copies above every number given first: no dup2 below then overwrites a source.
    high = {t: fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, 64) for t, src in given.items()}
    try:
        masks = [str(n) for n in request["proc_masked"]]
        argv = ["panday-init", "-i", str(request["cwd"]), *masks, "--"]
        argv += [str(a) for a in request["argv"]]
        env = {str(k): str(v) for k, v in request["env"].items()}
        return os.posix_spawn(
            f"/proc/self/fd/{high[wall]}",
            argv,
            env,
            file_actions=[(os.POSIX_SPAWN_DUP2, src, t) for t, src in high.items()],
            setsigmask=(),
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGCHLD),
        )
    finally:
        for fd in high.values():
            os.close(fd)


def _missing_calls() -> str:
    """The system calls every command needs that this kernel lacks (open_tree and
    move_mount: Linux 5.2; pidfd_open: 5.3; openat2: 5.6; mount_setattr: 5.12), asked with
    a descriptor that cannot be one: EBADF says the call is there, ENOSYS that it is not. A
    kernel without one gets no session jail at all (each command a bwrap of its own), not a
    refusal at every command."""
    how = _OpenHow(0, 0, 0)
    attr = _MountAttr(0, 0, 0, 0)
    calls: dict[str, tuple[object, ...]] = {
        "open_tree": (SYS_OPEN_TREE, -1, b"", 0),
        "move_mount": (SYS_MOVE_MOUNT, -1, b"", -1, b"", 0),
        "openat2": (SYS_OPENAT2, -1, b"x", ctypes.byref(how), ctypes.sizeof(how)),
        "mount_setattr": (SYS_MOUNT_SETATTR, -1, b"", 0, ctypes.byref(attr), ctypes.sizeof(attr)),
        "pidfd_open": (SYS_PIDFD_OPEN, -1, 0),
    }
    missing: list[str] = []
    for name, call in calls.items():
        if _libc.syscall(*call) < 0 and ctypes.get_errno() == errno.ENOSYS:
            missing.append(name)
    return ", ".join(missing)


class Zygote:
    """The serving loop: requests on the control socket, exits of the commands."""

    def __init__(
        self, control: socket.socket, inner: int, session: dict[str, int], *, spawn: bool
    ) -> None:
        self.control = control
        self.inner = inner
        self.spawn = spawn
        """Whether the wall's init can be spawned (`keep_admin_across_exec`)."""
        self.session = session  # our own mnt, pid and ipc namespaces, to return to
        self.running: dict[int, tuple[int, int, int]] = {}  # pidfd -> (pid, status, exec_r)

    def _back(self) -> None:
        """Into the session's namespaces again (a command's set-up left them), or die: a
        zygote left in one command's namespaces must serve no other (the session sees its
        end and gives each command a bwrap of its own)."""
        try:
            for name, kind in (("mnt", CLONE_NEWNS), ("pid", CLONE_NEWPID), ("ipc", CLONE_NEWIPC)):
                _setns(self.session[name], kind, f"{name} (back)")
        except BaseException:  # noqa: BLE001 - whatever failed, this process must not go on
            os._exit(1)

    def start(self, request: Request, received: list[int]) -> None:
        """Set one command up and start its init; the session gets the init's pidfd, or
        ``E`` and why (nothing of the command ran)."""
        fds: dict[str, int] = dict(zip(FD_NAMES, received[: len(FD_NAMES)], strict=True))
        fds["inner"] = self.inner
        protect = [(str(p), bool(ro)) for p, ro in request["protect"]]
        given = received[len(FD_NAMES) : len(FD_NAMES) + len(protect)]
        entries = list(zip(protect, given, strict=True))
        reply = fds["reply"]
        try:
            _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC), "unshare")
            exec_r, exec_w = os.pipe2(os.O_CLOEXEC)
            try:
                command_mounts(request, fds["workspace"], entries)
                wall = request.get("init") if self.spawn else None
                if wall is not None:
                    pid = spawn_init(request, fds, received, exec_w, wall)
                else:
                    pid = os.fork()
                    if pid == 0:
                        _command(request, fds, received, exec_w)
            except BaseException:
                os.close(exec_r)
                raise
            finally:
                os.close(exec_w)
                self._back()
            pidfd = _check(_libc.syscall(SYS_PIDFD_OPEN, pid, 0), "pidfd_open")
            with socket.socket(fileno=os.dup(reply)) as answer:
                answer.sendmsg(
                    [b"P"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", pidfd))]
                )
            self.running[pidfd] = (pid, os.dup(fds["status"]), exec_r)
        except (SetupError, OSError, ValueError, LookupError, TypeError) as exc:
            with suppress(OSError):
                os.write(reply, b"E" + str(exc).encode()[:4000])

    def ended(self, pidfd: int) -> None:
        """A command's process ended: its exit code on its status descriptor, as bwrap's
        ``--json-status-fd`` says it, only when the command was exec'd."""
        pid, status_fd, exec_r = self.running.pop(pidfd)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code
        # The init's own wait status too: a kill of ours (SIGKILL to the init) is reported
        # as bwrap's is, by the signal, not as an exit code the command never chose.
        os.set_blocking(exec_r, False)
        try:
            failed = os.read(exec_r, 1)
        except BlockingIOError:
            failed = b""
        try:
            if not failed:
                line = {"exit-code": code, "wait-status": status}
                os.write(status_fd, json.dumps(line).encode() + b"\n")
        except OSError:
            pass  # the session stopped listening
        os.close(status_fd)
        os.close(exec_r)
        os.close(pidfd)

    def serve(self) -> None:
        """Until the session closes its end: requests, and the ends of commands."""
        poller = select.poll()
        control = self.control.fileno()
        poller.register(control, select.POLLIN)
        while True:
            for fd, _events in poller.poll():
                if fd != control:
                    poller.unregister(fd)
                    self.ended(fd)
                    continue
                request = self._receive()
                if request is None:
                    return  # the session closed its end
                data, received = request
                try:
                    if data:
                        self.start(json.loads(data), received)
                finally:
                    for taken in received:
                        os.close(taken)
                for pidfd in self.running:
                    poller.register(pidfd, select.POLLIN)

    def _receive(self) -> tuple[bytes, list[int]] | None:
        """One request and its descriptors; None at the session's end. A request cut
        short (too large, too many descriptors) is answered ``E`` and comes back empty."""
        data, ancdata, flags, _addr = self.control.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * 4))
        received: list[int] = []
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                count = len(payload) // 4
                received += list(struct.unpack(f"{count}i", payload[: count * 4]))
        if not data and not received:
            return None
        whole = not flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC) and len(received) >= len(
            FD_NAMES
        )
        if not whole:
            if len(received) > FD_NAMES.index("reply"):
                with suppress(OSError):
                    os.write(received[FD_NAMES.index("reply")], b"Ea request over the size taken")
            return b"", received
        return data, received


def main() -> None:
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "die with the session")
    control = socket.socket(fileno=3)
    names = ("user", "mnt", "net", "ipc", "uts", "cgroup", "pid")
    given = {name: 4 + i for i, name in enumerate(names)}
    keep = {name: os.dup(given[name]) for name in ("mnt", "pid", "ipc")}
    inner = join(given)
    sys.path[:] = []
    sys.meta_path[:] = []
    # A process that joined a pid namespace cannot make one below it (the kernel asks the
    # maker's own pid namespace to be its children's): the server is our child, inside the
    # session's pid namespace, and makes one per command. It dies with us, and we with the
    # session; the holder's end (its pid 1) kills it too.
    server = os.fork()
    if server == 0:
        try:
            _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "die with the zygote")
            zygote = Zygote(control, inner, keep, spawn=keep_admin_across_exec())
            # Each command is a fork of this process: objects the collector would walk
            # (and so write to) in the child are copied page by page. Frozen, it leaves
            # them alone; and it never runs here (what this loop makes is freed by count).
            gc.disable()
            gc.freeze()
            _warm()
            missing = _missing_calls()
            if missing:
                control.send(b"E" + missing.encode())
                os._exit(1)
            control.send(b"R")  # ready
            zygote.serve()
        finally:
            os._exit(0)
    control.close()
    os.waitpid(server, 0)


if __name__ == "__main__":
    main()
