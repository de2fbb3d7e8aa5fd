"""The compiled seccomp program, run on a classic-BPF interpreter: what the kernel will do.

`test_seccomp.py` checks the rules as data (`FilterSpec`); a compiler that silently drops a
rule would pass it. Here the BPF bytes that `compile_program` (and the per-user cache, via
`program`) hand to bwrap are executed instruction by instruction against the
``struct seccomp_data`` the kernel would pass for a call, and the action they return is
compared with what the jail promises. The expectations are written out below as literals,
not read from `seccomp.DENIED`: a rule removed from the module's table must turn this red.

Syscall numbers come from libseccomp's own table for this architecture (the same one the
compiler uses, but not panday's code).
"""

from __future__ import annotations

import os
import struct
import sys
from typing import TYPE_CHECKING

import pytest

from panday_core import userstate
from panday_tier_linux import seccomp

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="libseccomp and its BPF are Linux-only"
)

# ------------------------------------------------------------------ what the jail promises

DENIED_EPERM = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "modify_ldt",
    "iopl",
    "ioperm",
    "open_by_handle_at",
    "lookup_dcookie",
    "syslog",
    "acct",
    "quotactl",
    "swapon",
    "swapoff",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "vhangup",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "setns",
)
"""Denied whatever their arguments (issue 4's list and the mount API, setns, chroot,...)."""

ALLOWED = (
    "read",
    "write",
    "openat",
    "close",
    "fstat",
    "mmap",
    "mprotect",
    "munmap",
    "brk",
    "rt_sigaction",
    "execve",
    "wait4",
    "exit_group",
    "getpid",
    "kill",
    "pidfd_open",
    "prctl",
    "pipe2",
    "dup3",
    "futex",
)

CLONE_NEW = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWTIME": 0x00000080,
}
SIGCHLD = 17
# What glibc passes for a thread (pthread_create) and for fork: both must stay allowed.
THREAD_FLAGS = 0x003D0F00
FORK_FLAGS = 0x01200000 | SIGCHLD  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD

TIOCSTI = 0x5412
TIOCLINUX = 0x541C
TCGETS = 0x5401
READ_IMPLIES_EXEC = 0x0400000
ADDR_NO_RANDOMIZE = 0x0040000

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 1, 2, 10, 16, 17

# ------------------------------------------------------------------ the kernel's side

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
RET_ACTION_FULL = 0xFFFF0000
EPERM = 1
ENOSYS = 38
AUDIT_ARCH = {
    "x86_64": (0xC000003E, 0x40000003),  # (native, the 32-bit ABI on the same kernel)
    "aarch64": (0xC00000B7, 0x40000028),
}


def syscall_number(name: str) -> int:
    # Imported here: loading libseccomp fails at import time on a host without it.
    import pyseccomp as sc  # noqa: PLC0415  # pyright: ignore[reportMissingTypeStubs] - typed inline, no stub package

    number = sc.resolve_syscall(sc.Arch.NATIVE, name)
    if number < 0:
        pytest.skip(f"{name} does not exist on {os.uname().machine}")
    return number


def native_arch() -> tuple[int, int]:
    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        pytest.fail(f"no audit-arch token known for {machine}; add it to this test")
    return AUDIT_ARCH[machine]


def seccomp_data(nr: int, arch: int, args: Sequence[int] = ()) -> bytes:
    """``struct seccomp_data`` in native byte order: nr, arch, ip, args[6]."""
    full = [*args, *([0] * (6 - len(args)))]
    return struct.pack("=iIQ6Q", nr, arch, 0, *(a & (2**64 - 1) for a in full))


