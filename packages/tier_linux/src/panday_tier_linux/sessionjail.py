"""The session's end of zygote.py: a holder bwrap and a zygote per session; commands
launched through them.

What a command gets is what `jail.start` gives it with bwrap, except that the namespaces
and the session-wide mounts (the read-only root, /etc, /dev, the workspace, staged paths,
hidden state, the bridge) are made once, by the holder; each command gets its own mount,
pid and ipc namespaces, its /proc, its /tmp and the protected entries' binds.
"""

from __future__ import annotations

import json
import os
import select
import signal as _signal
import socket
import struct
import sys
import time
from contextlib import suppress
from typing import TYPE_CHECKING

from panday_core.process import ChildProcess, data_fd, spawn
from panday_tier_linux.argv import build_options, jail_command, jail_env
from panday_tier_linux.binds import CommandBinds
from panday_tier_linux.jail import (
    CgroupError,
    JailSupervisor,
    Status,
    await_tmpfs,
    child_pidfd,
)
from panday_tier_linux.zygote import FD_NAMES, MAX_FDS

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from panday_tier_linux.argv import JailSpec
    from panday_tier_linux.binds import Roots
    from panday_tier_linux.jail import Guard

READY_TIMEOUT_S = 30.0
NAMESPACES = ("user", "mnt", "net", "ipc", "uts", "cgroup", "pid")


class Refused(Exception):
    """The zygote could not set one command up (an entry not the one listed, a mount the
    kernel refused): that command gets a bwrap of its own."""


class ZygoteProcess(ChildProcess):
    """A command the zygote forked: not our child, so its end is read from its pidfd and
    its exit code from the status the zygote writes."""

    __slots__ = ("status_of",)

    def __init__(
        self,
        *,
        pid: int,
        pidfd: int,
        stdin: int | None,
        stdout: int,
        stderr: int,
        status_of: Status,
    ) -> None:
        super().__init__(
            pid=pid,
            pidfd=pidfd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            started=time.monotonic(),
        )
        self.status_of = status_of

    def reap(self, *, block: bool) -> bool:
        if self.status is not None:
            return True
        if self.pidfd is not None:  # else closed: it has ended
            poller = select.poll()
            poller.register(self.pidfd, select.POLLIN)
            if not poller.poll(-1 if block else 0):
                return False
        # Ended: the zygote writes its code (or nothing: it never ran) and closes.
        deadline = time.monotonic() + 5.0
        while self.status_of.fd >= 0 and time.monotonic() < deadline:
            self.status_of.read_available(wait_s=0.05)
            if self.status_of.value("exit-code") is not None:
                break
        raw = self.status_of.value("wait-status")
        self.status = raw if raw is not None else 1 << 8  # none: it never ran (exit 1)
        return True

    def exited(self) -> bool:
        if self.status is not None or self.pidfd is None:
            return True
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        return bool(poller.poll(0))

    def signal_group(self, sig: int) -> None:
        """Signal the command's init, by pidfd (SIGKILL is all panday sends: the init is
        pid 1 of the command's namespace, and its end takes the whole namespace)."""
        if self.status is None and self.pidfd is not None:
            with suppress(ProcessLookupError, PermissionError):
                _signal.pidfd_send_signal(self.pidfd, sig)


def _inside(binds: CommandBinds, workspace: str) -> list[tuple[tuple[str, bool], int]]:
    """The binds beneath the workspace (protected entries, their placeholders, pinned
    directories), shallowest first: ((path relative to it, read-only), descriptor)."""
    prefix = workspace.rstrip("/") + "/"
    return [
        ((dest[len(prefix) :], option != "--bind-fd"), fd)
        for option, fd, dest in sorted(binds.ops, key=lambda op: op[2].count("/"))
        if dest.startswith(prefix)
    ]


class _Ours:
    """Our ends of one command's pipes and sockets (closed together on a failure)."""

    def __init__(self) -> None:
        self.stdin: int | None = None
        self.stdout = self.stderr = self.status = self.program = self.report = -1
        self.reply: socket.socket | None = None

    def close(self) -> None:
        for fd in (self.stdin, self.stdout, self.stderr, self.status, self.program, self.report):
            if fd is not None and fd >= 0:
                with suppress(OSError):
                    os.close(fd)
        if self.reply is not None:
            self.reply.close()


