"""The library: `panday.open` (sync) and `panday.aio.open` (async) against the real tier."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

import pytest

import panday
import panday.aio
from panday import tiers
from panday_core.capabilities import FieldSupport, Support, TierCapabilities
from panday_core.errors import (
    CommandNotFound,
    PolicyError,
    PolicyViolation,
    SessionClosed,
    TierUnavailable,
    Unsupported,
)
from panday_core.policy import FsPolicy, Limits, SandboxPolicy
from panday_core.types import ExecExit, LimitKind, OutputChunk, SandboxTier

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

linux = pytest.mark.usefixtures("linux_tier")


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace that is also the current directory (the default policy's workspace)."""
    path = tmp_path / "ws"
    path.mkdir()
    monkeypatch.chdir(path)
    return path


def _with_token(token: str) -> list[str]:
    # The token sits in the shell's command line, so /proc shows which processes are ours.
    return ["/bin/sh", "-c", f"echo started; sleep 300; : {token}"]


def _holding(token: str) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):  # noqa: PTH208 - /proc walk
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:  # noqa: PTH123
                cmdline = fh.read()
        except OSError:
            continue
        if token.encode() in cmdline and int(entry) != os.getpid():
            found.append(int(entry))
    return found


def _gone(token: str, within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while _holding(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _holding(token)


# ---------------------------------------------------------------------- sync


@linux
def test_open_runs_a_command_with_the_default_policy(ws: Path) -> None:
    with panday.open() as session:
        result = session.run(["sh", "-c", "echo hi; pwd; echo err >&2; exit 7"])
        assert session.tier == "t2-linux"
        assert session.workspace == str(ws)
    assert result.stdout == f"hi\n{ws}\n".encode()
    assert result.stderr == b"err\n"
    assert result.exit_code == 7
    assert result.breach is None
    assert result.wall_ms > 0
    assert session.closed


@linux
def test_stream_yields_chunks_then_one_exit(ws: Path) -> None:
    del ws
    with panday.open() as session:
        events = list(session.stream(["sh", "-c", "echo a; sleep 0.05; echo b >&2"]))
    chunks = [e for e in events if isinstance(e, OutputChunk)]
    assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"a\n"
    assert b"".join(c.data for c in chunks if c.stream == "stderr") == b"b\n"
    assert isinstance(events[-1], ExecExit)
    assert sum(isinstance(e, ExecExit) for e in events) == 1


@linux
def test_stdin_cwd_and_timeout(ws: Path) -> None:
    (ws / "sub").mkdir()
    with panday.open() as session:
        assert session.run(["cat"], stdin="piped").stdout == b"piped"
        assert session.run(["pwd"], cwd="sub").stdout == f"{ws}/sub\n".encode()
        slow = session.run(["sleep", "30"], timeout=0.2)
    assert slow.breach is not None
    assert slow.breach.kind.value == "wall_clock"


@linux
def test_put_get_snapshot(ws: Path) -> None:
    with panday.open() as session:
        session.put("dir/a.txt", "text")
        assert (ws / "dir" / "a.txt").read_text() == "text"
        assert session.run(["cat", "dir/a.txt"]).stdout == b"text"
        session.run(["sh", "-c", "echo made > b.txt"])
        assert session.get("b.txt") == b"made\n"
        paths = {e.path for e in session.snapshot().entries}
    assert {"dir/a.txt", "b.txt"} <= paths


@linux
def test_enforcement_and_guarantees(ws: Path) -> None:
    del ws
    with panday.open() as session:
        report = session.enforcement()
        guarantees = session.guarantees()
    assert report.problems() == []
    assert report.no_new_privs
    assert any("No network" in g.name for g in guarantees)
    assert guarantees == tiers.host_capabilities("t2-linux").guarantees


@linux
def test_a_missing_program_is_command_not_found_not_a_broken_tier(ws: Path) -> None:
    del ws
    with panday.open() as session:
        events: list[object] = []
        with pytest.raises(CommandNotFound) as info:
            events.extend(session.stream(["nosuchcmd", "arg"]))
        assert info.value.exit_code == 127
        assert info.value.program == "nosuchcmd"
        assert events == []  # bubblewrap's own message is not passed on as output
        with pytest.raises(CommandNotFound) as info:
            session.run(["/etc"])
        assert info.value.exit_code == 126
        # A command printing a bwrap-like first line is still just output.
        result = session.run(["sh", "-c", "echo 'bwrap: execvp x: y' >&2; echo done"])
    assert result.stderr == b"bwrap: execvp x: y\n"
    assert result.stdout == b"done\n"


@linux
def test_leaving_a_stream_early_kills_the_command(ws: Path) -> None:
    del ws
    token = f"panday-break-{os.getpid()}"
    with panday.open() as session:
        for event in session.stream(_with_token(token)):
            assert isinstance(event, OutputChunk)
            if not _holding(token):
                pytest.fail("inconclusive: control failed: the command is not running")
            break
        assert _gone(token)


@linux
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError])
def test_an_exception_in_the_with_block_kills_and_closes(
    ws: Path, interrupt: type[BaseException]
) -> None:
    del ws
    token = f"panday-{interrupt.__name__}-{os.getpid()}"
    with pytest.raises(interrupt), panday.open() as session:  # noqa: PT012 - the block is the test
        for _event in session.stream(_with_token(token)):
            if not _holding(token):
                pytest.fail("inconclusive: control failed: the command is not running")
            raise interrupt
    assert session.closed
    assert _gone(token)
    with pytest.raises(panday.SandboxError):
        session.run(["true"])


