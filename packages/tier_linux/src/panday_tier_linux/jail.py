# Over 500 lines: the one launch path that sessions and cached plans share, on purpose.
"""Starting and watching one jailed command: the one launch path every caller takes.

A session (`session.LinuxSession`) and ``panday run``'s cached plan (`plan`, through
`panday.cli_fast`) start a command the same way, with these functions: the binds of the
command (`binds.Roots.command_binds`), bwrap's options built for it
(`argv.build_options`), its descriptors (3 the options, 4 the seccomp program, 5 the
status pipe, [6 the report pipe of the Landlock wall and the relay, 7 the wall's memfd,]
then the binds), the spawn, the jail's wait for its seccomp program while it is moved into
its cgroup and given its rlimits (`release`), and the supervisor that kills its pid
namespace and reads its counters (`JailSupervisor`). What a command's exit means (did it
run at all?) is decided here too (`Start`), in plain values: the session turns a command
that never ran into an exception, the cached path hands it to the full path. There is
nothing to keep in step between two copies, because there is one.

On ``panday run``'s start-up path: no typing, no msgspec, no enum or contextlib.
"""

from __future__ import annotations

import _signal  # pyright: ignore[reportMissingModuleSource] - signal without its enum (panday_core.startup)
import os
import select
import time

from panday_core.execution import Supervisor
from panday_core.process import data_fd, spawn
from panday_core.startup import suppress
from panday_tier_linux.argv import build_options, jail_command

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from panday_core.execution import Breach, ChildProcess
    from panday_core.process import Stream
    from panday_tier_linux.argv import JailSpec
    from panday_tier_linux.binds import CommandBinds
    from panday_tier_linux.cgroups import ExecCgroup, SessionCgroup
    from panday_tier_linux.hostguard import Rlimits

CEILINGS = ("mem_bytes", "pids", "cpu_ms")
"""The policy's limits a cgroup holds: the one place their names are spelled."""
CPU_POLL_MS = 10
"""How often a CPU-time ceiling is polled while the command runs (capabilities says so)."""
CHILD_PID_TIMEOUT_S = 30.0
"""How long bwrap may take to report the jail's pid on its status descriptor."""
SETUP_TIMEOUT_S = 10.0
STDERR_TAIL = 4096
"""Longer than this, stderr is not one setup line of bwrap's."""
SETUP_MARKS = (b"bwrap: ", b"panday-relay: ", b"panday: landlock wall: ")
"""How a setup line of bwrap, the relay or the wall starts (held back until the start is
decided)."""


def ceilings_of(mem_bytes: int | None, pids: int | None, cpu_ms: int | None) -> dict[str, int]:
    """The cgroup ceilings a policy's limits ask for, by `CEILINGS` name."""
    values = (mem_bytes, pids, cpu_ms)
    return {name: value for name, value in zip(CEILINGS, values, strict=True) if value is not None}


# ---------------------------------------------------------------------- bwrap's status


class Status:
    """bwrap's ``--json-status-fd``: the jail's pid first, its exit code at the end."""

    __slots__ = ("fd", "text")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.text = b""

    def read_available(self, *, wait_s: float) -> None:
        """Read what bwrap has written; with `wait_s`, wait that long for the jail's pid."""
        deadline = time.monotonic() + wait_s
        while self.fd >= 0:
            at = self.text.find(b"child-pid")
            if wait_s > 0 and at >= 0 and b"}" in self.text[at:]:
                return  # read already: the jail's pid is all a wait is for
            left = max(0.0, deadline - time.monotonic())
            # poll, not select(): a descriptor numbered 1,024 or above must not break it.
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            if not poller.poll(left * 1000.0):
                return
            chunk = os.read(self.fd, 4096)
            if not chunk:
                os.close(self.fd)
                self.fd = -1
                return
            self.text += chunk

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


# ---------------------------------------------------------------------- bounds


