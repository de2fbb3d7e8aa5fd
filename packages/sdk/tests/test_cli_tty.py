"""`panday run --tty` driven from a real pseudo-terminal (issue 27, 2): ``bash -i`` in the
jail with job control (Ctrl-Z, jobs, fg, Ctrl-C ending only the foreground job), a window
size passed in and a resize followed, the caller's terminal mode restored afterwards, and
TIOCSTI inside reaching nothing (the command's terminal is a pty of its own, and seccomp
refuses the ioctl; the control: the same ioctl on a pty outside injects)."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self").exists(), reason="a terminal in the jail is T2 Linux's"
)

BASH = "/usr/bin/bash"


class Terminal:
    """A pty whose slave is panday's stdin, stdout and stderr; we type on the master."""

    def __init__(self, exe: str, cwd: Path, *args: str) -> None:
        self.master, self.slave = os.openpty()
        self.resize(40, 120)
        self.before = termios.tcgetattr(self.slave)
        env = {**os.environ, "PS1": "PROMPT$ ", "TERM": "xterm", "XDG_CONFIG_HOME": "/nonexistent"}
        self.proc = subprocess.Popen(
            [exe, *args],
            cwd=cwd,
            env=env,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            start_new_session=True,
        )
        self.seen = b""
        self.transcript = b""
        """Everything read, kept whole for a failure's message (`seen` is consumed)."""

    def diagnosis(self) -> str:
        """The processes below panday as /proc shows them (state, process group, terminal's
        foreground group, signals ignored and blocked) and the output's last 600 bytes."""
        rows: list[str] = []
        frontier = {self.proc.pid}
        seen: set[int] = set()
        for _ in range(20):
            children: set[int] = set()
            for pid in frontier - seen:
                seen.add(pid)
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    status = Path(f"/proc/{pid}/status").read_text().splitlines()
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                except OSError:
                    continue
                wanted = ("SigIgn", "SigBlk", "SigPnd", "ShdPnd")
                sig = " ".join(ln for ln in status if ln.startswith(wanted))
                ids = f"pgrp={stat[2]} sid={stat[3]} tpgid={stat[5]}"
                rows.append(f"{pid} {comm} state={stat[0]} {ids} {sig}")
                children |= {int(k) for k in kids}
            frontier = children
            if not frontier:
                break
        return "\n".join([*rows, f"output: {self.transcript[-600:]!r}"])

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def expect(self, needle: bytes, timeout: float = 8) -> bytes:
        """Read until `needle` has been seen (event-driven: each read waits for output). The
        bound stays under falsify's per-test floor (10 s), so a hang fails here and the
        finally clause kills panday (and its jail with it)."""
        deadline = time.monotonic() + timeout
        while needle not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.master], [], [], left)[0]:
                pytest.fail(
                    f"never saw {needle!r}; output so far: {self.seen[-2000:]!r}\n"
                    + self.diagnosis()
                )
            self.read(needle)
        found, _, self.seen = self.seen.partition(needle)
        return found

    def read(self, needle: bytes) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:
            pytest.fail(f"the terminal closed before {needle!r}: {self.seen[-2000:]!r}")
        self.seen += data
        self.transcript += data

    def wait(self) -> int:
        """panday's exit code (it is killed after 30 s: a hang fails the test)."""
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self.master, self.slave):
            os.close(fd)


