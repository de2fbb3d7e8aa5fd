"""Escape probes: the seccomp filter on its own, with the jail's other walls taken down.

The jail normally drops every capability and forbids nested user namespaces, and each of
those alone already stops most of the calls the filter denies. So a rule missing from the
filter goes unnoticed by the other probes, until a later change to another layer exposes
it. Here the jail is built from the same argv builder with ``--cap-drop ALL`` replaced by
``--cap-add ALL`` and ``--disable-userns`` removed: between a probe and each denied call
there is nothing but the filter.

Every call is made twice, each in a child process of its own: in that jail without the
filter (the positive control: the call reaches the kernel, whose answer may be success or
any error but EPERM, e.g. EBADF for a bad descriptor), then with it, where it must fail
with EPERM (clone3: ENOSYS, so that libc falls back to clone, whose flags the filter can
see). Arguments are harmless: bad descriptors, missing paths, invalid flags.

A few calls check a capability of the host's *initial* user namespace before looking at
their arguments (module and kexec loading, syslog under ``kernel.dmesg_restrict``, swap,
accounting, open_by_handle_at on kernels before 6.10). No capability inside a jail's own
user namespace reaches them, so their control needs the host's namespace: a root caller
gets a jail without ``--unshare-user`` for them. An unprivileged caller tries them in its
own jail, and where the kernel answers EPERM without the filter, it has no way to reach
them at all: those probes are skipped with that reason (the compiled program is checked
for them by ``tests/test_seccomp_program.py`` on every run).
"""

from __future__ import annotations

import errno
import json
import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

EPERM = errno.EPERM
ENOSYS = errno.ENOSYS
BROKEN = 255
"""A child whose probe raised (a bug in the probe, not an answer from the kernel)."""

