"""Issue 30 probes (macOS only; CI's macos-15 and macos-14 jobs run them).

Persistence under fs.allow_home and in a home's places, case and Unicode folding on a fresh
case-insensitive APFS image, terminals, survivors of setsid, other sessions' temp files,
and the programs and services a command must not reach (launchd, Launch Services, Apple
events, the pasteboard, the keychain, sudo). Every probe first shows the operation
succeeding without the sandbox (or with the permission granted) and fails as inconclusive
when that control fails.
"""

from __future__ import annotations

import contextlib
import os
import plistlib
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from macos_escape_helpers import (
    PROBE_TIMEOUT_S,
    Jail,
    Listener,
    control,
    guarded,
    inconclusive,
    outside,
)

from panday_core.errors import PolicyViolation

if TYPE_CHECKING:
    from collections.abc import Iterator

READ = guarded("import sys", "with open(sys.argv[1], 'rb') as f:\n    f.read()", "READ")
WRITE = guarded(
    "import os, sys",
    "os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)\n"
    "with open(sys.argv[1], 'ab') as f:\n    f.write(b'x')",
    "WROTE",
)
OP = guarded("import os, sys", "exec(sys.argv[1])", "OK")
CONNECT6 = guarded(
    "import socket, sys\ns = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\ns.settimeout(10)",
    "s.connect((sys.argv[1], int(sys.argv[2])))",
    "CONNECTED",
)
RUN = """
import subprocess, sys
try:
    done = subprocess.run(sys.argv[1:], capture_output=True, timeout=30, check=False)
except PermissionError:
    print('DENIED'); sys.exit()
out = done.stdout.decode('utf-8', 'replace').strip().replace('\\n', ' ')[:200]
print(f'EXIT {done.returncode} {out}'.rstrip())
"""
LISTPIDS = """
import ctypes, sys
lib = ctypes.CDLL('/usr/lib/libproc.dylib', use_errno=True)
buf = (ctypes.c_int * 16384)()
n = lib.proc_listallpids(buf, ctypes.sizeof(buf))
print('SEEN' if int(sys.argv[1]) in set(buf[: max(n, 0)]) else f'NOT-SEEN {n}')
"""
SWAP = """
import ctypes, sys
lib = ctypes.CDLL('/usr/lib/libSystem.B.dylib', use_errno=True)
RENAME_SWAP = 0x2
r = lib.renamex_np(sys.argv[1].encode(), sys.argv[2].encode(), RENAME_SWAP)
print('SWAPPED' if r == 0 else f'DENIED {ctypes.get_errno()}')
"""
SEM = """
import ctypes, os, sys
lib = ctypes.CDLL('/usr/lib/libSystem.B.dylib', use_errno=True)
lib.sem_open.restype = ctypes.c_void_p
lib.sem_open.argtypes = [ctypes.c_char_p, ctypes.c_int]
name = sys.argv[1].encode()
sem = lib.sem_open(name, os.O_CREAT, ctypes.c_uint(0o600), ctypes.c_uint(1))
if sem in (None, ctypes.c_void_p(-1).value):
    print('DENIED', ctypes.get_errno()); sys.exit()
lib.sem_close(ctypes.c_void_p(sem)); lib.sem_unlink(name)
print('OPENED')
"""


def _run(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        list(argv), capture_output=True, timeout=PROBE_TIMEOUT_S, check=False, input=stdin
    )


# ------------------------------------------------------------- 1: persistence in a home


def test_allow_home_cannot_write_a_launch_agent_or_a_pth(jail: Jail, fake_home: Path) -> None:
    agent = fake_home / "Library" / "LaunchAgents" / "com.evil.plist"
    pth = fake_home / "Library" / "Python" / "3.12" / "lib" / "python" / "site-packages" / "x.pth"
    control(WRITE, str(agent), want="WROTE")
    control(WRITE, str(pth), want="WROTE")
    agent.unlink()
    pth.unlink()
    granted = jail.create(
        fake_home,
        {"fs": {"allow_home": True, "unprotect": ["Library/LaunchAgents", "Library/Python"]}},
    )
    if jail.py(granted, WRITE, str(agent)) != "WROTE":
        inconclusive("the agent is writable in the home when fs.unprotect names it")
    agent.unlink()
    handle = jail.create(fake_home, {"fs": {"allow_home": True}})
    assert jail.py(handle, WRITE, str(agent)) != "WROTE"
    assert jail.py(handle, WRITE, str(pth)) != "WROTE"
    assert not agent.exists()
    assert not pth.exists()


