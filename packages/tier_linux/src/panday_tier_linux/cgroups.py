"""Resource ceilings through cgroups: v2 (a delegated subtree) first, then v1.

A session gets one cgroup directory per hierarchy it needs, created below the nearest
cgroup we may write (for v1 that is usually our own; for v2 an ancestor that already hands
the controllers down, because v2 forbids enabling controllers where processes live). Each
command gets a child directory with the ceilings written into it, and the jail is moved in
before it runs (bwrap waits on its block descriptor until we have done so). Everything the
command starts is then counted together: that is what makes memory and pid ceilings
totals rather than per-process rlimits.

Directories are named ``panday-<our pid>.<its start time>-<session>``. A caller that was
SIGKILLed cannot remove its own: the next session of the same user that uses cgroups sweeps
every hierarchy panday could have written (each v1 controller it uses, and the v2 tree),
removing each ``panday-*`` directory it owns whose process is gone, or whose pid now
belongs to a process that started at another time (`sweep_stale`).
"""

from __future__ import annotations

import _signal  # pyright: ignore[reportMissingModuleSource] - signal without its enum (panday_core.startup)
import os
import time

from panday_core.process import proc_stat
from panday_core.startup import suppress

# `panday run`'s cached start-up makes a session's cgroups with this module, so it imports
# neither typing nor contextlib nor signal (panday_core.startup).
TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from collections.abc import Mapping

PREFIX = "panday-"
_RMDIR_WAIT_S = 2.0


class CgroupUnavailable(Exception):
    """No writable cgroup can hold the requested ceilings; `reason` says which and why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


# What each ceiling needs: (v1 controller, v2 controller or "" when none is needed).
NEEDS = {"mem_bytes": ("memory", "memory"), "pids": ("pids", "pids"), "cpu_ms": ("cpuacct", "")}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


def _key(text: str | None, key: str) -> int:
    """The number after `key` in a flat-keyed file (``oom_kill 3``), 0 when absent."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


class Mounts:
    """The cgroup hierarchies this process sees and where it sits in each."""

    __slots__ = ("v1", "v2", "v2_mount")

    def __init__(self, v1: dict[str, str], v2: str | None, v2_mount: str | None = None) -> None:
        self.v1 = v1
        """controller -> directory of our own cgroup in that v1 hierarchy."""
        self.v2 = v2
        """Directory of our own cgroup in the v2 hierarchy, if one is mounted."""
        self.v2_mount = v2_mount or v2
        """Where the v2 hierarchy is mounted (its root cgroup, as far as we can see)."""


def _cgroup_mounts(mountinfo: str) -> tuple[dict[str, tuple[str, str]], tuple[str, str] | None]:
    """controller -> (mount point, mount root) for v1, and the v2 (point, root)."""
    v1: dict[str, tuple[str, str]] = {}
    v2: tuple[str, str] | None = None
    for line in mountinfo.splitlines():
        pre, sep, post = line.partition(" - ")
        fields, tail = pre.split(), post.split()
        if not sep or len(fields) < 5 or len(tail) < 3:  # noqa: PLR2004 - mountinfo's fixed columns
            continue
        root, point = fields[3], fields[4].replace("\\040", " ")
        if tail[0] == "cgroup2":
            v2 = (point, root)
        elif tail[0] == "cgroup":
            for opt in tail[2].split(","):
                v1.setdefault(opt, (point, root))
    return v1, v2


def discover(mountinfo: str | None = None, self_cgroup: str | None = None) -> Mounts:
    """Parse /proc/self/mountinfo and /proc/self/cgroup (arguments exist for tests)."""
    mountinfo = mountinfo if mountinfo is not None else _read("/proc/self/mountinfo") or ""
    self_cgroup = self_cgroup if self_cgroup is not None else _read("/proc/self/cgroup") or ""
    v1_mounts, v2_mount = _cgroup_mounts(mountinfo)
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:  # noqa: PLR2004 - hierarchy-id:controllers:path
            continue
        _, controllers, path = parts
        if not controllers and v2_mount is not None:
            v2 = _join(*v2_mount, path)
        for ctrl in controllers.split(",") if controllers else ():
            if ctrl in v1_mounts:
                v1[ctrl] = _join(*v1_mounts[ctrl], path)
    return Mounts(v1, v2, v2_mount[0] if v2_mount else None)