# Calls whose control needs the capabilities of the host's initial user namespace.
INITIAL_NAMESPACE = frozenset(
    {
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "open_by_handle_at",
        "lookup_dcookie",
        "syslog",
        "acct",
        "swapon",
        "swapoff",
        "vhangup",
    }
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

# label -> the probe's Python expression (returns the raw result and errno of one call).
CALLS: dict[str, str] = {
    # Other processes (PTRACE_ATTACH to a pid that does not exist: ESRCH).
    "ptrace": 'call("ptrace", 16, 0x3FFFFFF0, 0, 0)',
    "process_vm_readv": 'vm("process_vm_readv")',
    "process_vm_writev": 'vm("process_vm_writev")',
    "pidfd_getfd": "pidfd_getfd()",
    # Kernel attack surface.
    "io_uring_setup": 'call("io_uring_setup", 4, buffer(120))',
    "io_uring_enter": 'call("io_uring_enter", -1, 0, 0, 0, 0, 0)',
    "io_uring_register": 'call("io_uring_register", -1, 0, 0, 0)',
    "bpf": "bpf()",
    "perf_event_open": "perf_event_open()",
    "userfaultfd": 'call("userfaultfd", 0o2000000 | 1)',
    "keyctl": 'call("keyctl", 0, -3, 0)',
    "add_key": 'call("add_key", s(b"panday-no-such-type"), s(b"x"), 0, 0, -2)',
    "request_key": 'call("request_key", s(b"user"), s(b"panday-no-such-key"), 0, 0)',
    "kexec_load": 'call("kexec_load", 0, 0, 0, 0xFFFF0000)',
    "kexec_file_load": 'call("kexec_file_load", -1, -1, 0, 0, 0xFFFFFFFF)',
    "init_module": 'call("init_module", 0, 0, s(b""))',
    "finit_module": 'call("finit_module", -1, s(b""), 0)',
    "delete_module": 'call("delete_module", s(b"panday_no_such_module"), 0)',
    "modify_ldt": 'call("modify_ldt", 0, buffer(16), 16)',
    "iopl": 'call("iopl", 4)',
    "ioperm": 'call("ioperm", 0xFFFF0000, 0x20000, 1)',
    "open_by_handle_at": 'call("open_by_handle_at", -1, 0, 0)',
    "lookup_dcookie": 'call("lookup_dcookie", 0, 0, 0)',
    "syslog": 'call("syslog", 10, 0, 0)',  # SYSLOG_ACTION_SIZE_BUFFER
    "acct": 'call("acct", s(b"/panday-no-such-file"))',
    "quotactl": 'call("quotactl", 7, 0, 0, 0)',  # an invalid quota type: EINVAL
    "swapon": 'call("swapon", s(b"/panday-no-such-file"), 0xFFFFFFFF)',
    "swapoff": 'call("swapoff", 0)',
    "reboot": 'call("reboot", 0, 0, 0, 0)',  # wrong magic: EINVAL
    "settimeofday": "settimeofday()",
    "clock_settime": 'call("clock_settime", 100, buffer(16))',
    "clock_adjtime": 'call("clock_adjtime", 100, buffer(256))',
    "vhangup": 'call("vhangup")',
    # The file system view.
    "mount": 'call("mount", s(b"none"), s(b"/panday-no-such-dir"), s(b"tmpfs"), 0, 0)',
    "umount2": 'call("umount2", s(b"/panday-no-such-dir"), 0)',
    "pivot_root": 'call("pivot_root", s(b"/panday-no-such-dir"), s(b"/panday-x"))',
    "chroot": 'call("chroot", s(b"/"))',
    "move_mount": 'call("move_mount", -1, s(b""), -1, s(b""), 0)',
    "open_tree": 'call("open_tree", -100, s(b"/panday-no-such-dir"), 0)',
    "fsopen": 'call("fsopen", s(b"tmpfs"), 0)',
    "fsconfig": 'call("fsconfig", -1, 0, 0, 0, 0)',
    "fsmount": 'call("fsmount", -1, 0, 0)',
    "fspick": 'call("fspick", -100, s(b"/"), 0xFFFF)',
    "mount_setattr": 'call("mount_setattr", -1, s(b""), 0, 0, 0)',
    "setns": 'call("setns", -1, 0)',
    # Conditional rules: namespace flags, terminal injection, personality, socket families.
    **{f"unshare {name}": f'call("unshare", {flag:#x})' for name, flag in CLONE_NEW.items()},
    **{f"clone {name}": f"clone({flag:#x})" for name, flag in CLONE_NEW.items()},
    "ioctl TIOCSTI": 'call("ioctl", 0, 0x5412, s(b"x"))',
    "ioctl TIOCSTI with high bits": 'call("ioctl", 0, (1 << 32) | 0x5412, s(b"x"))',
    "ioctl TIOCLINUX": 'call("ioctl", 0, 0x541C, s(b"\\x0b"))',
    "personality READ_IMPLIES_EXEC": 'call("personality", 0x0400000)',
    "personality ADDR_NO_RANDOMIZE": 'call("personality", 0x0040000)',
    "socket AF_INET": 'call("socket", 2, 1, 0)',
    "socket AF_INET6": 'call("socket", 10, 1, 0)',
    "socket AF_NETLINK": 'call("socket", 16, 3, 0)',
    "socket AF_PACKET": 'call("socket", 17, 3, 0)',
    "socketpair AF_INET": 'call("socketpair", 2, 1, 0, buffer(8))',
    "clone3": 'call("clone3", buffer(88), 88)',
}
EXPECTED = {label: ENOSYS if label == "clone3" else EPERM for label in CALLS}

PROBE = """
import json
NR = {numbers!r}
KEEP = []
def buffer(size):
    buf = ctypes.create_string_buffer(size)
    KEEP.append(buf)
    return ctypes.addressof(buf)
def s(text):
    buf = ctypes.create_string_buffer(text)
    KEEP.append(buf)
    return ctypes.addressof(buf)
def call(name, *args):
    return sys_call(NR[name], *args)
def vm(name):
    here, there = buffer(16), buffer(16)
    local = (ctypes.c_ulong * 2)(here, 16)
    remote = (ctypes.c_ulong * 2)(there, 16)
    KEEP.extend([local, remote])
    return call(name, os.getpid(), ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
def pidfd_getfd():
    pidfd, e = call("pidfd_open", os.getpid(), 0)
    if pidfd < 0:
        raise OSError(e, "pidfd_open")
    return call("pidfd_getfd", pidfd, 0, 0)
def bpf():
    attr = (ctypes.c_uint32 * 32)()
    attr[0] = 0xFFFFFFFF
    KEEP.append(attr)
    return call("bpf", 1, ctypes.addressof(attr), ctypes.sizeof(attr))
def perf_event_open():
    attr = (ctypes.c_uint8 * 128)()
    KEEP.append(attr)
    ctypes.c_uint32.from_buffer(attr, 0).value = 1
    ctypes.c_uint32.from_buffer(attr, 4).value = 128
    ctypes.c_uint64.from_buffer(attr, 8).value = 1
    ctypes.c_uint64.from_buffer(attr, 40).value = (1 << 0) | (1 << 5) | (1 << 6)
    return call("perf_event_open", ctypes.addressof(attr), 0, -1, -1, 0)
def settimeofday():
    tv = (ctypes.c_long * 2)(0, 2_000_000)  # tv_usec out of range: EINVAL
    KEEP.append(tv)
    return call("settimeofday", ctypes.addressof(tv), 0)
def clone(flag):
    r, e = call("clone", flag | 17, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0x40000000)  # __WALL: the exit signal need not be SIGCHLD
    return r, e
CALLS = {calls!r}
answers = {{}}
for label, expression in CALLS.items():
    pid = os.fork()
    if pid == 0:
        try:
            r, e = eval(expression)
            os._exit(0 if r >= 0 else min(e, 254))
        except BaseException:
            os._exit(255)
    _, status = os.waitpid(pid, 0)
    answers[label] = os.waitstatus_to_exitcode(status)
ok(json.dumps(answers))
"""

_ANSWERS: dict[tuple[str, bool], dict[str, int] | str] = {}


def syscall_numbers() -> dict[str, int]:
    """Numbers from libseccomp's table for this architecture (not from panday's code)."""
    import pyseccomp as sc  # noqa: PLC0415  # pyright: ignore[reportMissingTypeStubs] - typed inline, no stub package

    names = {expr.split('"')[1] for expr in CALLS.values() if expr.startswith("call(")}
    names |= {"pidfd_open", "pidfd_getfd", "bpf", "perf_event_open", "settimeofday", "clone"}
    names |= {"process_vm_readv", "process_vm_writev"}
    return {name: sc.resolve_syscall(sc.Arch.NATIVE, name) for name in sorted(names)}


def _edit(*, initial: bool) -> object:
    def edit(args: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(args):
            if args[i] == "--cap-drop":
                i += 2
                continue
            if args[i] == "--disable-userns" or (initial and args[i] == "--unshare-user"):
                i += 1
                continue
            out.append(args[i])
            i += 1
        for option in ("--cap-drop", "--disable-userns"):
            assert option not in out, f"the layer jail still has {option}"
        return [*out, "--cap-add", "ALL"]

    return edit


def answers(esc: Escape, *, initial: bool, seccomp: bool) -> dict[str, int]:
    """Each call's answer (0: success, else the errno) in the layer jail, run once per mode."""
    key = ("initial" if initial else "namespaced", seccomp)
    if key not in _ANSWERS:
        code = PROBE.format(numbers=syscall_numbers(), calls=CALLS)
        where = (
            f"a jail with every capability{' of the initial user namespace' if initial else ''}, "
            f"nested user namespaces allowed, seccomp {'on' if seccomp else 'off'}"
        )
        outcome = esc.edited_run(
            esc.py(code),
            edit=_edit(initial=initial),  # pyright: ignore[reportArgumentType] - the edit callable
            seccomp=seccomp,
            where=where,
        )
        _ANSWERS[key] = (
            json.loads(outcome.detail)
            if outcome.ok
            else f"broken probe ({outcome.where}): {outcome.raw}"
        )
    got = _ANSWERS[key]
    if isinstance(got, str):
        pytest.fail(got)
    return got


def _name(code: int) -> str:
    if code == 0:
        return "success"
    if code == BROKEN:
        return "the probe raised"
    return errno.errorcode.get(code, str(code)) if code > 0 else f"killed by signal {-code}"


@pytest.mark.parametrize("label", sorted(CALLS))
def test_the_filter_alone_denies(esc: Escape, label: str) -> None:
    root = os.geteuid() == 0
    initial = label in INITIAL_NAMESPACE and root
    control = answers(esc, initial=initial, seccomp=False)[label]
    if control == EPERM and label in INITIAL_NAMESPACE and not root:
        pytest.skip(
            f"{label}: this kernel checks a capability of the host's initial user namespace "
            "first (EPERM without the filter), which an unprivileged caller cannot hold in "
            "any jail; the root pass runs this probe, and test_seccomp_program.py checks "
            "the compiled rule"
        )
    if control in {EPERM, BROKEN} or control < 0:
        pytest.fail(
            f"inconclusive: control failed: without the filter {label} answered "
            f"{_name(control)}, so the filter's EPERM could not be told from the kernel's"
        )
    filtered = answers(esc, initial=initial, seccomp=True)[label]
    assert filtered == EXPECTED[label], (
        f"ESCAPE: with only seccomp between them, {label} answered {_name(filtered)} "
        f"(without the filter: {_name(control)}); expected {_name(EXPECTED[label])}"
    )
    esc.held()
