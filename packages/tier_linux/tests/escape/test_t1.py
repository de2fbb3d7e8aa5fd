"""Escape probes for T1 Linux (Landlock + seccomp + rlimits, no namespaces).

Each must-fail probe runs its positive control first: the same operation outside the
sandbox, as this user, succeeding. The probes are the suite's own (`conftest.Escape`),
run in a T1 session instead of a T2 jail. Proves: reads and writes outside the allowlist
fail, a protected entry of a writable workspace stays read-only, no TCP (to a loopback
listener this test runs), UDP, pathname or abstract unix socket reaches the host, ptrace
is denied, no setuid bit can be planted and no_new_privs holds, host processes cannot be
signalled and /proc is unreadable; and what T1 cannot enforce is refused by field.
"""

from __future__ import annotations

import ctypes
import os
import socket
from typing import TYPE_CHECKING, Unpack

import pytest

from panday_core.capabilities import Support
from panday_core.errors import PolicyViolation
from panday_core.policy import FsPolicy, Limits, NetPolicy, SandboxPolicy
from panday_tier_linux import seccomp
from panday_tier_linux.t1 import landlock
from panday_tier_linux.t1.capabilities import host_capabilities
from panday_tier_linux.t1.session import open_session

if TYPE_CHECKING:
    from collections.abc import Callable

    from conftest import Escape, Listener, Outcome, PolicyOptions  # the suite's fixture types

    from panday_tier_linux.t1.session import T1Session


class _T1:
    """The suite's probe runner, its sessions opened in T1."""

    def __init__(self, esc: Escape) -> None:
        self.esc = esc

    def open(self, **options: Unpack[PolicyOptions]) -> T1Session:
        return open_session(self.esc.policy(**options))

    def inside(self, code: str, **options: Unpack[PolicyOptions]) -> Outcome:
        with self.open(**options) as session:
            result = session.run(self.esc.py(code), timeout_ms=60_000)
        return self.esc.parse("inside T1", result.stdout, result.stderr, result.exit_code)


@pytest.fixture
def t1(esc: Escape) -> _T1:
    return _T1(esc)


def _check(esc: Escape, t1: _T1, code: str, **options: Unpack[PolicyOptions]) -> None:
    esc.control(esc.outside(code))
    esc.must_block(t1.inside(code, **options))


READ = """
try:
    with open({path!r}, "rb") as fh:
        fh.read(1)
except OSError as exc:
    blocked(err(exc))
ok("read")
"""


def test_a_file_next_to_the_workspace_is_unreadable(esc: Escape, t1: _T1) -> None:
    secret = esc.next_door / "secret"
    secret.write_text("s")
    _check(esc, t1, READ.format(path=str(secret)))


def test_etc_outside_the_allowlist_is_unreadable(esc: Escape, t1: _T1) -> None:
    # /etc/shadow where this user can read it (root); an /etc file every user can read
    # but T2 does not show (/etc/hostname) otherwise.
    path = "/etc/shadow" if os.geteuid() == 0 else "/etc/hostname"
    _check(esc, t1, READ.format(path=path))


def test_a_write_next_to_the_workspace_fails(esc: Escape, t1: _T1) -> None:
    code = f"""
try:
    with open({str(esc.next_door / "planted")!r}, "w") as fh:
        fh.write("x")
except OSError as exc:
    blocked(err(exc))
ok("written")
"""
    _check(esc, t1, code)


def test_the_workspace_is_writable_and_a_protected_entry_is_not(esc: Escape, t1: _T1) -> None:
    (esc.ws / ".git").mkdir()
    (esc.ws / "src").mkdir()
    code = """
try:
    with open(os.path.join({ws!r}, ".git", "config"), "w") as fh:
        fh.write("[core]\\n")
except OSError as exc:
    blocked(err(exc))
ok("wrote .git/config")
"""
    esc.control(esc.outside(code.format(ws=str(esc.ws))))
    (esc.ws / ".git" / "config").unlink()
    # The positive control inside: the same write beneath an ordinary entry works.
    ordinary = code.replace('".git"', '"src"')
    esc.control(t1.inside(ordinary.format(ws=str(esc.ws))))
    esc.must_block(t1.inside(code.format(ws=str(esc.ws))))