def _join(point: str, root: str, path: str) -> str:
    # Inside a container the mount's root may be a subtree; /proc/self/cgroup is absolute.
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return point.rstrip("/") + (path if path != "/" else "")


def _ancestors(path: str, stop: str) -> list[str]:
    out: list[str] = []
    while path.startswith(stop) and path != stop:
        path = os.path.dirname(path)
        out.append(path)
    return out


def _writable(path: str) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_time(pid: int) -> str | None:
    return (proc_stat(pid) or ("", None))[1]


def _owner_gone(name: str) -> bool:
    """Whether the panday process a ``panday-<pid>[.<start>]-...`` name stands for is gone."""
    who = name[len(PREFIX) :].split("-", 1)[0]
    pid, _, start = who.partition(".")
    if not pid.isdigit():
        return False
    if not _alive(int(pid)):
        return True
    stat = proc_stat(int(pid))
    # A zombie runs nothing (a killed caller whose parent died too waits for an init that may
    # reap late: a Ray worker whose raylet was killed). Alive: the same process only if it
    # started when the name says (pids are reused).
    if stat is not None and stat[0] in {"Z", "X"}:
        return True
    return bool(start) and (stat[1] if stat else None) not in {start, None}


def _remove_tree(path: str, deadline: float) -> bool:
    """rmdir a cgroup and its children (cgroup directories hold no files to unlink)."""
    try:
        children = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return not os.path.exists(path)
    ok = all(_remove_tree(child, deadline) for child in children)
    pause = 0.0002
    while ok:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            return True
        except OSError:
            # Busy: processes are still leaving (a killed tree takes a moment to die; the
            # last ones usually within a millisecond, so the wait starts short).
            _kill_members(path)
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
            continue
        return True
    return False


def _kill_members(path: str) -> None:
    for line in (_read(os.path.join(path, "cgroup.procs")) or "").split():
        if line.isdigit():
            with suppress(OSError):
                os.kill(int(line), _signal.SIGKILL)


def _reap_stale(parent: str) -> None:
    """Remove the stale session directories of this user below `parent`."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    uid = os.geteuid()
    for entry in entries:
        name = entry.name
        if not name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            mine = entry.stat(follow_symlinks=False).st_uid == uid
        except OSError:
            continue
        if mine and _owner_gone(name):
            _remove_tree(entry.path, time.monotonic() + 0.5)


_SWEPT: set[tuple[int, str]] = set()
"""(pid, directory) swept already: once per process and place (its own sessions are never
stale, so a long-lived caller does not scan again at every session)."""


def sweep_stale(mounts: Mounts | None = None) -> None:
    """Remove what SIGKILLed panday processes of this user left, in every hierarchy.

    Each v1 controller panday uses (memory, pids, cpuacct) is swept where a session of
    this process would create its directory there, and the v2 tree at each writable
    candidate parent, whichever controllers this session itself needs: a crashed session
    that used only ``pids`` is found by the next one that uses only ``memory``. Once per
    process and place; a few directory scans.
    """
    mounts = mounts or discover()
    parents: list[str] = []
    for ctrl in dict.fromkeys(v1 for v1, _ in NEEDS.values()):
        own = mounts.v1.get(ctrl)
        if own is not None:
            base = next(
                (p for p in [own, *_ancestors(own, "/sys/fs/cgroup/")] if _writable(p)), None
            )
            if base is not None:
                parents.append(base)
    if mounts.v2 is not None:
        root = (mounts.v2_mount or mounts.v2).rstrip("/") or "/"
        candidates = _ancestors(mounts.v2, root) if mounts.v2 != root else [mounts.v2]
        parents += [p for p in candidates if _writable(p)]
    pid = os.getpid()
    for parent in dict.fromkeys(parents):
        if (pid, parent) not in _SWEPT:
            _SWEPT.add((pid, parent))
            _reap_stale(parent)


class ExecCgroup:
    """One command's cgroup(s): ceilings written, the jail attached, counters read back."""

    def __init__(self, version: int, dirs: Mapping[str, str], limits: Mapping[str, int]) -> None:
        self.version = version
        self.dirs = dict(dirs)
        """role ("memory", "pids", "cpu", "kill") -> directory."""
        self.limits = dict(limits)
        self.removed = False

    def attach(self, pid: int) -> None:
        for path in dict.fromkeys(self.dirs.values()):
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def cpu_usage_ns(self) -> int | None:
        path = self.dirs.get("cpu")
        if path is None:
            return None
        if self.version == 2:  # noqa: PLR2004 - cgroup version
            return _key(_read(os.path.join(path, "cpu.stat")), "usage_usec") * 1000
        text = _read(os.path.join(path, "cpuacct.usage"))
        return int(text) if text and text.strip().isdigit() else None

    def oom_kills(self) -> int:
        path = self.dirs.get("memory")
        if path is None:
            return 0
        name = "memory.events" if self.version == 2 else "memory.oom_control"  # noqa: PLR2004 - as above
        return _key(_read(os.path.join(path, name)), "oom_kill")

    def pids_refused(self) -> int:
        path = self.dirs.get("pids")
        return 0 if path is None else _key(_read(os.path.join(path, "pids.events")), "max")

    def read_back(self) -> dict[str, str]:
        """The ceilings as the kernel holds them (what the enforcement report shows)."""
        files = {
            "memory": ("memory.max", "memory.swap.max")
            if self.version == 2  # noqa: PLR2004 - as above
            else ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"),
            "pids": ("pids.max",),
        }
        out: dict[str, str] = {}
        for role, names in files.items():
            path = self.dirs.get(role)
            for name in names if path else ():
                value = _read(os.path.join(path or "", name))
                if value is not None:
                    out[name] = value.strip()
        return out

    def kill(self) -> None:
        if self.removed:
            return
        path = self.dirs.get("kill") or next(iter(self.dirs.values()), None)
        if path is None:
            return
        if self.version == 2 and os.path.exists(os.path.join(path, "cgroup.kill")):  # noqa: PLR2004 - as above
            with suppress(OSError):
                _write(os.path.join(path, "cgroup.kill"), "1")
            return
        for p in dict.fromkeys(self.dirs.values()):
            _kill_members(p)

    def remove(self) -> bool:
        if self.removed:
            return True
        deadline = time.monotonic() + _RMDIR_WAIT_S
        ok = all(_remove_tree(p, deadline) for p in dict.fromkeys(self.dirs.values()))
        self.removed = ok
        return ok


