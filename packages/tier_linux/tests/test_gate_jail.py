"""Gates round three (issue 28): guards whose faults the auditor planted and no gate saw.

Each test asserts what a real jail, the kernel or the compiled filter does, never a
constant compared with itself; each kills the `tools/mutations.toml` entry named beside it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from panday_core import userstate
from panday_core.capabilities import Support
from panday_core.declared.t2_linux import HOST_GUARD
from panday_core.errors import PolicyViolation
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux import seccomp
from panday_tier_linux.capabilities import host_capabilities
from panday_tier_linux.jail import parent_of
from panday_tier_linux.session import open_session

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="T2 Linux runs on Linux only"
)


def _sh(workspace: Path, script: str, **fs: object) -> tuple[int | None, str]:
    policy = SandboxPolicy(fs=FsPolicy(workspace=str(workspace), **fs))  # pyright: ignore[reportArgumentType] - test keywords
    with open_session(policy) as session:
        result = session.run(["/bin/sh", "-c", script])
    return result.exit_code, (result.stdout + result.stderr).decode(errors="replace")


# ---- kills allow_home - .zshenv dropped (issue 28)

# What the shells themselves read at start-up (bash(1) INVOCATION, zsh(1) STARTUP/SHUTDOWN
# FILES, dash(1)): written from their manuals, not from panday's table.
SHELL_START_UP_FILES = (
    ".profile",
    ".bash_profile",
    ".bash_login",
    ".bashrc",
    ".bash_logout",
    ".zshenv",
    ".zprofile",
    ".zshrc",
    ".zlogin",
    ".zlogout",
)


def test_a_jail_whose_workspace_is_the_home_cannot_write_any_shell_start_up_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    probes = " ; ".join(
        f"echo planted >> {name} && echo WROTE {name}" for name in SHELL_START_UP_FILES
    )
    code, out = _sh(home, f"echo ok > notes.txt && echo CONTROL; {probes}; true", allow_home=True)
    assert code == 0, out
    # Positive control: the same jail writes an ordinary file of that home.
    assert "CONTROL" in out, out
    assert (home / "notes.txt").read_text() == "ok\n"
    wrote = [line for line in out.splitlines() if line.startswith("WROTE")]
    assert not wrote, f"ESCAPE: start-up files written in a home workspace: {wrote}"
    for name in SHELL_START_UP_FILES:
        path = home / name
        assert not path.exists() or b"planted" not in path.read_bytes(), name


# ---- kills t2-linux - a staged path's pins inside a protected entry re-bound


@pytest.mark.usefixtures("launch")
def test_a_staged_directory_inside_git_leaves_git_hooks_read_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    hooks = ws / ".git" / "hooks"
    (hooks / "data").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    # Control: without the staged path, .git/hooks is read-only in the jail.
    code, out = _sh(ws, "echo evil > .git/hooks/pre-commit || echo REFUSED")
    if "REFUSED" not in out:
        pytest.fail(f"inconclusive: control failed: .git/hooks writable already: {out}")
    code, out = _sh(
        ws,
        "echo ok > notes && echo CONTROL; echo evil > .git/hooks/pre-commit && echo WROTE; true",
        staged_ro=(str(hooks / "data"),),
    )
    assert code == 0, out
    assert "CONTROL" in out, out  # the workspace itself stays writable
    assert "WROTE" not in out, f"ESCAPE: .git/hooks written beside a staged path: {out}"
    assert not (hooks / "pre-commit").exists()


# ---- kills t2-linux - a workspace on the caller's sys.path accepted


def test_a_workspace_on_the_callers_import_path_is_refused_by_the_tier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    # Control: the same directory off the import path opens and runs.
    assert _sh(ws, "echo ok")[0] == 0
    monkeypatch.setattr(sys, "path", [str(ws), *sys.path])
    with pytest.raises(PolicyViolation) as refused:
        _sh(ws, "echo 'import os' > msgspec.py")
    assert "fs.workspace" in str(refused.value)
    assert "sys.path" in str(refused.value)
    assert not (ws / "msgspec.py").exists()


# ---- kills hostguard - the default pid ceiling raised


def test_a_default_jails_pid_ceiling_is_what_the_hosts_pid_max_gives(tmp_path: Path) -> None:
    """The documented bound (docs/tiers.md, hostguard's docstring): 4096 tasks, or a quarter
    of ``kernel.pid_max`` when that is smaller, read back from the jail's cgroup."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    expected = max(64, min(4096, pid_max // 4))
    row = next(g for g in host_capabilities().guarantees if g.name == HOST_GUARD)
    with open_session(SandboxPolicy(fs=FsPolicy(workspace=str(tmp_path)))) as session:
        seen = session.enforcement()
    if row.support is not Support.STRICT:
        pytest.skip("no writable cgroup here: the pid bound is an rlimit (escape suite)")
    assert seen.cgroup is not None
    assert int(seen.cgroup_limits["pids.max"]) == expected, (pid_max, seen.cgroup_limits)


# ---- kills seccomp - the compiler's identity left out of the key


def test_an_edited_compiler_never_reuses_a_cached_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(tmp_path))  # a cache of its own
    compiled: list[bytes] = []
    real = seccomp.compile_program

    def counting(spec: seccomp.FilterSpec) -> bytes:
        compiled.append(real(spec))
        return compiled[-1]

    monkeypatch.setattr(seccomp, "compile_program", counting)
    first = seccomp.program(seccomp.FilterSpec())
    assert seccomp.program(seccomp.FilterSpec()) == first
    assert len(compiled) == 1  # control: the second program came from the cache
    # The compiler is edited (its file changes): the next program is compiled again.
    edited = tmp_path / "seccomp.py"
    edited.write_text(Path(seccomp.__file__).read_text() + "\n# edited\n")
    monkeypatch.setattr(seccomp, "__file__", str(edited))
    seccomp.program(seccomp.FilterSpec())
    assert len(compiled) == 2, "an edited compiler's program was served from the cache"


