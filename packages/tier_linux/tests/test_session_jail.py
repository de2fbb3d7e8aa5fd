"""The session jail: commands forked by the zygote into namespaces made once per session
get what a bwrap of their own gives them (the escape suite runs through it as well)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux.session import LinuxSession, open_session

pytestmark = pytest.mark.skipif(not Path("/proc/self/ns").is_dir(), reason="Linux only")


@pytest.fixture
def zygote(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PANDAY_T2_SESSION_JAIL", raising=False)


def _open(ws: Path) -> LinuxSession:
    return open_session(SandboxPolicy(fs=FsPolicy(workspace=str(ws))))


def _served(session: LinuxSession) -> int:
    """How many commands the session jail set up (which path ran is the point)."""
    jail = session._jail  # pyright: ignore[reportPrivateUsage]
    return 0 if jail is None else jail.served


def _without_wall_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's init a fork of the zygote's interpreter (as where there is no wall)."""
    from panday_tier_linux import sessionjail  # noqa: PLC0415 - patched here

    request = sessionjail.SessionJail._request  # pyright: ignore[reportPrivateUsage]

    def without(*args: object, **kwargs: object) -> tuple[dict[str, object], list[int]]:
        made, sent = request(*args, **kwargs)  # pyright: ignore[reportArgumentType]
        made.pop("init", None)
        return made, sent

    monkeypatch.setattr(sessionjail.SessionJail, "_request", without)


@pytest.mark.usefixtures("zygote")
@pytest.mark.parametrize("init", ["wall", "interpreter"])
def test_commands_run_in_the_session_jail_with_nothing_of_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, init: str
) -> None:
    """What the kernel says of the command and of its init, pid 1 of its namespace: the
    wall's other use (nothing of the host's interpreter, not even its path, is in there),
    or, where there is no wall, a fork of the zygote's interpreter."""
    if init == "interpreter":
        _without_wall_init(monkeypatch)
    show = (
        "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status; "
        "hostname; grep -E '^Cap(Inh|Prm|Eff|Amb):' /proc/1/status | sed 's/^/init /'; "
        'awk \'$5 == "/proc" { print "proc", $6 }\' /proc/self/mountinfo | tail -n 1; '
        # the masks: mounts on the command's own /proc (not the holder's, beneath it)
        'awk \'NR == FNR { if ($5 == "/proc") id = $1; next } $5 ~ "^/proc/." && $2 == id '
        '{ print "mask", $5, $6 }\' /proc/self/mountinfo /proc/self/mountinfo; '
        "tr '\\0' ' ' < /proc/1/cmdline; echo"
    )
    with _open(tmp_path) as session:
        result = session.run(["sh", "-c", show])
        assert _served(session) == 1
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.decode().split("\n")
    for kind in ("Inh", "Prm", "Eff", "Bnd", "Amb"):
        assert f"Cap{kind}:\t0000000000000000" in lines, lines
    for kind in ("Inh", "Prm", "Eff", "Amb"):  # the init's CAP_SYS_ADMIN, ambient for its
        assert f"init Cap{kind}:\t0000000000000000" in lines, lines  # exec, is gone too
    assert "NoNewPrivs:\t1" in lines
    assert "Seccomp:\t2" in lines
    assert "panday" in lines
    # The command's init (pid 1 of its namespace) holds no capability either, and the
    # command's own /proc (the topmost mount there) is read-only, as the kernel says.
    assert any(line.startswith("proc ro,") for line in lines), lines
    # Each of the host's kernel files in it is a mask, read-only and no device.
    masks = [line.split() for line in lines if line.startswith("mask ")]
    assert masks, "inconclusive: no kernel file of this host is masked"
    assert all(m[2].startswith("ro,nosuid,nodev") for m in masks), masks
    pid1 = lines[-2]
    assert pid1.startswith("panday-init -i ") == (init == "wall"), pid1
    assert (sys.executable in pid1) == (init == "interpreter"), pid1


