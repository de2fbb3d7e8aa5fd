"""Escape probes: other processes, the terminal, and privilege.

Proves: host processes are invisible, unreadable and unsignalable (pid namespace); the
jail cannot trace or read the memory of processes, even its own children (seccomp);
keystrokes cannot be injected into a terminal (new session + seccomp on TIOCSTI, matched
on the low 32 bits); a setuid binary gains nothing (no_new_privs, nosuid, no capabilities).
"""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_tier_linux.argv import build_options
from panday_tier_linux.session import open_session

if TYPE_CHECKING:
    from collections.abc import Iterator

    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

PROBES = Path(__file__).resolve().parent / "probes"


def test_a_host_process_root_is_unreachable(esc: Escape, host_sleeper: tuple[int, str]) -> None:
    pid, _ = host_sleeper
    canary = esc.next_door / "canary.txt"
    canary.write_text("seen through /proc/pid/root")
    code = f"""
try:
    data = open("/proc/{pid}/root{canary}", "rb").read()
except OSError as exc:
    blocked(err(exc))
ok(f"read {{len(data)}} bytes through the host process's root")
"""
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code))


def test_a_host_process_environment_is_unreadable(
    esc: Escape, host_sleeper: tuple[int, str]
) -> None:
    pid, canary = host_sleeper
    code = f"""
try:
    env = open("/proc/{pid}/environ", "rb").read()
except OSError as exc:
    blocked(err(exc))
if {canary.encode()!r} in env:
    ok("canary read from the host process's environment")
blocked("environ readable but not the host process's")
"""
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code))


def test_host_processes_are_invisible(esc: Escape, host_sleeper: tuple[int, str]) -> None:
    pid, _ = host_sleeper
    code = f"""
pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
if {pid} in pids:
    ok("host pid listed")
blocked(f"{{len(pids)}} pids visible")
"""
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code))


def test_host_processes_cannot_be_signalled(esc: Escape, host_sleeper: tuple[int, str]) -> None:
    pid, _ = host_sleeper
    code = f"""
try:
    os.kill({pid}, 0)
except OSError as exc:
    blocked(err(exc))
ok("signal delivered")
"""
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code))


PTRACE = """
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
child = os.fork()
if child == 0:
    import time
    time.sleep(30)
    os._exit(0)
try:
    r = libc.ptrace(ctypes.c_long(PTRACE_ATTACH), ctypes.c_long(child), None, None)
    e = ctypes.get_errno()
    if r == 0:
        os.waitpid(child, 0)
        libc.ptrace(ctypes.c_long(PTRACE_DETACH), ctypes.c_long(child), None, None)
finally:
    os.kill(child, 9)
    os.waitpid(child, 0) if r != 0 else None
if r == 0:
    ok("attached to a child")
blocked(errno.errorcode.get(e, str(e)))
"""


def test_ptrace_is_denied_even_on_own_children(esc: Escape) -> None:
    esc.control(esc.outside(PTRACE))
    esc.must_block(esc.inside(PTRACE))


PROCESS_VM_READV = """
import time
secret = ctypes.create_string_buffer(b"child secret")
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(64)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 12)
remote = iovec(ctypes.cast(secret, ctypes.c_void_p), 12)
libc.process_vm_readv.restype = ctypes.c_ssize_t
n = libc.process_vm_readv(child, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
e = ctypes.get_errno()
os.kill(child, 9)
os.waitpid(child, 0)
if n == 12 and buf.raw[:12] == b"child secret":
    ok("read a child's memory")
blocked(errno.errorcode.get(e, str(e)))
"""


def test_process_vm_readv_is_denied(esc: Escape) -> None:
    esc.control(esc.outside(PROCESS_VM_READV))
    esc.must_block(esc.inside(PROCESS_VM_READV))


