"""Process escape probes: the environment, other processes (environment, signals, info),
setuid programs, the wall clock and what the process group kill can and cannot reach.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from macos_escape_helpers import PROBE_TIMEOUT_S, Jail, guarded, inconclusive, outside

from panday_core.errors import PolicyViolation
from panday_core.types import LimitKind

if TYPE_CHECKING:
    from collections.abc import Generator

    from panday_core.types import ExecResult

PROCARGS = """
import ctypes, sys
lib = ctypes.CDLL('/usr/lib/libSystem.B.dylib', use_errno=True)
lib.sysctl.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_uint, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p, ctypes.c_size_t]
mib = (ctypes.c_int * 3)(1, 49, int(sys.argv[1]))  # CTL_KERN, KERN_PROCARGS2, pid
size = ctypes.c_size_t(0)
if lib.sysctl(mib, 3, None, ctypes.byref(size), None, 0) != 0:
    print('DENIED', ctypes.get_errno()); sys.exit()
buf = ctypes.create_string_buffer(size.value)
if lib.sysctl(mib, 3, buf, ctypes.byref(size), None, 0) != 0:
    print('DENIED', ctypes.get_errno()); sys.exit()
print('FOUND' if sys.argv[2].encode() in buf.raw[: size.value] else 'READ')
"""

SIGNAL = guarded("import os, sys", "os.kill(int(sys.argv[1]), 0)", "SIGNALLED")

KINFO = """
import ctypes, struct, sys
lib = ctypes.CDLL('/usr/lib/libSystem.B.dylib', use_errno=True)
lib.sysctl.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_uint, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p, ctypes.c_size_t]
CTL_KERN, KERN_PROC, KERN_PROC_ALL, KERN_PROC_PID = 1, 14, 0, 1
KINFO_PROC_SIZE, P_PID_AT = 648, 40  # sizeof(struct kinfo_proc); kp_proc.p_pid
which, pid = sys.argv[1], int(sys.argv[2])
if which == 'pid':
    mib, n = (ctypes.c_int * 4)(CTL_KERN, KERN_PROC, KERN_PROC_PID, pid), 4
else:
    mib, n = (ctypes.c_int * 3)(CTL_KERN, KERN_PROC, KERN_PROC_ALL), 3
size = ctypes.c_size_t(0)
if lib.sysctl(mib, n, None, ctypes.byref(size), None, 0) != 0:
    print('DENIED', ctypes.get_errno()); sys.exit()
buf = ctypes.create_string_buffer(size.value + 64 * KINFO_PROC_SIZE)
size = ctypes.c_size_t(len(buf))
if lib.sysctl(mib, n, buf, ctypes.byref(size), None, 0) != 0:
    print('DENIED', ctypes.get_errno()); sys.exit()
pids = {struct.unpack_from('i', buf.raw, off + P_PID_AT)[0]
        for off in range(0, size.value - KINFO_PROC_SIZE + 1, KINFO_PROC_SIZE)}
print('SEEN' if pid in pids else f'NOT-SEEN {len(pids)}')
"""

PIDPATH = """
import ctypes, sys
lib = ctypes.CDLL('/usr/lib/libSystem.B.dylib', use_errno=True)
buf = ctypes.create_string_buffer(4096)
n = lib.proc_pidpath(int(sys.argv[1]), buf, 4096)
print('SEEN' if n > 0 else f'DENIED {ctypes.get_errno()}')
"""

SPAWN = guarded(
    "import subprocess, sys",
    "subprocess.run(sys.argv[1:], capture_output=True, timeout=30, check=False)",
    "STARTED",
)

SLEEPER = """
import os, sys, time
pidfile, setsid, main_sleeps = sys.argv[1], sys.argv[2] == '1', sys.argv[3] == '1'
child = os.fork()
if child == 0:
    if os.fork() == 0:
        if setsid:
            os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with open(pidfile + '.tmp', 'w') as f:
            f.write(str(os.getpid()))
        os.rename(pidfile + '.tmp', pidfile)
        time.sleep(60)
        os._exit(0)
    os._exit(0)