@pytest.mark.usefixtures("zygote")
def test_each_command_has_its_own_pid_namespace_tmp_and_nothing_left_running(
    tmp_path: Path,
) -> None:
    listing = "for p in /proc/[0-9]*; do echo ${p#/proc/} $(cat $p/comm); done"
    with _open(tmp_path) as session:
        first = session.run(["sh", "-c", f"echo x > /tmp/left; sleep 60 & {listing}"])
        second = session.run(["sh", "-c", f"ls /tmp/left 2>/dev/null; {listing}"])
        assert _served(session) == 2  # both commands, the second after the first's set-up
    assert first.exit_code == 0, first.stderr
    # Control: while the first ran, its `sleep` was there, in a pid namespace of its own.
    assert "sleep" in first.stdout.decode().split()
    assert first.stdout.startswith(b"1 ")
    # Nothing of the first is in /tmp (the workspace may lie in /tmp: bound again on the
    # command's own), and its `sleep` died with it: only the init and sh are there.
    assert [line.split()[0] for line in second.stdout.decode().splitlines()] == ["1", "2"]
    assert b"sleep" not in second.stdout


@pytest.mark.usefixtures("zygote")
def test_protected_names_stay_out_of_reach_and_their_placeholders_go(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    with _open(tmp_path) as session:
        # Control: the workspace itself takes writes.
        ok = session.run(["sh", "-c", "echo data > file"])
        assert ok.exit_code == 0, ok.stderr
        made = session.run(["sh", "-c", "echo '{}' > .mcp.json"])
        hooked = session.run(["sh", "-c", "echo evil >> .git/config"])
        moved = session.run(["mv", ".git", "elsewhere"])
        assert _served(session) == 4
    assert (tmp_path / "file").read_text() == "data\n"
    assert made.exit_code != 0
    assert hooked.exit_code != 0
    assert moved.exit_code != 0
    assert (tmp_path / ".git" / "config").read_text() == "[core]\n"
    # The missing names' placeholders existed only while each command ran.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".git", "file"]


@pytest.mark.usefixtures("zygote")
def test_an_entry_replaced_after_it_was_listed_leaves_the_command_to_bwrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zygote binds the entry it finds only when it is the inode the session listed;
    else the command gets a bwrap of its own, which binds the listed one over the name."""
    (tmp_path / ".vscode").mkdir()
    with _open(tmp_path) as session:
        assert session.run(["true"]).exit_code == 0  # control: served as it is
        assert _served(session) == 1
        from panday_tier_linux.binds import Roots  # noqa: PLC0415 - patched below

        listed = Roots.command_binds

        def then_replaced(self: Roots, **kwargs: object) -> object:
            binds = listed(self, **kwargs)  # pyright: ignore[reportArgumentType]
            (tmp_path / ".vscode").rename(tmp_path / "old")
            (tmp_path / ".vscode").mkdir()
            return binds

        monkeypatch.setattr(Roots, "command_binds", then_replaced)
        from panday_tier_linux import sessionjail  # noqa: PLC0415 - watched below

        refused: list[str] = []

        class Seen(sessionjail.Refused):
            def __init__(self, why: str) -> None:
                refused.append(why)
                super().__init__(why)

        monkeypatch.setattr(sessionjail, "Refused", Seen)
        result = session.run(["sh", "-c", "touch .vscode/tasks.json"])
        assert _served(session) == 1  # that one by bwrap
        monkeypatch.setattr(Roots, "command_binds", listed)
        assert session.run(["true"]).exit_code == 0
        assert _served(session) == 2  # the zygote lives on for later commands
    assert refused == [".vscode is not the entry the session holds"]
    assert result.exit_code != 0  # the listed .vscode, bound read-only over the new one
    assert not (tmp_path / ".vscode" / "tasks.json").exists()


HELD_CALLER = """
import os, sys
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux import session as sessions, sessionjail

release = sessionjail.SessionJail.release

def held(proc, sup, prog_w, guard):
    # As `release` begins: the command's init waits for its program, nothing bounds it yet.
    print(proc.pid, flush=True)
    if os.read(0, 1) != b"x":  # the test SIGKILLs this process here, or lets it go on
        os._exit(3)
    return release(proc, sup, prog_w, guard)

sessionjail.SessionJail.release = staticmethod(held)
ws = sys.argv[1]
with sessions.open_session(SandboxPolicy(fs=FsPolicy(workspace=ws))) as session:
    print(session.run(["/bin/sh", "-c", "echo ran > " + ws + "/ran"]).exit_code, flush=True)
"""


def _held(ws: Path) -> tuple[subprocess.Popen[bytes], int]:
    caller = subprocess.Popen(
        [sys.executable, "-c", HELD_CALLER, str(ws)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "PANDAY_T2_SESSION_JAIL"},
    )
    assert caller.stdout is not None
    poller = select.poll()
    poller.register(caller.stdout, select.POLLIN)
    if not poller.poll(120_000):
        caller.kill()
        caller.communicate(timeout=60)
        pytest.fail("inconclusive: the caller never reached its command's release")
    return caller, int(caller.stdout.readline())


def test_a_command_whose_caller_dies_before_releasing_it_never_runs(tmp_path: Path) -> None:
    """The caller is SIGKILLed while the command's init waits for its seccomp program:
    its end of that pipe closes with it, which the init takes for no program (it never
    runs the command), and the session jail dies with its caller."""
    mark = tmp_path / "ran"
    caller, _ = _held(tmp_path)  # control: let go, the command runs and writes its mark
    out, _ = caller.communicate(b"x", timeout=120)
    assert out.split()[-1:] == [b"0"], f"inconclusive: control failed: {out!r}"
    assert mark.exists(), "inconclusive: control failed: the released command wrote no mark"
    mark.unlink()
    caller, init = _held(tmp_path)
    pidfd = os.pidfd_open(init)
    try:
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait(timeout=60)
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        assert poller.poll(8000), "the command's init outlived its SIGKILLed caller, waiting"
        assert not mark.exists(), "ESCAPE: the command ran though never let go"
    finally:
        with contextlib.suppress(ProcessLookupError):  # kill only what this test started
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)
        caller.communicate(timeout=60)


WITHOUT_OPEN_TREE = """
import ctypes, json, os, platform, struct, sys
# A kernel without open_tree (Linux < 5.2), as seccomp makes it: ENOSYS for that call.
assert platform.machine() == "x86_64"
ld_arch, ld_nr = 0x20, 0x20
prog = b"".join([
    struct.pack("HBBI", ld_arch, 0, 0, 4),            # the architecture
    struct.pack("HBBI", 0x15, 0, 3, 0xC000003E),      # x86-64, else allow
    struct.pack("HBBI", ld_nr, 0, 0, 0),              # the call's number
    struct.pack("HBBI", 0x15, 0, 1, 428),             # open_tree
    struct.pack("HBBI", 0x06, 0, 0, 0x00050000 | 38), # ENOSYS
    struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000),      # allow
])
libc = ctypes.CDLL(None, use_errno=True)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.prctl(22, 2, ctypes.byref(Fprog(len(prog) // 8, prog)), 0, 0) == 0
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux.session import open_session
with open_session(SandboxPolicy(fs=FsPolicy(workspace=sys.argv[1]))) as session:
    results = [session.run(["sh", "-c", "echo ran"]).stdout.decode() for _ in range(2)]
    print(json.dumps({"jail": session._jail is not None, "results": results}))
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the stand-in filter is x86-64's")
def test_a_kernel_without_the_new_mount_api_gets_a_bwrap_per_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PANDAY_T2_SESSION_JAIL"}
    code = WITHOUT_OPEN_TREE
    # Control: the same script with the filter's call number never made serves its commands.
    control = subprocess.run(
        [sys.executable, "-c", code.replace("428),", "999),"), str(tmp_path)],
        capture_output=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert control.returncode == 0, control.stderr.decode()
    assert json.loads(control.stdout) == {"jail": True, "results": ["ran\n", "ran\n"]}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == {"jail": False, "results": ["ran\n", "ran\n"]}