def _sync_operations(session: panday.Session) -> dict[str, Callable[[], object]]:
    return {
        "run": lambda: session.run(["true"]),
        # Refused when called, not when iterated; drained here while the session is open.
        "stream": lambda: list(session.stream(["true"])),
        "put": lambda: session.put("after-close.txt", "x"),
        "get": lambda: session.get("before.txt"),
        "snapshot": session.snapshot,
        "enforcement": session.enforcement,
    }


@linux
def test_a_closed_session_refuses_everything_at_once(ws: Path) -> None:
    session = panday.open()
    # Control: every operation works while the session is open.
    for name, operation in _sync_operations(session).items():
        if name == "get":
            session.put("before.txt", "x")
        operation()
    (ws / "after-close.txt").unlink()
    session.close()
    for name, operation in _sync_operations(session).items():
        with pytest.raises(SessionClosed) as info:
            operation()
        assert info.value.session_id == session.id, name
        assert str(info.value) == f"session {session.id} is closed"
    with pytest.raises(SessionClosed):
        session.stream(["true"])  # at the call: a generator never iterated still refuses
    assert not (ws / "after-close.txt").exists()  # put wrote nothing into the workspace
    session.close()  # idempotent


@linux
def test_a_closed_async_session_refuses_the_same_way(ws: Path) -> None:
    async def main() -> list[str]:
        session = await panday.aio.open()
        assert (await session.run(["true"])).exit_code == 0  # control
        await session.put("before.txt", b"x")
        await session.close()
        refused: list[str] = []
        operations: dict[str, Callable[[], Awaitable[object]]] = {
            "run": lambda: session.run(["true"]),
            "put": lambda: session.put("after-close.txt", b"x"),
            "get": lambda: session.get("before.txt"),
            "snapshot": session.snapshot,
            "enforcement": session.enforcement,
        }
        for name, operation in operations.items():
            with pytest.raises(SessionClosed):
                await operation()
            refused.append(name)
        with pytest.raises(SessionClosed):
            session.stream(["true"])  # at the call, as the synchronous face does
        refused.append("stream")
        return refused

    assert len(asyncio.run(main())) == 6
    assert not (ws / "after-close.txt").exists()


# ---------------------------------------------------------------------- toolchains


