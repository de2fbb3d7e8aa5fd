"""What T1 Linux declares it enforces, as data: Landlock + seccomp + rlimits, no namespaces.

T1 runs where bubblewrap cannot (an AppArmor-restricted Ubuntu, a container whose seccomp
profile refuses ``CLONE_NEWUSER``). It has no mount, pid, network or user namespace, so
what those give T2 is either done another way here (Landlock rules instead of a new root;
no socket at all instead of an empty network namespace) or refused by field.

`capabilities(abi)` is the table on a kernel whose Landlock ABI is `abi` (the rows that
depend on it: signal and abstract-socket scoping need ABI 6, TCP rules ABI 4, device
ioctls ABI 5; T1 needs ABI 3, where truncate(2) is ruled); `declared_capabilities()` is
the table on a kernel with every ABI T1 uses.
"""

from __future__ import annotations

from typing import Final

from panday_core.capabilities import FieldSupport, Guarantee, Support, TierCapabilities
from panday_core.declared import ALLOW_HOME_NOTE, AT_DEPTH_NOTE

TIER: Final = "t1-linux"
FULL_ABI: Final = 6
"""The lowest Landlock ABI at which every row below holds as written."""
MIN_ABI: Final = 3
"""Below it T1 does not run: truncate(2) is not ruled before ABI 3."""

NET_REFUSED: Final = (
    "T1 has no network namespace, and Landlock's TCP rules name a port, never an address: "
    "letting the command reach the egress proxy's port would let it reach that port on "
    "every host on the internet, so T1 gives no network at all and refuses an allowlist "
    "(T2 Linux enforces it)"
)
NO_CGROUP: Final = (
    "T1 does not place commands in a cgroup (a command starts running before anything "
    "outside it could move it there without bwrap holding it first), so this ceiling cannot be "
    "held; T2 Linux enforces it"
)
NO_TMPFS: Final = (
    "T1 has no mount namespace, so no size-limited /tmp or read-only tmpfs can be given; "
    "T2 Linux enforces it"
)
NO_OVERLAY: Final = (
    "T1 has no mount namespace, so no overlay can hold a command's writes for checking or "
    "review: only 'direct' (in place) is available; T2 Linux enforces the others"
)
ROOT_DIR_NOTE: Final = (
    "with fs.access = 'rw' the workspace's own directory (and each directory on the way to "
    "a protected entry) accepts no new entries, renames or removals: Landlock grants a "
    "right to a whole tree and cannot except a path beneath it, so each other entry of the "
    "workspace is granted separately, listed before each command; entries below them are "
    "fully writable"
)

