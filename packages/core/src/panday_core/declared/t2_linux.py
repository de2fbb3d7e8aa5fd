"""What T2 Linux declares it enforces, as data: the table itself, with no host probing.

It lives in core, not in `panday_tier_linux`, so that a host without the tier's package
(macOS, where `pip install panday` does not install it) can still judge a policy against
it (`panday policy check`), and the docs can be generated anywhere.

Two views of one table: `declared_capabilities()` says what the tier enforces on a host
that has everything it can use (a writable cgroup, the egress bridge's interpreter).
`capabilities(cgroup_reasons, bridge_reason)` is the same table with what a host lacks
turned into refusals with the reason (no writable cgroup -> the memory, pid and CPU
ceilings are refused by name; no interpreter for the egress relay -> ``net.allow``,
``net.deny`` and ``net.ports``); the tier's `host_capabilities()` probes the host and
calls it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from panday_core.capabilities import (
    FieldSupport,
    Guarantee,
    Support,
    TierCapabilities,
    egress_fields,
)
from panday_core.declared import ALLOW_HOME_NOTE, AT_DEPTH_NOTE
from panday_core.types import SandboxTier

if TYPE_CHECKING:
    from collections.abc import Mapping

CPU_POLL_MS = 10
"""How often a CPU-time ceiling is checked; the overshoot is at most this per CPU."""

DISK_NEEDS_RO = (
    "a writable workspace is a host directory with no per-session quota, so a disk ceiling "
    "is enforced only with fs.access = 'ro' (then every writable place is a size-limited "
    "tmpfs); with a writable workspace it is refused"
)

_CGROUP_FIELDS = {
    "limits.mem_bytes": (
        (
            "cgroup memory ceiling: v2 memory.max with memory.swap.max=0, or v1 "
            "memory.limit_in_bytes with memory.memsw.limit_in_bytes; an OOM kill is reported "
            "as a memory breach"
        ),
        (
            "needs a writable cgroup with the memory controller; RLIMIT_AS is per process, "
            "not a total, so it is never used instead"
        ),
    ),
    "limits.pids": (
        "cgroup pids.max (v2 or v1); a refused fork is reported as a pids breach",
        (
            "needs a writable cgroup with the pids controller; RLIMIT_NPROC counts every "
            "process of the uid machine-wide, so it is not a pid ceiling and is never used"
        ),
    ),
    "limits.cpu_ms": (
        (
            "cgroup CPU usage (v2 cpu.stat usage_usec, v1 cpuacct.usage) checked every "
            f"{CPU_POLL_MS} ms; at the ceiling the whole tree is killed"
        ),
        (
            f"may overshoot by up to {CPU_POLL_MS} ms per CPU; needs a writable cgroup "
            "(RLIMIT_CPU is per process and counts whole seconds, so it is never used instead)"
        ),
    ),
}

_BRIDGE = (
    "the session's egress proxy (panday_core.egress) outside the jail, reached through one "
    "unix socket bound into it: a relay started before the command listens on the jail's "
    "own 127.0.0.1 (3128 HTTP, 1081 SOCKS5) and hands each connection to the proxy; "
    "--unshare-net stays"
)

_NET_FIELDS: Final = {
    "net.allow": (
        f"{_BRIDGE}; the proxy admits a host only when it matches net.allow, resolves it "
        "itself and refuses loopback, private, link-local and metadata answers unless that "
        "IP literal is listed"
    ),
    "net.deny": "the egress proxy refuses matching hosts (and listed IP literals) even when "
    "net.allow covers them",
    "net.ports": "the egress proxy refuses every destination port not listed",
}

GUARANTEES = (
    Guarantee(
        name="No network without net.allow: no host loopback, LAN, internet or abstract "
        "unix socket",
        mechanism="bwrap --unshare-net on every code path; seccomp allows only AF_UNIX sockets",
        support=Support.STRICT,
    ),
    Guarantee(
        name="With net.allow, the only way out is the egress proxy",
        mechanism="--unshare-net stays (the jail's namespace holds only its own loopback); one "
        "unix socket is bound in; seccomp admits AF_INET/AF_INET6 for such sessions only; no "
        "resolver inside (names go to the proxy); a dead proxy leaves no network at all",
        support=Support.STRICT,
    ),
    Guarantee(
        name="The proxy reaches only allowlisted hosts, never the host, its LAN or a "
        "metadata endpoint through them",
        mechanism="net.deny, net.allow and net.ports checked per request, and per request "
        "only: a plain-HTTP connection carries one request (bytes after it are never "
        "forwarded); the proxy resolves each name itself, refuses any answer that is not "
        "globally routable (loopback, private, link-local, site-local, CGNAT, metadata, "
        "outside 2000::/3; unless that IP literal is listed) and connects to the address "
        "it checked",
        support=Support.STRICT,
        note="what a command sends to an allowed host is not inspected (docs/egress.md)",
    ),
    Guarantee(
        name="Only this session's running commands can use its proxy",
        mechanism="per-command credentials (a random token per command id) in the proxy "
        "URL, checked in constant time and revoked when the command ends (its tunnels "
        "cut); the socket sits in a 0700 directory",
        support=Support.STRICT,
    ),
    Guarantee(
        name="A command cannot exhaust its caller through the proxy",
        mechanism="descriptors from a budget derived from RLIMIT_NOFILE (the caller keeps "
        "its share, and the numbers below its original limit); slots per command, per "
        "jail, and for connections without credentials (idle ones make room); read "
        "buffers returned at end of file and bounded in total; refusals at the edge "
        "summed up in the audit log",
        support=Support.STRICT,
        note="tunnels with credentials cost the caller's memory, not the jail's mem_bytes "
        "(about 10 KiB each; bounded by the command's share of slots)",
    ),
    Guarantee(
        name="No capabilities inside, also when the caller is root",
        mechanism="--unshare-user and --cap-drop ALL (CapEff, CapPrm, CapBnd all 0)",
        support=Support.STRICT,
    ),
    Guarantee(
        name="No privilege gain through setuid binaries",
        mechanism="PR_SET_NO_NEW_PRIVS (set by bwrap with a seccomp filter); nosuid mounts",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Host processes are invisible and cannot be signalled or traced",
        mechanism="--unshare-pid with a fresh /proc; seccomp denies ptrace and process_vm_*",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Reads are an allowlist: /usr, a list of /etc files, the workspace, staged paths",
        mechanism="a new root of bind mounts, remounted read-only; private /tmp; no /sys, "
        "no /home, no /root, no /etc/shadow",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Writes only to the workspace (when rw) and the jail's own tmpfs /tmp",
        mechanism="--remount-ro / after the binds; /proc read-only (no host-wide sysctl "
        "writes, also for a root caller); staged paths read-only; /dev/shm is /tmp; under a "
        "disk ceiling /tmp is sized to it",
        support=Support.STRICT,
    ),
    Guarantee(
        name="A second wall under the writes: a mistake in the mounts does not make "
        "anything outside the workspace and /tmp writable",
        mechanism="Landlock (ABI 3 or later), applied inside the jail after bwrap's mounts "
        "by a 2 KB program bwrap runs from a sealed memfd in front of the command "
        "(wall_x86_64.S): every write right handled, allowed only beneath the workspace "
        "(when rw), /tmp, /dev/null, /dev/zero, /dev/urandom and the terminal of its stdio",
        support=Support.PARTIAL,
        note="x86-64 hosts only, with Landlock ABI 3 or later and executable memfds "
        "(panday doctor says whether it is in force); Landlock allows beneath a directory "
        "and cannot carve names out of it, so inside a writable workspace the protected "
        "entries, and a staged path under /tmp or the workspace, rest on the mounts alone",
    ),
    Guarantee(
        name="Nothing a jail writes changes what a later jail mounts",
        mechanism="the workspace and staged paths are opened once without following a link, "
        "held for the session and bound from the descriptors (--bind-fd, --ro-bind-fd); a "
        "staged path inside the workspace is checked to be the held inode before each "
        "command and its directories there cannot be renamed (bound onto themselves)",
        support=Support.STRICT,
        note="a process outside the session that can write the workspace can race bwrap's "
        "one lookup of a destination path: the command is then refused, after bwrap may have "
        "made an empty directory where the swapped link pointed (docs/threat-model.md)",
    ),
    Guarantee(
        name="Nothing a jail writes runs outside it later: .git, editor and agent "
        "configuration, panday's own interpreter and code stay read-only",
        mechanism="the protected entries (docs/threat-model.md) are bound read-only over a "
        "writable workspace before every command, a missing one as a read-only placeholder, "
        "the directories above them bound onto themselves (a mount point cannot be renamed); "
        "panday's per-user state (filter cache, /etc views, jail plans, policy) likewise, "
        "and a writable workspace inside that state is refused",
        support=Support.PARTIAL,
        note=AT_DEPTH_NOTE,
    ),
    Guarantee(
        name="No setuid, setgid, capability or device file is left on the host",
        mechanism="seccomp refuses chmod-family and create modes with S_ISUID or S_ISGID, "
        "mknod of devices (the kernel refuses them in a user namespace too) and every "
        "extended-attribute write (ENOTSUP); openat2, whose mode the filter cannot read, "
        "is ENOSYS",
        support=Support.STRICT,
    ),
    Guarantee(
        name="No system directory or home directory is a workspace",
        mechanism="the jail's own mount points and their ancestors, /proc, /sys, /dev, /etc, "
        "/run and /boot are refused as roots; /usr and the library directories only "
        "read-only; a home directory only with fs.allow_home; a workspace on the caller's "
        "Python import path is refused",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Unix sockets inside the workspace or a staged path can be connected to",
        mechanism="a socket is a file; nothing outside the visible paths exists inside",
        support=Support.PARTIAL,
        note="do not stage a directory holding a service's socket (docker.sock, an agent's)",
    ),
    Guarantee(
        name="Kernel attack surface filtered",
        mechanism="seccomp (libseccomp): ptrace, process_vm_*, io_uring, bpf, perf_event_open, "
        "keyctl/add_key/request_key, userfaultfd, kexec, modules, the mount API, setns, "
        "clone/unshare with namespace flags (clone3: ENOSYS), personality changes, TIOCSTI and "
        "TIOCLINUX (low 32 bits compared)",
        support=Support.STRICT,
    ),
    Guarantee(
        name="The 32-bit syscall ABI cannot be used",
        mechanism="seccomp: a call from a foreign architecture kills the process",
        support=Support.STRICT,
    ),
    Guarantee(
        name="No terminal injection",
        mechanism="--new-session (no controlling terminal) and seccomp on TIOCSTI/TIOCLINUX",
        support=Support.STRICT,
    ),
    Guarantee(
        name="No nested user namespace",
        mechanism="--disable-userns and the seccomp namespace-flag rules",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Nothing outlives its command, its session or its caller",
        mechanism="pid namespace: the command's exit, a wall-clock breach or a SIGKILLed caller "
        "(--die-with-parent) takes every descendant, double-forked daemons included; a jail "
        "whose caller dies before it bounded the jail dies without running anything (its "
        "seccomp program never arrives)",
        support=Support.PARTIAL,
        note="a caller SIGKILLed while bwrap is between reporting the jail's first process and "
        "letting it go on (a few instructions, stretched by a loaded host) leaves that process "
        "waiting for bwrap for ever, before the jail is built: nothing of the command runs, "
        "and the next session's cgroup sweep kills it only if the caller had moved it into "
        "its cgroup",
    ),
    Guarantee(
        name="The policy's environment never appears on a host command line",
        mechanism="bwrap options travel through --args FD; the jail starts from --clearenv",
        support=Support.STRICT,
    ),
    Guarantee(
        name="Output is bounded in the caller's memory",
        mechanism="chunks are streamed as read; beyond limits.output_bytes (16 MiB per stream "
        "unless the policy sets another value, or writes 'unbounded') they are read and "
        "discarded with a marker",
        support=Support.STRICT,
        note="a policy that writes limits.output_bytes = 'unbounded' removes the bound "
        "(panday policy check names it)",
    ),
    Guarantee(
        name="Kernel state in /proc is hidden, also from a root caller's jail",
        mechanism="/proc/keys, kallsyms, timer_list, slabinfo, vmallocinfo, config.gz, cmdline "
        "and their siblings that describe the host's kernel (each one the host has) are "
        "covered by a read-only, nodev bind of /dev/null: opening one fails with EACCES",
        support=Support.STRICT,
    ),
)

HOST_GUARD = "A fork bomb or a memory bomb leaves the host usable"
"""The name of the guarantee row for the tier's own pid and memory bounds."""