class Guard:
    """What bounds a session's jails: its cgroup (None without one) and the ceilings it
    holds, which of them are the host's protection rather than the policy's (`hostguard`),
    and the rlimits for what no cgroup holds."""

    __slots__ = ("defaults", "held", "rlimits", "session")

    def __init__(
        self,
        session: SessionCgroup | None,
        explicit: Mapping[str, int],
        held: Mapping[str, int],
        rlimits: Rlimits,
    ) -> None:
        self.session = session
        self.held = dict(held)
        self.defaults = frozenset(k for k in held if k not in explicit)
        self.rlimits = rlimits

    @classmethod
    def open(cls, explicit: Mapping[str, int], session_id: str) -> tuple[Guard, dict[str, str]]:
        """The session's cgroup with the policy's ceilings and the host's protection
        (`hostguard.open_cgroups`), the rlimits for the rest, and why a ceiling cannot be
        held (by name)."""
        from panday_tier_linux import hostguard

        session, held, reasons = hostguard.open_cgroups(dict(explicit), session_id)
        return cls(session, explicit, held, hostguard.plan(set(explicit), set(held))), reasons

    @property
    def blocks(self) -> bool:
        """Whether a jail waits for its seccomp program (cgroup, rlimits) before it runs."""
        return self.session is not None or bool(self.rlimits)

    def new_exec(self) -> ExecCgroup | None:
        """The command's own cgroup (None without a session cgroup)."""
        return None if self.session is None else self.session.new_exec(self.held)

    def remove(self) -> None:
        """Remove the session's cgroup (the kernel may lag a moment after the last kill)."""
        session, self.session = self.session, None
        if session is not None and not session.remove():
            time.sleep(0.05)
            session.remove()


# ---------------------------------------------------------------------- the supervisor


class JailSupervisor(Supervisor):
    """The core pump's hook for a jail: kills it by its pid namespace and reads its cgroup
    counters (and its /tmp's fill level) as plain breaches."""

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
        self.filter = b""
        """The seccomp program a waiting jail is let go with (`release`)."""
        self.read_back: dict[str, str] = {}
        self.tick_s = CPU_POLL_MS / 1000 if cpu_ms is not None and cgroup is not None else None

    def kill(self, proc: ChildProcess) -> None:
        # bwrap is our child and not yet reaped, so its pid (and group) are still ours to
        # signal. Its death takes the jail's pid 1 only once pid 1 has reached its init
        # loop (bwrap 0.11 sets --die-with-parent there, after the mounts and its setsid):
        # killed earlier, bwrap would leave pid 1 waiting for bwrap's "go" for ever. So
        # the jail's pid 1 is killed by pidfd when bwrap has reported it, and bwrap's
        # process group, which pid 1 stays in until its setsid, with bwrap. Its end takes
        # the whole pid namespace; the cgroup kill is a second net for anything in flight.
        if proc.status is None:
            first = self._first_process(proc)
            proc.signal_group(_signal.SIGKILL)
            if first >= 0:
                with suppress(ProcessLookupError, PermissionError):
                    _signal.pidfd_send_signal(first, _signal.SIGKILL)
                os.close(first)
        if self.cgroup is not None:
            self.cgroup.kill()

    def _first_process(self, proc: ChildProcess) -> int:
        """A pidfd of the jail's pid 1 (-1 when bwrap has not reported it or it is gone).

        Opened while bwrap is alive and checked to be bwrap's child: a pid is judged by
        the process the descriptor holds, not by a number that may have been reused."""
        self.status.read_available(wait_s=0)
        pid = self.child_pid or self.status.value("child-pid")
        return child_pidfd(pid, proc.pid)

    def _cpu_breach(self) -> Breach | None:
        if self.cgroup is None or self.cpu_ms is None:
            return None
        used = self.cgroup.cpu_usage_ns()
        if used is not None and used >= self.cpu_ms * 1_000_000:
            detail = f"used {used // 1_000_000} ms of CPU, limits.cpu_ms={self.cpu_ms}; killed"
            return ("cpu", detail)
        return None

    def check(self) -> Breach | None:
        return self._cpu_breach()

    def _disk_full(self) -> bool:
        if self.tmp_fd is None:
            return False
        try:
            st = os.fstatvfs(self.tmp_fd)
        except OSError:
            return False
        return st.f_bavail == 0

    def finished(self, proc: ChildProcess) -> Breach | None:  # noqa: ARG002 - hook signature
        self.status.read_available(wait_s=0)
        if self.cgroup is not None:
            self.read_back = self.cgroup.read_back()
            breach = self._counted()
            if breach is not None:
                return breach
        if self._disk_full():
            detail = f"the jail's /tmp filled limits.disk_bytes={self.disk_bytes}; writes failed"
            return ("disk", detail)
        return None

    def _counted(self) -> Breach | None:
        """Which cgroup ceiling ended the command, read from its counters after the exit."""
        cgroup = self.cgroup
        if cgroup is None:
            return None
        if cgroup.oom_kills():
            limit = cgroup.limits.get("mem_bytes")
            detail = f"the kernel killed it at limits.mem_bytes={limit}"
            if "mem_bytes" in self.defaults:
                detail = (
                    f"the kernel killed it at the host's protection ceiling of {limit} "
                    "bytes (the policy sets no limits.mem_bytes)"
                )
            return ("memory", detail)
        breach = self._cpu_breach()
        if breach is not None:
            return breach
        refused = cgroup.pids_refused()
        if refused:
            limit = cgroup.limits.get("pids")
            detail = f"{refused} fork(s) refused at limits.pids={limit}"
            if "pids" in self.defaults:
                detail = (
                    f"{refused} fork(s) refused at the host's protection ceiling of {limit} "
                    "tasks (the policy sets no limits.pids)"
                )
            return ("pids", detail)
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


