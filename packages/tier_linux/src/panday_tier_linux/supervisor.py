"""Supervising one jailed command: its pid, its ceilings, and what its exit means.

bwrap reports on ``--json-status-fd`` the jail's pid (so the command can be moved into its
cgroup while bwrap waits on ``--block-fd``) and, at the end, the command's exit code. A
jail that ended without reporting one never ran the command: that is a tier failure, not
the command's result (`raise_setup_failure`). `JailSupervisor` is the core exec pump's
hook: it kills the whole pid namespace and turns cgroup counters into typed breaches.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING

from panday_core.errors import Internal, TierUnavailable
from panday_core.execution import ChildProcess, Supervisor
from panday_core.types import ExecExit, LimitBreach, LimitKind, SandboxTier
from panday_tier_linux import host
from panday_tier_linux.capabilities import CPU_POLL_MS

if TYPE_CHECKING:
    from panday_tier_linux.binds import CommandBinds
    from panday_tier_linux.cgroups import ExecCgroup

TIER = SandboxTier.T2_LINUX
SETUP_TIMEOUT_S = 10.0
STDERR_TAIL = 4096
RELAY_SETUP_FAILED = 125
_RELAY_MARK = b"panday-relay: "
_EXEC_MARK = b"bwrap: execvp "


class Status:
    """bwrap's --json-status-fd: the jail's pid first, its exit code at the end."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.text = b""

    def read_available(self, *, wait_s: float) -> None:
        """Read what bwrap has written; with `wait_s`, wait that long for the jail's pid."""
        import select  # noqa: PLC0415 - already loaded by the exec pump

        deadline = time.monotonic() + wait_s
        while self.fd >= 0:
            left = max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], left)[0]:
                return
            chunk = os.read(self.fd, 4096)
            if not chunk:
                os.close(self.fd)
                self.fd = -1
                return
            self.text += chunk
            at = self.text.find(b"child-pid")
            if wait_s > 0 and at >= 0 and b"}" in self.text[at:]:
                return

    def value(self, key: str) -> int | None:
        marker = f'"{key}":'.encode()
        at = self.text.find(marker)
        if at < 0:
            return None
        digits = self.text[at + len(marker) :].lstrip()
        end = 0
        while end < len(digits) and digits[end : end + 1].isdigit():
            end += 1
        return int(digits[:end]) if end else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class JailSupervisor(Supervisor):
    """Kills the jail by its pid namespace and reads its cgroup counters."""

    def __init__(
        self,
        *,
        cgroup: ExecCgroup | None,
        cpu_ms: int | None,
        disk_bytes: int | None,
        status: Status,
        binds: CommandBinds | None = None,
    ) -> None:
        self.cgroup = cgroup
        self.binds = binds
        """Released when the command has ended (placeholders removed, locks dropped)."""
        self.cpu_ms = cpu_ms
        self.disk_bytes = disk_bytes
        self.status = status
        self.tmp_fd: int | None = None
        self.child_pid: int | None = None
        self.read_back: dict[str, str] = {}
        self.tick_s = CPU_POLL_MS / 1000 if cpu_ms is not None else None

    def kill(self, proc: ChildProcess) -> None:
        # bwrap is our child and not yet reaped, so its pid is still ours to signal. Its
        # death takes the jail's pid 1 (--die-with-parent), and with it the whole pid
        # namespace; the cgroup kill is a second net for anything in flight.
        if proc.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill()

    def _cpu_breach(self) -> LimitBreach | None:
        if self.cgroup is None or self.cpu_ms is None:
            return None
        used = self.cgroup.cpu_usage_ns()
        if used is not None and used >= self.cpu_ms * 1_000_000:
            detail = f"used {used // 1_000_000} ms of CPU, limits.cpu_ms={self.cpu_ms}; killed"
            return LimitBreach(kind=LimitKind.CPU, detail=detail)
        return None

    def check(self) -> LimitBreach | None:
        return self._cpu_breach()

    def _disk_full(self) -> bool:
        if self.tmp_fd is None:
            return False
        try:
            st = os.fstatvfs(self.tmp_fd)
        except OSError:
            return False
        return st.f_bavail == 0

    def finished(self, proc: ChildProcess) -> LimitBreach | None:  # noqa: ARG002 - hook signature
        self.status.read_available(wait_s=0)
        if self.cgroup is not None:
            self.read_back = self.cgroup.read_back()
            if self.cgroup.oom_kills():
                limit = self.cgroup.limits.get("mem_bytes")
                detail = f"the kernel killed it at limits.mem_bytes={limit}"
                return LimitBreach(kind=LimitKind.MEMORY, detail=detail)
            breach = self._cpu_breach()
            if breach is not None:
                return breach
            refused = self.cgroup.pids_refused()
            if refused:
                limit = self.cgroup.limits.get("pids")
                detail = f"{refused} fork(s) refused at limits.pids={limit}"
                return LimitBreach(kind=LimitKind.PIDS, detail=detail)
        if self._disk_full():
            detail = f"the jail's /tmp filled limits.disk_bytes={self.disk_bytes}; writes failed"
            return LimitBreach(kind=LimitKind.DISK, detail=detail)
        return None

    def close(self) -> None:
        self.status.close()
        if self.tmp_fd is not None:
            os.close(self.tmp_fd)
            self.tmp_fd = None
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.binds is not None:
            self.binds.close()
            self.binds = None


