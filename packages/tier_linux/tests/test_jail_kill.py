"""A jail killed while bwrap is still setting it up leaves nothing of itself behind.

bwrap 0.11 ties the jail's first process (pid 1 of its pid namespace) to its own life
(``--die-with-parent``) only once that process reaches its init loop, after bwrap has
reported its pid and let it go. A kill that lands between the two must still take it:
otherwise it waits for bwrap's "go" for ever, reparented to the host's init. The window
is microseconds wide; bwrap's own ``--userns-block-fd`` holds its outer process exactly
there (after the pid report, before the "go"), so the test is deterministic.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

import pytest

from panday_core.policy import FsPolicy, Limits, SandboxPolicy
from panday_core.process import ChildProcess, spawn
from panday_tier_linux import cgroups
from panday_tier_linux.host import Bwrap, find_bwrap
from panday_tier_linux.jail import JailSupervisor, Status
from panday_tier_linux.session import open_session

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="T2 Linux runs on Linux only"
)

WRAPPER = """#!{python}
import os, sys
real, info = {real!r}, {info!r}
argv = sys.argv[1:]
if argv[:2] == ["--args", "3"]:
    data = b""
    while chunk := os.read(3, 65536):
        data += chunk
    # --userns-block-fd is refused beside --disable-userns; the process tree is the same.
    words = [w for w in data.split(b"\\0")[:-1] if w != b"--disable-userns"]
    args = os.memfd_create("args", 0)
    os.write(args, b"".join(w + b"\\0" for w in words))
    os.lseek(args, 0, 0)
    os.dup2(args, 3)
    out = os.open(info, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    wrapper = os.getpid()  # bwrap's, once it execs

    def clone():
        # The jail's pid 1 as bwrap's child named bwrap (the caller's own --info-fd, a
        # session jail holder's, wins over ours: then the file stays empty).
        try:
            with open(f"/proc/{{wrapper}}/task/{{wrapper}}/children") as f:
                kids = f.read().split()
        except OSError:
            return None
        for kid in kids:
            try:
                with open(f"/proc/{{kid}}/comm") as f:
                    if f.read() == "bwrap\\n":
                        return int(kid)
            except OSError:
                pass
        return None

    if os.fork() == 0:  # backstop, 60 s at most: a test killed before its cleanup
        import select, signal, time
        os.closerange(0, 1 << 16)
        deadline = time.monotonic() + 60
        pid = None
        while pid is None and time.monotonic() < deadline:
            with open(info) as f:
                text = f.read()
            if '"child-pid":' in text:
                pid = int(text.split('"child-pid":')[1].split(",")[0].strip(" }}\\n"))
            else:
                pid = clone()
            if pid is None:
                time.sleep(0.05)
        if pid is None:
            os._exit(0)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            os._exit(0)
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os._exit(0)
    hold_r, hold_w = os.pipe()  # bwrap holds both ends: its read waits for ever
    for fd in (out, hold_r, hold_w):
        os.set_inheritable(fd, True)
    argv = ["--info-fd", str(out), "--userns-block-fd", str(hold_r), *argv]
os.execv(real, [real, *argv])
"""


def held_bwrap(tmp_path: Path) -> tuple[Bwrap, Path]:
    """A bwrap whose outer process stops after reporting the jail's pid, and the file that
    pid is reported in."""
    real = find_bwrap()
    assert real is not None, "no bwrap on this host: T2 Linux's suite needs one"
    info = tmp_path / "info.json"
    wrapper = tmp_path / "bwrap-held"
    wrapper.write_text(WRAPPER.format(python=sys.executable, real=real.path, info=str(info)))
    wrapper.chmod(0o700)
    return Bwrap(str(wrapper), real.source), info


def first_pid(info: Path, deadline: float) -> int | None:
    """The jail's pid 1 as bwrap reported it (bounded wait)."""
    while time.monotonic() < deadline:
        text = info.read_text() if info.exists() else ""
        if '"child-pid":' in text:
            digits = text.split('"child-pid":', 1)[1].strip().split(",")[0].split()[0]
            return int(digits.rstrip("}"))
        time.sleep(0.02)
    return None


def leader_only(self: ChildProcess, sig: int) -> None:
    """`ChildProcess.signal_group` as if the jail's pid 1 had left bwrap's group already
    (it does, with its setsid, before it ties its life to bwrap's)."""
    if self.status is None:
        with suppress(ProcessLookupError):
            os.kill(self.pid, sig)


@pytest.mark.parametrize("layer", ["process group", "pidfd"])
def test_a_jail_killed_during_its_setup_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: str
) -> None:
    # Each way of reaching the jail's pid 1 is tested with the other switched off.
    ws = tmp_path / "ws"
    ws.mkdir()

    # Without a cgroup, nothing but the kill itself can take the jail's pid 1 (a cgroup
    # kill would hide the fault on hosts that have one).
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise cgroups.CgroupUnavailable("no cgroup in this test")

    def unreported(self: JailSupervisor, proc: object) -> int:
        del self, proc
        return -1

    monkeypatch.setattr(cgroups, "open_session", refuse)
    # A bwrap per command (the session jail's holder, held the same way, is the next test's).
    monkeypatch.setenv("PANDAY_T2_SESSION_JAIL", "0")
    if layer == "process group":
        monkeypatch.setattr(JailSupervisor, "_first_process", unreported)
    else:
        monkeypatch.setattr(ChildProcess, "signal_group", leader_only)
    policy = SandboxPolicy(fs=FsPolicy(workspace=str(ws)), limits=Limits(wall_clock_ms=60_000))
    bwrap, info = held_bwrap(tmp_path)
    with open_session(policy) as session:  # control: the same command runs unheld
        assert session.run(["/bin/sh", "-c", "echo ran"]).stdout == b"ran\n"
    pidfds: list[int] = []

    def watch() -> None:
        pid = first_pid(info, time.monotonic() + 60)
        if pid is not None:
            pidfds.append(os.pidfd_open(pid))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with open_session(policy, bwrap=bwrap) as session:
            result = session.run(["/bin/sh", "-c", "echo ran"], timeout_ms=2000)
        watcher.join(65)
        # Controls: the jail was held in its setup (its pid 1 existed, bwrap reported it)
        # and the command never ran; the wall clock is what killed it.
        assert pidfds, "inconclusive: bwrap never reported the jail's pid 1"
        assert result.stdout == b""
        assert result.breach is not None
        assert result.breach.kind == "wall_clock"
        poller = select.poll()
        poller.register(pidfds[0], select.POLLIN)
        gone = bool(poller.poll(10_000))  # a pidfd is readable once its process has exited
        assert gone, "the jail's pid 1 outlived the session that killed its bwrap"
    finally:
        for fd in pidfds:  # kill only what this test started, by its own descriptor
            with suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)


