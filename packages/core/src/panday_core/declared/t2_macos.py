"""What T2 macOS declares it enforces, as data: the table itself, with no host probing.

It lives in core, not in `panday_tier_macos`, so that a host without the tier's package
(Linux, where `pip install panday` does not install it) can still judge a policy against it
(`panday policy check`), and the docs can be generated anywhere. The paths every session
protects are here too: the guarantee table names them, and the tier's profile generator
(`panday_tier_macos.profile`) imports them from here.

`declared_capabilities()` is host-independent. `capabilities(proxy_reason)` is the same
table narrowed (never widened) when the session's egress proxy could not start: then
``net.allow``, ``net.deny`` and ``net.ports`` are refused with the cause.
"""

from __future__ import annotations

from panday_core.capabilities import (
    FieldSupport,
    Guarantee,
    Support,
    TierCapabilities,
    egress_fields,
)
from panday_core.types import SandboxTier

SENSITIVE_HOME_PATHS: tuple[str, ...] = (
    # keys and cloud credentials
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gh",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".password-store",
    # macOS keychains
    "Library/Keychains",
    # shell and REPL histories
    ".bash_history",
    ".zsh_history",
    ".sh_history",
    ".bash_sessions",
    ".zsh_sessions",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".local/share/fish",
    # browser profiles (cookies, saved logins)
    "Library/Cookies",
    "Library/Application Support/Google/Chrome",
    "Library/Application Support/Chromium",
    "Library/Application Support/BraveSoftware",
    "Library/Application Support/Microsoft Edge",
    "Library/Application Support/Firefox",
)
"""Paths under each home (the runner's ``$HOME`` and the account's) that a command can neither
read nor write, whatever the policy says."""

SENSITIVE_SYSTEM_PATHS: tuple[str, ...] = (
    "/private/etc/master.passwd",
    "/private/var/db",
    "/Library/Keychains",
)
"""System paths a command can neither read nor write (resolved spellings: ``/etc`` and
``/var`` are symlinks into ``/private``)."""

MACH_SERVICES: tuple[str, ...] = ("com.apple.system.opendirectoryd.libinfo",)
"""The only mach services a command may look up: user and group names (``ls -l``, ``id``,
``whoami``, ``~user``). Everything else (DNS daemon, keychain, pasteboard, Launch Services,
launchd job submission) stays unreachable."""


_SEATBELT = "Seatbelt profile run by /usr/bin/sandbox-exec"

_CPU = (
    "RLIMIT_CPU is per process (every child starts with a fresh budget) and macOS only sends a "
    "catchable SIGXCPU at the soft limit and never kills at the hard one, so nothing bounds "
    "the command's total CPU time for an unprivileged process"
)
_MEM = (
    "RLIMIT_AS and RLIMIT_DATA bound one process's virtual address space, not the memory the "
    "command uses; every process already maps the shared cache region (hundreds of GiB of "
    "address space), so setrlimit refuses any useful value, and per-process memory (jetsam) "
    "limits need root or an Apple entitlement"
)
_PIDS = (
    "RLIMIT_NPROC counts every process of the user on the whole machine (and none of root's), "
    "not the command's processes; macOS gives an unprivileged process no per-tree ceiling"
)
_DISK = (
    "no per-directory quota is available to an unprivileged process; RLIMIT_FSIZE bounds the "
    "size of one file, not the bytes a command writes"
)
_SETSID = (
    "a process that moves itself out of the command's process group (setsid, setpgid) is not "
    "killed; Seatbelt has no operation for setsid"
)


_PROXY = (
    "the session's egress proxy (panday_core.egress) on 127.0.0.1 and ::1 at one port; the "
    "profile allows outbound TCP to localhost at that port and nothing else"
)
_NET_FIELDS = {
    "net.allow": f"{_PROXY}; the proxy admits a host only when it matches net.allow, resolves "
    "it itself and refuses loopback, private, link-local and metadata answers unless that IP "
    "literal is listed",
    "net.deny": "the egress proxy refuses matching hosts (and listed IP literals) even when "
    "net.allow covers them",
    "net.ports": "the egress proxy refuses every destination port not listed",
}