@pytest.mark.parametrize("place", ["Library/LaunchAgents", ".config", ".local/bin"])
def test_a_homes_persistence_place_is_no_writable_workspace(
    jail: Jail, fake_home: Path, place: str
) -> None:
    (fake_home / place).mkdir(parents=True, exist_ok=True)
    (fake_home / "projects" / "p").mkdir(parents=True)
    jail.create(fake_home / "projects" / "p")  # control: a project in the home opens
    for allow_home in (False, True):
        with pytest.raises(PolicyViolation) as info:
            jail.create(fake_home / place, {"fs": {"allow_home": allow_home}})
        assert info.value.field == "fs.workspace"


# ----------------------------------------------------- 2: case and Unicode folding (APFS)


@pytest.fixture
def fresh_volume(tmp_path: Path) -> Iterator[Path]:
    """A new case-insensitive APFS volume (macOS's default) mounted under the test's temp
    dir: nothing on it is in the name cache, so every lookup of a folded spelling is a
    first lookup."""
    image = tmp_path / "fold.dmg"
    mount = tmp_path / "mnt"
    mount.mkdir()
    made = _run(
        "/usr/bin/hdiutil", "create", "-size", "32m", "-fs", "APFS", "-volname", "pdyfold",
        str(image),
    )  # fmt: skip
    if made.returncode != 0:
        inconclusive("hdiutil can make an APFS image", made.stderr)
    attached = _run(
        "/usr/bin/hdiutil", "attach", "-nobrowse", "-mountpoint", str(mount), str(image)
    )
    if attached.returncode != 0:
        inconclusive("hdiutil can attach the image", attached.stderr)
    try:
        yield Path(os.path.realpath(mount))
    finally:
        _run("/usr/bin/hdiutil", "detach", "-force", str(mount))


def test_folded_spellings_of_missing_protected_names_find_the_placeholder(
    jail: Jail, fresh_volume: Path
) -> None:
    nfc = unicodedata.normalize("NFC", "caf\u00e9.sh")
    nfd = unicodedata.normalize("NFD", nfc)
    probe = fresh_volume / "probe"
    probe.mkdir()
    (probe / ".VSCODE").mkdir()
    (probe / nfd).write_text("x", encoding="utf-8")
    if not (probe / ".vscode").is_dir() or not (probe / nfc).exists():
        inconclusive("the fresh volume ignores case and normalisation")
    ws = fresh_volume / "ws"
    ws.mkdir()
    handle = jail.create(ws, {"fs": {"protect": [nfc]}})
    if jail.py(handle, WRITE, str(ws / "Ordinary.txt")) != "WROTE":
        inconclusive("an ordinary file is writable on the volume inside")
    assert jail.py(handle, OP, f"os.makedirs({str(ws / '.VSCODE' / 'x')!r})") != "OK"
    assert jail.py(handle, WRITE, str(ws / ".MCP.json")) != "WROTE"
    assert jail.py(handle, WRITE, str(ws / ".Claude" / "settings.json")) != "WROTE"
    assert jail.py(handle, WRITE, str(ws / nfd)) != "WROTE"
    for name in (".vscode", ".mcp.json", ".claude", nfc):
        assert not (ws / name).exists(), f"{name}: the placeholder is gone after the command"