class SessionCgroup:
    """A session's cgroup directories; commands get children of them."""

    def __init__(self, version: int, dirs: Mapping[str, str], mechanism: str) -> None:
        self.version = version
        self.dirs = dict(dirs)
        """role -> the session's directory for it."""
        self.mechanism = mechanism
        self.count = 0

    def new_exec(self, limits: Mapping[str, int]) -> ExecCgroup:
        self.count += 1
        name = f"exec-{self.count}"
        made: dict[str, str] = {}
        try:
            for role, base in self.dirs.items():
                path = os.path.join(base, name)
                if path not in made.values():
                    os.mkdir(path, 0o755)
                made[role] = path
            _apply(self.version, made, limits)
        except OSError:
            ExecCgroup(self.version, made, limits).remove()
            raise
        return ExecCgroup(self.version, made, limits)

    def remove(self) -> bool:
        deadline = time.monotonic() + _RMDIR_WAIT_S
        return all(_remove_tree(p, deadline) for p in dict.fromkeys(self.dirs.values()))


def _apply(version: int, dirs: Mapping[str, str], limits: Mapping[str, int]) -> None:
    mem, pids = limits.get("mem_bytes"), limits.get("pids")
    if version == 2:  # noqa: PLR2004 - as above
        if mem is not None:
            _write(os.path.join(dirs["memory"], "memory.max"), str(mem))
            swap = os.path.join(dirs["memory"], "memory.swap.max")
            if os.path.exists(swap):
                _write(swap, "0")  # swap would let the command hold more than the ceiling
        if pids is not None:
            _write(os.path.join(dirs["pids"], "pids.max"), str(pids))
        return
    if mem is not None:
        _write(os.path.join(dirs["memory"], "memory.limit_in_bytes"), str(mem))
        memsw = os.path.join(dirs["memory"], "memory.memsw.limit_in_bytes")
        if os.path.exists(memsw):
            _write(memsw, str(mem))  # memory plus swap: swap cannot extend the ceiling
    if pids is not None:
        _write(os.path.join(dirs["pids"], "pids.max"), str(pids))


def _session_name(session_id: str) -> str:
    pid = os.getpid()
    return f"{PREFIX}{pid}.{_start_time(pid) or 0}-{session_id}"