def _fields(proxy_reason: str | None = None) -> tuple[FieldSupport, ...]:
    return (
        FieldSupport(
            field="version",
            support=Support.NOT_APPLICABLE,
            mechanism="policy format",
            note="the format version of the document; there is nothing to enforce",
        ),
        FieldSupport(
            field="fs.workspace",
            support=Support.PARTIAL,
            mechanism=f"{_SEATBELT}: file-write* allowed only under the workspace and a private "
            "temp dir; HOME and the working directory point at the workspace",
            note="writes are confined; reads are not: the rest of the filesystem stays readable "
            "except the protected paths (see the guarantees). A workspace inside a protected "
            "path is refused",
        ),
        FieldSupport(
            field="fs.access",
            support=Support.STRICT,
            mechanism="ro: the profile has no write rule for the workspace",
        ),
        FieldSupport(
            field="fs.staged_ro",
            support=Support.STRICT,
            mechanism="readable at the same path (reads are broad); a deny-write rule per path, "
            "placed after the workspace rule so it holds inside the workspace too",
            note="a staged path inside a protected path is refused",
        ),
        *egress_fields(_NET_FIELDS, proxy_reason),
        FieldSupport(
            field="limits.cpu_ms", support=Support.NOT_ENFORCED, mechanism="none", note=_CPU
        ),
        FieldSupport(
            field="limits.mem_bytes", support=Support.NOT_ENFORCED, mechanism="none", note=_MEM
        ),
        FieldSupport(
            field="limits.pids", support=Support.NOT_ENFORCED, mechanism="none", note=_PIDS
        ),
        FieldSupport(
            field="limits.disk_bytes", support=Support.NOT_ENFORCED, mechanism="none", note=_DISK
        ),
        FieldSupport(
            field="limits.wall_clock_ms",
            support=Support.PARTIAL,
            mechanism="timer in the runner; SIGKILL to the command's process group (each command "
            "starts in a new session)",
            note=_SETSID,
        ),
        FieldSupport(
            field="limits.output_bytes",
            support=Support.STRICT,
            mechanism="the runner keeps at most this many bytes of stdout and of stderr each and "
            "marks the result truncated",
        ),
        FieldSupport(
            field="env",
            support=Support.STRICT,
            mechanism="the environment is cleared and rebuilt from PATH, HOME, LANG, TERM, TMPDIR "
            "and these variables; sandbox-exec adds nothing",
        ),
    )


def _guarantees() -> tuple[Guarantee, ...]:
    homes = ", ".join(f"~/{p}" for p in SENSITIVE_HOME_PATHS)
    system = ", ".join(SENSITIVE_SYSTEM_PATHS)
    return (
        Guarantee(
            name="Writes land only in the workspace (when rw) and the session's temp dir",
            mechanism=f"{_SEATBELT}: (deny default); file-write* allowed under those two paths; "
            "data writes to /dev/null-style devices",
            support=Support.STRICT,
            note="Seatbelt checks the path used: a hard link that already exists in the "
            "workspace and points outside it can be written through (the command cannot "
            "create such a link itself)",
        ),
        Guarantee(
            name="Secrets outside the workspace cannot be read",
            mechanism=f"(allow file-read*), then a final deny of {system} (except the time-zone "
            "database, the developer-tools selection link and the local user records) and, "
            f"under both the runner's $HOME and the account's home, {homes}",
            support=Support.PARTIAL,
            note="a denylist, not an allowlist: everything else on the filesystem stays "
            "readable (T2 Linux shows only the workspace, staged inputs and system files). "
            "A deny-default read profile stops binaries before main on current macOS",
        ),
        Guarantee(
            name="No network except the egress proxy",
            mechanism="(deny network*) always; with an allowlist, one rule allows outbound TCP "
            "to the proxy's loopback port; no bind, no inbound, no DNS (the resolver's socket "
            "is a network operation; the proxy resolves names)",
            support=Support.STRICT,
            note="the proxy holds its port on 127.0.0.1 and ::1 (Seatbelt's localhost names "
            "both), so no other process can listen where the profile points; it admits only "
            "requests with the session's credentials, to allowlisted hosts",
        ),
        Guarantee(
            name="Other processes cannot be signalled, inspected or have their environment read",
            mechanism="signal and process-info* only within the same sandbox; sysctl "
            "kern.procargs* denied",
            support=Support.STRICT,
        ),
        Guarantee(
            name="No privilege gain through setuid programs",
            mechanism="(deny process-exec (file-mode #o4000))",
            support=Support.STRICT,
            note="matches setuid and setgid files, so ps and top (setuid on macOS) cannot run",
        ),
        Guarantee(
            name="Only the user-directory mach service is reachable",
            mechanism=f"mach-lookup allowed for {', '.join(MACH_SERVICES)} only",
            support=Support.STRICT,
            note="keychain, pasteboard, Launch Services (open), launchd jobs and the DNS "
            "daemon stay unreachable",
        ),
        Guarantee(
            name="The environment is rebuilt, never inherited",
            mechanism="the runner builds it from a fixed set and the policy's env",
            support=Support.STRICT,
        ),
        Guarantee(
            name="The wall clock ends every process of the command",
            mechanism="SIGKILL to the command's process group",
            support=Support.PARTIAL,
            note=_SETSID,
        ),
        Guarantee(
            name="Memory, CPU, process and disk ceilings",
            mechanism="none on this tier",
            support=Support.NOT_ENFORCED,
            note="a policy that asks for limits.mem_bytes, cpu_ms, pids or disk_bytes is refused "
            "at create, by field name",
        ),
    )


def declared_capabilities() -> TierCapabilities:
    """The tier's table, independent of the host (the docs are generated from it)."""
    return TierCapabilities(tier=SandboxTier.T2_MACOS, fields=_fields(), guarantees=_guarantees())


def capabilities(proxy_reason: str | None) -> TierCapabilities:
    """The table when the session's egress proxy could not start (`proxy_reason` says why;
    None: it could). The net fields are then refused with that reason, never approximated
    by no network, nor by the whole network."""
    if proxy_reason is None:
        return declared_capabilities()
    return TierCapabilities(
        tier=SandboxTier.T2_MACOS, fields=_fields(proxy_reason), guarantees=_guarantees()
    )
