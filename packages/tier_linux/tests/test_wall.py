"""The Landlock wall under T2 Linux's writes (wall.py, wall_x86_64.S).

Each must-fail check first shows the same write succeeds where it should (the workspace),
and the layer-alone probe first shows that the widened bind really is writable without
the wall: otherwise the test fails as inconclusive.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_core.errors import CommandNotFound, TierUnavailable
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_tier_linux import binds, wall
from panday_tier_linux.session import LinuxSession, open_session

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="T2 Linux runs on Linux only"
)
ROOT = Path(__file__).resolve().parents[3]


def _need_wall() -> None:
    reason = wall.unavailable_reason()
    if reason is not None:
        pytest.fail(f"this host has no Landlock wall for T2 Linux: {reason}")


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the jail's /tmp (the jail's /tmp rule covers whatever is bound
    beneath it), to stage read-only."""
    made = Path(tempfile.mkdtemp(prefix="panday-wall-", dir="/var/tmp"))
    try:
        (made / "file").write_text("original\n")
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _session(ws: Path, staged: Path | None = None) -> LinuxSession:
    fs = FsPolicy(workspace=str(ws), staged_ro=(str(staged),) if staged else ())
    return open_session(SandboxPolicy(fs=fs))


def _widen(monkeypatch: pytest.MonkeyPatch, staged: Path) -> None:
    """The test build's mount mistake: the staged path bound writable."""
    add = binds.CommandBinds.add

    def widened(self: binds.CommandBinds, option: str, fd: int, dest: str) -> None:
        if dest == str(staged) and option == "--ro-bind-fd":
            option = "--bind-fd"
        add(self, option, fd, dest)

    monkeypatch.setattr(binds.CommandBinds, "add", widened)


WRITE = 'echo changed > "$1/file" && echo wrote'


def test_the_embedded_wall_is_its_assembled_source() -> None:
    if shutil.which("as") is None or shutil.which("objcopy") is None:
        pytest.fail("inconclusive: assembling the wall needs GNU as and objcopy (binutils)")
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/wall.py"), "--check"], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()


def test_a_widened_bind_is_still_read_only_behind_the_wall(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need_wall()
    _widen(monkeypatch, outside)
    # Control: without the wall, the widened bind takes the write (the mistake is real).
    monkeypatch.setattr(wall, "_REASON", ["switched off for the control"])
    with _session(tmp_path, outside) as bare:
        assert not bare.plan.spec.wall
        control = bare.run(["sh", "-c", WRITE, "sh", str(outside)])
    if control.exit_code != 0 or (outside / "file").read_text() != "changed\n":
        pytest.fail(f"inconclusive: the widened bind took no write: {control.stderr!r}")
    (outside / "file").write_text("original\n")
    monkeypatch.setattr(wall, "_REASON", [None])
    with _session(tmp_path, outside) as walled:
        assert walled.plan.spec.wall
        ok = walled.run(["sh", "-c", WRITE, "sh", str(tmp_path)])
        assert ok.exit_code == 0, ok.stderr  # the workspace still takes writes
        denied = walled.run(["sh", "-c", WRITE, "sh", str(outside)])
        moved = walled.run(["mv", f"{outside}/file", f"{tmp_path}/taken"])
        made = walled.run(["mkdir", f"{outside}/new"])
    assert denied.exit_code != 0
    assert b"Permission denied" in denied.stderr  # Landlock's EACCES, not the mount's EROFS
    assert moved.exit_code != 0
    assert made.exit_code != 0
    assert (outside / "file").read_text() == "original\n"
    assert sorted(p.name for p in outside.iterdir()) == ["file"]


def test_without_the_widening_the_mount_still_refuses_first(tmp_path: Path, outside: Path) -> None:
    """Both layers stand alone: here the mount's read-only bind answers (EROFS)."""
    _need_wall()
    with _session(tmp_path, outside) as session:
        done = session.run(["sh", "-c", WRITE, "sh", str(outside)])
    assert done.exit_code != 0
    assert b"Read-only file system" in done.stderr
    assert (outside / "file").read_text() == "original\n"


def test_the_command_runs_as_execvp_would_behind_the_wall(tmp_path: Path) -> None:
    _need_wall()
    script = tmp_path / "noshebang"
    script.write_text('echo "script $1"\n')
    script.chmod(0o755)
    (tmp_path / "plain").write_text("data\n")
    with _session(tmp_path) as session:
        assert session.plan.spec.wall
        by_shell = session.run(["./noshebang", "arg"])
        searched = session.run(
            ["sh", "-c", 'PATH=/nonexistent::/usr/bin; cd "$1" && noshebang x', "sh", str(tmp_path)]
        )
        with pytest.raises(CommandNotFound) as missing:
            session.run(["no-such-program-here"])
        with pytest.raises(CommandNotFound) as not_executable:
            session.run([str(tmp_path / "plain")])
    assert by_shell.stdout == b"script arg\n", by_shell.stderr
    assert searched.stdout == b"script x\n", searched.stderr
    assert missing.value.exit_code == 127
    assert not_executable.value.exit_code == 126


def test_a_wall_that_cannot_be_set_up_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need_wall()
    mark = tmp_path / "ran"
    with _session(tmp_path) as session:
        control = session.run(["touch", str(mark)])
        if control.exit_code != 0 or not mark.exists():
            pytest.fail(f"inconclusive: the control command did not run: {control.stderr!r}")
        mark.unlink()
        monkeypatch.setattr(wall, "DEVICES", ("/dev/no-such-device",))
        with pytest.raises(TierUnavailable) as refused:
            session.run(["touch", str(mark)])
    assert "Landlock wall could not be set up" in str(refused.value)
    assert not mark.exists()


def test_the_wall_is_run_from_a_sealed_memfd() -> None:
    fd = wall.memfd()
    try:
        assert os.pread(fd, len(wall.WALL_X86_64) + 1, 0) == wall.WALL_X86_64
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"\0", 0)  # F_SEAL_WRITE: the jail's copy cannot be rewritten
        assert os.get_inheritable(fd) is False
    finally:
        os.close(fd)


def _wall_sh(script: str) -> subprocess.CompletedProcess[bytes]:
    """`script` run by sh with ``$W`` the wall (its memfd, as the jail has it)."""
    _need_wall()
    fd = wall.memfd()
    try:
        os.set_inheritable(fd, True)  # noqa: FBT003 - os's own signature
        env = {"W": f"/proc/self/fd/{fd}", "PATH": "/usr/bin:/bin"}
        return subprocess.run(
            ["/bin/sh", "-c", script],
            pass_fds=[fd],
            env=env,
            capture_output=True,
            timeout=30,
            check=False,
        )
    finally:
        os.close(fd)


def test_the_wall_refuses_what_it_does_not_understand() -> None:
    """Its two uses (the wall; ``-i``, a session jail's init, exercised through the session
    jail's tests) and nothing else: a usage line, exit 125, nothing run."""
    control = _wall_sh('exec "$W" 2 0 99 -- /bin/sh -c "exit 7"')
    assert control.returncode == 7, f"inconclusive: the wall did not run a command: {control}"
    for script in ('exec "$W" -r 12', 'exec "$W" -x 1', 'exec "$W" -i', 'exec "$W" -i /'):
        done = _wall_sh(script)
        assert done.returncode == 125, script
        assert b"landlock wall: usage" in done.stderr, done.stderr