def test_an_interactive_shell_has_job_control_a_size_and_gives_the_terminal_back(
    exe: str, tmp_path: Path
) -> None:
    # Each step prints a marker the typed line does not contain (M""ARK: the shell's echo
    # of what we type shows the quotes), so what we wait for is the shell's own output.
    term = Terminal(exe, tmp_path, "run", "--tty", "--", BASH, "--norc", "--noprofile", "-i")
    try:
        term.expect(b"bash-")  # its first prompt (\s-\v\$): typed before it, input is lost
        term.type(b'echo M""ARK0\n')
        term.expect(b"MARK0")
        assert termios.tcgetattr(term.slave) != term.before, "the caller's terminal is not raw"
        term.type(b'stty size; echo M""ARK1\n')
        assert b"40 120" in term.expect(b"MARK1")
        term.resize(50, 132)
        # Queued before the next line is typed: panday's handler runs before it reads that
        # line (Python runs a pending handler at the next call after poll() returns).
        term.proc.send_signal(signal.SIGWINCH)  # the kernel would, were it panday's terminal
        term.type(b'stty size; echo M""ARK2\n')
        assert b"50 132" in term.expect(b"MARK2")
        # A job that says when it runs and when it is continued: no sleeping on a race. It
        # forks once, before it says so, and then only waits: dash forks with vfork, and a
        # ^Z that lands between a vfork and the child's exec stops the child while dash
        # itself waits for that exec, so no "Stopped" ever comes (seen at load 10, 3 runs in
        # 12, with `while :; do sleep 0.1; done`: /proc showed the parent in D, the child T).
        job = b'sh -c \'trap "echo RESU""MED" CONT; sleep 300 & echo STA""RTED; '
        job += b"while :; do wait; done'\n"
        term.type(job)
        term.expect(b"STARTED")
        term.type(b"\x1a")  # Ctrl-Z: the job stops, the shell gets the terminal back
        term.expect(b"Stopped")
        term.type(b'jobs; echo M""ARK3\n')
        assert b"Stopped" in term.expect(b"MARK3")
        term.type(b"fg\n")
        term.expect(b"RESUMED")  # in the foreground again (its CONT trap ran)
        term.type(b"\x03")  # Ctrl-C: the foreground job ends, the shell stays
        term.type(b'echo rc=$? M""ARK4\n')
        assert b"rc=130" in term.expect(b"MARK4")
        term.type(b"exit 3\n")
        assert term.wait() == 3
        assert termios.tcgetattr(term.slave) == term.before, "the caller's terminal stayed raw"
    finally:
        term.close()


def test_tiocsti_inside_reaches_nothing(exe: str, tmp_path: Path) -> None:
    # Control: on a pty outside, TIOCSTI types into it.
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSTI, b"Z")
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ICANON
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        assert select.select([slave], [], [], 5)[0], "inconclusive: TIOCSTI injected nothing"
        assert os.read(slave, 1) == b"Z"
    finally:
        os.close(master)
        os.close(slave)
    probe = (
        "import fcntl, os, termios\n"
        "print('device', os.fstat(0).st_rdev)\n"
        "try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'Z')\n    print('injected')\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
    )
    term = Terminal(exe, tmp_path, "run", "--tty", "--", "/usr/bin/python3", "-c", probe)
    try:
        inner = int(term.expect(b"\r\nrefused 1").split(b"device ")[1])  # EPERM: seccomp
        assert term.wait() == 0
        assert inner != os.fstat(term.slave).st_rdev, "the jail got the caller's terminal"
        assert b"injected" not in term.seen
    finally:
        term.close()


def test_session_run_with_a_terminal_of_its_own(tmp_path: Path) -> None:
    """`Session.run(tty=True)`: the command's output is a terminal (the control: without
    it, it is not), 24 x 80."""
    import panday  # noqa: PLC0415 - the library, beside the CLI tests of this file
    from panday_core.policy import FsPolicy, SandboxPolicy  # noqa: PLC0415 - as above

    probe = ["sh", "-c", "test -t 1 && echo is-a-tty || echo not-a-tty; stty size 2>&1"]
    with panday.open(SandboxPolicy(fs=FsPolicy(workspace=str(tmp_path))), tier="t2-linux") as s:
        plain = s.run(probe)
        assert b"not-a-tty" in plain.stdout
        with_tty = s.run(probe, tty=True)
    assert with_tty.exit_code == 0
    assert with_tty.stdout.split(b"\r\n")[:2] == [b"is-a-tty", b"24 80"]


def test_a_command_reopens_its_terminal_behind_the_landlock_wall(tmp_path: Path) -> None:
    """The wall (T2 Linux's Landlock layer) allows writes to the terminal the command was
    given, so ``> /dev/stdout`` (a reopen of the pty through /proc/self/fd/1) works; a
    file outside the workspace stays refused in the same run (the control)."""
    import panday  # noqa: PLC0415 - the library, beside the CLI tests of this file
    from panday_core.policy import FsPolicy, SandboxPolicy  # noqa: PLC0415 - as above

    probe = ["sh", "-c", "echo reopened > /dev/stdout; echo x > /etc/hostname || echo refused"]
    with panday.open(SandboxPolicy(fs=FsPolicy(workspace=str(tmp_path))), tier="t2-linux") as s:
        done = s.run(probe, tty=True)
    assert done.exit_code == 0
    assert done.stdout.split(b"\r\n")[0] == b"reopened", done.stdout
    assert b"refused" in done.stdout