# ---------------------------------------------------------------------- did it run?


class Start:
    """Whether the command ever ran, decided by what only panday's side can write.

    * Without either front program, bwrap's ``--json-status-fd`` carries ``exit-code``
      exactly when its exec of the command succeeded (bwrap's own setup pipe says so); the
      command cannot write there. No exit code (and no kill of ours) means it never ran, so
      nothing but bwrap wrote its stderr: only then is bwrap's line read.
    * With the Landlock wall or the relay (``relay`` is true for either: both report the
      same way), bwrap exec'd that program, so the status says nothing about the
      command. The wall and the relay write on their report pipe (close-on-exec: the
      command never holds it) ``E<errno>`` when its exec failed and ``S<message>`` when
      it could not set up; an empty pipe means the command was exec'd, and its exit, 125
      or not, is its own.

    So a command's output never changes how its exit is classified. While the start is
    undecided, stderr that could still be one setup line (``bwrap: ...``, ``panday-relay:
    ...``, ``panday: landlock wall: ...``) is held back (`feed`); anything else releases it
    in order, and a command that never ran has its setup line dropped rather than passed on
    as output.
    """

    __slots__ = ("deciding", "held", "relay", "sup", "tail")

    def __init__(self, sup: JailSupervisor, *, relay: bool) -> None:
        self.sup = sup
        self.relay = relay
        self.deciding = True
        self.held: list[tuple[Stream, bytes]] = []
        self.tail = b""
        """The end of stderr, for the message of a jail that never started."""

    @staticmethod
    def could_be_setup_line(data: bytes) -> bool:
        if len(data) > STDERR_TAIL:
            return False
        for mark in SETUP_MARKS:
            if data.startswith(mark):
                end = data.find(b"\n")
                return end < 0 or end == len(data) - 1  # one line so far, nothing after it
            if mark.startswith(data):
                return True
        return False

    def feed(self, stream: Stream, data: bytes) -> list[tuple[Stream, bytes]]:
        """The output to pass on for one chunk (possibly none yet, or held ones first)."""
        if stream == "stderr":
            self.tail = (self.tail + data)[-STDERR_TAIL:]
        if not self.deciding:
            return [(stream, data)]
        if stream == "stderr":
            so_far = b"".join(d for _s, d in self.held) + data
            if self.could_be_setup_line(so_far):
                self.held.append((stream, data))
                return []
        self.deciding = False
        held, self.held = self.held, []
        return [*held, (stream, data)]

    def release(self) -> list[tuple[Stream, bytes]]:
        """What is still held: the command's own output once it is known to have run."""
        held, self.held = self.held, []
        return held

    def failure(self, *, breach: object, exit_code: int | None) -> tuple[str, str] | None:
        """None when this exit is the command's; else why the command never ran, as
        (kind, text): ``setup`` (bwrap's own line, or the tail of stderr), ``relay-exec``
        (the errno the relay's exec failed with) or ``relay-setup`` (the relay's line)."""
        if breach is not None:  # our own kill or a ceiling: reported as the breach
            return None
        status = self.sup.status
        status.read_available(wait_s=0)
        ran = status.value("exit-code") is not None
        if not ran and (status.value("child-pid") is None or exit_code == 1):
            text = b"".join(d for _s, d in self.held) or self.tail
            return ("setup", text.decode("utf-8", "replace").strip())
        if self.relay:
            report = self.sup.read_report()
            if report.startswith(b"E"):
                return ("relay-exec", report[1:].split(b"\n", 1)[0].decode("ascii", "replace"))
            if report.startswith(b"S"):
                return ("relay-setup", report[1:].split(b"\n", 1)[0].decode("utf-8", "replace"))
        return None


