"""What T2 macOS enforces, as data (rendered by `doctor`, the docs and the run report).

Two views of the same table:

* `declared_capabilities()` is host-independent. The docs generator renders it on any OS, so
  it must never probe anything.
* `host_capabilities()` is what `create` and `doctor` use on this machine. It equals the
  declared table, narrowed (never widened) when the session's egress proxy could not start:
  then ``net.allow``, ``net.deny`` and ``net.ports`` are refused with the cause.

`unavailable_reason()` says, in one line, why the tier cannot run here. On macOS it refuses a
root caller (`caller_reason`), and it does not trust that `/usr/bin/sandbox-exec` exists: it
runs it once with a profile that denies one file and checks that the denial holds (inside
another sandbox, `sandbox-exec` exits 71 with "sandbox_apply: Operation not permitted", and a
command there would run unconfined by us).
"""

from __future__ import annotations

import functools
import sys

from panday_core.capabilities import (
    FieldSupport,
    Guarantee,
    Support,
    TierCapabilities,
    egress_fields,
)
from panday_core.types import SandboxTier
from panday_tier_macos.profile import (
    DATA_VOLUME,
    MACH_SERVICES,
    SANDBOX_EXEC,
    SENSITIVE_HOME_PATHS,
    SENSITIVE_SYSTEM_PATHS,
    sbpl_string,
)

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


ROOT_REASON = (
    "T2 macOS does not run commands for root (effective uid 0): a root jail's files would be "
    "root's, and Seatbelt offers no rule this tier can rely on for every way root can leave a "
    "privileged file behind (a set-id mode given when a file is created, a device node, a "
    "change of owner); run panday as an ordinary user"
)
"""Why a root caller is refused. The profile denies setting the set-id bits for everyone
(``file-write-setugid``); that covers chmod, fchmod and setattrlist, and the non-root
routes that remain only ever name the caller's own uid and groups."""


def caller_reason(euid: int) -> str | None:
    """Why a caller with effective uid `euid` cannot use this tier; None when it can."""
    return ROOT_REASON if euid == 0 else None


