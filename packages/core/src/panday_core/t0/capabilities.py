"""What T0 enforces, as data (rendered by `doctor`, the docs and the run report).

T0 serves file tools in-process. It starts no process and opens no socket, so its whole
defence is the path resolver in `panday_core.paths`; every field below says what enforces it
there, or why T0 refuses it, or why it has no meaning for T0.
"""

from __future__ import annotations

from panday_core.capabilities import FieldSupport, Guarantee, Support, TierCapabilities
from panday_core.declared import ALLOW_HOME_NOTE, AT_DEPTH_NOTE
from panday_core.paths import Backend, backend_description, default_backend
from panday_core.types import SandboxTier

# Same shape as capabilities.NO_EGRESS_PROXY: say why, and that it is refused rather than
# silently turned into "no network".
T0_NO_NETWORK = (
    "T0 runs no process and opens no connection, so it cannot give anything network access "
    "to these hosts; refused rather than silently giving none"
)
_NO_PROCESS = "T0 runs in the caller's own process"
_NARROWS = "only narrows net.allow, which T0 refuses when it is non-empty"


def declared_capabilities(backend: Backend | None = None) -> TierCapabilities:
    """T0's table on this host (`backend` only changes how the resolver is described)."""
    resolver = backend_description(backend or default_backend())
    s, na, ne = Support.STRICT, Support.NOT_APPLICABLE, Support.NOT_ENFORCED

    def row(field: str, support: Support, mechanism: str, note: str = "") -> FieldSupport:
        return FieldSupport(field=field, support=support, mechanism=mechanism, note=note)

    fields = (
        row("version", na, "policy loader", "the format version; checked when a policy loads"),
        row(
            "fs.workspace",
            s,
            resolver,
            "paths are canonicalised, checked against the root, then opened beneath it; "
            "files with more than one hard link are not read",
        ),
        row("fs.access", s, "write and put refuse unless access is 'rw'"),
        row("fs.staged_ro", s, resolver, "absolute paths under a staged path; never written"),
        row(
            "fs.protect",
            s,
            "write and put refuse any path at or beneath a protected entry, judged by where "
            "the kernel says the target directory is (no link changes it)",
        ),
        row(
            "fs.unprotect",
            s,
            "the named default entries are left out of the protected list",
        ),
        row(
            "fs.allow_home",
            Support.PARTIAL,
            "a home directory is accepted as a root only with it; its start-up files and "
            "what they source, .ssh, .config, .local, bin, toolchains and tools' user "
            "configuration that names code stay protected",
            ALLOW_HOME_NOTE,
        ),
        row(
            "fs.writes",
            ne,
            "none: write and put land in place (direct), refusing protected entries",
            "T0's tools write one file per call, each judged before it is written; checked "
            "and review (an overlay for a command's writes) apply to tiers that run commands",
        ),
        row("net.allow", ne, "none", T0_NO_NETWORK),
        row("net.deny", na, "none", _NARROWS),
        row("net.ports", na, "none", _NARROWS),
        row("limits.cpu_ms", ne, "none", f"{_NO_PROCESS} and cannot cap its CPU time"),
        row(
            "limits.mem_bytes",
            ne,
            "none",
            f"{_NO_PROCESS} and cannot cap its memory (each tool bounds its own buffers, "
            "which is not a ceiling)",
        ),
        row(
            "limits.pids",
            na,
            "none",
            "T0 starts no process or thread, so any pid ceiling is already met",
        ),
        row(
            "limits.disk_bytes",
            s,
            "the session counts the bytes its write/put calls write and refuses the call "
            "that would cross the ceiling, before writing anything",
        ),
        row(
            "limits.wall_clock_ms",
            ne,
            "none",
            f"{_NO_PROCESS}; a tool call runs to completion and nothing interrupts it",
        ),
        row(
            "limits.output_bytes",
            s,
            "caps the bytes one tool call returns (read and get content, grep lines)",
        ),
        row("env", na, "none", "T0 runs no process, so there is no environment to set"),
        row(
            "allow_env_hooks",
            na,
            "none",
            "T0 runs no process, so no start-up hook could run",
        ),
    )
    guarantees = (
        Guarantee(
            name="no code execution",
            mechanism="exec raises Unsupported; T0 has no code path that starts a process",
            support=s,
        ),
        Guarantee(name="no network", mechanism="T0 opens no socket", support=s),
        Guarantee(
            name="paths stay beneath the workspace and staged roots", mechanism=resolver, support=s
        ),
        Guarantee(
            name="hard links to files elsewhere are not read",
            mechanism="content reads refuse st_nlink > 1; writes replace the name, not the inode",
            support=s,
        ),
        Guarantee(
            name="protected entries are never written (.git, editor and agent configuration, "
            "panday's own interpreter and code)",
            mechanism="writes check the target's physical directory against the protected "
            "list; roots are opened without following any link",
            support=Support.PARTIAL,
            note=AT_DEPTH_NOTE,
        ),
        Guarantee(
            name="no setuid or setgid file is left",
            mechanism="a write keeps an existing file's permission bits without the setuid "
            "and setgid bits; new files are 0644",
            support=s,
        ),
        Guarantee(
            name="writes are atomic",
            mechanism="temporary file, fsync, rename over the name",
            support=s,
        ),
        Guarantee(
            name="results are bounded",
            mechanism="size caps on read/get, counts on list/glob/grep, limits.output_bytes",
            support=s,
        ),
        Guarantee(
            name="a directory moved out of the root mid-call",
            mechanism=resolver,
            support=Support.PARTIAL,
            note="a process that can write both inside and outside the root can move a "
            "directory T0 is inside of out of the root during a call; a sandboxed process "
            "cannot write outside its workspace",
        ),
    )
    return TierCapabilities(tier=SandboxTier.T0, fields=fields, guarantees=guarantees)
