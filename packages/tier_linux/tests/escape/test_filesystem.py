"""Escape probes: reading and writing outside the workspace, and path tricks.

Proves: reads are an allowlist (secrets, the home directory, files next to the workspace
do not exist inside), the root and staged paths are read-only, and links and renames
cannot carry a path across a mount boundary.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

import pytest

from panday_tier_linux.session import open_session

# Fixtures and verdict helpers come from conftest.py through the `esc` fixture.


def read_code(path: str) -> str:
    return f"""
try:
    data = open({path!r}, "rb").read()
except OSError as exc:
    blocked(err(exc))
ok(f"read {{len(data)}} bytes")
"""


def write_code(path: str) -> str:
    return f"""
try:
    with open({path!r}, "wb") as fh:
        fh.write(b"escaped")
except OSError as exc:
    blocked(err(exc))
ok("wrote")
"""


def test_etc_shadow_does_not_exist_inside(esc: Escape) -> None:
    code = """
try:
    os.lstat("/etc/shadow")
except OSError as exc:
    blocked(err(exc))
ok("exists")
"""
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code))


def test_a_canary_file_next_to_the_workspace_is_unreadable(esc: Escape) -> None:
    canary = esc.next_door / "canary.txt"
    canary.write_text("secret next door")
    esc.control(esc.outside(read_code(str(canary))))
    esc.must_block(esc.inside(read_code(str(canary))))


@pytest.fixture
def home_canary() -> Iterator[Path]:
    home = Path(pwd.getpwuid(os.geteuid()).pw_dir)
    if not home.is_dir() or not os.access(home, os.W_OK):
        pytest.fail(f"inconclusive: the caller's home {home} is not a writable directory")
    canary = home / f".panday-escape-canary-{os.urandom(4).hex()}"
    canary.write_text("secret in the home directory")
    try:
        yield canary
    finally:
        canary.unlink()


def test_the_callers_home_does_not_exist_inside(esc: Escape, home_canary: Path) -> None:
    esc.control(esc.outside(read_code(str(home_canary))))
    esc.must_block(esc.inside(read_code(str(home_canary))))
    home = str(home_canary.parent)
    listing = f"""
try:
    os.listdir({home!r})
except OSError as exc:
    blocked(err(exc))
ok("home listed")
"""
    esc.control(esc.outside(listing))
    esc.must_block(esc.inside(listing))


def test_writing_next_to_the_workspace_fails(esc: Escape) -> None:
    target = esc.next_door / "planted.txt"
    esc.control(esc.outside(write_code(str(target))))
    target.unlink()
    esc.must_block(esc.inside(write_code(str(target))))
    assert not target.exists()


@pytest.mark.usefixtures("launch")
def test_a_staged_path_is_read_only(esc: Escape) -> None:
    staged = esc.tmp / "staged"
    staged.mkdir()
    target = staged / "new.txt"
    # Granted: the same directory as the (writable) workspace.
    esc.control(esc.inside(write_code(str(target)), workspace=staged))
    target.unlink()
    esc.must_block(esc.inside(write_code(str(target)), staged=[staged]))
    assert not target.exists()


def test_a_read_only_workspace_cannot_be_written(esc: Escape) -> None:
    target = esc.ws / "new.txt"
    esc.control(esc.inside(write_code(str(target)), access="rw"))
    target.unlink()
    esc.must_block(esc.inside(write_code(str(target)), access="ro"))


def test_the_root_is_read_only(esc: Escape) -> None:
    code = write_code("/planted-at-root")
    # Granted: the same jail without its last step, the read-only remount of /.
    esc.control(esc.without(code, "--remount-ro", "/"))
    esc.must_block(esc.inside(code))
    esc.must_block(esc.inside(write_code("/usr/planted")))
    esc.must_block(esc.inside(write_code("/etc/planted")))


def test_a_symlink_out_of_the_workspace_leads_nowhere(esc: Escape) -> None:
    canary = esc.next_door / "canary.txt"
    canary.write_text("secret next door")
    link = esc.ws / "link"
    link.symlink_to(canary)
    esc.control(esc.outside(read_code(str(link))))
    esc.must_block(esc.inside(read_code(str(link))))


def test_a_relative_symlink_climbing_out_leads_nowhere(esc: Escape) -> None:
    canary = esc.next_door / "canary.txt"
    canary.write_text("secret next door")
    link = esc.ws / "up"
    link.symlink_to(os.path.relpath(canary, esc.ws))
    esc.control(esc.outside(read_code(str(link))))
    esc.must_block(esc.inside(read_code(str(link))))


def _staged_file(esc: Escape) -> Path:
    staged = esc.tmp / "staged"
    staged.mkdir(exist_ok=True)
    original = staged / "input.txt"
    original.write_text("read-only input")
    return original


def test_a_hard_link_cannot_carry_a_staged_file_into_the_workspace(esc: Escape) -> None:
    original = _staged_file(esc)
    link = esc.ws / "linked.txt"
    code = f"""
try:
    os.link({str(original)!r}, {str(link)!r})
    with open({str(link)!r}, "a") as fh:
        fh.write("tampered")
except OSError as exc:
    blocked(err(exc))
ok("linked and wrote through the link")
"""
    esc.control(esc.outside(code))  # same file system on the host: the link works
    link.unlink()
    original.write_text("read-only input")
    esc.must_block(esc.inside(code, staged=[original.parent]))
    assert original.read_text() == "read-only input"


def test_a_rename_cannot_move_a_staged_file(esc: Escape) -> None:
    original = _staged_file(esc)
    moved = esc.ws / "moved.txt"
    code = f"""