# ---------------------------------------------------------------------- starting one


class CgroupError(Exception):
    """The command's cgroup could not be made (the cgroup file system said no)."""


SETSID = "/usr/bin/setsid"
"""util-linux's setsid: inside the jail (which shows the host's /usr) it gives a command run
with a pseudo-terminal that terminal as its controlling one."""


def start(
    spec: JailSpec,
    argv: Sequence[str],
    *,
    bwrap: str,
    program: bytes,
    binds: CommandBinds,
    cwd: str,
    guard: Guard,
    cpu_ms: int | None,
    env: Mapping[str, str] | None = None,
    stdin: bool = False,
    tty: tuple[int, int] | None = None,
) -> tuple[ChildProcess, JailSupervisor, int]:
    """Spawn bwrap for `argv` in the jail `spec` describes (nothing of it runs yet when it
    waits): the process, its supervisor (holding the binds, the command's cgroup and the
    status and report pipes, released by its `close`), and our end of the pipe the jail
    reads its seccomp program from (-1 when the jail does not wait; then `release` is not
    needed). On an exception nothing is left open and nothing ran."""
    block = spec.tmp_bytes is not None or guard.blocks
    reports = spec.reports
    given: list[int] = []
    ours: list[int] = []
    exec_cgroup: ExecCgroup | None = None
    try:
        try:
            exec_cgroup = guard.new_exec()
        except OSError as exc:
            raise CgroupError(str(exc)) from exc
        # Descriptors as the child sees them: 3 options, 4 seccomp, 5 status, [6 the
        # report pipe of the wall or relay,] [7 the wall's memfd,] then the binds'
        # directories.
        status_child = 5
        report_child = status_child + 1 if reports else None
        wall_child = status_child + 2 if spec.wall else None
        options = build_options(
            spec,
            cwd=cwd,
            seccomp_fd=4,
            status_fd=status_child,
            env=env,
            binds=binds.options(status_child + 1 + reports + spec.wall),
        )
        words = b"".join(o.encode("utf-8", "surrogateescape") + b"\0" for o in options)
        given.append(data_fd(words))
        filter_w = -1
        if block:
            filter_r, filter_w = program_pipe(program)
            ours.append(filter_w)
            given.append(filter_r)
        else:
            given.append(data_fd(program))
        status_r, report_r = _pipes(spec, given, ours)
        if tty is not None:
            # bwrap's --new-session leaves the command without a controlling terminal (so
            # TIOCSTI cannot reach the caller's); setsid -c makes the command the leader of
            # a session of its own whose controlling terminal is the pty it was given (job
            # control works, and TIOCSTI, refused by seccomp anyway, reaches only that pty).
            argv = [SETSID, "--ctty", "--wait", *argv]
        command = jail_command(spec, argv, report_fd=report_child, wall_fd=wall_child)
        proc = spawn(
            [bwrap, "--args", "3", "--", *command],
            env={},
            stdin=stdin,
            pass_fds=[*given, *binds.fds],
            tty=tty,
        )
    except BaseException:
        if exec_cgroup is not None:
            exec_cgroup.remove()
        for fd in ours:
            os.close(fd)
        binds.close()
        raise
    finally:
        for fd in given:
            os.close(fd)
    binds.spawned()
    sup = JailSupervisor(
        cgroup=exec_cgroup,
        cpu_ms=cpu_ms,
        disk_bytes=spec.tmp_bytes,
        status=Status(status_r),
        binds=binds,
        report_fd=report_r if reports else None,
        defaults=guard.defaults,
    )
    if block:
        sup.filter = program
    return proc, sup, filter_w


def _pipes(spec: JailSpec, given: list[int], ours: list[int]) -> tuple[int, int]:
    """Our ends of the status pipe and of the report pipe (-1 without the wall or the
    relay); their other ends, and the wall's memfd, appended to `given` in the order the
    child sees them (5, 6, 7)."""
    status_r, status_w = os.pipe()
    ours.append(status_r)
    given.append(status_w)
    report_r = -1
    if spec.reports:
        report_r, report_w = os.pipe()
        ours.append(report_r)
        os.set_blocking(report_r, False)
        given.append(report_w)
    if spec.wall:
        from panday_tier_linux import wall

        given.append(wall.memfd())
    return status_r, report_r