_ROOTS = (
    "opened from / component by component without following a link (a link anywhere is "
    "refused, naming it and the real path: /tmp, /var and /etc are links into /private) and "
    "spelled as the file system spells them (the volume ignores case; checks and rules do "
    "not); the jail's own system directories, /etc, /System and a home directory (unless "
    "fs.allow_home) are refused"
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
            f"temp dir; HOME and the working directory point at the workspace; {_ROOTS}, as is "
            "a workspace on the caller's Python import path",
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
            mechanism=f"{_ROOTS}; readable at the same path (reads are broad); a deny-write "
            "rule per path (also in its /System/Volumes/Data spelling), placed after the "
            "workspace rule so it holds inside the workspace too; the path and every directory "
            "holding it inside the workspace cannot be unlinked, so none can be renamed away",
            note="a staged path inside a protected path is refused",
        ),
        FieldSupport(
            field="fs.protect",
            support=Support.STRICT,
            mechanism="each entry is found beneath the workspace without following a link and "
            "denied file-write* after the workspace rule (also in its /System/Volumes/Data "
            "spelling); a missing entry is denied at its first missing component, so neither "
            "it nor a directory holding it can be created or renamed into place; the "
            "workspace and every directory holding an entry cannot be unlinked (so not "
            "renamed); an entry that is a symbolic link is refused",
            note="entries are found once, at create: one that may be created (.envrc, a "
            "submodule's .git) and is created by a command stays writable for the session",
        ),
        FieldSupport(
            field="fs.unprotect",
            support=Support.STRICT,
            mechanism="the named default entries get no deny rule",
        ),
        FieldSupport(
            field="fs.allow_home",
            support=Support.STRICT,
            mechanism="a home directory (or one holding it) is accepted as a root only with "
            "it; its start-up files, .ssh, .gnupg and .config are then protected entries, and "
            "its secrets stay unreadable (the guarantees)",
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
            "and these variables; sandbox-exec adds nothing; a DYLD_* name is refused by name "
            "(env.DYLD_...), because macOS drops it when /bin/sh, which starts every command, "
            "starts",
        ),
        FieldSupport(
            field="allow_env_hooks",
            support=Support.STRICT,
            mechanism="the listed start-up hooks in env are set like any other variable; a "
            "DYLD_* name stays refused even when listed (env.DYLD_...)",
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
            f"under both the runner's $HOME and the account's home, {homes}; each also in its "
            f"{DATA_VOLUME} spelling (the firmlinked name of the same file); the homes and the "
            "directories holding these secrets under them cannot be unlinked, so no secret can "
            "be renamed out from under its rule",
            support=Support.PARTIAL,
            note="a denylist, not an allowlist: everything else on the filesystem stays "
            "readable (T2 Linux shows only the workspace, staged inputs and system files). "
            "A deny-default read profile stops binaries before main on current macOS",
        ),
        Guarantee(
            name="Nothing a jail writes runs outside it later: .git, editor and agent "
            "configuration, panday's own interpreter and code stay read-only",
            mechanism="the protected entries (docs/threat-model.md) are denied file-write* "
            "after the workspace rule, in both spellings; a missing one cannot be created, nor "
            "a directory that would hold it; the workspace and every directory holding an "
            "entry cannot be unlinked, so nothing protected can be renamed aside and replaced",
            support=Support.STRICT,
            note="a command can still write the workspace's own source code and create new "
            "repositories in subdirectories: running those later is running the workspace's "
            "code",
        ),
        Guarantee(
            name="Nothing a jail writes changes what a later jail sees",
            mechanism="every create opens the workspace and staged paths from / without "
            "following a link, so a link planted by an earlier command is refused, never "
            "followed; a staged path and the directories holding it inside the workspace "
            "cannot be unlinked or renamed",
            support=Support.STRICT,
        ),
        Guarantee(
            name="No setuid, setgid or device file is left on the host",
            mechanism="(deny file-write-setugid): Seatbelt's operation for setting the set-id "
            "bits (chmod, fchmod, setattrlist), outside the file-write* wildcard, so no write "
            "rule grants it; root callers are refused (device nodes need root)",
            support=Support.STRICT,
            note="a non-root caller's file can only ever carry its own uid and groups; the "
            "set-id mode given when a file is created is probed in the macOS escape suite",
        ),
        Guarantee(
            name="No system directory or home directory is a workspace",
            mechanism=f"roots are {_ROOTS}; /usr and the library directories only read-only; "
            "a workspace on the caller's Python import path is refused",
            support=Support.STRICT,
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
            name="Other processes cannot be signalled, inspected, listed or have their "
            "environment read",
            mechanism="signal and process-info* only within the same sandbox; no sysctl under "
            "kern.proc (kern.proc.pid.N, .uid, .all ... and kern.procargs*): none is on the "
            "sysctl allowlist, and a final deny on the prefix keeps it so",
            support=Support.STRICT,
            note="a program that asks sysctl about its own process (some debugger-detection "
            "code does) is refused too",
        ),
        Guarantee(
            name="No privilege gain through setuid or setgid programs",
            mechanism="(deny process-exec (require-any (file-mode #o4000) (file-mode #o2000)))",
            support=Support.STRICT,
            note="ps and top (setuid on macOS) cannot run",
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


def host_capabilities(proxy_reason: str | None = None) -> TierCapabilities:
    """The table as it holds on this host (`create` and `doctor` use this one).

    `proxy_reason` is why the session's egress proxy could not start; the net fields are then
    refused with it (never approximated by no network, nor by the whole network).
    """
    if proxy_reason is None:
        return declared_capabilities()
    return TierCapabilities(
        tier=SandboxTier.T2_MACOS, fields=_fields(proxy_reason), guarantees=_guarantees()
    )


_PROBE_SECRET = b"panday-probe-secret\n"


def _probe() -> str | None:
    import os  # noqa: PLC0415 - only the probe needs these; keep import cost off the CLI path
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    if not os.access(SANDBOX_EXEC, os.X_OK):
        return f"{SANDBOX_EXEC} is missing or not executable"
    with tempfile.TemporaryDirectory(prefix="panday-probe-") as tmp:
        secret = os.path.join(os.path.realpath(tmp), "secret")  # noqa: PTH118 - os is loaded
        with open(secret, "wb") as fh:  # noqa: PTH123 - as above
            fh.write(_PROBE_SECRET)
        profile = f"(version 1)(allow default)(deny file-read* (literal {sbpl_string(secret)}))"
        try:
            done = subprocess.run(
                [SANDBOX_EXEC, "-p", profile, "/bin/cat", secret],
                capture_output=True,
                timeout=10,
                check=False,
                env={"PATH": "/usr/bin:/bin"},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{SANDBOX_EXEC} could not be run: {exc}"
    err = done.stderr.decode("utf-8", "replace").strip().splitlines()
    detail = err[-1] if err else f"exit status {done.returncode}"
    if _PROBE_SECRET in done.stdout:
        return f"{SANDBOX_EXEC} ran but did not enforce a deny rule"
    if "sandbox_apply" in detail or "sandbox-exec:" in detail:
        return f"{SANDBOX_EXEC} cannot apply a profile here (already inside a sandbox?): {detail}"
    if done.returncode == 0 or "Operation not permitted" not in detail:
        return f"{SANDBOX_EXEC} probe gave an unexpected result: {detail}"
    return None


@functools.cache
def unavailable_reason() -> str | None:
    """None when T2 macOS can run here; otherwise one line saying why not (probed once)."""
    if sys.platform != "darwin":
        return f"T2 macOS needs macOS; this host is {sys.platform}"
    import os  # noqa: PLC0415 - macOS only; keep import cost off the CLI path

    reason = caller_reason(os.geteuid())
    if reason is not None:
        return reason
    return _probe()