def test_a_staged_path_inside_a_writable_workspace_stays_read_only(esc: Escape, t1: _T1) -> None:
    staged = esc.ws / "vendor" / "lib"
    staged.mkdir(parents=True)
    (esc.ws / "src").mkdir()
    code = """
try:
    with open(os.path.join({where!r}, "planted"), "w") as fh:
        fh.write("x")
except OSError as exc:
    blocked(err(exc))
ok("written")
"""
    esc.control(esc.outside(code.format(where=str(esc.next_door))))
    # The control inside: beside it, in the same writable workspace, the write works.
    esc.control(t1.inside(code.format(where=str(esc.ws / "src")), staged=[staged]))
    esc.must_block(t1.inside(code.format(where=str(staged)), staged=[staged]))
    assert not (staged / "planted").exists()


def test_a_missing_protected_entry_cannot_be_made(esc: Escape, t1: _T1) -> None:
    code = """
try:
    os.mkdir(os.path.join({ws!r}, ".vscode"))
except OSError as exc:
    blocked(err(exc))
ok("made .vscode")
"""
    control_ws = esc.next_door / "ws-control"
    control_ws.mkdir()
    esc.control(esc.outside(code.format(ws=str(control_ws))))
    esc.must_block(t1.inside(code.format(ws=str(esc.ws))))
    assert not (esc.ws / ".vscode").exists()


def _connect(family: str, address: object) -> str:
    return f"""
s = None
try:
    s = socket.socket(socket.{family}, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect({address!r})
except OSError as exc:
    blocked(err(exc))
finally:
    if s is not None:
        s.close()
ok("connected")
"""


@pytest.mark.parametrize("kind", ["tcp4", "tcp6", "path", "abstract"])
def test_a_host_listener_is_unreachable(
    esc: Escape, t1: _T1, listen: Callable[[str], Listener], kind: str
) -> None:
    """TCP to loopback listeners this test runs (never the egress proxy), and unix sockets:
    a pathname one outside every allowed path (Landlock does not rule connecting to it:
    no socket(2) does) and an abstract one."""
    server = listen(kind)
    family = {"tcp4": "AF_INET", "tcp6": "AF_INET6"}.get(kind, "AF_UNIX")
    code = _connect(family, server.address)
    esc.control(esc.outside(code))
    server.settle()
    accepted = server.accepted
    esc.must_block(t1.inside(code))
    server.settle()
    assert server.accepted == accepted, "the host listener saw a connection from T1"