def _ready(holder: ChildProcess, info_r: int) -> int:
    """The holder's first process (bwrap's init), once its command has printed that it
    runs: the jail is made then, its inner user namespace included."""
    if holder.stdout is None or _read_exactly(holder.stdout, 2) != b"R\n":
        raise OSError("the session jail did not start")
    info = os.read(info_r, 4096)
    return int(json.loads(info[: info.index(b"}") + 1])["child-pid"])


def _first_process(holder: ChildProcess, info_r: int) -> int:
    """A pidfd of the holder's jail's pid 1 (-1 when bwrap has not reported it or it is
    gone), checked to be the holder's child while the holder lives."""
    info = Status(os.dup(info_r))  # bwrap's --info-fd says child-pid as its status does
    try:
        info.read_available(wait_s=0)
        return child_pidfd(info.value("child-pid"), holder.pid)
    finally:
        info.close()


def _close_sent(sent: list[int], binds: CommandBinds) -> None:
    """Our copies of what a request carried, except the binds' own (theirs to close)."""
    held = set(binds.fds)
    for fd in sent:
        if fd not in held:
            with suppress(OSError):
                os.close(fd)
    sent.clear()


def _host_pid(pidfd: int) -> int:
    with open(f"/proc/self/fdinfo/{pidfd}", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    raise OSError("no pid for the command's pidfd")


class SessionJail:
    """One session's holder and zygote."""

    def __init__(
        self, holder: ChildProcess, zygote: ChildProcess, control: socket.socket, roots: Roots
    ) -> None:
        self.under_tmp = [
            p
            for p in (roots.workspace.path, *(s.path for s in roots.staged))
            if p == "/tmp" or p.startswith("/tmp/")  # noqa: S108 - the jail's own /tmp
        ]
        """The roots the command's fresh /tmp would hide: bound again on top of it."""
        self.served = 0
        """How many commands the zygote has set up (what tests tell the two paths by)."""
        self.holder = holder
        """The holder bwrap: it waits on its stdin, whose end (at `close`) ends it."""
        self.zygote = zygote
        self.control = control

    @classmethod
    def open(cls, spec: JailSpec, roots: Roots, *, bwrap: str, program: bytes) -> SessionJail:
        """Start the holder, wait until its jail is made (its command prints one line),
        then the zygote in its namespaces."""
        ws = roots.workspace
        # The session-wide binds, made as each command's are (`Roots.command_binds`): the
        # workspace and the staged paths, from the descriptors the session holds.
        session_binds = CommandBinds()
        session_binds.add("--bind-fd" if roots.writable else "--ro-bind-fd", os.dup(ws.fd), ws.path)
        for staged in roots.staged:
            session_binds.add("--ro-bind-fd", os.dup(staged.fd), staged.path)
        static = session_binds.options(6)
        given = session_binds.fds
        options = build_options(spec, cwd=ws.path, seccomp_fd=4, binds=static)
        words = b"".join(
            o.encode("utf-8", "surrogateescape") + b"\0" for o in [*options, "--info-fd", "5"]
        )
        info_r, info_w = os.pipe()
        fds = [data_fd(words), data_fd(program), info_w, *given]
        try:
            holder = spawn(
                [bwrap, "--args", "3", "--", "/bin/sh", "-c", "echo R; read x"],
                env={},
                stdin=True,
                pass_fds=fds,
            )
        finally:
            for fd in fds:
                os.close(fd)
        try:
            child = _ready(holder, info_r)
            ns = [os.open(f"/proc/{child}/ns/{n}", os.O_RDONLY | os.O_CLOEXEC) for n in NAMESPACES]
        except BaseException:
            first = _first_process(holder, info_r)
            holder.close()
            holder.signal_group(_signal.SIGKILL)
            if first >= 0:
                # Its jail's pid 1, held in its set-up: bwrap ties it to its own life only
                # once it is let go, and it left bwrap's group already (as `jail.start`'s).
                with suppress(ProcessLookupError):
                    _signal.pidfd_send_signal(first, _signal.SIGKILL)
                os.close(first)
            holder.reap(block=True)
            raise
        finally:
            os.close(info_r)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        from panday_tier_linux import zygote as _z

        try:
            zygote = spawn(
                [sys.executable, "-I", "-S", "-B", _z.__file__],
                env={},
                pass_fds=[theirs.fileno(), *ns],
            )
        finally:
            theirs.close()
            for fd in ns:
                os.close(fd)
        ready = ours.recv(4096)
        if ready != b"R":
            ours.close()
            zygote.close()
            zygote.reap(block=True)
            holder.close()  # its stdin: it ends
            holder.reap(block=True)
            why = ready[1:].decode(errors="replace") or "it ended"
            raise OSError(f"the zygote cannot serve here: {why}")
        return cls(holder, zygote, ours, roots)

    def start(
        self,
        spec: JailSpec,
        argv: Sequence[str],
        *,
        program: bytes,
        binds: CommandBinds,
        cwd: str,
        guard: Guard,
        cpu_ms: int | None,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
    ) -> tuple[ZygoteProcess, JailSupervisor, int] | None:
        """As `jail.start`: the command's init, waiting for its seccomp program (then
        `release`). None (nothing done, `binds` untouched) when its descriptors do not fit
        one message: bwrap's turn. Raises `Refused` when the zygote could not set it up,
        OSError when the zygote is gone; `binds` are closed then, and nothing ran."""
        inside = _inside(binds, spec.workspace)
        if len(FD_NAMES) + len(inside) + spec.reports + spec.wall > MAX_FDS:
            return None
        exec_cgroup = None
        sent: list[int] = []
        ours = _Ours()
        try:
            try:
                exec_cgroup = guard.new_exec()
            except OSError as exc:
                raise CgroupError(str(exc)) from exc
            request, sent = self._request(
                spec, argv, binds=binds, inside=inside, cwd=cwd, env=env, stdin=stdin, ours=ours
            )
            pidfd = self._ask(request, sent, ours, binds)
            pid = _host_pid(pidfd)
        except BaseException:
            if exec_cgroup is not None:
                exec_cgroup.remove()
            ours.close()
            binds.close()
            raise
        finally:
            _close_sent(sent, binds)
        binds.spawned()
        status = Status(ours.status)
        sup = JailSupervisor(
            cgroup=exec_cgroup,
            cpu_ms=cpu_ms,
            disk_bytes=spec.tmp_bytes,
            status=status,
            binds=binds,
            report_fd=ours.report if spec.reports else None,
            defaults=guard.defaults,
        )
        sup.filter = program
        proc = ZygoteProcess(
            pid=pid,
            pidfd=pidfd,
            stdin=ours.stdin,
            stdout=ours.stdout,
            stderr=ours.stderr,
            status_of=status,
        )
        self.served += 1
        return proc, sup, ours.program

    def _request(
        self,
        spec: JailSpec,
        argv: Sequence[str],
        *,
        binds: CommandBinds,
        inside: list[tuple[tuple[str, bool], int]],
        cwd: str,
        env: Mapping[str, str] | None,
        stdin: bool,
        ours: _Ours,
    ) -> tuple[dict[str, object], list[int]]:
        """The request for one command and the descriptors it carries (`FD_NAMES`, the
        entries, then the fronts' report pipe and memfd); our ends go to `ours`."""
        sent: list[int] = []
        if stdin:
            in_r, ours.stdin = os.pipe()
        else:
            in_r = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        sent.append(in_r)
        ours.stdout, out_w = os.pipe()
        ours.stderr, err_w = os.pipe()
        ours.status, status_w = os.pipe()
        prog_r, ours.program = os.pipe()
        ours.reply, reply = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sent += [out_w, err_w, reply.detach(), prog_r, status_w, binds.ops[0][1]]
        sent += [fd for _rel, fd in inside]
        fd_map = {"0": 0, "1": 1, "2": 2}
        report_child = wall_child = None
        if spec.reports:
            ours.report, report_w = os.pipe()
            os.set_blocking(ours.report, False)
            report_child = 6
            fd_map[str(report_child)] = len(sent)
            sent.append(report_w)
        if spec.wall:
            from panday_tier_linux import wall

            wall_child = 7 if spec.reports else 6
            fd_map[str(wall_child)] = len(sent)
            sent.append(wall.memfd())
        request: dict[str, object] = {
            "argv": jail_command(spec, argv, report_fd=report_child, wall_fd=wall_child),
            "env": jail_env(spec, env),
            "cwd": cwd,
            "workspace": spec.workspace,
            "protect": [entry for entry, _fd in inside],
            "hidden": list(binds.hidden),
            "proc_masked": list(spec.layout.proc),
            "tmp_bytes": spec.tmp_bytes,
            "under_tmp": self.under_tmp,
            "fd_map": fd_map,
        }
        if wall_child is not None:  # the command's init: the wall's other use (zygote.py)
            request["init"] = wall_child
        return request, sent

    def _ask(
        self, request: dict[str, object], sent: list[int], ours: _Ours, binds: CommandBinds
    ) -> int:
        """Send one request; the command's init's pidfd."""
        self.control.sendmsg(
            [json.dumps(request).encode()],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(sent)}i", *sent))],
        )
        # The zygote holds its copies now. Ours of the reply socket's other end closed
        # before the wait: a zygote that dies before it answers is then an end of file.
        _close_sent(sent, binds)
        reply, ours.reply = ours.reply, None
        assert reply is not None  # noqa: S101 - made by `_request`
        with reply:
            msg, anc, _flags, _addr = reply.recvmsg(4096, socket.CMSG_SPACE(4))
        if msg.startswith(b"E"):
            raise Refused(msg[1:].decode(errors="replace"))
        if not msg.startswith(b"P") or not anc:
            raise OSError("the zygote ended")
        return int(struct.unpack("i", anc[0][2][:4])[0])

    @staticmethod
    def release(proc: ZygoteProcess, sup: JailSupervisor, prog_w: int, guard: Guard) -> str | None:
        """As `jail.release`: the command's init bounded (cgroup, rlimits, /tmp watched),
        then let go with its seccomp program. None when it runs, else why it never ran
        (``bounds: <error>``); `prog_w` is closed either way, after the init is dead when
        it is not to run (its end of file alone would stop it too)."""
        ran = False
        try:
            try:
                if sup.cgroup is not None:
                    sup.cgroup.attach(proc.pid)
                if guard.rlimits:
                    sup.rlimits = guard.rlimits.apply(proc.pid)
                if sup.disk_bytes is not None:
                    sup.tmp_fd = await_tmpfs(proc.pid, sup.disk_bytes)
            except OSError as exc:
                return f"bounds: {exc}"
            if os.write(prog_w, sup.filter or b"") < 0:  # never: sup.filter is set by start
                return "bounds: the seccomp program was not written"
            ran = True
            return None
        finally:
            if not ran:
                proc.signal_group(_signal.SIGKILL)
                proc.reap(block=True)
            os.close(prog_w)

    def alive(self) -> bool:
        """Whether the zygote and the holder still run."""
        return not (self.zygote.exited() or self.holder.exited())

    def close(self) -> None:
        self.control.close()  # the zygote's end of file: it ends
        self.holder.close()  # the holder's stdin: it ends
        for child in (self.zygote, self.holder):
            deadline = time.monotonic() + 5.0
            while not child.reap(block=False) and time.monotonic() < deadline:
                time.sleep(0.005)
            if child.status is None:
                child.signal_group(_signal.SIGKILL)
                child.reap(block=True)
            child.close()


def _read_exactly(fd: int, size: int) -> bytes:
    """Up to `size` bytes from a non-blocking pipe, within `READY_TIMEOUT_S`."""
    data = b""
    deadline = time.monotonic() + READY_TIMEOUT_S
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            break
        chunk = os.read(fd, size - len(data))
        if not chunk:
            break
        data += chunk
    return data