GUARANTEES: Final = (
    Guarantee(
        name="No network: no host loopback, LAN, internet, unix socket or abstract socket",
        mechanism="seccomp refuses socket(2) of every family, and socketpair(2) of any family "
        "but AF_UNIX and of datagram type (stream and seqpacket pairs, connected to each "
        "other only, are kept); Landlock (ABI 4) also handles TCP bind and connect with no "
        "port allowed",
        support=Support.STRICT,
        note="Landlock does not rule connecting or sending to a pathname unix socket "
        "(measured: a datagram socketpair reached a host datagram socket by path before "
        "seccomp refused such pairs); with neither, nothing can reach one",
    ),
    Guarantee(
        name="No capabilities, also when the caller is root",
        mechanism="the session's spawning thread empties its bounding set, the command "
        "thread (started from it) its inheritable, permitted and effective sets before the "
        "command's exec (no_new_privs keeps them empty)",
        support=Support.STRICT,
        note="a root caller's command still runs as uid 0: files it can reach through the "
        "Landlock rules are judged by owner bits as uid 0",
    ),
    Guarantee(
        name="No privilege gain through setuid binaries",
        mechanism="PR_SET_NO_NEW_PRIVS on the session's spawning thread, inherited by each "
        "command thread and the command",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Reads are an allowlist: /usr, a list of /etc files, four devices, the "
        "workspace, staged paths, the session's private tmp",
        mechanism="Landlock: every filesystem right of the kernel's ABI is handled, and "
        "read rights are allowed only beneath those paths, each opened once (system paths at "
        "session open, roots held as descriptors); no /proc, /sys, /home, /root or /etc/shadow",
        support=Support.PARTIAL,
        note="a path's existence and metadata outside the allowlist are not hidden (stat(2), "
        "readlink(2) and inotify watches work there): Landlock rules opening and listing, "
        "not lookup; T2's mount view hides them",
    ),
    Guarantee(
        name="Writes only to the workspace (when rw) and the session's private tmp",
        mechanism="Landlock write rights (write, truncate, make, remove, refer) allowed only "
        "there; device nodes and device ioctls allowed nowhere; what Landlock does not rule "
        "is refused by seccomp everywhere: chmod and chown families, path-based time changes "
        "(utimensat with a path, utime, utimes), extended-attribute writes and removals",
        support=Support.PARTIAL,
        note="modes and owners cannot be changed inside the workspace either (EPERM: a file "
        "keeps the mode it was created with); futimens(2) on a file opened through Landlock "
        "is kept, so a root caller's command can set the times of a system file it reads",
    ),
    Guarantee(
        name="No host IPC: System V shared memory, semaphores, message queues, POSIX "
        "message queues",
        mechanism="seccomp refuses every System V IPC call and the mq_* calls (no IPC "
        "namespace: the objects of the uid's host processes would be reachable by id)",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Nothing a jail writes runs outside it later: .git, editor and agent "
        "configuration, panday's own interpreter and code stay read-only",
        mechanism="the protected entries and the directories above them get no write "
        "right: the other entries of the workspace are granted one by one before each "
        "command; a workspace or staged path holding panday's per-user state is refused",
        support=Support.PARTIAL,
        note=f"{AT_DEPTH_NOTE}; {ROOT_DIR_NOTE}",
    ),
    Guarantee(
        name="No setuid, setgid, capability or device file is left on the host",
        mechanism="seccomp refuses chmod-family and create modes with S_ISUID or S_ISGID, "
        "mknod of devices and every extended-attribute write (as T2's filter does); "
        "Landlock allows MAKE_CHAR and MAKE_BLOCK nowhere",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Host processes cannot be traced or their memory read",
        mechanism="seccomp denies ptrace, process_vm_* and pidfd_getfd; Landlock denies "
        "ptrace-mode access to any process outside the command's domain",
        support=Support.STRICT,
        note="the session's commands whose Landlock rules are the same share one domain "
        "(one command thread)",
    ),
    Guarantee(
        name="Host processes cannot be signalled",
        mechanism="Landlock's signal scope (ABI 6): a signal to a process outside the "
        "command's domain fails with EPERM",
        support=Support.STRICT,
        note="the session's commands whose Landlock rules are the same share one domain "
        "(one command thread): a process that outlived its command can be signalled by "
        "the next such command, never by anything outside the session",
    ),
    Guarantee(
        name="Host processes' limits, priority and CPU affinity cannot be changed",
        mechanism="seccomp admits prlimit64, sched_setaffinity, sched_setscheduler, "
        "sched_setparam and sched_setattr for pid 0 only, setpriority and ioprio_set for "
        "who 0 and never for a whole uid (no pid namespace: the caller's own processes "
        "are reachable by pid)",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Host processes are invisible",
        mechanism="no /proc is readable inside",
        support=Support.PARTIAL,
        note="no pid namespace: a pid can still be probed by kill(pid, 0) (EPERM for a "
        "live process, ESRCH otherwise)",
    ),
    Guarantee(
        name="Kernel attack surface filtered",
        mechanism="seccomp (libseccomp, the rules of T2's filter): ptrace, process_vm_*, "
        "io_uring, bpf, perf_event_open, keyctl/add_key/request_key, userfaultfd, kexec, "
        "modules, the mount API, setns, clone/unshare with namespace flags (clone3: ENOSYS), "
        "personality changes, TIOCSTI and TIOCLINUX; socket(2); fcntl F_SETLEASE (a lease "
        "on a file it may read would hold up the host's writers; low 32 bits compared)",
        support=Support.STRICT,
    ),
    Guarantee(
        name="The 32-bit syscall ABI cannot be used",
        mechanism="seccomp: a call from a foreign architecture kills the process",
        support=Support.STRICT,
    ),
    Guarantee(
        name="No terminal injection",
        mechanism="a new session (setsid, no controlling terminal), seccomp on TIOCSTI/TIOCLINUX",
        support=Support.STRICT,
    ),
    Guarantee(
        name="No user namespace",
        mechanism="seccomp refuses clone/unshare with namespace flags and clone3",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Nothing outlives its command, its session or its caller",
        mechanism="the command's process group is killed when its main process exits "
        "(before it is reaped, so the group id cannot be reused) or at a ceiling",
        support=Support.PARTIAL,
        note="no pid namespace: a process that calls setsid(2) or setpgid(2) leaves the "
        "group and outlives the command (still inside its Landlock domain and seccomp "
        "filter); a SIGKILLed caller leaves the command running",
    ),
    Guarantee(
        name="The policy's environment never appears on a host command line",
        mechanism="posix_spawn with the environment alone (a cleared one, then PATH, HOME, "
        "LANG, TERM, TMPDIR and the policy's variables)",
        support=Support.STRICT,
    ),
    Guarantee(
        name="A fork bomb or a memory bomb leaves the host usable",
        mechanism="RLIMIT_NPROC (the uid's tasks at that moment plus 4096; not for root) and "
        "RLIMIT_AS (half the host's RAM per process), set with prlimit right after the spawn",
        support=Support.PARTIAL,
        note="no cgroup: the first instructions of the command run before the limits are "
        "set; memory is bounded per process, not in total; root's tasks ignore RLIMIT_NPROC",
    ),
    Guarantee(
        name="Output is bounded in the caller's memory",
        mechanism="chunks are streamed as read; beyond limits.output_bytes they are read and "
        "discarded with a marker",
        support=Support.STRICT,
    ),
)


