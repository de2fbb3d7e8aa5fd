"""A T1 session as a caller meets it: what a command runs with and how it ends. What it
cannot reach is the escape suite's (tests/escape/test_t1.py)."""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_core.errors import CommandNotFound
from panday_core.policy import FsPolicy, Limits, SandboxPolicy
from panday_tier_linux.t1.landlock import kernel_abi
from panday_tier_linux.t1.launch import CommandThread
from panday_tier_linux.t1.session import open_session

if TYPE_CHECKING:
    from collections.abc import Callable

    from panday_tier_linux.t1.session import T1Session

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or isinstance(kernel_abi(), str),
    reason="T1 needs Linux with Landlock",
)


def _policy(ws: Path, **limits: int) -> SandboxPolicy:
    return SandboxPolicy(fs=FsPolicy(workspace=str(ws)), limits=Limits(**limits))


def test_a_program_is_found_as_execvp_would_find_it(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    script = tmp_path / "sub" / "s.sh"
    script.write_text("#!/bin/sh\necho here\n")
    script.chmod(0o755)
    with open_session(_policy(tmp_path)) as session:
        assert session.run(["./s.sh"], cwd="sub").stdout == b"here\n"
        assert session.run(["sub/s.sh"]).stdout == b"here\n"
        # A bare name is resolved in the command's PATH; the program gets the path found.
        assert session.run(["sh", "-c", "echo $0"]).stdout.endswith(b"/sh\n")
        with pytest.raises(CommandNotFound) as info:
            session.run(["no-such-program-here"])
        assert info.value.exit_code == 127  # a shell's "not found"


def test_the_environment_is_made_not_inherited(tmp_path: Path) -> None:
    os.environ["PANDAY_T1_CANARY"] = "leak"
    try:
        with open_session(_policy(tmp_path)) as session:
            out = session.run(["sh", "-c", "env"]).stdout.decode()
            tmp = session.tmp
    finally:
        del os.environ["PANDAY_T1_CANARY"]
    env = dict(line.split("=", 1) for line in out.splitlines())
    assert "PANDAY_T1_CANARY" not in env
    assert env["HOME"] == str(tmp_path)
    assert env["TMPDIR"] == tmp
    assert not Path(tmp).exists()  # the private tmp goes with the session


def test_the_wall_clock_kills_the_whole_group(tmp_path: Path) -> None:
    with open_session(_policy(tmp_path, wall_clock_ms=300)) as session:
        result = session.run(["sh", "-c", "sleep 30 & sleep 30; echo late"])
    assert result.breach is not None
    assert result.breach.kind == "wall_clock"
    assert b"late" not in result.stdout


def test_the_callers_threads_stay_unrestricted(tmp_path: Path) -> None:
    """Each command's restrictions belong to a command thread: the caller's threads,
    running commands concurrently, keep their own access (a socket, a file outside the
    workspace) and every command is restricted."""
    outside = tmp_path / "outside.txt"
    outside.write_text("caller's")
    ws = tmp_path / "ws"
    ws.mkdir()
    failures: list[str] = []

    def worker() -> None:
        with open_session(_policy(ws)) as session:
            for _ in range(5):
                result = session.run(["cat", str(outside)])
                if result.exit_code == 0:
                    failures.append("a command read outside its workspace")
                try:
                    socket.socket().close()
                    outside.read_text()
                except OSError as exc:
                    failures.append(f"the caller's thread was restricted: {exc}")

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    socket.socket().close()
    assert outside.read_text() == "caller's"


def test_each_command_is_ruled_by_its_own_ruleset_however_many_run(tmp_path: Path) -> None:
    """A command's Landlock ruleset belongs to a command thread, never to the session's
    spawning thread: rulesets would pile up there (a directory made after the first
    command would stay unwritable, and the 17th ruleset would not fit)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    later = ws / "later"
    with open_session(_policy(ws)) as session:
        # Ruled before "later" exists: its ruleset grants nothing there.
        assert session.run(["true"]).exit_code == 0
        later.mkdir()
        for i in range(20):  # more commands than Landlock stacks rulesets (16)
            result = session.run(["sh", "-c", f"echo {i} > later/file{i}"])
            assert result.exit_code == 0, (i, result.stderr)
    assert sorted(p.name for p in later.iterdir()) == sorted(f"file{i}" for i in range(20))


def test_a_ruleset_is_made_again_whenever_the_workspace_changes_past_landlocks_16(
    tmp_path: Path,
) -> None:
    """Each command whose rules differ from the last one's gets a new command thread: a
    directory the host makes before each command is writable by that command, twenty times
    (a ruleset applied on a thread already restricted would stack: the directory made after
    the first ruleset would stay unwritable, and the 17th would not fit)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with open_session(_policy(ws)) as session:
        for i in range(20):
            (ws / f"made{i}").mkdir()
            result = session.run(["sh", "-c", f"echo {i} > made{i}/file"])
            assert result.exit_code == 0, (i, result.stderr)
    assert all((ws / f"made{i}" / "file").read_text() == f"{i}\n" for i in range(20))


def test_commands_ruled_alike_share_a_command_thread_and_an_entry_protected_since_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands whose rules are the same are spawned from one command thread (no new
    thread or ruleset for each); a directory of the workspace that becomes protected
    between two commands (here: put on the caller's PATH) makes the rules differ, and the
    next command cannot write there."""
    ws = tmp_path / "ws"
    (ws / "bin").mkdir(parents=True)
    with open_session(_policy(ws)) as session:
        jail = session.jail
        # Positive control: writable while it is an ordinary directory.
        assert session.run(["sh", "-c", "echo 1 > bin/one"]).exit_code == 0
        first = jail._command  # pyright: ignore[reportPrivateUsage] - the thread kept
        assert session.run(["sh", "-c", "echo 2 > bin/two"]).exit_code == 0
        assert jail._command is first  # pyright: ignore[reportPrivateUsage] - kept, reused
        monkeypatch.setenv("PATH", f"{ws / 'bin'}:{os.environ.get('PATH', '')}")
        result = session.run(["sh", "-c", "echo 3 > bin/three"])
        assert jail._command is not first  # pyright: ignore[reportPrivateUsage] - replaced
    assert result.exit_code != 0, "a directory on the caller's PATH was written"
    assert not (ws / "bin" / "three").exists()
    assert (ws / "bin" / "two").read_text() == "2\n"


class _CallerInterruptError(Exception):
    """What the test's signal handler raises (as Ctrl-C's KeyboardInterrupt would)."""


def _reaped(pid: int) -> bool:
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


def _until(done: Callable[[], bool], seconds: float = 20) -> bool:
    """Whether `done()` holds within `seconds` (asked every 10 ms)."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _kill_left(pids: list[int]) -> None:
    """Kill and reap what the test started that is still there (by pid)."""
    for pid in pids:
        if not _reaped(pid):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_a_spawn_abandoned_by_an_interrupted_caller_is_killed_and_its_thread_retired(
    tmp_path: Path,
) -> None:
    """A signal whose handler raises (Ctrl-C) while the command thread spawns: the caller
    gets the exception at once; the child the thread then makes is killed and reaped
    (nothing would supervise it), and the thread serves no later command (its answer
    could be taken for the next one's). The collector stays off until the thread has undone
    the spawn. Control: the same thread spawns as asked."""
    assert gc.isenabled(), "the collector is off before the test"
    ws = tmp_path / "ws"
    ws.mkdir()
    inside, go_on = threading.Event(), threading.Event()
    spawned: list[int] = []

    def slow_spawn() -> int:
        inside.set()
        go_on.wait(20)
        pid = os.posix_spawn("/bin/sleep", ["/bin/sleep", "60"], {}, setsid=True)
        spawned.append(pid)
        return pid

    def interrupt(main: int) -> None:
        if inside.wait(20):
            signal.pthread_kill(main, signal.SIGUSR1)

    def raise_interrupted(_signum: int, _frame: object) -> None:
        raise _CallerInterruptError

    with open_session(_policy(ws)) as session:
        jail = session.jail
        thread = _command_thread(session)
        cwd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
        old = signal.signal(signal.SIGUSR1, raise_interrupted)
        helper = threading.Thread(target=interrupt, args=(threading.get_ident(),))
        try:
            pid = thread.run(cwd, lambda: os.posix_spawn("/bin/true", ["/bin/true"], {}))
            assert os.waitpid(pid, 0)[1] == 0  # control: handed over, spawned, answered
            helper.start()
            with pytest.raises(_CallerInterruptError):
                thread.run(cwd, slow_spawn)
            # Off until the thread has undone the spawn (a collection there would run
            # finalizers under the command's restrictions).
            collector_held = not gc.isenabled()
        finally:
            signal.signal(signal.SIGUSR1, old)
            go_on.set()
            if helper.ident is not None:
                helper.join(20)
            os.close(cwd)
        try:
            assert _until(lambda: bool(spawned) and _reaped(spawned[0])), (
                "the abandoned spawn's child was left running (or never made)"
            )
        finally:
            _kill_left(spawned)
        assert collector_held, "the collector ran again while the thread still spawned"
        assert _until(gc.isenabled), "the collector was left off"
        assert not thread.serves(thread.key), "an abandoned thread would serve the next command"
        assert session.run(["/bin/true"]).exit_code == 0
        assert jail._command is not thread  # pyright: ignore[reportPrivateUsage] - replaced


def _command_thread(session: T1Session) -> CommandThread:
    """The session's command thread, after a command it spawned (the control)."""
    assert session.run(["/bin/true"]).exit_code == 0
    thread = session.jail._command  # pyright: ignore[reportPrivateUsage] - the thread under test
    assert thread is not None
    return thread


class _RaisesOnceAnswered:
    """A lock that raises, once, right after a wait on it returns: what a signal's handler
    does when the signal came before the wait blocked (it runs once Python code runs)."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.armed = True

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:  # noqa: FBT002 - the lock's own signature
        got = self.lock.acquire(blocking, timeout)
        if got and self.armed:
            self.armed = False
            raise _CallerInterruptError
        return got

    def release(self) -> None:
        self.lock.release()


def test_a_spawn_abandoned_after_the_thread_answered_is_undone_by_the_caller(
    tmp_path: Path,
) -> None:
    """The caller's exception can come just after its wait returned, the thread having
    answered: the caller then kills and reaps the child itself (the thread will not), the
    collector is on again at once, and the thread ends. Control: the session spawns."""
    ws = tmp_path / "ws"
    ws.mkdir()
    spawned: list[int] = []

    def spawn_sleep() -> int:
        pid = os.posix_spawn("/bin/sleep", ["/bin/sleep", "60"], {}, setsid=True)
        spawned.append(pid)
        return pid

    with open_session(_policy(ws)) as session:
        thread = _command_thread(session)
        thread._done = _RaisesOnceAnswered(thread._done)  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue] - the race, made deterministic
        cwd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(_CallerInterruptError):
                thread.run(cwd, spawn_sleep)
            assert spawned, "the command thread made no spawn"
            assert _reaped(spawned[0]), "the answered spawn's child was left running"
            assert gc.isenabled(), "the collector was left off"
        finally:
            _kill_left(spawned)
            os.close(cwd)
        assert not thread.serves(thread.key)
        assert session.run(["/bin/true"]).exit_code == 0


class _SlowRestrictions:
    """Stands in for a command thread's restrictions: says where it runs, then waits
    (restricting nothing), so the caller can be interrupted while the thread starts."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go_on = threading.Event()
        self.native_id = 0

    def apply(self, _spawner: object) -> None:
        self.native_id = threading.get_native_id()
        self.entered.set()
        self.go_on.wait(20)


def test_a_thread_start_abandoned_by_an_interrupted_caller_ends_the_thread(
    tmp_path: Path,
) -> None:
    """A signal whose handler raises (Ctrl-C) while a new command thread restricts itself:
    the caller gets the exception, and the thread ends once restricted (else it would wait
    for ever for a spawn, holding its ruleset). Control: the session's spawner starts it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    slow = _SlowRestrictions()

    def interrupt(main: int) -> None:
        if slow.entered.wait(20):
            signal.pthread_kill(main, signal.SIGUSR1)

    def raise_interrupted(_signum: int, _frame: object) -> None:
        raise _CallerInterruptError

    with open_session(_policy(ws)) as session:
        _command_thread(session)
        thread = CommandThread(slow, key=None)  # pyright: ignore[reportArgumentType] - a stand-in
        old = signal.signal(signal.SIGUSR1, raise_interrupted)
        helper = threading.Thread(target=interrupt, args=(threading.get_ident(),))
        try:
            helper.start()
            with pytest.raises(_CallerInterruptError):
                thread.start(session.jail.spawner)
        finally:
            signal.signal(signal.SIGUSR1, old)
            slow.go_on.set()
            helper.join(20)
        assert slow.native_id, "the spawner did not start the thread"
        task = Path(f"/proc/self/task/{slow.native_id}")
        assert _until(lambda: not task.exists()), "the thread still waits for a spawn"


def _open_descriptors() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


def test_a_commands_rules_hold_each_entry_once_and_release_them(tmp_path: Path) -> None:
    """Recording a command's rules holds one descriptor per granted entry of the
    workspace (handed over, not copied) and closing them releases every one."""
    ws = tmp_path / "ws"
    for name in ("a", "b", "c"):
        (ws / name).mkdir(parents=True)
    (ws / "file").write_text("x")
    (ws / ".git" / "hooks").mkdir(parents=True)  # protected: its directory is not granted
    with open_session(_policy(ws)) as session:
        before = _open_descriptors()
        rules = session.jail.rules()
        held = _open_descriptors() - before
        rules.close()
        after = _open_descriptors()
        assert session.run(["sh", "-c", "echo 1 > a/x && echo 2 > file"]).exit_code == 0
        assert session.run(["sh", "-c", "echo 3 > .git/hooks/pre-commit"]).exit_code != 0
    assert held == 4, held  # a, b, c and file (control: the rules do hold them)
    assert after == before
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()


def test_one_session_spawns_for_several_threads_at_once(tmp_path: Path) -> None:
    """One session's commands started from several threads at once are each spawned (one
    at a time, by the session's command thread) and each answered."""
    outside = tmp_path / "outside.txt"
    outside.write_text("caller's")
    ws = tmp_path / "ws"
    ws.mkdir()
    assert outside.read_text() == "caller's"  # control: readable outside the sandbox
    answers: list[tuple[int | None, bytes, bytes]] = []
    with open_session(_policy(ws)) as session:

        def worker(n: int) -> None:
            for i in range(5):
                result = session.run(["sh", "-c", f"echo {n}-{i}; cat {outside}"])
                answers.append((result.exit_code, result.stdout, result.stderr))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
    assert len(answers) == 15
    # Each command ran (its echo) and each was restricted (the cat outside failed).
    assert sorted(out.split(b"\n")[0] for _, out, _ in answers) == sorted(
        f"{n}-{i}".encode() for n in range(3) for i in range(5)
    )
    assert all(
        code != 0 and b"caller's" not in out and b"Permission denied" in err
        for code, out, err in answers
    )


def test_a_forked_child_spawns_through_threads_of_its_own(tmp_path: Path) -> None:
    """A child forked from a process whose session has spawned has none of its threads:
    its first command starts a spawner and a command thread of its own (both know the pid
    they belong to), is restricted as the parent's are, and the parent's session goes on."""
    outside = tmp_path / "outside.txt"
    outside.write_text("caller's")
    assert outside.read_text() == "caller's"  # control: readable outside the sandbox
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)  # T1 makes no new entry at the workspace's top
    with open_session(_policy(ws)) as session:
        assert session.run(["true"]).exit_code == 0  # the parent's threads now exist
        with warnings.catch_warnings():
            # Python 3.12+ warns that a threaded process forks: the case under test.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: its verdict is its exit status, and it never cleans up
            code = 3
            try:
                wrote = session.run(["sh", "-c", "echo hi > sub/child.txt"]).exit_code == 0
                refused = session.run(["cat", str(outside)])
                denied = refused.exit_code != 0 and b"Permission denied" in refused.stderr
                code = 0 if wrote and denied else 2
            finally:
                os._exit(code)
        status = None
        # A child waiting on a thread it lacks hangs: bounded at 8 s (200 waits of 40 ms)
        # against its milliseconds of work, and below falsify's 10 s cut-off, so such a
        # child fails this assertion rather than the clock.
        for _ in range(200):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.04)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's command never started")
        assert os.waitstatus_to_exitcode(status) == 0
        assert (ws / "sub" / "child.txt").read_text() == "hi\n"
        parent = session.run(["cat", str(outside)])  # the parent's, restricted
        assert parent.exit_code != 0
        assert b"Permission denied" in parent.stderr
        assert session.run(["true"]).exit_code == 0


def test_a_failed_spawn_leaves_the_session_able_to_spawn(tmp_path: Path) -> None:
    """A command that cannot start (not executable) is answered, and the next one runs."""
    script = tmp_path / "plain.txt"
    script.write_text("not a program\n")
    with open_session(_policy(tmp_path)) as session:
        with pytest.raises(CommandNotFound):
            session.run(["./plain.txt"])
        assert session.run(["sh", "-c", "echo again"]).stdout == b"again\n"


def test_removing_the_private_tmp_never_follows_a_link(tmp_path: Path) -> None:
    """A command can leave links in its tmp pointing anywhere; the session's cleanup
    removes the links, never what they point to."""
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file").write_text("mine")
    ws = tmp_path / "ws"
    ws.mkdir()
    with open_session(_policy(ws)) as session:
        plant = (
            f'mkdir -p "$TMPDIR/d/e" && ln -s {keep} "$TMPDIR/d/e/to" && ln -s {keep} "$TMPDIR/top"'
        )
        assert session.run(["sh", "-c", plant]).exit_code == 0
        tmp = Path(session.tmp)
    assert not tmp.exists()
    assert (keep / "file").read_text() == "mine"