def _try_v2(own: str, mount_root: str, needs: set[str], name: str) -> SessionCgroup | str:
    """A v2 session cgroup, or why there is none."""
    mount_root = mount_root.rstrip("/") or "/"
    # Our own cgroup holds processes (us), so v2 will not enable controllers below it;
    # the nearest ancestor that hands them down (or the root, which is exempt) can host us.
    candidates = _ancestors(own, mount_root) if own != mount_root else [own]
    for parent in candidates:
        controllers = set((_read(os.path.join(parent, "cgroup.subtree_control")) or "").split())
        if not _writable(parent):
            continue
        if not needs <= controllers and parent == mount_root:
            with suppress(OSError):
                _write(
                    os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in needs)
                )
            controllers = set((_read(os.path.join(parent, "cgroup.subtree_control")) or "").split())
        if not needs <= controllers:
            continue
        path = os.path.join(parent, name)
        try:
            os.mkdir(path, 0o755)
            if needs:
                _write(
                    os.path.join(path, "cgroup.subtree_control"), " ".join(f"+{c}" for c in needs)
                )
        except OSError as exc:
            _remove_tree(path, time.monotonic() + 0.5)
            return f"cgroup v2: cannot create {path}: {exc.strerror}"
        dirs = {"memory": path, "pids": path, "cpu": path, "kill": path}
        return SessionCgroup(2, dirs, f"cgroup v2 at {parent}")
    wanted = ", ".join(sorted(needs)) or "a cgroup"
    return f"cgroup v2: no writable cgroup above {own} hands down {wanted} (no delegated subtree)"


def _try_v1(mounts: Mounts, roles: dict[str, str], name: str) -> SessionCgroup | str:
    dirs: dict[str, str] = {}
    for role, ctrl in roles.items():
        own = mounts.v1.get(ctrl)
        base = None
        if own is not None:
            base = next(
                (p for p in [own, *_ancestors(own, "/sys/fs/cgroup/")] if _writable(p)), None
            )
        if own is None or base is None:
            # The directories made for the controllers before this one go too.
            SessionCgroup(1, dirs, "").remove()
            if own is None:
                return f"cgroup v1: the {ctrl} controller is not mounted"
            return f"cgroup v1: {own} ({ctrl}) is not writable by uid {os.geteuid()}"
        path = os.path.join(base, name)
        try:
            os.mkdir(path, 0o755)
        except OSError as exc:
            SessionCgroup(1, dirs, "").remove()
            return f"cgroup v1: cannot create {path}: {exc.strerror}"
        dirs[role] = path
    where = ", ".join(sorted({os.path.dirname(p) for p in dirs.values()}))
    return SessionCgroup(1, dirs, f"cgroup v1 under {where}")


def open_session(
    limits: Mapping[str, int], session_id: str, mounts: Mounts | None = None
) -> SessionCgroup:
    """Create the session's cgroups for `limits` (keys of `NEEDS`), or raise why not."""
    mounts = mounts or discover()
    sweep_stale(mounts)
    name = _session_name(session_id)
    reasons: list[str] = []
    if mounts.v2 is not None:
        needs = {NEEDS[k][1] for k in limits if NEEDS[k][1]}
        got = _try_v2(mounts.v2, mounts.v2_mount or mounts.v2, needs, name)
        if isinstance(got, SessionCgroup):
            return got
        reasons.append(got)
    roles = {
        "memory" if k == "mem_bytes" else "pids" if k == "pids" else "cpu": NEEDS[k][0]
        for k in limits
    }
    if mounts.v1:
        got = _try_v1(mounts, roles, name)
        if isinstance(got, SessionCgroup):
            return got
        reasons.append(got)
    if not reasons:
        reasons.append("no cgroup file system is mounted")
    raise CgroupUnavailable("; ".join(reasons))


def probe(limits: Mapping[str, int]) -> str | None:
    """None when a session cgroup for `limits` can be created here, else why not.

    Creates and removes a throwaway session cgroup: writability of a directory is only
    proven by writing it.
    """
    try:
        session = open_session(limits, f"probe-{os.urandom(3).hex()}")
    except CgroupUnavailable as exc:
        return exc.reason
    except OSError as exc:
        return f"cgroup: {exc.strerror}"
    session.remove()
    return None