def test_a_secret_read_through_a_folded_spelling_is_denied(
    jail: Jail, fresh_volume: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = fresh_volume / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("CANARY\n", encoding="utf-8")
    (home / "notes.txt").write_text("fine\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    ws = fresh_volume / "ws"
    ws.mkdir()
    # Fresh names: nothing has looked these spellings up yet.
    folded = str(home / ".AWS" / "CREDENTIALS")
    control(READ, str(home / ".Aws" / "Credentials"), want="READ")
    handle = jail.create(ws)
    if jail.py(handle, READ, str(home / "NOTES.txt")) != "READ":
        inconclusive("an ordinary file of that home is readable inside by a folded name")
    assert jail.py(handle, READ, folded) == "DENIED"


def test_a_placeholder_cannot_be_unflagged_or_removed(jail: Jail, workspace: Path) -> None:
    plain = workspace / "plain.txt"
    plain.write_text("x", encoding="utf-8")
    flag = "import stat; os.chflags(sys.argv[2], stat.UF_IMMUTABLE)"
    control(OP, flag, str(plain), want="OK")
    _run("/usr/bin/chflags", "nouchg", str(plain))
    handle = jail.create(workspace)
    if jail.py(handle, OP, "os.unlink('plain.txt')") != "OK":
        inconclusive("an ordinary file can be removed inside")
    mcp = str(workspace / ".mcp.json")
    assert jail.py(handle, OP, "os.chflags(sys.argv[2], 0)", mcp) != "OK"
    assert jail.py(handle, OP, "os.unlink(sys.argv[2])", mcp) != "OK"
    assert jail.py(handle, OP, "os.rename('.mcp.json', 'x')") != "OK"
    assert not Path(mcp).exists(), "removed after the command"


def test_no_file_flag_can_be_set(jail: Jail, workspace: Path, tmp_path: Path) -> None:
    target = tmp_path / "flagme"
    target.write_text("x", encoding="utf-8")
    flag = "import stat; os.chflags(sys.argv[2], stat.UF_HIDDEN)"
    control(OP, flag, str(target), want="OK")
    (workspace / "mine").write_text("x", encoding="utf-8")
    handle = jail.create(workspace)
    assert jail.py(handle, OP, flag, str(workspace / "mine")) == "DENIED"


# ----------------------------------------------------------------------- 3: terminals


def test_another_terminal_cannot_be_read(jail: Jail, workspace: Path) -> None:
    master, slave = os.openpty()
    try:
        name = os.ttyname(slave)
        if not name.startswith("/dev/ttys"):
            inconclusive("a new pty is a /dev/ttys device", name)
        opener = guarded(
            "import os, sys",
            "os.close(os.open(sys.argv[1], os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))",
            "OPENED",
        )
        control(opener, name, want="OPENED")
        handle = jail.create(workspace)
        if jail.py(handle, READ, "/dev/null") != "READ":
            inconclusive("/dev/null is readable inside")
        assert jail.py(handle, opener, name) == "DENIED"
        assert jail.py(handle, opener, "/dev/ptmx") == "DENIED"
    finally:
        os.close(master)
        os.close(slave)


# ---------------------------------------------------------------------- 4: survivors


SETSID_SLEEPER = """
import os, sys, time
pidfile = sys.argv[1]
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with open(pidfile + '.tmp', 'w') as f:
            f.write(str(os.getpid()))
        os.rename(pidfile + '.tmp', pidfile)
        time.sleep(120)
        os._exit(0)
    os._exit(0)
deadline = time.time() + 10
while not os.path.exists(pidfile) and time.time() < deadline:
    time.sleep(0.01)
print('FORKED')
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_from(path: Path) -> int:
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not path.exists():
        inconclusive("the sleeper wrote its pid", path)
    return int(path.read_text(encoding="utf-8"))


def test_a_setsid_survivor_does_not_outlive_its_session(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "control.pid"
    _run(sys.executable, "-I", "-c", SETSID_SLEEPER, str(pidfile))
    pid = _pid_from(pidfile)
    try:
        if not _alive(pid):
            inconclusive("a double-forked setsid sleeper outlives its parent unsandboxed")
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    handle = jail.create(workspace)
    inside = workspace / "sleeper.pid"
    assert jail.py(handle, SETSID_SLEEPER, str(inside)) == "FORKED"
    pid = _pid_from(inside)
    try:
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the setsid survivor outlived its command and session"
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)


# ------------------------------------------------------------------- 6: other sessions


def test_a_session_cannot_read_another_sessions_temp_files(jail: Jail, workspace: Path) -> None:
    first = jail.create(workspace)
    where = "import os; p = os.path.join(os.environ['TMPDIR'], 'secret'); "
    write = where + "open(p, 'w').write('S'); print(p)"
    path = jail.py(first, write)
    if not path.startswith("/"):
        inconclusive("a session writes its own temp dir", path)
    if jail.py(first, READ, path) != "READ":
        inconclusive("the session reads its own temp file")
    control(READ, path, want="READ")
    other_ws = workspace.parent / "other"
    other_ws.mkdir()
    second = jail.create(other_ws)
    assert jail.py(second, READ, path) == "DENIED"
    assert jail.py(second, OP, f"os.listdir({os.path.dirname(path)!r})") == "DENIED"  # noqa: PTH120 - a plain string path


# --------------------------------------------------------- 7: mode, semaphores, records


def test_the_workspace_root_keeps_its_mode(jail: Jail, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    handle = jail.create(workspace)
    if jail.py(handle, OP, "os.chmod('sub', 0o777)") != "OK":
        inconclusive("an ordinary directory's mode can be changed inside")
    before = workspace.stat().st_mode
    assert jail.py(handle, OP, f"os.chmod({str(workspace)!r}, 0o777)") == "DENIED"
    assert workspace.stat().st_mode == before


def test_only_multiprocessing_semaphores_can_be_opened(jail: Jail, workspace: Path) -> None:
    name = f"/pdy-{os.getpid()}"
    control(SEM, name, want="OPENED")
    handle = jail.create(workspace)
    if jail.py(handle, SEM, f"/mp-pdy{os.getpid()}") != "OPENED":
        inconclusive("a multiprocessing-style semaphore opens inside")
    assert jail.py(handle, SEM, name).startswith("DENIED")


def test_the_local_user_records_carve_out_holds_no_password_hash(
    jail: Jail, workspace: Path
) -> None:
    """The /private/var/db carve-out for DarwinDirectory's recordStore.data: what a command
    can read there must not be a password hash."""
    path = "/private/var/db/DarwinDirectory/local/recordStore.data"
    handle = jail.create(workspace)
    if not os.access(path, os.R_OK):
        assert jail.py(handle, READ, path) != "READ"
        return
    data = Path(path).read_bytes()
    for marker in (b"ShadowHashData", b"SALTED-SHA512", b"PBKDF2"):
        assert marker not in data, marker


# --------------------------------------------------------------- 8: the missing probes


@pytest.fixture
def sibling_pid() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-I", "-c", "import time; time.sleep(120)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_sudo_cannot_run(jail: Jail, workspace: Path) -> None:
    """The runner has passwordless sudo: the ideal positive control."""
    if outside(RUN, "/usr/bin/sudo", "-n", "/usr/bin/true") != "EXIT 0":
        inconclusive("sudo -n true works without the sandbox")
    handle = jail.create(workspace)
    if jail.py(handle, RUN, "/usr/bin/true") != "EXIT 0":
        inconclusive("an ordinary program runs inside")
    assert jail.py(handle, RUN, "/usr/bin/sudo", "-n", "/usr/bin/true") != "EXIT 0"


def test_launchctl_cannot_submit_or_bootstrap_a_job(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    label = f"dev.panday.probe.{os.getpid()}"
    uid = os.getuid()
    made = outside(RUN, "/bin/launchctl", "submit", "-l", label + ".control", "--", "/usr/bin/true")
    _run("/bin/launchctl", "remove", label + ".control")
    if made != "EXIT 0":
        inconclusive("launchctl submit works without the sandbox", made)
    plist = tmp_path / f"{label}.plist"
    plist.write_bytes(plistlib.dumps({"Label": label, "ProgramArguments": ["/usr/bin/true"]}))
    handle = jail.create(workspace)
    try:
        jail.py(handle, RUN, "/bin/launchctl", "submit", "-l", label, "--", "/usr/bin/true")
        jail.py(handle, RUN, "/bin/launchctl", "bootstrap", f"gui/{uid}", str(plist))
        listed = _run("/bin/launchctl", "list", label)
        assert listed.returncode != 0, "a job the command submitted exists"
    finally:
        _run("/bin/launchctl", "remove", label)
        _run("/bin/launchctl", "bootout", f"gui/{uid}/{label}")


MACH = """
import ctypes, sys
lib = ctypes.CDLL('/usr/lib/libSystem.B.dylib')
bootstrap = ctypes.c_uint32.in_dll(lib, 'bootstrap_port')
lib.bootstrap_look_up.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32)]
port = ctypes.c_uint32(0)
kr = lib.bootstrap_look_up(bootstrap, sys.argv[1].encode(), ctypes.byref(port))
print('FOUND' if kr == 0 else f'DENIED {kr}')
"""


def test_open_cannot_reach_launch_services(jail: Jail, workspace: Path) -> None:
    control(MACH, "com.apple.coreservices.launchservicesd", want="FOUND")
    (workspace / "a.txt").write_text("x", encoding="utf-8")
    handle = jail.create(workspace)
    got = jail.py(handle, RUN, "/usr/bin/open", "-g", "-R", str(workspace / "a.txt"))
    assert got != "EXIT 0"


def test_osascript_cannot_run_apple_events(jail: Jail, workspace: Path) -> None:
    if outside(RUN, "/usr/bin/osascript", "-e", "return 6 * 7") != "EXIT 0 42":
        inconclusive("osascript runs without the sandbox")
    handle = jail.create(workspace)
    assert jail.py(handle, RUN, "/usr/bin/osascript", "-e", "return 6 * 7") != "EXIT 0 42"


def test_the_pasteboard_cannot_be_read(jail: Jail, workspace: Path) -> None:
    canary = f"PASTE-CANARY-{os.urandom(4).hex()}"
    _run("/usr/bin/pbcopy", stdin=canary.encode())
    if outside(RUN, "/usr/bin/pbpaste") != f"EXIT 0 {canary}":
        inconclusive("pbpaste reads the pasteboard without the sandbox")
    handle = jail.create(workspace)
    assert canary not in jail.py(handle, RUN, "/usr/bin/pbpaste")


def test_the_keychain_cannot_be_reached(jail: Jail, workspace: Path) -> None:
    got = outside(RUN, "/usr/bin/security", "dump-keychain")
    if not got.startswith("EXIT 0"):
        inconclusive("security dump-keychain works without the sandbox", got)
    handle = jail.create(workspace)
    assert not jail.py(handle, RUN, "/usr/bin/security", "dump-keychain").startswith("EXIT 0")


def test_other_processes_cannot_be_listed_through_libproc(
    jail: Jail, workspace: Path, sibling_pid: int
) -> None:
    time.sleep(0.2)
    control(LISTPIDS, str(sibling_pid), want="SEEN")
    handle = jail.create(workspace)
    assert jail.py(handle, LISTPIDS, str(sibling_pid)) != "SEEN"


def test_a_guarded_directory_cannot_be_swapped_away(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    for base in (workspace, tmp_path / "c"):
        (base / ".git").mkdir(parents=True)
        (base / ".git" / "config").write_text("[core]\n", encoding="utf-8")
        (base / "evil").mkdir()
        (base / "evil" / "config").write_text("[core]\n\tfsmonitor = x\n", encoding="utf-8")
    c = tmp_path / "c"
    control(SWAP, str(c / ".git"), str(c / "evil"), want="SWAPPED")
    (workspace / "a").mkdir()
    (workspace / "b").mkdir()
    handle = jail.create(workspace)
    if jail.py(handle, SWAP, str(workspace / "a"), str(workspace / "b")) != "SWAPPED":
        inconclusive("two ordinary directories can be swapped inside")
    assert jail.py(handle, SWAP, str(workspace / ".git"), str(workspace / "evil")) != "SWAPPED"
    assert (workspace / ".git" / "config").read_text(encoding="utf-8") == "[core]\n"


def test_a_hard_link_to_a_protected_entry_does_not_write_it(
    jail: Jail, workspace: Path, tmp_path: Path
) -> None:
    (workspace / ".git").mkdir()
    config = workspace / ".git" / "config"
    config.write_text("[core]\n", encoding="utf-8")
    (tmp_path / "src").write_text("x", encoding="utf-8")
    control(OP, f"os.link({str(tmp_path / 'src')!r}, {str(tmp_path / 'dst')!r})", want="OK")
    handle = jail.create(workspace)
    (workspace / "own").write_text("x", encoding="utf-8")
    if jail.py(handle, OP, "os.link('own', 'own2')") != "OK":
        inconclusive("a hard link of an ordinary workspace file can be made inside")
    jail.py(handle, OP, "os.link('.git/config', 'cfg')")
    jail.py(handle, WRITE, str(workspace / "cfg"))
    assert config.read_text(encoding="utf-8") == "[core]\n"


def test_an_ipv4_mapped_loopback_address_is_not_a_way_out(
    jail: Jail, workspace: Path, tcp_listener: Listener
) -> None:
    control(CONNECT6, "::ffff:127.0.0.1", str(tcp_listener.port), want="CONNECTED")
    before = tcp_listener.accepted
    handle = jail.create(workspace)
    assert jail.py(handle, CONNECT6, "::ffff:127.0.0.1", str(tcp_listener.port)) == "DENIED"
    assert tcp_listener.accepted == before