def await_tmpfs(pid: int, size: int) -> int:
    """Open the jail's /tmp once bwrap has mounted it (it then waits on its block fd).

    Holding a descriptor keeps the tmpfs alive after the jail ends, so its fill level can
    be read after the exit: that is how a full disk becomes a typed breach.
    """
    page = os.sysconf("SC_PAGE_SIZE")
    want = -(-size // page) * page
    host_dev = os.stat("/tmp").st_dev  # noqa: S108 - compared with the jail's private /tmp
    path = f"/proc/{pid}/root/tmp"
    deadline = time.monotonic() + SETUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        if fd >= 0:
            st, vfs = os.fstat(fd), os.fstatvfs(fd)
            if st.st_dev != host_dev and vfs.f_blocks * vfs.f_frsize == want:
                return fd
            os.close(fd)
        time.sleep(0.0005)
    raise Internal(f"the jail's /tmp did not appear within {SETUP_TIMEOUT_S} s")


def bwrap_error(proc: ChildProcess, fallback: str) -> str:
    text = b""
    if proc.stderr is not None:
        try:
            text = os.read(proc.stderr, STDERR_TAIL)
        except OSError:
            text = b""
    return _explain(text.decode("utf-8", "replace").strip() or fallback)


def _explain(message: str) -> str:
    first = message.splitlines()[0] if message else message
    restriction = host.userns_restriction() if os.geteuid() != 0 else None
    if restriction is not None:
        return f"{first} (user namespaces are restricted on this host: {restriction})"
    return first


def raise_relay_failure(event: ExecExit, stderr_tail: bytes) -> None:
    """The egress relay could not set up, or could not exec the command (its one line on
    stderr, exit 125): the command never ran, and that is not the command's result. An exec
    failure is raised as bwrap's own is (`_raise_setup_failure`), in bwrap's words."""
    if event.breach is not None or event.exit_code != RELAY_SETUP_FAILED:
        return
    if stderr_tail.startswith(_EXEC_MARK) and stderr_tail.count(b"\n") == 1:
        raise TierUnavailable(str(TIER), _explain(stderr_tail.decode("utf-8", "replace").strip()))
    at = stderr_tail.rfind(_RELAY_MARK)
    if at < 0:
        return
    line = stderr_tail[at:].split(b"\n", 1)[0].decode("utf-8", "replace")
    raise Internal(f"the egress relay inside the jail failed: {line}")


def raise_setup_failure(event: ExecExit, sup: JailSupervisor, stderr_tail: bytes) -> None:
    """bwrap reports the command's exit code on its status descriptor; without it (and
    without our own kill) the jail never started, and that is not the command's result."""
    if event.breach is not None or sup.status.value("exit-code") is not None:
        return
    if sup.status.value("child-pid") is not None and event.exit_code != 1:
        return
    message = stderr_tail.decode("utf-8", "replace").strip() or "bwrap failed without a message"
    raise TierUnavailable(str(TIER), _explain(message))