def _below(abi: int) -> dict[str, Guarantee]:
    """Rows replaced on a kernel whose ABI is below what they need."""
    rows: dict[str, Guarantee] = {}
    if abi < FULL_ABI:
        rows["Host processes cannot be signalled"] = Guarantee(
            name="Host processes cannot be signalled",
            mechanism=f"Landlock's signal scope needs ABI 6; this kernel has {abi}",
            support=Support.NOT_ENFORCED,
            note="the command can signal (and kill) every other process of the caller's uid",
        )
    return rows


def _fields() -> tuple[FieldSupport, ...]:
    refused = [
        FieldSupport(field=name, support=Support.NOT_ENFORCED, mechanism="not available", note=note)
        for name, note in (
            ("net.allow", NET_REFUSED),
            ("net.deny", NET_REFUSED),
            ("net.ports", NET_REFUSED),
            ("limits.mem_bytes", NO_CGROUP),
            ("limits.pids", NO_CGROUP),
            ("limits.cpu_ms", NO_CGROUP),
            ("limits.disk_bytes", NO_TMPFS),
            ("fs.writes", NO_OVERLAY),
        )
    ]
    return (
        FieldSupport(
            field="fs.workspace",
            support=Support.STRICT,
            mechanism="Landlock rules beneath the workspace, held as a descriptor from the "
            "session's open (HOME points into it)",
        ),
        FieldSupport(
            field="fs.access",
            support=Support.PARTIAL,
            mechanism="'ro': read rights only; 'rw': write rights on each entry of the "
            "workspace but the protected ones",
            note=ROOT_DIR_NOTE,
        ),
        FieldSupport(
            field="fs.staged_ro",
            support=Support.STRICT,
            mechanism="opened once without following a link, held, and given read rights "
            "from that descriptor",
        ),
        FieldSupport(
            field="fs.protect",
            support=Support.STRICT,
            mechanism="each entry (and the directories above it) gets no write right",
        ),
        FieldSupport(
            field="fs.unprotect",
            support=Support.STRICT,
            mechanism="the named default entries are granted like any other",
        ),
        FieldSupport(
            field="fs.allow_home",
            support=Support.PARTIAL,
            mechanism="a home directory is accepted as a root only with it; its protected "
            "entries get no write right",
            note=ALLOW_HOME_NOTE,
        ),
        *refused,
        FieldSupport(
            field="limits.wall_clock_ms",
            support=Support.PARTIAL,
            mechanism="the exec supervisor's clock; at the ceiling the command's process "
            "group is SIGKILLed",
            note="a process that left the group (setsid, setpgid) is not killed",
        ),
        FieldSupport(
            field="limits.output_bytes",
            support=Support.STRICT,
            mechanism="per-stream cap in the exec pump; the rest is read and discarded, with a "
            "marker chunk and an output breach",
        ),
        FieldSupport(
            field="env",
            support=Support.STRICT,
            mechanism="a cleared environment, then PATH, HOME, LANG, TERM, TMPDIR and the "
            "policy's variables, given to posix_spawn (no command line shows them)",
        ),
        FieldSupport(
            field="allow_env_hooks",
            support=Support.STRICT,
            mechanism="the listed start-up hooks in env are set like any other variable",
        ),
    )


def capabilities(abi: int) -> TierCapabilities:
    """The table on a kernel whose Landlock ABI is `abi` (at least `MIN_ABI`)."""
    replaced = _below(abi)
    rows = tuple(replaced.get(g.name, g) for g in GUARANTEES)
    return TierCapabilities(tier=TIER, fields=_fields(), guarantees=rows)


def declared_capabilities(abi: int = FULL_ABI) -> TierCapabilities:
    """The table on a kernel with every Landlock ABI T1 uses (host-independent)."""
    return capabilities(abi)