_GUARD_CGROUP = (
    "when the policy sets no limits.pids or limits.mem_bytes the tier adds its own cgroup "
    "ceilings: pids.max of 4096 tasks (a quarter of kernel.pid_max when that is smaller) "
    "and memory of half the host's RAM, swap included; a policy's own ceilings replace them"
)
_GUARD_RLIMITS = (
    "without a writable cgroup, rlimits set on the jail before the command runs: "
    "RLIMIT_NPROC of the tasks the host runs at that moment plus 4096, and RLIMIT_AS of half "
    "the host's RAM per process"
)


def host_guard(cgroup_reasons: Mapping[str, str], *, root: bool) -> Guarantee:
    """The host-protection row as it holds where `cgroup_reasons` (field -> why no cgroup can
    hold that ceiling) says what is missing; `root`: the caller is root (RLIMIT_NPROC does
    not bind root)."""
    pids = "limits.pids" not in cgroup_reasons
    memory = "limits.mem_bytes" not in cgroup_reasons
    if pids and memory:
        return Guarantee(name=HOST_GUARD, mechanism=_GUARD_CGROUP, support=Support.STRICT)
    gaps: list[str] = []
    if not memory:
        gaps.append("memory is bounded per process (RLIMIT_AS), not in total")
    if not pids and root:
        gaps.append("no pid bound: root's processes ignore RLIMIT_NPROC")
    elif not pids:
        gaps.append(
            "the pid bound counts every process of the caller's uid machine-wide (RLIMIT_NPROC)"
        )
    reason = cgroup_reasons.get("limits.pids") or cgroup_reasons.get("limits.mem_bytes", "")
    return Guarantee(
        name=HOST_GUARD,
        mechanism=f"{_GUARD_CGROUP} where a cgroup can hold them; {_GUARD_RLIMITS}",
        support=Support.PARTIAL,
        note=f"{'; '.join(gaps)} (no writable cgroup for it here: {reason})",
    )