def test_a_host_unix_datagram_socket_is_unreachable_through_a_socketpair(
    esc: Escape, t1: _T1
) -> None:
    """socket(2) is denied, but a datagram socketpair could sendto(2) any host unix
    datagram socket by path (Landlock does not rule it): /dev/log, journald. Measured:
    the host socket received the datagram before the filter refused such pairs."""
    path = str(esc.next_door / "host-dgram.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.settimeout(0.5)
    code = f"""
try:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"escaped", {path!r})
except OSError as exc:
    blocked(err(exc))
ok("sent")
"""
    try:
        esc.control(esc.outside(code))
        if server.recv(64) != b"escaped":
            pytest.fail("inconclusive: control failed: the host socket received nothing")
        inside = t1.inside(code)
        try:
            got = server.recv(64)
        except TimeoutError:
            got = b""
        assert not got, f"ESCAPE: the host datagram socket received {got!r} from T1"
        esc.must_block(inside)
    finally:
        server.close()


def test_a_mode_change_next_to_the_workspace_fails(esc: Escape, t1: _T1) -> None:
    """Landlock does not rule chmod(2): a key next door made readable by all is a write
    outside the workspace. seccomp refuses mode and owner changes in T1."""
    victim = esc.next_door / "id_key"
    victim.write_text("secret")
    victim.chmod(0o600)
    code = f"""
try:
    os.chmod({str(victim)!r}, 0o644)
except OSError as exc:
    blocked(err(exc))
ok("mode changed")
"""
    esc.control(esc.outside(code))
    victim.chmod(0o600)
    esc.must_block(t1.inside(code))
    assert victim.stat().st_mode & 0o777 == 0o600


LEASE = """
import fcntl
F_SETLEASE = 1024
import platform
fd = os.open({path!r}, os.O_RDONLY)
FCNTL = {{"x86_64": 72, "aarch64": 25}}[platform.machine()]
for command in (F_SETLEASE, F_SETLEASE | (1 << 32)):  # high bits the kernel drops
    r = sys_call(FCNTL, fd, command, fcntl.F_RDLCK)
    if r[0] == 0:
        sys_call(FCNTL, fd, F_SETLEASE, fcntl.F_UNLCK)
        ok(f"leased with command {{command:#x}}")
blocked(errno.errorcode.get(r[1], str(r[1])))
"""


def test_no_lease_on_a_file_it_may_only_read(esc: Escape, t1: _T1) -> None:
    """A read lease on a staged file (ours) would hold up every host process that opens it
    for writing, for the kernel's lease-break time. seccomp refuses F_SETLEASE in T1."""
    staged = esc.next_door / "staged.txt"
    staged.write_text("input")
    code = LEASE.format(path=str(staged))
    esc.control(esc.outside(code))
    esc.must_block(t1.inside(code, staged=[staged]))


SHMAT = """
libc.shmat.restype = ctypes.c_void_p
addr = libc.shmat({shmid}, None, 0)
if addr in (None, ctypes.c_void_p(-1).value):
    blocked(errno.errorcode.get(ctypes.get_errno(), "shmat failed"))
libc.shmdt(ctypes.c_void_p(addr))
ok("attached to a host segment")
"""


def test_a_host_shared_memory_segment_is_unreachable(esc: Escape, t1: _T1) -> None:
    """No IPC namespace: a System V segment of this uid's host processes is reachable by
    its id alone. seccomp refuses System V IPC in T1."""
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(0, 4096, 0o600)  # IPC_PRIVATE: a new segment, this uid's
    if shmid < 0:
        pytest.fail(f"inconclusive: shmget failed (errno {ctypes.get_errno()})")
    try:
        code = SHMAT.format(shmid=shmid)
        esc.control(esc.outside(code))
        esc.must_block(t1.inside(code))
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID


def test_udp_to_a_host_loopback_listener(
    esc: Escape, t1: _T1, listen: Callable[[str], Listener]
) -> None:
    server = listen("udp4")
    code = f"""
s = None
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(3):
        s.sendto(b"escaped", {server.address!r})
except OSError as exc:
    blocked(err(exc))
finally:
    if s is not None:
        s.close()
ok("sent")
"""
    esc.control(esc.outside(code))
    server.settle()
    if not server.received:
        pytest.fail("inconclusive: control failed: the host listener received nothing")
    server.received.clear()
    inside = t1.inside(code)
    server.settle()
    assert not server.received, f"ESCAPE: the host listener received {server.received!r}"
    esc.must_block(inside)


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
    os.waitpid(child, 0)
if r == 0:
    ok("attached to a child")
blocked(errno.errorcode.get(e, str(e)))
"""


def test_ptrace_is_denied(esc: Escape, t1: _T1) -> None:
    _check(esc, t1, PTRACE)


def test_no_setuid_bit_can_be_planted(esc: Escape, t1: _T1) -> None:
    code = """
path = os.path.join({where!r}, "planted")
with open(path, "w") as fh:
    fh.write("#!/bin/sh\\n")
try:
    os.chmod(path, 0o4755)
except OSError as exc:
    blocked(err(exc))
ok("setuid bit set" if os.stat(path).st_mode & 0o4000 else "no bit")
"""
    esc.control(esc.outside(code.format(where=str(esc.next_door))))
    (esc.ws / "sub").mkdir()
    esc.must_block(t1.inside(code.format(where=str(esc.ws / "sub"))))


def test_no_new_privs_holds(esc: Escape, t1: _T1) -> None:
    code = """
PR_GET_NO_NEW_PRIVS = 39
if libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1:
    blocked("no_new_privs is set")
ok("no_new_privs is not set")
"""
    _check(esc, t1, code)


def test_a_directory_on_the_callers_path_cannot_be_filled(
    esc: Escape, t1: _T1, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace directory on the caller's own PATH stays read-only (a program planted
    there would run in the caller's next shell command). Control: the same plant in a
    sibling directory that is not on the PATH lands."""
    plant = """
target = os.path.join({where!r}, "ls")
try:
    with open(target, "w") as fh:
        fh.write("#!/bin/sh\\necho planted\\n")
except OSError as exc:
    blocked(err(exc))
ok("planted ls")
"""
    (esc.ws / "bin").mkdir()
    (esc.ws / "tools").mkdir()
    monkeypatch.setenv("PATH", f"{esc.ws / 'bin'}:{os.environ['PATH']}")
    esc.control(t1.inside(plant.format(where=str(esc.ws / "tools"))))
    esc.must_block(t1.inside(plant.format(where=str(esc.ws / "bin"))))
    assert list((esc.ws / "bin").iterdir()) == []


CAPABILITIES = """
PR_CAPBSET_READ = 23
bounding = [c for c in range(64) if libc.prctl(PR_CAPBSET_READ, c, 0, 0, 0) == 1]
header = (ctypes.c_uint32 * 2)(0x20080522, 0)
sets = (ctypes.c_uint32 * 6)()
if libc.capget(header, sets) != 0:
    blocked("capget: " + errno.errorcode.get(ctypes.get_errno(), "?"))
if not bounding and not any(sets):
    blocked("no capability held, none in the bounding set")
ok(f"{len(bounding)} in the bounding set, sets {list(sets)}")
"""


def test_a_root_callers_command_holds_no_capability_and_can_regain_none(
    esc: Escape, t1: _T1
) -> None:
    """A root caller's command runs as uid 0 with empty capability sets and an empty
    bounding set, so no program it runs gets one back (a layer beside no_new_privs)."""
    if os.geteuid() != 0:
        pytest.skip(
            "an unprivileged caller holds no capability and cannot empty its bounding set; "
            "the root pass runs this probe (no_new_privs: test_no_new_privs_holds)"
        )
    _check(esc, t1, CAPABILITIES)


def test_host_processes_cannot_be_signalled(
    esc: Escape, t1: _T1, host_sleeper: tuple[int, str]
) -> None:
    pid, _ = host_sleeper
    code = f"""
try:
    os.kill({pid}, 0)
except OSError as exc:
    blocked(err(exc))
ok("signal delivered")
"""
    if _abi_below(esc, landlock.SCOPE_ABI, "Host processes cannot be signalled"):
        return
    _check(esc, t1, code)


def _abi_below(esc: Escape, needed: int, guarantee: str) -> bool:
    """On a kernel whose Landlock ABI is below `needed`, the row `guarantee` must say it
    is not enforced (the gap declared, never approximated): asserted, and True."""
    abi = landlock.kernel_abi()
    assert isinstance(abi, int), f"T1 cannot run here: {abi}"
    if abi >= needed:
        return False
    rows = {g.name: g for g in host_capabilities().guarantees}
    assert rows[guarantee].support is Support.NOT_ENFORCED, rows[guarantee]
    esc.held()
    return True


def test_host_processes_limits_and_priority_cannot_be_changed(
    esc: Escape, t1: _T1, host_sleeper: tuple[int, str]
) -> None:
    """No pid namespace: a host process of the same uid (the caller itself) is reachable by
    pid. Its limits, priority and CPU affinity stay its own: seccomp admits those calls
    for the calling process alone."""
    pid, _ = host_sleeper
    code = f"""
import resource
done = []
for name, call in (
    ("prlimit", lambda: resource.prlimit({pid}, resource.RLIMIT_NOFILE, (64, 64))),
    ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, {pid}, 5)),
    ("sched_setaffinity", lambda: os.sched_setaffinity({pid}, {{0}})),
):
    try:
        call()
        done.append(name)
    except OSError:
        pass
if done:
    ok("changed: " + ",".join(done))
blocked("none changed")
"""
    esc.control(esc.outside(code))
    esc.must_block(t1.inside(code))


def test_host_process_environments_are_unreadable(
    esc: Escape, t1: _T1, host_sleeper: tuple[int, str]
) -> None:
    pid, canary = host_sleeper
    code = f"""
try:
    with open("/proc/{pid}/environ", "rb") as fh:
        data = fh.read()
except OSError as exc:
    blocked(err(exc))
ok("canary read" if {canary.encode()!r} in data else "read, no canary")
"""
    _check(esc, t1, code)


@pytest.mark.parametrize(
    ("field", "policy"),
    [
        ("net.allow", {"net": NetPolicy(allow=("example.com",))}),
        ("limits.mem_bytes", {"limits": Limits(mem_bytes=1 << 28)}),
        ("limits.pids", {"limits": Limits(pids=64)}),
        ("limits.disk_bytes", {"limits": Limits(disk_bytes=1 << 20)}),
    ],
)
def test_what_t1_cannot_enforce_is_refused_by_field(
    esc: Escape, field: str, policy: dict[str, object]
) -> None:
    made = SandboxPolicy(fs=FsPolicy(workspace=str(esc.ws)), **policy)  # pyright: ignore[reportArgumentType] - one section each
    with pytest.raises(PolicyViolation) as info:
        open_session(made)
    assert field in [v.field for v in info.value.violations]
    assert info.value.tier == "t1-linux"
    esc.count_refusal()


@pytest.mark.parametrize("kind", ["tcp4", "abstract"])
def test_landlock_alone_refuses_tcp_and_abstract_sockets(
    esc: Escape, t1: _T1, listen: Callable[[str], Listener], kind: str
) -> None:
    """The layer alone: with a seccomp program that lets socket(2) through (T2's filter for
    a session with the egress bridge: AF_UNIX, AF_INET, AF_INET6), Landlock's TCP rule (no
    port allowed, ABI 4) and its abstract-socket scope (ABI 6) still refuse the connect.
    The probe first proves the socket itself was made (else it is inconclusive). Below
    ABI 6 (4 for TCP) that Landlock wall does not exist: socket(2) is the only one there."""
    abi = landlock.kernel_abi()
    needed = landlock.SCOPE_ABI if kind == "abstract" else landlock.NET_ABI
    if isinstance(abi, int) and abi < needed:  # no such Landlock wall on this kernel
        esc.held()  # the seccomp wall is probed by test_a_host_listener_is_unreachable
        return
    server = listen(kind)
    family = "AF_INET" if kind == "tcp4" else "AF_UNIX"
    code = f"""
try:
    s = socket.socket(socket.{family}, socket.SOCK_STREAM)
except OSError as exc:
    print("no socket at all:", err(exc)); sys.exit(3)
s.settimeout(3)
try:
    s.connect({server.address!r})
except OSError as exc:
    blocked(err(exc))
ok("connected")
"""
    esc.control(esc.outside(code))
    server.settle()
    accepted = server.accepted
    with t1.open() as session:
        session.program = seccomp.program(
            seccomp.FilterSpec(socket_families=seccomp.BRIDGE_FAMILIES)
        )
        result = session.run(esc.py(code), timeout_ms=60_000)
    outcome = esc.parse("inside T1, Landlock alone", result.stdout, result.stderr, result.exit_code)
    esc.must_block(outcome)
    server.settle()
    assert server.accepted == accepted, "the host listener saw a connection from T1"
