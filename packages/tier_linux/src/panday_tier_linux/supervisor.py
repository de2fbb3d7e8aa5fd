"""Supervising one jailed command: its pid, its ceilings, and what its exit means.

bwrap reports on ``--json-status-fd`` the jail's pid (so the command can be moved into its
cgroup while bwrap waits on ``--block-fd``) and, at the end, the command's exit code. A
jail that ended without reporting one never ran the command: that is a tier failure, not
the command's result (`raise_setup_failure`). `JailSupervisor` is the core exec pump's
hook: it kills the whole pid namespace and turns cgroup counters into typed breaches.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from typing import TYPE_CHECKING

from panday_core.errors import CommandNotFound, Internal, TierUnavailable, WorkspaceUnusable
from panday_core.execution import ChildProcess, Supervisor
from panday_core.types import ExecExit, LimitBreach, LimitKind, OutputChunk, SandboxTier
from panday_tier_linux import host
from panday_tier_linux.capabilities import CPU_POLL_MS

if TYPE_CHECKING:
    from panday_core.types import ExecEvent
    from panday_tier_linux.binds import CommandBinds
    from panday_tier_linux.cgroups import ExecCgroup

TIER = SandboxTier.T2_LINUX
SETUP_TIMEOUT_S = 10.0
STDERR_TAIL = 4096
_SETUP_MARKS = (b"bwrap: ", b"panday-relay: ")
"""How a setup line of bwrap or the relay starts (held back until the start is decided)."""
_EXEC_MARK = "bwrap: execvp "
_CHDIR_MARK = "bwrap: Can't chdir to "
_MISSING = frozenset({os.strerror(errno.ENOENT), os.strerror(errno.ENOTDIR)})
"""Exec failures a shell reports as 127 (no such program); any other is 126."""
NOT_FOUND = 127
NOT_EXECUTABLE = 126


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
        report_fd: int | None = None,
        defaults: frozenset[str] = frozenset(),
    ) -> None:
        self.cgroup = cgroup
        self.defaults = defaults
        """Ceilings of `cgroup` the policy did not ask for: the host's protection."""
        self.rlimits: dict[str, int] = {}
        """The rlimits set on the jail where no cgroup holds the host's protection."""
        self.report_fd = report_fd
        """Our end of the relay's report pipe (sessions with the egress bridge)."""
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
                if "mem_bytes" in self.defaults:
                    detail = (
                        f"the kernel killed it at the host's protection ceiling of {limit} "
                        "bytes (the policy sets no limits.mem_bytes)"
                    )
                return LimitBreach(kind=LimitKind.MEMORY, detail=detail)
            breach = self._cpu_breach()
            if breach is not None:
                return breach
            refused = self.cgroup.pids_refused()
            if refused:
                limit = self.cgroup.limits.get("pids")
                detail = f"{refused} fork(s) refused at limits.pids={limit}"
                if "pids" in self.defaults:
                    detail = (
                        f"{refused} fork(s) refused at the host's protection ceiling of {limit} "
                        "tasks (the policy sets no limits.pids)"
                    )
                return LimitBreach(kind=LimitKind.PIDS, detail=detail)
        if self._disk_full():
            detail = f"the jail's /tmp filled limits.disk_bytes={self.disk_bytes}; writes failed"
            return LimitBreach(kind=LimitKind.DISK, detail=detail)
        return None

    def read_report(self) -> bytes:
        """What the relay reported (``E<errno>``, ``S<message>``), b"" when it exec'd the
        command. Read after the exit: the relay writes before it exits or execs."""
        if self.report_fd is None:
            return b""
        try:
            return os.read(self.report_fd, 4096)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        self.status.close()
        if self.report_fd is not None:
            os.close(self.report_fd)
            self.report_fd = None
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


def _not_found(program: str, why: str) -> CommandNotFound:
    if why in _MISSING:
        return CommandNotFound(program, "not found inside the sandbox", exit_code=NOT_FOUND)
    return CommandNotFound(
        program, f"cannot be executed inside the sandbox ({why})", exit_code=NOT_EXECUTABLE
    )