WRITES_MECHANISM = (
    "checked and review: the workspace is an overlay (bwrap --overlay, unprivileged "
    "overlayfs) whose upper directory is a change set in panday's per-user state; when the "
    "command ends the change set is read and judged by the hazard rules at any depth "
    "(docs/workspace.md); checked applies what passes with one rename per file after a "
    "journal, review applies nothing until asked; direct: the workspace is bound "
    "read-write with the protected entries read-only over it"
)
WRITES_NOTE = (
    "direct is partial (a list of protected names); the hazard rules that match names "
    "(tools' configuration) are partial too, those that read content and kinds are not"
)


def writes_field(overlay_reason: str | None) -> FieldSupport:
    """``fs.writes``: strict where an overlay can be mounted, else refused with why."""
    if overlay_reason is None:
        return FieldSupport(
            field="fs.writes", support=Support.PARTIAL, mechanism=WRITES_MECHANISM, note=WRITES_NOTE
        )
    return FieldSupport(
        field="fs.writes",
        support=Support.NOT_ENFORCED,
        mechanism=WRITES_MECHANISM,
        note="checked and review need an overlay, and this host cannot mount one: "
        + overlay_reason,
    )


def _fields(
    cgroup_reasons: Mapping[str, str], bridge_reason: str | None, overlay_reason: str | None = None
) -> tuple[FieldSupport, ...]:
    fields = [
        FieldSupport(
            field="fs.workspace",
            support=Support.STRICT,
            mechanism="bind mount at the same path (HOME points into it) on a read-only root "
            "that holds nothing else of the host but /usr, an /etc allowlist and staged paths",
        ),
        FieldSupport(
            field="fs.access",
            support=Support.STRICT,
            mechanism="--ro-bind instead of --bind for the workspace",
        ),
        FieldSupport(
            field="fs.staged_ro",
            support=Support.STRICT,
            mechanism="opened once without following a link, held, and bound read-only from "
            "that descriptor (--ro-bind-fd) at the same path; one inside the workspace is "
            "checked to be that inode before every command",
        ),
        FieldSupport(
            field="fs.protect",
            support=Support.STRICT,
            mechanism="each entry opened beneath the held workspace without following a link "
            "and bound read-only over it before every command; a missing one gets a "
            "read-only empty placeholder for the command's lifetime; the directories above "
            "it are bound onto themselves, so they cannot be renamed (EBUSY)",
        ),
        FieldSupport(
            field="fs.unprotect",
            support=Support.STRICT,
            mechanism="the named default entries are left out of the read-only binds",
        ),
        FieldSupport(
            field="fs.allow_home",
            support=Support.PARTIAL,
            mechanism="a home directory is accepted as a root only with it; its start-up "
            "files and what they source, .ssh, .gnupg, .config, .local, bin, toolchains "
            "(.cargo, .rustup, .nvm ...) and tools' user configuration that names code "
            "(.vimrc, .aws, .kube, .npmrc, .ipython ...) are bound read-only",
            note=ALLOW_HOME_NOTE,
        ),
        writes_field(overlay_reason),
        *egress_fields(_NET_FIELDS, bridge_reason),
    ]
    for name, (mechanism, note) in _CGROUP_FIELDS.items():
        reason = cgroup_reasons.get(name)
        if reason is None:
            support = Support.PARTIAL if name == "limits.cpu_ms" else Support.STRICT
            fields.append(FieldSupport(field=name, support=support, mechanism=mechanism, note=note))
        else:
            fields.append(
                FieldSupport(
                    field=name,
                    support=Support.NOT_ENFORCED,
                    mechanism=mechanism,
                    note=f"no cgroup can hold it on this host: {reason}",
                )
            )
    fields += [
        FieldSupport(
            field="limits.disk_bytes",
            support=Support.STRICT,
            mechanism="the jail's /tmp is a tmpfs of that size and its /dev is read-only; "
            "filling it is reported as a disk breach",
            note=DISK_NEEDS_RO,
        ),
        FieldSupport(
            field="limits.wall_clock_ms",
            support=Support.STRICT,
            mechanism="the exec supervisor's clock; at the ceiling bwrap is SIGKILLed, and "
            "the pid namespace dies with every descendant",
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
            mechanism="--clearenv, then PATH, HOME, LANG, TERM and the policy's variables; "
            "passed through --args so no host command line shows them",
        ),
        FieldSupport(
            field="allow_env_hooks",
            support=Support.STRICT,
            mechanism="the listed start-up hooks in env are set like any other variable",
        ),
    ]
    return tuple(fields)


def declared_capabilities() -> TierCapabilities:
    """The tier's table on a host with everything it can use (host-independent)."""
    return TierCapabilities(
        tier=SandboxTier.T2_LINUX,
        fields=_fields({}, None),
        guarantees=(*GUARANTEES, host_guard({}, root=False)),
    )


def capabilities(
    cgroup_reasons: Mapping[str, str],
    bridge_reason: str | None,
    *,
    root: bool = False,
    overlay_reason: str | None = None,
) -> TierCapabilities:
    """The table on a host that lacks what `cgroup_reasons` (field -> why no cgroup can hold
    that ceiling) and `bridge_reason` (why the egress bridge cannot run; None: it can) say;
    `root`: the caller is root (see `host_guard`)."""
    return TierCapabilities(
        tier=SandboxTier.T2_LINUX,
        fields=_fields(cgroup_reasons, bridge_reason, overlay_reason),
        guarantees=(*GUARANTEES, host_guard(cgroup_reasons, root=root)),
    )


CGROUP_FIELDS: Final = tuple(_CGROUP_FIELDS)
"""The ceilings that need a writable cgroup (the tier probes each one)."""