try:
    os.rename({str(original)!r}, {str(moved)!r})
except OSError as exc:
    blocked(err(exc))
ok("renamed")
"""
    esc.control(esc.outside(code))
    moved.rename(original)
    esc.must_block(esc.inside(code, staged=[original.parent]))
    assert original.exists()


def _host_device() -> str:
    for entry in sorted(Path("/dev").iterdir()):
        mode = entry.lstat().st_mode
        if stat.S_ISBLK(mode) or entry.name in {"kmsg", "mem", "console", "ttyS0"}:
            return str(entry)
    return "/dev/kmsg"


def test_host_devices_do_not_exist_inside(esc: Escape) -> None:
    device = _host_device()
    code = f"""
try:
    os.lstat({device!r})
except OSError as exc:
    blocked(err(exc))
ok("device node present")
"""
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code))


def test_sysfs_is_not_mounted_inside(esc: Escape) -> None:
    code = """
try:
    os.listdir("/sys/kernel")
except OSError as exc:
    blocked(err(exc))
ok("sysfs visible")
"""
    esc.control(esc.outside(code))
    esc.must_block(esc.inside(code))


def test_the_cgroup_file_system_cannot_be_reached_or_mounted(esc: Escape) -> None:
    code = """
for path in ("/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/memory/cgroup.procs"):
    try:
        with open(path, "w") as fh:
            fh.write("0")
        ok("wrote " + path)
    except OSError:
        pass
os.makedirs("/tmp/cg", exist_ok=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
if libc.mount(b"none", b"/tmp/cg", b"cgroup2", 0, None) == 0:
    ok("mounted cgroup2")
blocked(errno.errorcode.get(ctypes.get_errno(), "?"))
"""
    # Granted: with capabilities in its own user and cgroup namespace, a process may
    # mount cgroup2; that is exactly what the dropped capabilities and the filter deny.
    esc.control(esc.granted(code))
    esc.must_block(esc.inside(code))


def test_pandays_own_cache_cannot_be_rewritten_from_a_jail(
    esc: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A workspace holding the caller's cache (a workspace of ~, say): a jail could replace
    # the cached seccomp program that every later session loads.
    # (Its state is also covered by an empty read-only tmpfs in the jail: test_caches.py.)
    from panday_core import userstate  # noqa: PLC0415 - this test only

    home = esc.tmp / "home"
    (home / ".cache").mkdir(parents=True)
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(home))
    with open_session(esc.policy(workspace=home)) as session:
        state = [f"{home}/{e.rel}" for e in session.roots.entries() if "panday" in e.rel]
    assert state, "panday's cache inside the workspace is not protected"
    cached = next((home / ".cache" / "panday" / "seccomp").glob("*.bpf"))
    code = f"""
try:
    with open({str(cached)!r}, "r+b") as fh:
        fh.write(b"tampered")
except OSError as exc:
    blocked(err(exc))
ok("rewrote the cached filter")
"""
    before = cached.read_bytes()

    def without_bind_and_cover(args: list[str]) -> list[str]:
        dest = state[0]
        for i in range(len(args) - 3):
            if args[i : i + 4] == ["--tmpfs", dest, "--remount-ro", dest]:
                args = args[:i] + args[i + 4 :]
                break
        for i in range(len(args) - 2):
            if args[i] == "--ro-bind-fd" and args[i + 2] == dest:
                return args[:i] + args[i + 3 :]
        pytest.fail(f"the jail has no bind at {dest}")

    esc.control(
        esc.edited_run(
            esc.py(code),
            edit=without_bind_and_cover,
            seccomp=True,
            where="inside a jail without the bind and cover at panday's state",
            workspace=home,
        )
    )
    cached.write_bytes(before)
    esc.must_block(esc.inside(code, workspace=home))
    assert cached.read_bytes() == before


@pytest.mark.usefixtures("launch")
def test_proc_is_read_only(esc: Escape) -> None:
    # A process may rename itself through /proc/self/comm anywhere: a writable /proc.
    esc.control(esc.outside(_COMM))
    esc.control(esc.without(_COMM, "--remount-ro", "/proc"))
    esc.must_block(esc.inside(_COMM))


@pytest.mark.usefixtures("launch")
def test_host_wide_sysctls_cannot_be_written(esc: Escape) -> None:
    # A root caller's jail is the host's uid 0 without capabilities, and procfs checks a
    # sysctl write against the uid alone: core_pattern would run a program as host root.
    # The probe writes a harmless sysctl's current value back.
    code = """
path = "/proc/sys/kernel/printk_ratelimit_burst"
try:
    value = open(path).read()
    with open(path, "w") as fh:
        fh.write(value)
except OSError as exc:
    blocked(err(exc))
ok("wrote " + path)
"""
    if esc.root:
        esc.control(esc.outside(code))
    else:
        # An unprivileged caller may not write it anywhere; the wall that matters for it is
        # the same read-only /proc, shown writable without it by the jail minus the remount.
        esc.control(esc.without(_COMM, "--remount-ro", "/proc"))
    esc.must_block(esc.inside(code))


_COMM = """
try:
    with open("/proc/self/comm", "w") as fh:
        fh.write("renamed")
except OSError as exc:
    blocked(err(exc))
ok("wrote /proc/self/comm")
"""