def _venv_python(ws: Path) -> tuple[Path, str]:
    """A project .venv in `ws` whose python links outside it (to this test's interpreter's
    base installation, e.g. ~/.pyenv/versions/X or /usr), and that installation's prefix."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(ws / ".venv")],
        check=True,
        timeout=120,
    )
    return ws / ".venv" / "bin" / "python", sys.base_prefix


@linux
def test_a_program_linking_outside_names_what_to_stage(ws: Path) -> None:
    python, prefix = _venv_python(ws)
    if os.path.realpath(python).startswith(("/usr/", "/bin/")):
        pytest.skip(f"this interpreter lives under /usr ({prefix}), which the jail shows")
    with panday.open() as session, pytest.raises(CommandNotFound) as info:
        session.run([".venv/bin/python", "-c", "print(1)"])
    error = info.value
    assert error.exit_code == 127
    assert error.stage == (prefix,)
    assert error.host_path is not None
    assert error.host_path.startswith(prefix)
    assert f"which the sandbox cannot see: stage it read-only with --ro {prefix}" in str(error)
    assert "fs.staged_ro" in str(error)
    # Staged as the error says, the same command runs.
    policy = panday.default_policy(str(ws))
    staged = SandboxPolicy(
        fs=FsPolicy(workspace=str(ws), staged_ro=error.stage),
        limits=policy.limits,
        env=policy.env,
    )
    with panday.open(staged) as session:
        result = session.run([".venv/bin/python", "-c", "import sys; print(sys.prefix)"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"{ws / '.venv'}\n".encode()


@linux
def test_a_program_only_on_the_host_path_is_named(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "toolchain" / "bin"
    tools.mkdir(parents=True)
    tool = tools / "mytool"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    with panday.open() as session, pytest.raises(CommandNotFound) as info:
        session.run(["mytool"])
    text = str(info.value)
    assert "it is not on the sandbox's PATH" in text
    assert f"on this host it is {tool}: run it by that path" in text
    assert info.value.stage == (str(tmp_path / "toolchain"),)
    staged = SandboxPolicy(fs=FsPolicy(workspace=str(ws), staged_ro=info.value.stage))
    with panday.open(staged) as session:  # control: staged and run by its path, it runs
        assert session.run([str(tool)]).stdout == b"tool ran\n"
    del ws


@linux
def test_a_missing_program_gets_no_staging_advice(ws: Path) -> None:
    del ws
    with panday.open() as session, pytest.raises(CommandNotFound) as info:
        session.run(["no-such-program-anywhere"])
    assert str(info.value) == "'no-such-program-anywhere': not found inside the sandbox"
    assert info.value.stage == ()


# ---------------------------------------------------------------------- tier choice


@linux
def test_auto_picks_the_host_tier_and_a_named_tier_is_never_replaced(ws: Path) -> None:
    del ws
    with panday.open(tier="auto") as session:
        assert session.tier == "t2-linux"
    with pytest.raises(TierUnavailable) as info:
        panday.open(tier="t2-macos")
    assert info.value.tier == "t2-macos"
    quiet = SandboxPolicy(fs=FsPolicy(), limits=Limits())  # nothing T0 must refuse
    with panday.open(quiet, tier="t0") as session:
        assert session.tier == "t0"
        with pytest.raises(Unsupported):
            session.run(["true"])


def test_an_unknown_tier_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'t9' is not a tier"):
        panday.open(tier="t9")


def _table(tier: SandboxTier, refused: set[str]) -> TierCapabilities:
    from panday_core.capabilities import policy_fields  # noqa: PLC0415

    fields = tuple(
        FieldSupport(
            field=name,
            support=Support.NOT_ENFORCED if name in refused else Support.STRICT,
            mechanism="test",
            note=f"{tier} cannot",
        )
        for name in policy_fields()
    )
    return TierCapabilities(tier=tier, fields=fields)


def test_auto_takes_the_strongest_tier_that_enforces_everything() -> None:
    policy = SandboxPolicy(fs=FsPolicy(workspace="/w"), limits=Limits(mem_bytes=1 << 30))
    strong = _table(SandboxTier.T2_LINUX, {"limits.mem_bytes"})
    weak = _table(SandboxTier.T0, set())
    tables = {"strong": strong, "weak": weak}
    chosen = tiers.choose(policy, "auto", candidates=["strong", "weak"], capabilities=tables.get)  # pyright: ignore[reportArgumentType] - a dict's get
    assert chosen == "weak"
    tables["weak"] = _table(SandboxTier.T0, {"limits.mem_bytes"})
    with pytest.raises(PolicyViolation) as info:
        tiers.choose(policy, "auto", candidates=["strong", "weak"], capabilities=tables.get)  # pyright: ignore[reportArgumentType] - a dict's get
    assert info.value.field == "limits.mem_bytes"
    assert info.value.tier == "strong"
    # A named tier is returned as named, whatever the tables say: the host's own tier, or
    # T0, which refuses this policy's memory ceiling (its own create says so, by field).
    host = tiers.host_command_tier()
    assert host is not None
    assert tiers.choose(policy, host, candidates=["strong"]) == host
    assert tiers.choose(policy, "t0", candidates=["strong"]) == "t0"
    # Another OS's tier is unavailable, with the reason, never replaced by this host's.
    other = next(t for t in tiers.COMMAND_TIERS if t not in tiers.host_command_tiers())
    with pytest.raises(TierUnavailable, match=r"needs .*; this host is"):
        tiers.choose(policy, other, candidates=["strong"])


def test_auto_without_any_command_tier_says_so() -> None:
    with pytest.raises(TierUnavailable, match="no tier that runs commands"):
        tiers.choose(SandboxPolicy(), "auto", candidates=[])


# ---------------------------------------------------------------------- policy input


def test_policy_inputs(tmp_path: Path, ws: Path) -> None:
    file = tmp_path / "p.toml"
    file.write_text("[limits]\npids = 64\n")
    from panday._shared import resolve_policy  # noqa: PLC0415

    assert resolve_policy(str(file)).limits.pids == 64
    assert resolve_policy(file).fs.workspace == str(ws)
    assert resolve_policy({"limits": {"pids": 9}}).limits.pids == 9
    given = SandboxPolicy(fs=FsPolicy(workspace=str(tmp_path)))
    assert resolve_policy(given) is given
    with pytest.raises(PolicyError, match=r"limits\.pid: unknown key"):
        resolve_policy({"limits": {"pid": 9}})


def test_a_string_command_is_refused_not_split() -> None:
    from panday._shared import exec_spec  # noqa: PLC0415

    with pytest.raises(TypeError, match="never split or given to a shell"):
        exec_spec("rm -rf /", stdin=None, cwd=None, timeout=None)
    with pytest.raises(ValueError, match="timeout"):
        exec_spec(["true"], stdin=None, cwd=None, timeout=0)


# ---------------------------------------------------------------------- async


@linux
def test_aio_open_await_and_async_with(ws: Path) -> None:
    async def main() -> None:
        async with panday.aio.open() as session:
            assert session.tier == "t2-linux"
            result = await session.run(["sh", "-c", "echo hi"])
            assert result.stdout == b"hi\n"
            events = [e async for e in session.stream(["echo", "x"])]
            assert isinstance(events[-1], ExecExit)
            await session.put("f", b"data")
            assert await session.get("f") == b"data"
            assert (await session.enforcement()).problems() == []
            with pytest.raises(CommandNotFound):
                await session.run(["nosuchcmd"])
        session2 = await panday.aio.open(tier="t2-linux")
        try:
            assert (await session2.run(["true"])).exit_code == 0
        finally:
            await session2.close()
        with pytest.raises(TierUnavailable):
            await panday.aio.open(tier="t2-macos")

    asyncio.run(main())
    assert (ws / "f").read_bytes() == b"data"


@linux
def test_aio_cancellation_kills_the_command(ws: Path) -> None:
    del ws
    token = f"panday-cancel-{os.getpid()}"

    async def main() -> None:
        async with panday.aio.open() as session:

            async def consume() -> None:
                async for _event in session.stream(_with_token(token)):
                    pass

            task = asyncio.create_task(consume())
            for _ in range(200):  # up to 10 s for the command to start
                if _holding(token):
                    break
                await asyncio.sleep(0.05)
            if not _holding(token):
                pytest.fail("inconclusive: control failed: the command is not running")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert _gone(token)


def test_the_start_guard_only_adds_what_the_host_knows(tmp_path: Path) -> None:
    """The tier decides that a command never ran (from its status, not from output) and
    raises `CommandNotFound`; the SDK only adds where the program is on the host."""
    from panday._shared import StartGuard  # noqa: PLC0415

    event = OutputChunk(stream="stderr", data=b"bwrap: execvp x: No such file or directory\n")
    assert StartGuard().feed(event) == [event]  # output is never held or read here
    bare = CommandNotFound("x", "not found inside the sandbox", exit_code=127)
    assert StartGuard().failure(bare) is bare
    denied = CommandNotFound("/etc", "cannot be executed inside the sandbox", exit_code=126)
    policy = panday.SandboxPolicy().with_workspace(str(tmp_path))
    assert StartGuard(policy).failure(denied) is denied
    other = TierUnavailable("t2-linux", "bwrap: setting up uid map: Permission denied")
    assert StartGuard(policy).failure(other) is other


@linux
def test_a_policy_from_a_dict_or_a_file_bounds_the_output_too(ws: Path) -> None:
    """Not only the embedded default: a policy that says nothing about limits, given as a
    mapping or as a file (examples/allowlist.toml's shape), keeps 16 MiB per stream."""
    flood = ["head", "-c", str(24 << 20), "/dev/zero"]
    policy_file = ws.parent / "limitless.toml"
    policy_file.write_text("version = 1\n[fs]\naccess = 'rw'\n")
    explicit = {"limits": {"output_bytes": "unbounded"}}
    with panday.open(explicit) as session:  # control: with "unbounded" all of it is kept
        control = session.run(flood)
    if len(control.stdout) != 24 << 20 or control.breach is not None:
        pytest.fail(f"inconclusive: control failed: {len(control.stdout)} bytes")
    for given in ({}, {"fs": {"access": "rw"}}, str(policy_file)):
        with panday.open(given) as session:
            result = session.run(flood)
        assert len(result.stdout) < (16 << 20) + 200, given
        assert result.truncated_stdout
        assert result.breach is not None
        assert result.breach.kind is LimitKind.OUTPUT