# ---- kills t2-linux - die-with-parent dropped (no timing)

PARENT = """
import sys
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux.session import open_session
ws = sys.argv[1]
with open_session(SandboxPolicy(fs=FsPolicy(workspace=ws))) as session:
    session.run(["/bin/sh", "-c", "echo $$ > " + ws + "/started; exec sleep 3600"])
"""


def _descendants(pid: int) -> set[int]:
    out: set[int] = set()
    todo = [pid]
    while todo:
        here = todo.pop()
        for task in Path(f"/proc/{here}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in out:
                    out.add(child)
                    todo.append(child)
    return out


def _without_cgroups(argv: list[str]) -> list[str]:
    """`argv` in a mount namespace of its own whose /sys/fs/cgroup is an empty read-only
    tmpfs (root only; elsewhere as it is). Any panday session of this user that opens
    sweeps the cgroups of SIGKILLed callers and kills what is in them, so on a host where
    other sessions run (a loaded CI machine, other test workers) a jail in a cgroup would
    die of a sweep, at a moment nobody controls, even without --die-with-parent: this is
    what let the heartbeat probe's mutation survive at load 9 (issue 28). Without a
    writable cgroup the session bounds the jail with rlimits, and nothing but
    --die-with-parent can end it when its caller dies."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        return argv
    script = 'mount -t tmpfs -o ro,mode=0555 none /sys/fs/cgroup && exec "$@"'
    return [unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh", *argv]


@pytest.mark.usefixtures("launch")
def test_the_jail_dies_with_its_sigkilled_caller_whatever_the_load(tmp_path: Path) -> None:
    """Event-driven, not timed: the jail's processes are found from the caller's process
    tree, the caller is SIGKILLed, and each process's pidfd must become readable (it
    exited). Only a jail that never dies meets the bound, which is generous (5 s: the
    kernel kills a pid namespace in milliseconds) and not what the verdict depends on; it
    stays under falsify's per-test floor (10 s), so a surviving jail is found and killed
    here (by pidfd), not left running when falsify kills the test. No other session can
    end the jail (no cgroup)."""
    started = tmp_path / "started"
    parent = subprocess.Popen(_without_cgroups([sys.executable, "-c", PARENT, str(tmp_path)]))
    try:
        until = time.monotonic() + 120
        while not started.exists() and parent.poll() is None and time.monotonic() < until:
            time.sleep(0.05)
        if not started.exists():
            pytest.fail(f"inconclusive: control failed: the jail never ran (exit {parent.poll()})")
        jail = _descendants(parent.pid)
        assert jail, "inconclusive: no process under the caller"
        fds = {pid: os.pidfd_open(pid) for pid in jail if Path(f"/proc/{pid}").exists()}
        try:
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait(timeout=60)
            poller = select.poll()
            for fd in fds.values():
                poller.register(fd, select.POLLIN)
            alive = set(fds.values())
            deadline = time.monotonic() + 5
            while alive and time.monotonic() < deadline:
                for fd, _ in poller.poll(1000):
                    alive.discard(fd)
                    poller.unregister(fd)
            left = [pid for pid, fd in fds.items() if fd in alive]
            assert not left, f"ESCAPE: the jail outlived its SIGKILLed caller: {left}"
        finally:
            for pid, fd in fds.items():
                if fd in fds.values() and Path(f"/proc/{pid}").exists():
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                os.close(fd)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


# ---- kills t2-linux - a waiting jail is let go by its caller's death (--block-fd's end of file)

HELD_CALLER = """
import os, sys
os.environ["PANDAY_T2_SESSION_JAIL"] = "0"  # bwrap's path (test_session_jail.py: the other)
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux import jail, session as sessions