def program_pipe(program: bytes) -> tuple[int, int]:
    """The pipe a waiting jail reads its seccomp program from (read end, write end).

    The jail waits where bwrap reads that program (after the mounts, before anything of
    the command), and `release` writes it only once the jail is bounded. Not --block-fd:
    bwrap takes any end of that read as "go", end of file included, so a caller SIGKILLed
    before it had bounded the jail (its end closed by its death) would let the command run
    with no bound at all. Here that end of file is an empty program, which bwrap refuses:
    the jail dies, and nothing of it ran. The program goes in one write, which the kernel
    makes whole up to PIPE_BUF bytes: never a part of it, whatever kills the caller."""
    if len(program) > select.PIPE_BUF:
        raise ValueError(f"a seccomp program of {len(program)} bytes is over PIPE_BUF")
    return os.pipe()


def release(proc: ChildProcess, sup: JailSupervisor, filter_w: int, guard: Guard) -> str | None:
    """Attach the waiting jail to its ceilings (its cgroup, its rlimits, its /tmp watched),
    then let it run by writing its seccomp program to `filter_w` (`start`). None when it
    runs; else why it never ran anything: ``bwrap`` (bwrap ended before the jail started)
    or ``bounds: <error>`` (a bound could not be set: the jail does not run unbounded).
    `filter_w` is closed either way; when the jail is not to run (or this raises, a Ctrl-C
    included), only after the jail is dead (its end of file would kill it too, but it is
    waited for here, so that nothing of it outlives this call)."""
    pid: int | None = None
    ran = False
    try:
        sup.status.read_available(wait_s=CHILD_PID_TIMEOUT_S)
        pid = sup.status.value("child-pid")
        if pid is None:
            return "bwrap"
        sup.child_pid = pid
        try:
            if sup.cgroup is not None:
                sup.cgroup.attach(pid)
            if guard.rlimits:
                sup.rlimits = guard.rlimits.apply(pid)
            if sup.disk_bytes is not None:
                sup.tmp_fd = await_tmpfs(pid, sup.disk_bytes)
        except OSError as exc:  # fail closed: the jail does not run unbounded
            return f"bounds: {exc}"
        try:
            written = os.write(filter_w, sup.filter)
        except OSError:  # bwrap is gone: it never ran the command
            return "bwrap"
        if written != len(sup.filter):  # never (one write of at most PIPE_BUF bytes)
            return "bounds: the seccomp program was not written whole"
        ran = True
        return None
    finally:
        if not ran:
            kill_blocked(proc, pid)
        os.close(filter_w)  # the program's end: with it written, the jail runs


def child_pidfd(pid: int | None, parent: int) -> int:
    """A pidfd of `pid` when it is `parent`'s child, else -1 (also when it is None or
    gone). Opened first and checked after: a pid is judged by the process the descriptor
    holds, not by a number that may have been reused."""
    if pid is None:
        return -1
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return -1
    if parent_of(pid) != parent:
        os.close(pidfd)
        return -1
    return pidfd


def parent_of(pid: int) -> int | None:
    """The parent pid /proc shows for `pid` (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


KILL_WAIT_S = 10.0
"""How long a jail killed before its command may take to die (it waits in a read:
at once, unless the host is stalled)."""


def kill_blocked(proc: ChildProcess, pid: int | None) -> None:
    """Kill a jail that is still waiting for its seccomp program, and wait until it is gone.

    `pid` is the jail's first process (bwrap's child, init of its pid namespace) when bwrap
    reported it. SIGKILL is queued to it before anything else, so none of its code runs
    again; its end takes every other process of its namespace with it, and it is waited
    for by pidfd, because bwrap's outer process (ours, killed and reaped here) is not what
    holds the program pipe's read end."""
    pidfd = -1
    if pid is not None:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = -1  # gone already
    try:
        if pidfd >= 0:
            with suppress(ProcessLookupError, PermissionError):
                _signal.pidfd_send_signal(pidfd, _signal.SIGKILL)
        proc.signal_group(_signal.SIGKILL)
        if pidfd >= 0:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            poller.poll(int(KILL_WAIT_S * 1000))
        proc.reap(block=True)
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def await_tmpfs(pid: int, size: int) -> int:
    """Open the jail's /tmp once bwrap has mounted it (it then waits for its program).

    Holding a descriptor keeps the tmpfs alive after the jail ends, so its fill level can
    be read after the exit: that is how a full disk becomes a breach. OSError (timeout)
    when it does not appear.
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
    raise TimeoutError(f"the jail's /tmp did not appear within {SETUP_TIMEOUT_S} s")