class Bpf:
    """A classic-BPF machine (as the kernel's seccomp runs it) over one seccomp_data."""

    def __init__(self, program: bytes, data: bytes) -> None:
        assert program, "empty program"
        assert len(program) % 8 == 0, "a BPF program is a sequence of 8-byte instructions"
        self.insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
        self.data = data
        self.a = self.x = self.pc = 0
        self.mem = [0] * 16

    def run(self) -> int:
        for _step in range(len(self.insns) + 1):  # classic BPF only jumps forward
            code, jt, jf, k = self.insns[self.pc]
            cls = code & 0x07
            if cls == 0x06:  # RET: K, A or X
                rval = code & 0x18
                return k if rval == 0x00 else self.a if rval == 0x10 else self.x
            if cls == 0x05:  # JMP
                self.pc += 1 + self._jump(code, jt, jf, k)
                continue
            self._step(cls, code, k)
            self.pc += 1
        pytest.fail("the program ran past its end without returning")

    def _load(self, code: int, k: int) -> int:
        mode = code & 0xE0
        if mode == 0x20:  # ABS
            assert code & 0x18 == 0x00, "seccomp loads 32-bit words only"
            return int(struct.unpack_from("=I", self.data, k)[0])
        return {0x00: k, 0x60: self.mem[k % 16], 0x80: len(self.data)}[mode]

    def _step(self, cls: int, code: int, k: int) -> None:
        if cls == 0x00:  # LD
            self.a = self._load(code, k)
        elif cls == 0x01:  # LDX
            self.x = self._load(code, k)
        elif cls == 0x02:  # ST
            self.mem[k] = self.a
        elif cls == 0x03:  # STX
            self.mem[k] = self.x
        elif cls == 0x04:  # ALU
            operand = self.x if code & 0x08 else k
            self.a = _alu(code & 0xF0, self.a, operand) & 0xFFFFFFFF
        elif code & 0xF8 == 0x00:  # MISC: TAX
            self.x = self.a
        else:  # MISC: TXA
            self.a = self.x

    def _jump(self, code: int, jt: int, jf: int, k: int) -> int:
        op = code & 0xF0
        if op == 0x00:  # JA
            return k
        operand = self.x if code & 0x08 else k
        taken = {
            0x10: self.a == operand,
            0x20: self.a > operand,
            0x30: self.a >= operand,
            0x40: bool(self.a & operand),
        }[op]
        return jt if taken else jf


def run_bpf(program: bytes, data: bytes) -> int:
    """Execute a classic-BPF program (as the kernel's seccomp does) and return its verdict."""
    return Bpf(program, data).run()


def _alu(op: int, a: int, operand: int) -> int:
    if op == 0x80:
        return -a
    ops = {
        0x00: lambda: a + operand,
        0x10: lambda: a - operand,
        0x20: lambda: a * operand,
        0x30: lambda: a // operand,
        0x40: lambda: a | operand,
        0x50: lambda: a & operand,
        0x60: lambda: a << operand,
        0x70: lambda: a >> operand,
        0x90: lambda: a % operand,
        0xA0: lambda: a ^ operand,
    }
    return ops[op]()


def verdict(program: bytes, name: str, *args: int, arch: int | None = None) -> str:
    """The action for `name(args)`: "allow", "errno N", "kill-process" or the raw value."""
    return verdict_by_number(program, syscall_number(name), *args, arch=arch)


def verdict_by_number(program: bytes, nr: int, *args: int, arch: int | None = None) -> str:
    """As `verdict`, for a call given by number (one this libseccomp may not know by name)."""
    native, _ = native_arch()
    ret = run_bpf(program, seccomp_data(nr, arch or native, args))
    action = ret & RET_ACTION_FULL
    if action == RET_ALLOW:
        return "allow"
    if action == RET_ERRNO:
        return f"errno {ret & 0xFFFF}"
    if ret == RET_KILL_PROCESS:
        return "kill-process"
    return f"{ret:#x}"


# Function-scoped on purpose: compiling takes a few milliseconds, and a test that compiles
# its own program is a test mutation testing can tie to the compiler (a module-scoped
# fixture would be built by the first test alone).
@pytest.fixture
def program() -> bytes:
    """The program for a session without network (no egress bridge)."""
    return seccomp.compile_program(seccomp.FilterSpec())


@pytest.fixture
def bridge_program() -> bytes:
    """The program for a session with ``net.allow`` (the egress bridge)."""
    families = seccomp.socket_families(bridge=True)
    return seccomp.compile_program(seccomp.FilterSpec(socket_families=families))


# ------------------------------------------------------------------ the verdicts


@pytest.mark.parametrize("name", DENIED_EPERM)
def test_each_denied_call_gets_eperm_whatever_its_arguments(program: bytes, name: str) -> None:
    assert verdict(program, name) == "errno 1"
    assert verdict(program, name, 1, 2, 3, 4, 5, 6) == "errno 1"
    assert verdict(program, name, 2**64 - 1, 2**63) == "errno 1"