class StartCheck:
    """Whether the command ever ran, decided by what only panday's side can write.

    * Without the relay, bwrap's ``--json-status-fd`` carries ``exit-code`` exactly when its
      exec of the command succeeded (bwrap's own setup pipe says so); the command cannot
      write there. No exit code (and no kill of ours) means it never ran, so nothing but
      bwrap wrote its stderr: only then is bwrap's line read, to tell a failed exec
      (`CommandNotFound`, raised here) from another setup failure (`TierUnavailable`).
    * With the relay, bwrap did exec the relay, so the status says nothing about the
      command. The relay writes on its report pipe (close-on-exec: the command never holds
      it) ``E<errno>`` when its exec failed and ``S<message>`` when it could not set up;
      an empty pipe means the command was exec'd, and its exit, 125 or not, is its own.

    So a command's output never changes how its exit is classified. While the start is
    undecided, stderr that could still be one setup line (``bwrap: ...``, ``panday-relay:
    ...``) is held back; anything else releases it in order, and a command that never ran
    has its setup line dropped rather than passed on as output.
    """

    __slots__ = ("deciding", "held", "program", "relay", "sup", "tail")

    def __init__(self, program: str, sup: JailSupervisor, *, relay: bool) -> None:
        self.program = program
        self.sup = sup
        self.relay = relay
        self.deciding = True
        self.held: list[OutputChunk] = []
        self.tail = b""
        """The end of stderr, for the message of a jail that never started."""

    def _could_be_setup_line(self, data: bytes) -> bool:
        if len(data) > STDERR_TAIL:
            return False
        for mark in _SETUP_MARKS:
            if data.startswith(mark):
                end = data.find(b"\n")
                return end < 0 or end == len(data) - 1  # one line so far, nothing after it
            if mark.startswith(data):
                return True
        return False

    def feed(self, event: ExecEvent) -> list[ExecEvent]:
        """The events to pass on for `event` (raises at the exit of a command that never
        ran)."""
        if isinstance(event, ExecExit):
            self.settle(event)
            held, self.held = self.held, []
            return [*held, event]
        if event.stream == "stderr":
            self.tail = (self.tail + event.data)[-STDERR_TAIL:]
        if not self.deciding:
            return [event]
        if event.stream == "stderr":
            so_far = b"".join(c.data for c in self.held) + event.data
            if self._could_be_setup_line(so_far):
                self.held.append(event)
                return []
        self.deciding = False
        held, self.held = self.held, []
        return [*held, event]

    def settle(self, event: ExecExit) -> None:
        """Raise when the command never ran; return when this exit is the command's."""
        if event.breach is not None:  # our own kill or a ceiling: reported as the breach
            return
        status = self.sup.status
        status.read_available(wait_s=0)
        ran = status.value("exit-code") is not None
        if not ran and (status.value("child-pid") is None or event.exit_code == 1):
            self._raise_setup_failure()
        if self.relay:
            report = self.sup.read_report()
            if report.startswith(b"E"):
                code = report[1:].split(b"\n", 1)[0]
                number = int(code) if code.isdigit() else 0
                raise _not_found(self.program, os.strerror(number) if number else "exec failed")
            if report.startswith(b"S"):
                line = report[1:].split(b"\n", 1)[0].decode("utf-8", "replace")
                raise Internal(f"the egress relay inside the jail failed: {line}")

    def _raise_setup_failure(self) -> None:
        # The command never ran: what is on stderr is bwrap's own.
        text = b"".join(c.data for c in self.held) or self.tail
        message = text.decode("utf-8", "replace").strip() or "bwrap failed without a message"
        first = message.splitlines()[0]
        if first.startswith(_EXEC_MARK) and not self.relay:
            raise _not_found(self.program, first.rpartition(": ")[2])
        if first.startswith(_CHDIR_MARK):  # the directory, not the tier, is at fault
            where, _, why = first.removeprefix(_CHDIR_MARK).rpartition(": ")
            raise WorkspaceUnusable(
                "cwd",
                where,
                f"cannot be entered inside the sandbox ({why}); the jail runs as the "
                "caller's uid without capabilities: choose a directory it can enter",
            )
        raise TierUnavailable(str(TIER), _explain(message))
