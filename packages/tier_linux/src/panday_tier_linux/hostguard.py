"""The host's own protection: a fork bomb or a memory bomb must leave the host usable, also
under a policy that asks for no pid or memory ceiling.

Those ceilings are not in the default policy (T2 macOS enforces neither, and fail closed
means a default asking for them would be refused wherever they cannot be held), so the tier
adds its own wherever the policy sets none, as strongly as this host allows, and says how
strongly (`panday doctor`, `session.guarantees()`): never a silent "none".

* **A writable cgroup** (root on this project's hosts, or a delegated cgroup v2 subtree):
  the same cgroup ceilings a policy would ask for, at `ceilings()`: ``pids.max`` of
  `PIDS` tasks (a quarter of ``kernel.pid_max`` when that is smaller) and memory of half
  the host's RAM, swap included. Strict: totals over the whole command tree.
* **No writable cgroup** (an unprivileged user on a cgroup v1 host): rlimits on the jail's
  first process, set while the jail waits for its seccomp program, so every process of the
  jail inherits them before the command runs. ``RLIMIT_NPROC`` of the tasks this host runs
  at that moment plus `PIDS`: the kernel counts every process of the uid machine-wide, so
  this bounds the user's processes in total while the command runs (its other processes
  are the headroom it starts with). ``RLIMIT_AS`` of half the host's RAM, per process.
  Partial: memory is bounded per process, not in total, and a root caller's processes
  ignore ``RLIMIT_NPROC`` (root has no pid bound without a cgroup).

A policy's own ``limits.pids`` / ``limits.mem_bytes`` replace these (and are refused, by
name, where no cgroup can hold them).
"""

from __future__ import annotations

import os

# `panday run`'s cached start-up bounds its jail with this module (`jail.Guard.open`), so it
# imports nothing costly at load time: no typing (panday_core.startup).
TYPE_CHECKING = False  # typing's flag without importing typing
if TYPE_CHECKING:
    from typing import Final

    from panday_tier_linux.cgroups import SessionCgroup

PIDS: Final = 4096
"""Tasks (processes and threads) a command tree may hold at once when the policy sets no
``limits.pids``: far above what builds and test runners use, far below what takes a host's
pid space (``kernel.pid_max`` is 32768 on many hosts)."""

MEMORY_SHARE: Final = 2
"""Without ``limits.mem_bytes`` a command may use 1/MEMORY_SHARE of the host's RAM: the
other half stays for the host, the caller and everyone else."""

_CACHE: dict[str, int] = {}


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return ""


def _mem_total() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def ceilings() -> dict[str, int]:
    """The ceilings the tier adds when the policy sets none (``pids``, ``mem_bytes``)."""
    if not _CACHE:
        pid_max = _read("/proc/sys/kernel/pid_max").strip()
        pids = min(PIDS, int(pid_max) // 4) if pid_max.isdigit() else PIDS
        mem = _mem_total() // MEMORY_SHARE
        mib = 1 << 20
        _CACHE["pids"] = max(pids, 64)
        _CACHE["mem_bytes"] = max(mem // mib * mib, 256 * mib)
    return dict(_CACHE)


def running_tasks() -> int:
    """Tasks (processes and threads) on this host now: /proc/loadavg's fourth field."""
    fields = _read("/proc/loadavg").split()
    total = fields[3].partition("/")[2] if len(fields) > 3 else ""  # noqa: PLR2004 - its format
    return int(total) if total.isdigit() else 0


class Rlimits:
    """The rlimit bounds for what no cgroup holds here, applied to the jail's first process
    (`apply`) before it runs anything; None where that bound is not needed."""

    __slots__ = ("address_space", "tasks")

    def __init__(self, *, tasks: bool, address_space: bool) -> None:
        self.tasks = tasks
        """Bound the uid's tasks (RLIMIT_NPROC; root ignores it, so never for root)."""
        self.address_space = address_space
        """Bound each process's address space (RLIMIT_AS)."""

    def __bool__(self) -> bool:
        return self.tasks or self.address_space

    def apply(self, pid: int) -> dict[str, int]:
        """Lower `pid`'s limits (soft and hard, so nothing in the jail can raise them).
        Returns what was set (resource name -> value)."""
        import resource

        wanted: list[tuple[str, int, int]] = []
        bounds = ceilings()
        if self.tasks:
            wanted.append(("RLIMIT_NPROC", resource.RLIMIT_NPROC, running_tasks() + bounds["pids"]))
        if self.address_space:
            wanted.append(("RLIMIT_AS", resource.RLIMIT_AS, bounds["mem_bytes"]))
        done: dict[str, int] = {}
        for name, which, bound in wanted:
            _soft, hard = resource.prlimit(pid, which)
            value = bound if hard == resource.RLIM_INFINITY else min(bound, hard)  # only lowered
            resource.prlimit(pid, which, (value, value))
            done[name] = value
        return done


def plan(explicit: set[str], held: set[str]) -> Rlimits:
    """The rlimits a command needs: for each host-protection ceiling the policy does not set
    (not in `explicit`) and no cgroup holds (not in `held`)."""
    tasks = "pids" not in explicit and "pids" not in held and os.geteuid() != 0
    memory = "mem_bytes" not in explicit and "mem_bytes" not in held
    return Rlimits(tasks=tasks, address_space=memory)


def open_cgroups(
    explicit: dict[str, int], sid: str
) -> tuple[SessionCgroup | None, dict[str, int], dict[str, str]]:
    """A session's cgroups: the policy's ceilings (`explicit`), plus the host-protection
    ceilings (`ceilings`) for the pid and memory ceilings it leaves out, as many of those
    as a cgroup here can hold. Returns the cgroup (None without one), the ceilings it holds,
    and, when the policy's own ceilings cannot be held, field -> why (a refusal).

    One function for a session's open and for `panday run`'s cached start-up
    (`plan.open_guard`), so a planned jail is bounded exactly as a session's would be now.
    """
    from panday_tier_linux import cgroups

    defaults = {k: v for k, v in ceilings().items() if k not in explicit}
    attempts = [{**explicit, **defaults}]
    if "mem_bytes" in defaults:  # a pid bound is worth having without the memory one
        attempts.append({**explicit, **{k: v for k, v in defaults.items() if k != "mem_bytes"}})
    if defaults and explicit:
        attempts.append(dict(explicit))
    mounts = cgroups.discover()
    reason = ""
    for wanted in attempts:
        if not wanted:
            continue
        try:
            return cgroups.open_session(wanted, sid, mounts), wanted, {}
        except cgroups.CgroupUnavailable as exc:
            reason = exc.reason
    return None, {}, {f"limits.{k}": reason for k in explicit}