@pytest.mark.parametrize("name", DENIED_EPERM)
def test_each_denied_call_gets_eperm_in_the_bridge_program_too(
    bridge_program: bytes, name: str
) -> None:
    assert verdict(bridge_program, name, 7) == "errno 1"


@pytest.mark.parametrize("name", ALLOWED)
def test_ordinary_calls_are_allowed(program: bytes, name: str) -> None:
    # The control for the verdicts above: the program does not answer EPERM to everything.
    assert verdict(program, name, 3, 0, 0) == "allow"


def test_clone3_answers_enosys_so_libc_falls_back_to_clone(program: bytes) -> None:
    assert verdict(program, "clone3", 0, 88) == "errno 38"


def test_a_call_from_a_foreign_abi_kills_the_process(program: bytes) -> None:
    native, foreign = native_arch()
    assert verdict(program, "getpid", arch=native) == "allow"
    for name in ("getpid", "read", "setns"):
        assert verdict(program, name, arch=foreign) == "kill-process"


@pytest.mark.parametrize("call", ["clone", "unshare"])
@pytest.mark.parametrize("flag", sorted(CLONE_NEW), ids=str)
def test_every_namespace_flag_is_denied_to_clone_and_unshare(
    program: bytes, call: str, flag: str
) -> None:
    value = CLONE_NEW[flag]
    assert verdict(program, call, value) == "errno 1"
    assert verdict(program, call, value | SIGCHLD) == "errno 1"
    assert verdict(program, call, value | THREAD_FLAGS) == "errno 1"
    # Every other namespace flag set too, and the flag among high bits.
    assert verdict(program, call, sum(CLONE_NEW.values())) == "errno 1"
    assert verdict(program, call, value | (1 << 40)) == "errno 1"


@pytest.mark.parametrize("call", ["clone", "unshare"])
def test_clone_and_unshare_without_namespace_flags_are_allowed(program: bytes, call: str) -> None:
    for flags in (0, SIGCHLD, FORK_FLAGS, THREAD_FLAGS):
        assert verdict(program, call, flags) == "allow", hex(flags)


def test_tiocsti_and_tioclinux_are_denied_on_the_low_32_bits(program: bytes) -> None:
    for request in (TIOCSTI, TIOCLINUX):
        assert verdict(program, "ioctl", 0, request) == "errno 1"
        # The kernel reads the request as 32 bits: high bits must not get it through.
        assert verdict(program, "ioctl", 0, (1 << 32) | request) == "errno 1"
        assert verdict(program, "ioctl", 0, (0xFFFFFFFF << 32) | request) == "errno 1"
    assert verdict(program, "ioctl", 0, TCGETS) == "allow"
    assert verdict(program, "ioctl", 0, (1 << 32) | TCGETS) == "allow"


def test_only_the_plain_linux_personality_is_allowed(program: bytes) -> None:
    assert verdict(program, "personality", 0) == "allow"
    for persona in (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, 0xFFFFFFFF, 1 << 32):
        assert verdict(program, "personality", persona) == "errno 1", hex(persona)


@pytest.mark.parametrize("call", ["socket", "socketpair"])
def test_without_the_bridge_only_unix_sockets(program: bytes, call: str) -> None:
    assert verdict(program, call, AF_UNIX, 1, 0) == "allow"
    for family in range(64):
        if family != AF_UNIX:
            assert verdict(program, call, family, 1, 0) == "errno 1", family
    # The kernel truncates the family to an int; a value with high bits is not AF_UNIX.
    assert verdict(program, call, (1 << 32) | AF_INET, 1, 0) == "errno 1"
    assert verdict(program, call, (1 << 32) | AF_UNIX, 1, 0) == "errno 1"


@pytest.mark.parametrize("call", ["socket", "socketpair"])
def test_with_the_bridge_unix_inet_and_inet6_only(bridge_program: bytes, call: str) -> None:
    for family in range(64):
        expected = "allow" if family in {AF_UNIX, AF_INET, AF_INET6} else "errno 1"
        assert verdict(bridge_program, call, family, 1, 0) == expected, family
    for family in (AF_NETLINK, AF_PACKET, (1 << 32) | AF_INET):
        assert verdict(bridge_program, call, family, 3, 0) == "errno 1", family