TIOCSTI = """
import fcntl, termios
done = []
def attempt(label, fn):
    try:
        fn()
        done.append(label)
    except OSError as exc:
        pass
attempt("TIOCSTI", lambda: fcntl.ioctl(0, termios.TIOCSTI, b"X"))
try:
    os.setsid()
except OSError:
    pass
attempt("TIOCSCTTY", lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
attempt("TIOCSTI after TIOCSCTTY", lambda: fcntl.ioctl(0, termios.TIOCSTI, b"Y"))
# The kernel reads the request as 32 bits: set bit 32 and a filter comparing all 64 bits
# would let it through (CVE-2019-10063).
ch = ctypes.c_char(b"Z")
request = ctypes.c_ulong((1 << 32) | termios.TIOCSTI)
r = libc.syscall(ctypes.c_long(16), ctypes.c_long(0), request, ctypes.byref(ch))
if r == 0:
    done.append("TIOCSTI with high bits")
injected = [d for d in done if d.startswith("TIOCSTI")]
if injected:
    ok(",".join(injected))
blocked(",".join(done) or "nothing")
"""


def _run_on_pty(argv: list[str], pass_fds: tuple[int, ...] = ()) -> tuple[bytes, bytes, int]:
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(  # noqa: PLW1510 - the outcome is parsed, not checked
            argv,
            stdin=slave,
            capture_output=True,
            timeout=60,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    finally:
        os.close(slave)
        os.close(master)
    return proc.stdout, proc.stderr, proc.returncode


def test_keystrokes_cannot_be_injected_into_a_terminal(esc: Escape) -> None:
    out, err, code = _run_on_pty(esc.py(TIOCSTI))
    esc.control(esc.parse("outside, on a pty", out, err, code))
    # Inside: the jail's stdin is a pty slave (what an interactive caller would pass on).
    with open_session(esc.policy()) as session, session.roots.command_binds() as binds:
        r, w = os.pipe()
        os.write(w, session.program)
        os.close(w)
        options = build_options(
            session.spec, cwd=session.workspace, seccomp_fd=r, binds=binds.options(None)
        )
        try:
            out, err, code = _run_on_pty(
                [session.bwrap.path, *options, "--", *esc.py(TIOCSTI)], (r, *binds.fds)
            )
        finally:
            os.close(r)
    esc.must_block(esc.parse("inside the jail, on a pty", out, err, code))


@pytest.fixture
def suid_helper(esc: Escape) -> Iterator[Path]:
    """A setuid-root program reporting its effective uid and capabilities.

    As root the test builds it; an unprivileged run cannot, so the CI script (running as
    root first) builds it and names it in PANDAY_ESCAPE_SUID_HELPER.
    """
    if os.geteuid() != 0:
        path = os.environ.get("PANDAY_ESCAPE_SUID_HELPER")
        if not path or not Path(path).exists():
            pytest.fail(
                "inconclusive: unprivileged runs need PANDAY_ESCAPE_SUID_HELPER "
                "(tools/ci/escape-as-user.sh builds it)"
            )
        yield Path(path)
        return
    # A directory every user may enter, so the control can run it as another user.
    shared = Path(f"/tmp/panday-suid-{os.getpid()}-{os.urandom(3).hex()}")
    shared.mkdir(mode=0o755)
    helper = esc.compile_c("suid-helper", (PROBES / "suid_helper.c").read_text())
    target = shared / "suid-helper"
    target.write_bytes(helper.read_bytes())
    target.chmod(0o4755)
    try:
        yield target
    finally:
        shutil.rmtree(shared)


def test_a_setuid_binary_gains_nothing(esc: Escape, suid_helper: Path) -> None:
    argv = [str(suid_helper)]
    if os.geteuid() == 0:
        # Control: an ordinary user running it outside becomes euid 0.
        control_argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    else:
        control_argv = argv
    esc.control(esc.outside_run(control_argv))
    esc.must_block(esc.inside_run(argv, staged=[suid_helper.parent]))
    # And staged into the workspace itself (same answer: no privilege from the bit).
    esc.must_block(esc.inside_run(argv, workspace=suid_helper.parent, access="ro"))
