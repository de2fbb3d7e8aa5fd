"""`session.enforcement()`: what a session actually applies, read back inside its jail.

Declared guarantees are claims; this runs a small probe in a jail built exactly like the
session's commands (same argv builder, seccomp program and cgroup ceilings) and reads the
kernel's own answers: namespace inode numbers against the host's, the capability sets,
NoNewPrivs and the seccomp mode and filter count from /proc/self/status, rlimits from
/proc/self/limits, the mount table, and the ceilings from the cgroup files themselves.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import msgspec

from panday_core.execution import stream
from panday_core.types import ExecExit, ExecSpec, OutputChunk
from panday_tier_linux import host

if TYPE_CHECKING:
    from panday_core.execution import ChildProcess
    from panday_tier_linux.supervisor import JailSupervisor

NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts")
_SEP = "@@panday@@"
_SCRIPT = (
    "cat /proc/self/status; echo {sep}; cat /proc/self/limits; echo {sep}; "
    'for n in {ns}; do echo "$n $(readlink /proc/self/ns/$n)"; done; echo {sep}; '
    "cat /proc/self/mountinfo"
).format(sep=_SEP, ns=" ".join(NAMESPACES))
SECCOMP_FILTER_MODE = 2


class NamespaceCheck(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    inside: str
    host: str

    @property
    def isolated(self) -> bool:
        return bool(self.inside) and self.inside != self.host


class Enforcement(msgspec.Struct, frozen=True, kw_only=True):
    """The kernel's view of one jail of the session (see the module docstring)."""

    bwrap: str
    bwrap_source: str
    bwrap_version: str
    uid_inside: int | None
    namespaces: tuple[NamespaceCheck, ...]
    capabilities: dict[str, str]
    """CapInh, CapPrm, CapEff, CapBnd, CapAmb as hex masks."""
    no_new_privs: bool
    seccomp_mode: int | None
    seccomp_filters: int | None
    cgroup: str | None
    """How the ceilings are held (e.g. ``cgroup v1 under ...``), None without ceilings."""
    cgroup_limits: dict[str, str]
    rlimits: dict[str, str]
    mounts: tuple[str, ...]
    """Mount point and ``ro``/``rw`` of every mount inside the jail."""

    def problems(self) -> list[str]:
        """Each declared guarantee this reading contradicts (empty when all hold)."""
        out = [
            f"namespace {n.name} is shared with the host" for n in self.namespaces if not n.isolated
        ]
        out += [f"{k} is {v}, not 0" for k, v in self.capabilities.items() if int(v or "1", 16)]
        if not self.no_new_privs:
            out.append("NoNewPrivs is not set")
        if self.seccomp_mode != SECCOMP_FILTER_MODE:
            out.append(f"seccomp mode is {self.seccomp_mode}, not 2 (filter)")
        if self.seccomp_filters is not None and self.seccomp_filters < 1:
            out.append("no seccomp filter is installed")
        writable = [m for m in self.mounts if m.endswith(" rw")]
        # The jail's own tmpfs /tmp and the three device nodes.
        allowed_rw = {"/tmp", "/dev/null", "/dev/zero", "/dev/urandom"}  # noqa: S108 - the jail's own
        out += [f"{m.split()[0]} is writable" for m in writable if m.split()[0] not in allowed_rw]
        return out


def _status(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _limits(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines()[1:]:
        name, values = line[:26].strip(), line[26:].split()
        if name and len(values) >= 2:  # noqa: PLR2004 - soft and hard columns
            out[name] = f"{values[0]} {values[1]}"
    return out


def _mounts(text: str, workspace_rw_paths: set[str]) -> tuple[str, ...]:
    out: list[str] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6:  # noqa: PLR2004 - mountinfo's fixed columns
            continue
        point, opts = fields[4], fields[5].split(",")
        mode = "ro" if "ro" in opts else "rw"
        if point in workspace_rw_paths:
            mode += " (workspace)"
        out.append(f"{point} {mode}")
    return tuple(out)


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


PROBE = ExecSpec(argv=("/bin/sh", "-c", _SCRIPT), timeout_ms=30_000)
"""The command a session launches for `read_enforcement` (`LinuxSession.enforcement`)."""


def read_enforcement(
    launched: tuple[ChildProcess, JailSupervisor],
    *,
    bwrap: host.Bwrap,
    cgroup: str | None,
    rw: set[str],
) -> Enforcement:
    """Read `PROBE`'s answers from the jail it was `launched` in (`bwrap` built it, in a
    cgroup of that mechanism or none; `rw` the workspace when it is writable)."""
    proc, sup = launched
    out: list[bytes] = []
    try:
        for event in stream(proc, sup, timeout_ms=30_000):
            if isinstance(event, OutputChunk) and event.stream == "stdout":
                out.append(event.data)
            elif isinstance(event, ExecExit) and event.exit_code != 0:
                raise RuntimeError(f"the enforcement probe failed: {event}")
    finally:
        sup.close()
    parts = b"".join(out).decode("utf-8", "replace").split(_SEP + "\n")
    status_text, limits_text, ns_text, mounts_text = [*parts, "", "", "", ""][:4]
    status = _status(status_text)
    inside = dict(line.split(" ", 1) for line in ns_text.splitlines() if " " in line)
    namespaces = tuple(
        NamespaceCheck(name=n, inside=inside.get(n, ""), host=os.readlink(f"/proc/self/ns/{n}"))
        for n in NAMESPACES
    )
    caps = {k: status.get(k, "") for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    uid = status.get("Uid", "").split()
    return Enforcement(
        bwrap=bwrap.path,
        bwrap_source=bwrap.source,
        bwrap_version=host.bwrap_version(bwrap.path),
        uid_inside=_int(uid[0]) if uid else None,
        namespaces=namespaces,
        capabilities=caps,
        no_new_privs=status.get("NoNewPrivs") == "1",
        seccomp_mode=_int(status.get("Seccomp")),
        seccomp_filters=_int(status.get("Seccomp_filters")),
        cgroup=cgroup,
        cgroup_limits=sup.read_back,
        rlimits=_limits(limits_text),
        mounts=_mounts(mounts_text, rw),
    )
