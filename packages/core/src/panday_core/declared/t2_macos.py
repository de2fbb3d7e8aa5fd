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
from panday_core.declared import ALLOW_HOME_NOTE, AT_DEPTH_NOTE
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
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".config/git/credentials",
    ".vault-token",
    ".pgpass",
    ".terraform.d",
    ".gem/credentials",
    # coding agents' own credentials and configuration
    ".codex",
    ".claude",
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
    "Library/Application Support/Google/Chrome Beta",
    "Library/Application Support/Google/Chrome Canary",
    "Library/Application Support/Chromium",
    "Library/Application Support/BraveSoftware",
    "Library/Application Support/Microsoft Edge",
    "Library/Application Support/Firefox",
    "Library/Application Support/Arc",
    "Library/Application Support/Vivaldi",
    # places TCC guards, readable by a command when the app that started panday (the
    # "responsible" app: Terminal, iTerm2, an IDE) has Full Disk Access (issue 30, 5)
    "Library/Messages",
    "Library/Mail",
    "Library/Safari",
    "Library/Group Containers",
    "Library/Containers",
    "Library/Mobile Documents",
    "Library/Saved Application State",
    # plaintext tokens and credentials of tools the first list missed (issue 30, 5)
    ".gemini/oauth_creds.json",
    ".config/github-copilot",
    "Library/Application Support/Claude/claude_desktop_config.json",
    ".cursor/mcp.json",
    ".cache/huggingface/token",
    ".terraformrc",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".config/op",
    ".config/rclone",
    ".s3cfg",
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

DATA_VOLUME = "/System/Volumes/Data"
"""Where the writable Data volume is mounted. ``/Users``, ``/private``, ``/Library``,
``/usr/local`` ... are firmlinks into it, so ``/System/Volumes/Data/Users/a/.ssh`` is the same
directory as ``/Users/a/.ssh`` under another name, and a rule written for one spelling does not
match the other. Every deny in the profile is therefore written for both."""

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
    "the wall clock kills the command's process group only; a process that moves itself out "
    "of it (setsid, setpgid) runs on until the sweep: when the session's last running "
    "command ends, and at destroy, every process of the user still under the session's "
    "profile is found by its sandbox (sandbox_check on its pid: sandboxed, and allowed the "
    "session's own temp dir) and killed, repeatedly until none is left"
)

_TCC = (
    "TCC (macOS's privacy permissions) judges a sandboxed command as the app that started "
    "panday (its responsible process): when Terminal, iTerm2 or an IDE has Full Disk Access, "
    "or access to Documents, Desktop, Downloads or iCloud Drive, a command can read there "
    "too, except where the denylist says otherwise (Mail, Messages, Safari, other apps' "
    "Containers and Group Containers, Mobile Documents and Saved Application State are on "
    "it). Grant panday's host app as little as it needs"
)

_ALLOW_HOME_MACOS = (
    "on macOS partial, with the list: the home entries of docs/threat-model.md, "
    "Library/LaunchAgents, Library/Python, Library/Preferences, VS Code's and Cursor's "
    "User settings, iTerm2's AutoLaunch scripts and Claude Desktop's MCP configuration "
    "among them, are protected entries; a missing one is held by an immutable placeholder "
    "while a command runs. Not covered: what macOS or an app runs from a place not on the "
    "list (other Library/Application Support folders, login items an app registers, "
    "Library/LaunchDaemons needs root). A writable workspace that is, or lies inside, one "
    "of these places (~/Library/LaunchAgents, ~/.config, ~/.local/bin) is refused with or "
    "without fs.allow_home. "
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
            support=Support.PARTIAL,
            mechanism="a home directory (or one holding it) is accepted as a root only with "
            "it; its start-up files and what they source, .ssh, .gnupg, .config, .local, bin, "
            "toolchains, tools' user configuration that names code and Library/LaunchAgents, "
            "Library/Python, Library/Preferences are then protected entries, and its secrets "
            "stay unreadable (the guarantees); a writable root that is or lies inside one of "
            "those places is refused by identity, whatever this field says",
            note=_ALLOW_HOME_MACOS + ALLOW_HOME_NOTE,
        ),
        FieldSupport(
            field="fs.writes",
            support=Support.NOT_ENFORCED,
            mechanism="none: writes land in place (direct), with the protected entries denied",
            note="checked and review need an overlay over the workspace, and macOS has no "
            "unprivileged overlay file system a Seatbelt profile can combine with (an APFS "
            "clone is a copy, not a layer that records deletions); refused rather than "
            "writing in place",
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
            "A deny-default read profile stops binaries before main on current macOS. " + _TCC,
        ),
        Guarantee(
            name="Sessions cannot read each other's temp files",
            mechanism="every session's private temp dir is made in one per-user directory "
            "(0700, checked not to be a link); the profile denies that directory to reads "
            "and writes, in both spellings, except the session's own temp dir",
            support=Support.STRICT,
        ),
        Guarantee(
            name="Sessions cannot read each other's workspaces",
            mechanism="none: a profile is fixed when its command starts, so a session cannot "
            "be told about a workspace opened after it",
            support=Support.NOT_ENFORCED,
            note="reads are broad on this tier: any session can read a workspace of another "
            "that is not on the denylist. Give sessions of different trust separate users, "
            "or use T2 Linux, whose jails see only their own workspace",
        ),
        Guarantee(
            name="Other terminals are out of reach (no read, write or ioctl)",
            mechanism="file-read*, file-write* and file-ioctl denied last on /dev/ttys*, "
            "/dev/ptmx and the BSD pty pairs; commands run on pipes, with no controlling "
            "terminal of their own to except",
            support=Support.STRICT,
            note="a program that needs a pseudo-terminal (script, expect, a pty-based test "
            "runner) cannot make one",
        ),
        Guarantee(
            name="Nothing a jail writes runs outside it later: .git, editor and agent "
            "configuration, panday's own interpreter and code stay read-only",
            mechanism="the protected entries (docs/threat-model.md) are denied file-write* "
            "after the workspace rule, in both spellings; a missing one cannot be created, nor "
            "a directory that would hold it, and while a command runs it is held by an empty, "
            "read-only, immutable (uchg) placeholder, so a case or Unicode variant of its "
            "name finds the placeholder whatever Seatbelt makes of the spelling (file flags "
            "cannot be changed inside); the workspace and every directory holding an entry "
            "cannot be unlinked, so nothing protected can be renamed aside and replaced, nor "
            "have its mode or ACL changed",
            support=Support.PARTIAL,
            note=AT_DEPTH_NOTE,
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
            mechanism="(deny process-exec* (require-any (file-mode #o4000) (file-mode "
            "#o2000))): run directly or as a script's interpreter",
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
            name="No process of a session outlives it",
            mechanism="at destroy (and whenever the session's last running command ends) "
            "every process still under the session's profile is killed, found by its sandbox "
            "rather than its process group or parent, before the egress proxy closes its port "
            "and before the temp dir is removed; destroy fails loudly if some were still "
            "forking after every kill pass",
            support=Support.STRICT,
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
