"""T0: its capability table, `create`'s refusals, and the file tools' bounds and behaviour."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest

from panday_core.capabilities import Support, policy_fields
from panday_core.errors import (
    LimitExceeded,
    PathRefused,
    PolicyError,
    PolicyViolation,
    Unsupported,
)
from panday_core.paths import openat2_available
from panday_core.policy import FsPolicy, Limits, NetPolicy, SandboxPolicy
from panday_core.t0 import InvalidArgument, T0Sandbox, T0Session, declared_capabilities
from panday_core.types import ExecSpec, SessionSpec

if TYPE_CHECKING:
    from collections.abc import Iterator

    from panday_core.paths import Backend

BACKENDS: list[Backend] = ["openat2", "walk"] if sys.platform.startswith("linux") else ["walk"]


def policy(ws: Path, **kw: object) -> SandboxPolicy:
    fs = FsPolicy(workspace=str(ws), access=kw.pop("access", "rw"))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType] - test helper
    return SandboxPolicy(fs=fs, **kw)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType] - test helper


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "openat2" and not openat2_available():
        pytest.fail("openat2 is missing on this Linux host")
    chosen: Backend = request.param
    return chosen


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    (w / "src" / "pkg").mkdir(parents=True)
    (w / "src" / "pkg" / "a.py").write_text("import os\ndef alpha():\n    return 'needle one'\n")
    (w / "src" / "pkg" / "b.py").write_text("# nothing here\n")
    (w / "src" / "notes.md").write_text("needle in markdown\nsecond line\n")
    (w / "bin.dat").write_bytes(b"\x00\x01needle\x00")
    (tmp_path / "outside.txt").write_text("needle outside\n")
    return w


@pytest.fixture
def session(ws: Path, backend: Backend) -> Iterator[T0Session]:
    s = T0Session(policy(ws), backend=backend)
    yield s
    s.close()


# ------------------------------------------------------------------ capabilities / create


def test_every_policy_field_is_declared() -> None:
    caps = declared_capabilities()
    declared = [f.field for f in caps.fields]
    assert sorted(declared) == sorted(policy_fields())
    for entry in caps.fields:
        if entry.support in {Support.NOT_ENFORCED, Support.NOT_APPLICABLE}:
            assert entry.note, f"{entry.field} needs a reason"


def test_create_refuses_a_network_allowlist_naming_the_field(ws: Path) -> None:
    sandbox = T0Sandbox()
    # Control: the same policy without the allowlist opens a session.
    handle = asyncio.run(sandbox.create(SessionSpec(policy=policy(ws))))
    asyncio.run(sandbox.destroy(handle))
    spec = SessionSpec(policy=policy(ws, net=NetPolicy(allow=("api.github.com",))))
    with pytest.raises(PolicyViolation) as info:
        asyncio.run(sandbox.create(spec))
    assert info.value.field == "net.allow"
    assert "api.github.com" in info.value.reason
    assert "no connection" in info.value.reason


@pytest.mark.parametrize("field", ["cpu_ms", "mem_bytes", "wall_clock_ms"])
def test_create_refuses_limits_it_cannot_enforce_by_name(ws: Path, field: str) -> None:
    value = {"cpu_ms": 1000, "mem_bytes": 1 << 30, "wall_clock_ms": 1000}[field]
    sandbox = T0Sandbox()
    ok = SessionSpec(policy=policy(ws, limits=Limits(output_bytes=4096, disk_bytes=1 << 20)))
    asyncio.run(sandbox.destroy(asyncio.run(sandbox.create(ok))))
    with pytest.raises(PolicyViolation) as info:
        asyncio.run(sandbox.create(SessionSpec(policy=policy(ws, limits=Limits(**{field: value})))))
    assert info.value.field == f"limits.{field}"


def test_create_refuses_a_value_for_a_field_that_does_nothing_here(ws: Path) -> None:
    # limits.pids and env are not applicable to T0 (it starts no process): a value for
    # either would be a setting that silently does nothing, so it is refused by name.
    sandbox = T0Sandbox()
    cases = (
        (policy(ws, limits=Limits(pids=4)), "limits.pids"),
        (policy(ws, env={"A": "1"}), "env"),
    )
    for bad, field in cases:
        with pytest.raises(PolicyViolation) as info:
            asyncio.run(sandbox.create(SessionSpec(policy=bad)))
        assert info.value.field == field
        assert "not applicable on t0" in info.value.reason


def test_session_refuses_before_touching_the_filesystem(tmp_path: Path) -> None:
    missing = tmp_path / "never-created"
    bad = policy(missing, net=NetPolicy(allow=("example.com",)))
    with pytest.raises(PolicyViolation):
        T0Session(bad)  # refused on the policy alone: the missing workspace is never looked at


def test_exec_is_unsupported(ws: Path) -> None:
    sandbox = T0Sandbox()
    handle = asyncio.run(sandbox.create(SessionSpec(policy=policy(ws))))
    with pytest.raises(Unsupported, match="no exec"):
        sandbox.exec(handle, ExecSpec(argv=("/bin/true",)))
    asyncio.run(sandbox.destroy(handle))


def test_put_get_snapshot_through_the_protocol(ws: Path, tmp_path: Path) -> None:
    sandbox = T0Sandbox()

    async def run() -> None:
        handle = await sandbox.create(SessionSpec(policy=policy(ws), session_id="s1"))
        await sandbox.put(handle, "new/dir/file.txt", b"payload")
        assert await sandbox.get(handle, "new/dir/file.txt", max_bytes=100) == b"payload"
        with pytest.raises(LimitExceeded):
            await sandbox.get(handle, "new/dir/file.txt", max_bytes=3)
        with pytest.raises(PathRefused):
            await sandbox.put(handle, "../escaped.txt", b"x")
        os.link(tmp_path / "outside.txt", ws / "hard.txt")
        snap = await sandbox.snapshot(handle)
        by_path = {e.path: e for e in snap.entries}
        assert by_path["new/dir/file.txt"].size == 7
        assert len(by_path["new/dir/file.txt"].sha256) == 64
        assert by_path["hard.txt"].sha256 == ""  # multiply-linked: content not read
        await sandbox.destroy(handle)

    asyncio.run(run())
    assert not (tmp_path / "escaped.txt").exists()


# ------------------------------------------------------------------ tools


def test_read(session: T0Session, ws: Path) -> None:
    (ws / "big.txt").write_bytes(b"0123456789" * 1000)
    part = session.read("big.txt", offset=5, length=10)
    assert part.data == b"5678901234"
    assert part.truncated
    assert part.size == 10_000
    whole = session.read("src/notes.md")
    assert whole.data.startswith(b"needle")
    assert not whole.truncated
    with pytest.raises(InvalidArgument):
        session.read("big.txt", offset=-1)
    with pytest.raises(InvalidArgument):
        session.read("big.txt", length=0)


def test_read_is_capped_by_output_bytes(ws: Path, backend: Backend) -> None:
    (ws / "big.txt").write_bytes(b"x" * 10_000)
    s = T0Session(policy(ws, limits=Limits(output_bytes=4096)), backend=backend)
    try:
        result = s.read("big.txt", length=9000)
        assert len(result.data) == 4096
        assert result.truncated
    finally:
        s.close()


def test_write_is_atomic_and_keeps_mode(session: T0Session, ws: Path) -> None:
    target = ws / "src" / "notes.md"
    target.chmod(0o600)
    session.write("src/notes.md", b"replaced\n")
    assert target.read_bytes() == b"replaced\n"
    assert target.stat().st_mode & 0o777 == 0o600
    leftovers = [p.name for p in (ws / "src").iterdir() if ".panday-" in p.name]
    assert leftovers == []
    with pytest.raises(FileNotFoundError):
        session.write("no/such/dir/x", b"1")
    assert session.write("no/such/dir/x", b"1", make_parents=True).bytes_written == 1


def test_write_failure_leaves_old_content(session: T0Session, ws: Path) -> None:
    (ws / "src" / "dir_target").mkdir()
    with pytest.raises(IsADirectoryError):
        session.write("src/dir_target", b"x")
    assert (ws / "src" / "dir_target").is_dir()
    assert [p.name for p in (ws / "src").iterdir() if ".panday-" in p.name] == []


def test_read_only_session_refuses_writes(ws: Path, backend: Backend) -> None:
    s = T0Session(policy(ws, access="ro"), backend=backend)
    try:
        assert s.read("src/notes.md").data  # control: reads work
        with pytest.raises(PathRefused, match="read-only"):
            s.write("src/notes.md", b"x")
    finally:
        s.close()
    assert (ws / "src" / "notes.md").read_text().startswith("needle")


def test_disk_budget(ws: Path, backend: Backend) -> None:
    s = T0Session(policy(ws, limits=Limits(disk_bytes=64 * 1024)), backend=backend)
    try:
        s.write("a.bin", b"x" * 60_000)  # control: within the budget
        with pytest.raises(LimitExceeded, match="disk"):
            s.write("b.bin", b"x" * 10_000)
        assert not (ws / "b.bin").exists()
    finally:
        s.close()


def test_list_and_stat(session: T0Session, ws: Path) -> None:
    (ws / "link").symlink_to("src")
    listing = session.list(".")
    kinds = {e.name: e.kind for e in listing.entries}
    assert kinds == {"bin.dat": "file", "link": "symlink", "src": "dir"}
    assert session.list(".", max_entries=2).truncated
    assert session.stat("link").kind == "dir"  # stat follows links beneath the root
    assert session.stat("src/notes.md").size == len("needle in markdown\nsecond line\n")
    with pytest.raises(PathRefused):
        session.list("..")


def test_glob(session: T0Session, ws: Path) -> None:
    assert session.glob("src/**/*.py").paths == ("src/pkg/a.py", "src/pkg/b.py")
    assert session.glob("*.dat").paths == ("bin.dat",)
    assert session.glob("src/*").paths == ("src/notes.md", "src/pkg")
    assert session.glob("**/a.py").paths == ("src/pkg/a.py",)
    assert session.glob(f"{ws}/src/*.md").paths == ("src/notes.md",)
    assert session.glob("src/**", max_results=2).truncated
    (ws / "out").symlink_to("..")
    assert all(not p.startswith("out/") for p in session.glob("**/*").paths)  # links not descended
    with pytest.raises(PathRefused):
        session.glob("../*")
    with pytest.raises(InvalidArgument):
        session.glob("src/*/../x")
    with pytest.raises(PathRefused):
        session.glob("src/../../*")


def test_grep(session: T0Session) -> None:
    result = session.grep("needle")
    assert [(m.path, m.line_number, m.line) for m in result.matches] == [
        ("src/notes.md", 1, "needle in markdown"),
        ("src/pkg/a.py", 3, "    return 'needle one'"),
    ]
    assert result.skipped_binary == 1
    assert not result.truncated
    assert session.grep("NEEDLE").matches == ()
    assert len(session.grep("NEEDLE", ignore_case=True).matches) == 2
    assert [m.path for m in session.grep("needle", include="*.py").matches] == ["src/pkg/a.py"]
    assert session.grep("^def ", "src/pkg/a.py").matches[0].line_number == 2
    capped = session.grep("e", max_matches=1)
    assert len(capped.matches) == 1
    assert capped.truncated
    with pytest.raises(InvalidArgument, match="RE2"):
        session.grep("(a)\\1")


def test_grep_is_linear_time_on_a_backtracking_pattern(session: T0Session, ws: Path) -> None:
    """`re` takes exponential time on this; RE2 answers at once (no timing asserted: the
    test would simply not finish under the 120 s timeout with a backtracking engine)."""
    (ws / "evil.txt").write_text("a" * 5000 + "\n")
    assert session.grep("(a*)*b", "evil.txt").matches == ()


def test_grep_bounds_line_length_and_output(ws: Path, backend: Backend) -> None:
    (ws / "long.txt").write_text(("needle" + "x" * 5000 + "\n") * 10)
    s = T0Session(policy(ws, limits=Limits(output_bytes=2048)), backend=backend)
    try:
        result = s.grep("needle", "long.txt", max_line_bytes=1000)
        assert all(m.line_truncated and len(m.line) == 1000 for m in result.matches)
        assert len(result.matches) == 2  # 2 x 1000 bytes fit in 2048; the third does not
        assert result.truncated
    finally:
        s.close()


def test_grep_skips_hard_links_and_never_reads_outside(
    session: T0Session, ws: Path, tmp_path: Path
) -> None:
    os.link(tmp_path / "outside.txt", ws / "hard.txt")
    (ws / "soft.txt").symlink_to("../outside.txt")
    result = session.grep("outside")
    assert result.matches == ()
    assert result.skipped_unreadable == 1
    with pytest.raises(PathRefused):
        session.grep("outside", "soft.txt")


def test_results_encode_to_json(session: T0Session) -> None:
    encoded = msgspec.json.encode(session.grep("needle"))
    assert b"needle in markdown" in encoded


# ------------------------------------------------------------------ protected entries


def test_protected_entries_are_never_written_by_the_file_tools(ws: Path, backend: Backend) -> None:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "into-git").symlink_to(".git")  # a link on the way changes nothing
    attempts = [".git/config", ".git/hooks/pre-commit", ".mcp.json", ".vscode/tasks.json"]
    attempts.append("into-git/config")
    opted = SandboxPolicy(fs=FsPolicy(workspace=str(ws), unprotect=(".git", ".mcp.json")))
    with T0Session(opted, backend=backend) as granted:  # control: opted out, they land
        granted.write(".git/hooks/pre-commit", b"#!/bin/sh\n")
        granted.write(".mcp.json", b"{}")
    (ws / ".git" / "hooks" / "pre-commit").unlink()
    (ws / ".mcp.json").unlink()
    with T0Session(policy(ws), backend=backend) as s:
        s.write("ordinary.txt", b"ok")
        for path in attempts:
            with pytest.raises(PathRefused, match="protected"):
                s.write(path, b"planted", make_parents=True)
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert not (ws / ".mcp.json").exists()
    assert not (ws / ".vscode").exists()


def test_a_write_never_keeps_a_setuid_or_setgid_bit(ws: Path, backend: Backend) -> None:
    target = ws / "tool"
    target.write_bytes(b"old")
    target.chmod(0o6755)
    if not target.stat().st_mode & 0o6000:
        pytest.fail("inconclusive: this file system dropped the bits before the write")
    with T0Session(policy(ws), backend=backend) as s:
        s.write("tool", b"new")
    mode = target.stat().st_mode
    assert mode & 0o777 == 0o755
    assert not mode & 0o6000


def test_a_root_through_a_link_or_a_system_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    with pytest.raises(PolicyError, match="symbolic link"):
        T0Session(policy(tmp_path / "alias"))
    with pytest.raises(PolicyViolation) as refused:
        T0Session(policy(Path("/etc")))
    assert refused.value.field == "fs.workspace"