def held(proc, sup, filter_w, guard):
    # As `jail.release` begins: the jail's pid 1 is reported, nothing bounds it yet.
    sup.status.read_available(wait_s=jail.CHILD_PID_TIMEOUT_S)
    print(proc.pid, sup.status.value("child-pid"), flush=True)
    if os.read(0, 1) != b"x":  # the test SIGKILLs this process here, or lets it go on
        os._exit(3)
    return jail.release(proc, sup, filter_w, guard)

sessions.release = held
ws = sys.argv[1]
with sessions.open_session(SandboxPolicy(fs=FsPolicy(workspace=ws))) as session:
    print(session.run(["/bin/sh", "-c", "echo ran > " + ws + "/ran"]).exit_code, flush=True)
"""


def _held_caller(ws: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """A session's caller stopped inside `jail.release` before it bounds or lets its jail
    go; the caller, bwrap's pid and the jail's pid 1 (checked to be bwrap's child), once
    that pid 1 has its own root (bwrap has let it go on and it has built the jail).

    Before that, pid 1 waits for bwrap's outer process, whose death (it dies with the
    caller) would leave it waiting for ever: bwrap's own window, of a few instructions
    between its pid report and its "go", which a loaded host stretches (half of the runs
    at load 8 in falsify's copy). It is not what this test is about."""
    caller = subprocess.Popen(
        _without_cgroups([sys.executable, "-c", HELD_CALLER, str(ws)]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert caller.stdout is not None
    poller = select.poll()
    poller.register(caller.stdout, select.POLLIN)
    if not poller.poll(120_000):
        caller.kill()
        caller.wait()
        pytest.fail("inconclusive: the caller never reached its jail's release")
    words = caller.stdout.readline().split()
    bwrap, first = int(words[0]), int(words[1])
    assert parent_of(first) == bwrap, "inconclusive: not bwrap's child"
    host_root = Path("/").stat().st_dev
    deadline = time.monotonic() + 60
    while Path(f"/proc/{first}/root").stat().st_dev == host_root:
        if time.monotonic() > deadline:
            caller.kill()
            caller.communicate(timeout=60)
            pytest.fail("inconclusive: the jail's pid 1 never left the host's root")
        time.sleep(0.001)
    return caller, bwrap, first


def _exited(pidfd: int, wait_s: float) -> bool:
    """Whether the process `pidfd` holds has exited (a pidfd is readable then)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(int(wait_s * 1000)))


def test_a_jail_whose_caller_dies_before_releasing_it_never_runs(tmp_path: Path) -> None:
    """The caller is SIGKILLed after bwrap reported the jail and before the jail was bound
    (its cgroup, its rlimits) and let go: what it held of the jail closes with it. That
    must not be a "go", or the command would run with no bound at all; and the jail must
    not wait for ever either, or it outlives its caller. Decided by events, not a clock:
    bwrap's outer process exits (--die-with-parent), then the jail's pid 1 exits, and only
    then is the command's mark looked for (a command that ran wrote it before its end).
    No cgroup is writable for the caller, so no other session's sweep can end the jail."""
    ws = tmp_path / "ws"
    ws.mkdir()
    mark = ws / "ran"
    # Control: the same held caller, let go, runs the command (the mark works).
    caller, _, _ = _held_caller(ws)
    out, _ = caller.communicate(b"x", timeout=120)
    assert caller.returncode == 0, "inconclusive: control failed: the released caller"
    assert out.split() == [b"0"], f"inconclusive: control failed: {out!r}"
    assert mark.exists(), "inconclusive: control failed: the released jail wrote no mark"
    mark.unlink()

    caller, bwrap, first = _held_caller(ws)
    fds: list[int] = []
    try:
        fds += [os.pidfd_open(bwrap), os.pidfd_open(first)]
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait(timeout=60)
        assert _exited(fds[0], 60), "inconclusive: bwrap outlived its SIGKILLed caller"
        # The bound is generous (the jail ends in milliseconds) and under falsify's floor.
        assert _exited(fds[1], 8), "the jail's pid 1 outlived its SIGKILLed caller, waiting"
        assert not mark.exists(), "ESCAPE: the jail ran its command though never let go"
    finally:
        with contextlib.suppress(ProcessLookupError):  # kill only what this test started
            for fd in fds[1:]:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        for fd in fds:
            os.close(fd)
        if caller.poll() is None:
            caller.kill()
        caller.communicate(timeout=60)  # reaped, its pipes closed