def test_a_session_jail_held_in_its_setup_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session jail's holder never says it is ready (held where bwrap has reported its
    jail's pid 1 and not let it go): the session gives up on it, and that pid 1, which
    has left bwrap's group and is not yet tied to bwrap's life, goes too."""
    from panday_tier_linux import sessionjail  # noqa: PLC0415 - patched below

    monkeypatch.delenv("PANDAY_T2_SESSION_JAIL", raising=False)
    monkeypatch.setattr(sessionjail, "READY_TIMEOUT_S", 2.0)
    seen: list[int] = []
    ready = sessionjail._ready  # pyright: ignore[reportPrivateUsage]

    def watched(holder: ChildProcess, info_r: int) -> int:
        children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children")
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            # The jail's pid 1 is bwrap's clone (the wrapper's backstop is a child too).
            for kid in children.read_text(encoding="ascii").split():
                with suppress(OSError):
                    if Path(f"/proc/{kid}/comm").read_text(encoding="ascii") == "bwrap\n":
                        seen.append(os.pidfd_open(int(kid)))
                        break
            time.sleep(0.02)
        return ready(holder, info_r)

    monkeypatch.setattr(sessionjail, "_ready", watched)
    # As if pid 1 had left bwrap's group already: only its pidfd reaches it then.
    monkeypatch.setattr(ChildProcess, "signal_group", leader_only)
    ws = tmp_path / "ws"
    ws.mkdir()
    bwrap, _info = held_bwrap(tmp_path)
    try:
        with (
            open_session(SandboxPolicy(fs=FsPolicy(workspace=str(ws)))) as session,
            pytest.raises(OSError, match="did not start"),
        ):
            sessionjail.SessionJail.open(
                session.spec, session.roots, bwrap=bwrap.path, program=session.program
            )
        assert seen, "inconclusive: the held holder never made its jail's pid 1"
        poller = select.poll()
        poller.register(seen[0], select.POLLIN)
        assert poller.poll(10_000), "the held holder's pid 1 outlived the session's give-up"
    finally:
        for fd in seen:  # kill only what this test started, by its own descriptor
            with suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)


def first_word(fd: int) -> int:
    """The number a stand-in printed first (its output pipe does not block: bounded wait)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    assert poller.poll(30_000), "the stand-in printed nothing"
    return int(os.read(fd, 64).split()[0])


def supervisor_reporting(pid: int) -> JailSupervisor:
    """A supervisor whose status pipe says bwrap reported `pid` as the jail's pid 1."""
    r, w = os.pipe()
    os.write(w, b'{ "child-pid": %d }\n' % pid)
    os.close(w)
    return JailSupervisor(cgroup=None, cpu_ms=None, disk_bytes=None, status=Status(r))


def test_the_reported_pid_is_killed_only_while_it_is_bwraps_child() -> None:
    # A pid is a number that can be reused: the kill takes it only when the process the
    # pidfd holds is the stand-in bwrap's own child.
    stand_in = spawn(["/bin/sh", "-c", "sleep 30 & echo $!; wait"], env={})
    other = subprocess.Popen(["/bin/sleep", "30"])  # not the stand-in's child
    try:
        assert stand_in.stdout is not None
        child = first_word(stand_in.stdout)
        own = supervisor_reporting(child)
        foreign = supervisor_reporting(other.pid)
        try:
            foreign.kill(stand_in)  # also kills the stand-in's group (the sleep with it)
            # SIGKILL is queued at once but takes effect when the process next runs: give a
            # wrongly killed process ample time to show it (it would be gone in ms).
            with pytest.raises(subprocess.TimeoutExpired):
                other.wait(timeout=5)
        finally:
            foreign.status.close()
        # Control: the same kill does take the reported pid when it is bwrap's child. The
        # child is outside the stand-in's group here, so only the pidfd reaches it.
        stand_in.reap(block=True)
        stand_in.close()
        stand_in = spawn(["/bin/sh", "-c", "setsid sleep 30 & echo $!; wait"], env={})
        assert stand_in.stdout is not None
        child = first_word(stand_in.stdout)
        pidfd = os.pidfd_open(child)
        own.status.close()
        own = supervisor_reporting(child)
        try:
            own.kill(stand_in)
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            assert poller.poll(10_000), "bwrap's reported child outlived the kill"
        finally:
            own.status.close()
            os.close(pidfd)
    finally:
        other.kill()
        other.wait()
        stand_in.signal_group(signal.SIGKILL)
        stand_in.reap(block=True)
        stand_in.close()