def test_the_cached_program_is_the_compiled_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, program: bytes
) -> None:
    # What a session hands to bwrap comes from `program` (the per-user cache); a cache
    # that served another program would bypass every verdict above.
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(tmp_path))  # a cache of its own
    spec = seccomp.FilterSpec()
    first = seccomp.program(spec)  # compiled and written to the cache
    assert any((tmp_path / ".cache" / "panday" / "seccomp").glob("*.bpf"))
    second = seccomp.program(spec)  # read back from it
    assert first == second == program
    assert verdict(second, "setns") == "errno 1"
    assert verdict(second, "unshare", CLONE_NEW["CLONE_NEWNS"]) == "errno 1"


def test_openat2_answers_enosys_so_libc_falls_back_to_openat(program: bytes) -> None:
    # openat2's mode sits in a struct the filter cannot read; openat's it can (below).
    assert verdict(program, "openat2", 0, 0, 0, 24) == "errno 38"
    assert verdict(program, "openat", 0, 0, 0, 0o644) == "allow"


ENOTSUP = 95


@pytest.mark.parametrize("name", ["setxattr", "lsetxattr", "fsetxattr"])
def test_setting_an_extended_attribute_is_not_supported(program: bytes, name: str) -> None:
    assert verdict(program, name, 0, 0, 0, 8, 0) == f"errno {ENOTSUP}"
    assert verdict(program, "getxattr", 0, 0, 0, 8) == "allow"


def test_calls_newer_than_libseccomp_are_denied_by_their_number(program: bytes) -> None:
    # One number on every architecture since Linux 5.1; written out here, not read from
    # seccomp.NEWER_SYSCALLS, so a wrong number in that table turns this red.
    assert verdict_by_number(program, 463, 0, 0, 0, 0, 0) == f"errno {ENOTSUP}"  # setxattrat
    assert verdict_by_number(program, 467, 0, 0, 0, 0, 0) == "errno 1"  # open_tree_attr
    assert verdict_by_number(program, 452, 0, 0, 0o4755, 0) == "errno 1"  # fchmodat2, setuid
    assert verdict_by_number(program, 452, 0, 0, 0o755, 0) == "allow"  # and its control


S_ISUID, S_ISGID = 0o4000, 0o2000
S_IFREG, S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK = 0o100000, 0o010000, 0o140000, 0o020000, 0o060000
AT_FDCWD = -100
MODE_ARG = {
    "chmod": 1,
    "fchmod": 1,
    "fchmodat": 2,
    "fchmodat2": 2,
    "open": 2,
    "openat": 3,
    "creat": 1,
    "mknod": 1,
    "mknodat": 2,
}
"""Which argument of each call holds the file mode (from the man pages)."""


def _with_mode(call: str, mode: int) -> list[int]:
    """Arguments for `call` with `mode` in its place, every other argument harmless (the
    descriptor AT_FDCWD for the *at calls, a device number 1:3 after a mknod's mode)."""
    args = [0] * (MODE_ARG[call] + 2)
    if call.endswith("at") or call == "fchmodat2":
        args[0] = AT_FDCWD
    args[MODE_ARG[call]] = mode
    args[MODE_ARG[call] + 1] = 0x103 if call.startswith("mknod") else 0
    return args


@pytest.mark.parametrize("call", sorted(MODE_ARG))
def test_no_call_sets_a_setuid_or_setgid_bit(program: bytes, call: str) -> None:
    kind = S_IFREG if call.startswith("mknod") else 0
    assert verdict(program, call, *_with_mode(call, kind | 0o1777)) == "allow"
    for bits in (S_ISUID, S_ISGID, S_ISUID | S_ISGID):
        assert verdict(program, call, *_with_mode(call, kind | bits | 0o755)) == "errno 1"


@pytest.mark.parametrize("call", ["mknod", "mknodat"])
def test_no_device_node_can_be_made(program: bytes, call: str) -> None:
    for kind in (S_IFREG, S_IFIFO, S_IFSOCK):
        assert verdict(program, call, *_with_mode(call, kind | 0o600)) == "allow", oct(kind)
    for kind in (S_IFCHR, S_IFBLK):
        assert verdict(program, call, *_with_mode(call, kind | 0o600)) == "errno 1", oct(kind)