os.waitpid(child, 0)
deadline = time.time() + 10
while not os.path.exists(pidfile) and time.time() < deadline:
    time.sleep(0.01)
print('FORKED', flush=True)
if main_sleeps:
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def _read_pid(path: Path) -> int:
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not path.exists():
        inconclusive("the sleeper wrote its pid", path)
    return int(path.read_text(encoding="utf-8"))


def _kill(pid: int) -> None:
    if pid > 0 and _alive(pid):
        os.kill(pid, 9)


def test_the_callers_environment_does_not_leak(
    jail: Jail, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ENV-CANARY-" + os.urandom(6).hex()
    monkeypatch.setenv("PANDAY_ESCAPE_CANARY", token)
    show = "import os; print(os.environ.get('PANDAY_ESCAPE_CANARY', 'ABSENT'))"
    if outside(show, env=dict(os.environ)) != token:
        inconclusive("an ordinary child of this process inherits the variable")
    handle = jail.create(workspace, {"env": {"MY_SETTING": "1"}})
    assert jail.py(handle, show) == "ABSENT"
    listing = jail.run(handle, "/usr/bin/env")
    assert listing.exit_code == 0
    names = {line.split("=", 1)[0] for line in listing.stdout.decode().splitlines() if "=" in line}
    # PWD, SHLVL and _ are the start step's shell's own; nothing else may appear.
    assert names - {"PWD", "SHLVL", "_", "__CF_USER_TEXT_ENCODING"} == {
        "HOME",
        "LANG",
        "MY_SETTING",
        "PATH",
        "TERM",
        "TMPDIR",
    }


def test_another_process_environment_cannot_be_read(
    jail: Jail, workspace: Path, sibling: tuple[int, str]
) -> None:
    pid, canary = sibling
    time.sleep(0.2)  # let the sibling finish exec
    if outside(PROCARGS, str(pid), canary) != "FOUND":
        inconclusive("KERN_PROCARGS2 shows the sibling's environment without the sandbox")
    handle = jail.create(workspace)
    assert jail.py(handle, PROCARGS, str(pid), canary).startswith("DENIED")


def test_another_process_cannot_be_signalled(
    jail: Jail, workspace: Path, sibling: tuple[int, str]
) -> None:
    pid, _ = sibling
    if outside(SIGNAL, str(pid)) != "SIGNALLED":
        inconclusive("the sibling can be signalled without the sandbox")
    handle = jail.create(workspace)
    if jail.py(handle, "import os; os.kill(os.getpid(), 0); print('SELF')") != "SELF":
        inconclusive("a process in the sandbox can signal itself")
    assert jail.py(handle, SIGNAL, str(pid)) == "DENIED"


@pytest.mark.parametrize("which", ["pid", "all"])
def test_other_processes_cannot_be_listed_through_sysctl(
    jail: Jail, workspace: Path, sibling: tuple[int, str], which: str
) -> None:
    """Issue 12, 6(c): ``sysctl kern.proc.pid.<n>`` and ``kern.proc.all`` answer with every
    process's name, uid and parent; nothing under kern.proc is readable inside."""
    pid, _ = sibling
    if outside(KINFO, which, str(pid)) != "SEEN":
        inconclusive(f"KERN_PROC {which} shows the sibling without the sandbox")
    handle = jail.create(workspace)
    if jail.py(handle, "import os; print('ALIVE', os.getpid() > 0)") != "ALIVE True":
        inconclusive("a probe runs inside the sandbox")
    assert jail.py(handle, KINFO, which, str(pid)).startswith("DENIED")


def test_another_process_cannot_be_inspected(
    jail: Jail, workspace: Path, sibling: tuple[int, str]
) -> None:
    pid, _ = sibling
    if outside(PIDPATH, str(pid)) != "SEEN":
        inconclusive("proc_pidpath sees the sibling without the sandbox")
    handle = jail.create(workspace)
    assert jail.py(handle, PIDPATH, str(pid)).startswith("DENIED")


_SETUID_CANDIDATES = (
    ("/bin/ps", ("-o", "pid=", "-p", "1")),
    ("/usr/bin/top", ("-l", "1", "-n", "0")),
    ("/usr/bin/crontab", ("-l",)),
)


def _setuid_program() -> tuple[str, ...] | None:
    for path, args in _SETUID_CANDIDATES:
        try:
            mode = Path(path).stat().st_mode
        except OSError:
            continue
        if mode & 0o4000:
            return (path, *args)
    return None


def test_a_setuid_program_cannot_be_executed(jail: Jail, workspace: Path) -> None:
    program = _setuid_program()
    if program is None:
        inconclusive("no setuid program found to probe with", _SETUID_CANDIDATES)
    if outside(SPAWN, *program) != "STARTED":
        inconclusive(f"{program[0]} starts without the sandbox")
    handle = jail.create(workspace)
    if jail.py(handle, SPAWN, "/bin/echo", "hi") != "STARTED":
        inconclusive("an ordinary program starts inside the sandbox")
    assert jail.py(handle, SPAWN, *program) == "DENIED"


@pytest.mark.parametrize("mode", [0o2755, 0o4755])
def test_a_set_id_program_of_the_users_own_cannot_be_executed(
    jail: Jail, workspace: Path, tmp_path: Path, mode: int
) -> None:
    """Issue 12, 6(f): the exec deny covers setgid programs as well as setuid ones."""
    program = tmp_path / "bin" / f"true-{mode:o}"
    program.parent.mkdir()
    shutil.copyfile("/usr/bin/true", program)
    program.chmod(mode)
    if program.stat().st_mode & 0o7777 != mode:
        inconclusive(f"the {mode:o} bits could be set on a copy of /usr/bin/true")
    if outside(SPAWN, str(program)) != "STARTED":
        inconclusive(f"the {mode:o} copy starts without the sandbox")
    plain = tmp_path / "bin" / "true-plain"
    shutil.copyfile("/usr/bin/true", plain)
    plain.chmod(0o755)
    handle = jail.create(workspace)
    if jail.py(handle, SPAWN, str(plain)) != "STARTED":
        inconclusive("the same copy without set-id bits starts inside the sandbox")
    assert jail.py(handle, SPAWN, str(program)) == "DENIED"


def test_dyld_variables_are_refused_by_name_not_dropped(jail: Jail, workspace: Path) -> None:
    """Issue 12, 6(e): System Integrity Protection removes DYLD_* when a protected program
    such as /bin/sh starts, and every command starts through /bin/sh; a variable the command
    would never see is refused at create, by name."""
    stripped = subprocess.run(
        ["/bin/sh", "-c", 'echo "${DYLD_PANDAY_PROBE-unset}"'],
        capture_output=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
        env={"PATH": "/usr/bin:/bin", "DYLD_PANDAY_PROBE": "1"},
    )
    if stripped.stdout.decode().strip() != "unset":
        inconclusive("SIP removes DYLD_* variables when /bin/sh starts", stripped.stdout)
    allowed: dict[str, object] = {
        "env": {"LD_PANDAY_PROBE": "1"},
        "allow_env_hooks": ["LD_PANDAY_PROBE"],
    }
    handle = jail.create(workspace, allowed)
    show = "import os; print(os.environ.get('LD_PANDAY_PROBE', 'ABSENT'))"
    if jail.py(handle, show) != "1":
        inconclusive("an allowed hook variable reaches the command")
    with pytest.raises(PolicyViolation) as info:
        jail.create(
            workspace,
            {
                "env": {"DYLD_INSERT_LIBRARIES": "/tmp/x.dylib"},
                "allow_env_hooks": ["DYLD_INSERT_LIBRARIES"],
            },
        )
    assert info.value.field == "env.DYLD_INSERT_LIBRARIES"


def _outside_sleeper(tmp_path: Path, *, setsid: bool) -> None:
    """Positive control: without panday, the double-forked sleeper outlives its parent."""
    pidfile = tmp_path / "control.pid"
    subprocess.run(
        [sys.executable, "-I", "-c", SLEEPER, str(pidfile), "1" if setsid else "0", "0"],
        timeout=PROBE_TIMEOUT_S,
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pid = _read_pid(pidfile)
    try:
        if not _alive(pid):
            inconclusive("a double-forked sleeper outlives its parent without the sandbox")
    finally:
        _kill(pid)


@contextlib.contextmanager
def _sleeper_inside(
    jail: Jail, workspace: Path, doc: dict[str, object], *, setsid: bool, main_sleeps: bool
) -> Generator[tuple[ExecResult, int], None, None]:
    """Run the double-forking sleeper in a session; the result and the sleeper's pid."""
    handle = jail.create(workspace, doc)
    pidfile = workspace / "sleeper.pid"
    flags = ("1" if setsid else "0", "1" if main_sleeps else "0")
    result = jail.run(handle, sys.executable, "-I", "-c", SLEEPER, str(pidfile), *flags)
    pid = _read_pid(pidfile)
    try:
        yield result, pid
    finally:
        _kill(pid)


def test_the_wall_clock_kills_a_double_forked_sleeper(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    _outside_sleeper(tmp_path, setsid=False)
    wall: dict[str, object] = {"limits": {"wall_clock_ms": 3000}}
    with _sleeper_inside(jail, workspace, wall, setsid=False, main_sleeps=True) as (result, pid):
        assert result.breach is not None
        assert result.breach.kind is LimitKind.WALL_CLOCK
        assert result.wall_ms < 20_000
        assert _gone_within(pid, 10), "the double-forked sleeper outlived the wall clock"


def test_a_background_process_does_not_outlive_its_command(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    _outside_sleeper(tmp_path, setsid=False)
    with _sleeper_inside(jail, workspace, {}, setsid=False, main_sleeps=False) as (result, pid):
        assert result.exit_code == 0
        assert _gone_within(pid, 10), "a background process outlived its command"


def test_a_sleeper_that_calls_setsid_is_killed_too(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    """Issue 30, 4: the group kill misses it, the sweep at the command's end does not (it is
    found by its sandbox, not its process group or parent)."""
    _outside_sleeper(tmp_path, setsid=True)
    wall: dict[str, object] = {"limits": {"wall_clock_ms": 3000}}
    with _sleeper_inside(jail, workspace, wall, setsid=True, main_sleeps=True) as (_, pid):
        assert _gone_within(pid, 5)


def test_a_fork_bomb_policy_is_refused_before_anything_runs(jail: Jail, workspace: Path) -> None:
    jail.create(workspace, {"limits": {"wall_clock_ms": 5000}})  # control: opens without pids
    before = sorted(workspace.iterdir())
    with pytest.raises(PolicyViolation) as info:
        jail.create(workspace, {"limits": {"pids": 64, "wall_clock_ms": 5000}})
    assert info.value.field == "limits.pids"
    assert sorted(workspace.iterdir()) == before


@pytest.mark.parametrize("field", ["mem_bytes", "cpu_ms", "disk_bytes"])
def test_unenforceable_ceilings_are_refused_by_name(
    jail: Jail, workspace: Path, field: str
) -> None:
    value = {"mem_bytes": 1 << 30, "cpu_ms": 10_000, "disk_bytes": 1 << 30}[field]
    with pytest.raises(PolicyViolation) as info:
        jail.create(workspace, {"limits": {field: value}})
    assert info.value.field == f"limits.{field}"


def test_output_beyond_the_cap_is_discarded_and_reported(jail: Jail, workspace: Path) -> None:
    handle = jail.create(workspace, {"limits": {"output_bytes": 4096}})
    result = jail.run(handle, sys.executable, "-I", "-c", "print('x' * 100000)")
    assert result.exit_code == 0
    assert result.truncated_stdout
    assert result.breach is not None
    assert result.breach.kind is LimitKind.OUTPUT
    assert len(result.stdout) < 4096 + 200
