"""`panday run` end to end: the installed console script against the real T2 Linux tier.

Fails (never skips) on Linux when the jail cannot run; skipped with the reason elsewhere.
Every process these tests start is waited for with a bound; only those are signalled.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

from panday import exitcodes, tiers
from panday.defaults import ENV_PASSTHROUGH
from panday_core.capabilities import Support

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from subprocess import CompletedProcess

    Cli = Callable[..., CompletedProcess[str]]
    Line = Callable[[CompletedProcess[str]], str]
    Validate = Callable[[str, str], dict[str, object]]
    Finish = Callable[[subprocess.Popen[bytes]], None]

    class Procs(Protocol):
        """The `procs` fixture (conftest.Procs)."""

        @staticmethod
        def descendants(pid: int) -> list[int]: ...
        @staticmethod
        def alive(pids: Sequence[int]) -> list[int]: ...
        @staticmethod
        def cgroups_of(pid: int) -> list[str]: ...


pytestmark = pytest.mark.usefixtures("linux_tier")


def _cgroups_here() -> bool:
    entry = tiers.host_capabilities("t2-linux").for_field("limits.pids")
    return entry is not None and entry.support is not Support.NOT_ENFORCED


# ---------------------------------------------------------------------- the README command


def test_the_readme_command_shows_the_jail(cli: Cli) -> None:
    if not Path("/etc/shadow").exists():
        pytest.fail("inconclusive: control failed: this host has no /etc/shadow to hide")
    result = cli("run", "--", "sh", "-c", "echo hello; cat /etc/shadow")
    assert result.stdout == "hello\n"
    assert "/etc/shadow: No such file or directory" in result.stderr
    assert result.returncode == 1  # cat's own status, passed through


# ---------------------------------------------------------------------- exit codes, signals


@pytest.mark.parametrize("code", [0, 3, 42, 255])
def test_the_commands_exit_code_is_panday_s(cli: Cli, code: int) -> None:
    result = cli("run", "--", "sh", "-c", f"exit {code}")
    assert result.returncode == code, result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGUSR1])
def test_a_signal_that_ends_the_command_exits_128_plus_n(cli: Cli, sig: int) -> None:
    result = cli("run", "--", "sh", "-c", f"kill -{int(sig)} $$")
    assert result.returncode == exitcodes.SIGNAL_BASE + sig, result.stderr


def test_output_streams_live(tmp_path: Path, exe: str, finished: Finish) -> None:
    """The first line arrives while the command still runs (it waits for our go)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    go = ws / "go"
    wait = f"i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done"
    script = f"echo first; {wait}; echo second"
    proc = subprocess.Popen(
        [exe, "run", "--workspace", str(ws), "--", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no output within 20 s"
        assert proc.stdout.readline() == b"first\n"
        assert proc.poll() is None, "the command finished before we let it"
        go.touch()
        out, _err = proc.communicate(timeout=30)
    finally:
        finished(proc)
    assert out == b"second\n"
    assert proc.returncode == 0


# ---------------------------------------------------------------------- bad input


def _policy(tmp_path: Path, text: str) -> str:
    path = tmp_path / f"policy-{abs(hash(text))}.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("case", "code", "fragment"),
    [
        ("missing policy file", exitcodes.NO_INPUT, "cannot read policy file"),
        ("unreadable policy file", exitcodes.NO_INPUT, "cannot read policy file"),
        ("invalid TOML", exitcodes.INVALID_POLICY, "invalid TOML"),
        ("unknown field", exitcodes.INVALID_POLICY, "limits.pid: unknown key 'pid'"),
        ("--allow URL", exitcodes.USAGE, "--allow 'https://x.y/': 'https://x.y/' is a URL"),
        ("--mem lots", exitcodes.USAGE, "--mem 'lots': not a size"),
        ("--mem too small", exitcodes.USAGE, "--mem '1K': 1024 is out of range"),
        ("--timeout bad", exitcodes.USAGE, "--timeout 'soon': not a duration"),
        ("--env unset", exitcodes.USAGE, "--env 'PANDAY_TEST_UNSET': not set"),
        ("--env bad name", exitcodes.USAGE, "--env '1X=y': '1X' is not an environment"),
        ("unknown option", exitcodes.USAGE, "unknown option '--mems' (did you mean --mem?)"),
        ("option without value", exitcodes.USAGE, "--timeout needs a value"),
        ("--tier unknown", exitcodes.USAGE, "--tier 'nope' is not a tier"),
        ("empty command", exitcodes.USAGE, "no command given"),
        ("empty program name", exitcodes.USAGE, "argv[0]: the program name is empty"),
        ("nonexistent workspace", exitcodes.NO_INPUT, "--workspace '/nonexistent/ws': no such"),
        ("nonexistent --ro", exitcodes.NO_INPUT, "--ro '/nonexistent/ro': no such"),
        ("command not found", exitcodes.NOT_FOUND, "'nosuchcmd': not found inside the sandbox"),
        ("not executable", exitcodes.NOT_EXECUTABLE, "'/etc': cannot be executed inside"),
        ("a path hidden by the jail", exitcodes.NOT_FOUND, "not found inside the sandbox"),
    ],
)
def test_bad_input_is_one_line_and_its_exit_code(  # noqa: PLR0917 - fixtures and parameters
    tmp_path: Path, cli: Cli, clean_line: Line, case: str, code: int, fragment: str
) -> None:
    hidden = tmp_path / "hidden-tool"
    hidden.write_text("#!/bin/sh\necho ran\n")
    hidden.chmod(0o755)
    args = {
        "missing policy file": ["--policy", str(tmp_path / "nope.toml"), "--", "true"],
        "unreadable policy file": ["--policy", str(tmp_path), "--", "true"],
        "invalid TOML": ["--policy", _policy(tmp_path, "[net\n"), "--", "true"],
        "unknown field": ["--policy", _policy(tmp_path, "[limits]\npid = 3\n"), "--", "true"],
        "--allow URL": ["--allow", "https://x.y/", "--", "true"],
        "--mem lots": ["--mem", "lots", "--", "true"],
        "--mem too small": ["--mem", "1K", "--", "true"],
        "--timeout bad": ["--timeout", "soon", "--", "true"],
        "--env unset": ["--env", "PANDAY_TEST_UNSET", "--", "true"],
        "--env bad name": ["--env", "1X=y", "--", "true"],
        "unknown option": ["--mems", "1G", "--", "true"],
        "option without value": ["--timeout"],
        "--tier unknown": ["--tier", "nope", "--", "true"],
        "empty command": ["--"],
        "empty program name": ["--", ""],
        "nonexistent workspace": ["--workspace", "/nonexistent/ws", "--", "true"],
        "nonexistent --ro": ["--ro", "/nonexistent/ro", "--", "true"],
        "command not found": ["--", "nosuchcmd"],
        "not executable": ["--", "/etc"],
        # Control for the last case: the same program runs outside the jail.
        "a path hidden by the jail": ["--", str(hidden)],
    }[case]
    if case == "a path hidden by the jail":
        outside = subprocess.run([str(hidden)], capture_output=True, text=True, check=False)
        if outside.stdout != "ran\n":
            pytest.fail(f"inconclusive: control failed: {hidden} did not run outside")
    env = {k: v for k, v in os.environ.items() if k != "PANDAY_TEST_UNSET"}
    result = cli("run", *args, env=env)
    assert result.returncode == code, (result.returncode, result.stderr)
    assert fragment in clean_line(result)
    assert result.stdout == ""


def test_a_refused_policy_names_the_field_and_exits_77(
    tmp_path: Path, cli: Cli, clean_line: Line
) -> None:
    # A disk ceiling needs a read-only workspace on T2 Linux; with the default (rw) it is
    # refused before anything is spawned. Control: with access = "ro" the same runs.
    ws = tmp_path / "ws"
    ws.mkdir()
    ro = _policy(tmp_path, 'version = 1\n[fs]\naccess = "ro"\n[limits]\ndisk_bytes = 1048576\n')
    control = cli("run", "--policy", ro, "--workspace", str(ws), "--", "true")
    if control.returncode != 0:
        pytest.fail(f"inconclusive: control failed: {control.stderr}")
    rw = _policy(tmp_path, "[limits]\ndisk_bytes = 1048576\n")
    result = cli("run", "--policy", rw, "--workspace", str(ws), "--", "touch", "made")
    assert result.returncode == exitcodes.POLICY_REFUSED
    line = clean_line(result)
    assert "refused: tier t2-linux cannot enforce this policy: limits.disk_bytes" in line
    assert "fs.access = 'ro'" in line  # the reason says what to change
    assert "leave it out" not in line  # no advice to drop a field the tier does enforce
    assert not (ws / "made").exists()


def test_a_named_tier_is_never_replaced(cli: Cli, clean_line: Line) -> None:
    # Control: auto runs the command here.
    control = cli("run", "--", "true")
    if control.returncode != 0:
        pytest.fail(f"inconclusive: control failed: {control.stderr}")
    result = cli("run", "--tier", "t2-macos", "--", "true")
    assert result.returncode == exitcodes.TIER_UNAVAILABLE
    assert "tier t2-macos is unavailable" in clean_line(result)
    # T0 never runs commands: a usage error (docs/cli.md), not a refusal of some field.
    result = cli("run", "--tier", "t0", "--", "true")
    assert result.returncode == exitcodes.USAGE
    assert "--tier t0: T0 serves file tools in-process and never runs commands" in clean_line(
        result
    )


# ---------------------------------------------------------------------- limits


def test_a_wall_clock_breach_exits_84_and_names_the_kind(cli: Cli, clean_line: Line) -> None:
    control = cli("run", "--timeout", "20s", "--", "sleep", "0.1")
    if control.returncode != 0:
        pytest.fail(f"inconclusive: control failed: {control.stderr}")
    start = time.monotonic()
    for path in ((), ("--debug",)):  # from a cached plan, and the full path
        result = cli("run", *path, "--timeout", "300ms", "--", "sh", "-c", "sleep 60 & sleep 60")
        assert time.monotonic() - start < 30
        assert result.returncode == exitcodes.LIMIT_WALL_CLOCK
        assert "limit exceeded: wall_clock: still running after 300 ms" in clean_line(result)


def test_an_output_breach_exits_86(tmp_path: Path, cli: Cli) -> None:
    policy = _policy(tmp_path, "[limits]\noutput_bytes = 1024\n")
    control = cli("run", "--policy", policy, "--", "head", "-c", "1000", "/dev/zero")
    if control.returncode != 0:
        pytest.fail(f"inconclusive: control failed: {control.stderr}")
    for path in ((), ("--debug",)):  # from a cached plan, and the full path
        result = cli("run", *path, "--policy", policy, "--", "head", "-c", "5000", "/dev/zero")
        assert result.returncode == exitcodes.LIMIT_OUTPUT
        assert "limit exceeded: output" in result.stderr
        assert result.stdout.count("\0") == 1024


def test_a_memory_ceiling_is_enforced_or_refused_by_name(cli: Cli, clean_line: Line) -> None:
    hog = ["python3", "-c", "b = bytearray(512 * 1024 * 1024); print(len(b))"]
    if not _cgroups_here():
        result = cli("run", "--mem", "64M", "--", *hog)
        assert result.returncode == exitcodes.POLICY_REFUSED
        assert "limits.mem_bytes" in clean_line(result)
        return
    control = cli("run", "--mem", "1G", "--", *hog, timeout=120)
    if control.returncode != 0:
        pytest.fail(f"inconclusive: control failed: {control.stderr}")
    result = cli("run", "--mem", "64M", "--", *hog, timeout=120)
    assert result.returncode == exitcodes.LIMIT_MEMORY, result.stderr
    assert "limit exceeded: memory" in result.stderr


# ---------------------------------------------------------------------- options


def test_the_default_environment_is_scrubbed(cli: Cli) -> None:
    env = {
        **os.environ,
        "PANDAY_CANARY": "leak",
        "LC_SECRET": "leak",  # named like a locale category, but not one
        "LC_TIME": "C.UTF-8",
        "LANGUAGE": "de",
        "TERM": "xterm-test",
    }
    control = subprocess.run(["env"], env=env, capture_output=True, text=True, check=False)
    if "PANDAY_CANARY=leak" not in control.stdout or "LC_SECRET=leak" not in control.stdout:
        pytest.fail("inconclusive: control failed: the canaries are not in the caller's env")
    result = cli("run", "--", "env", env=env)
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    assert "PANDAY_CANARY" not in names
    assert "LC_SECRET" not in names
    assert names <= {"PATH", "HOME", "PWD", *ENV_PASSTHROUGH}
    assert "TERM=xterm-test" in result.stdout.splitlines()
    assert "LC_TIME=C.UTF-8" in result.stdout.splitlines()  # a real category passes
    assert "LANGUAGE=de" in result.stdout.splitlines()


def test_env_options_set_and_copy_variables(cli: Cli) -> None:
    env = {**os.environ, "PANDAY_COPIED": "from-host"}
    result = cli("run", "--env", "A=1", "--env", "PANDAY_COPIED", "--", "env", env=env)
    lines = result.stdout.splitlines()
    assert "A=1" in lines
    assert "PANDAY_COPIED=from-host" in lines


def test_workspace_and_staged_paths(tmp_path: Path, cli: Cli) -> None:
    ws, staged = tmp_path / "ws", tmp_path / "staged"
    ws.mkdir()
    staged.mkdir()
    (staged / "in.txt").write_text("input\n")
    script = f"cat {staged}/in.txt > out.txt; echo x > {staged}/new 2>/dev/null || echo refused"
    result = cli("run", "--workspace", str(ws), "--ro", str(staged), "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert (ws / "out.txt").read_text() == "input\n"
    assert result.stdout == "refused\n"
    assert not (staged / "new").exists()


def test_stdin_is_empty_unless_asked_for(cli: Cli) -> None:
    assert cli("run", "--", "cat", stdin="hello").stdout == ""
    assert cli("run", "--debug", "--", "cat", stdin="hello").stdout == ""  # the full path
    assert cli("run", "--stdin", "--", "cat", stdin="hello").stdout == "hello"


def test_json_prints_one_result_object_matching_its_schema(cli: Cli, validate: Validate) -> None:
    result = cli("run", "--json", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    doc = validate(result.stdout, "cli-run")
    assert doc["stdout"] == "out\n"
    assert doc["stderr"] == "err\n"
    assert doc["exit_code"] == 3
    assert doc["panday_exit_code"] == 3 == result.returncode
    assert doc["tier"] == "t2-linux"
    assert result.stderr == ""
    breach = cli("run", "--json", "--timeout", "200ms", "--", "sleep", "30")
    doc = validate(breach.stdout, "cli-run")
    assert doc["breach"] == {
        "kind": "wall_clock",
        "detail": "still running after 200 ms; the whole process tree was killed",
    }
    assert breach.returncode == doc["panday_exit_code"] == exitcodes.LIMIT_WALL_CLOCK


def test_help_is_printed(cli: Cli) -> None:
    result = cli("run", "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: panday run")


# ---------------------------------------------------------------------- interruption


def _start_sleeper(
    exe: str, extra: list[str], token: str, procs: Procs, finished: Finish, *, where: Path
) -> tuple[subprocess.Popen[bytes], list[int]]:
    """`panday run` holding a jailed tree (a shell and two sleeps); its processes, once seen.

    It runs in `where` (its workspace, read-write): never in the test run's own directory,
    the checkout, whose protected-entry placeholders a SIGKILLed panday would leave behind
    until the next session there."""
    script = f"echo ready; sleep 300 & sleep 300; : {token}"
    # A process started with SIGINT ignored keeps ignoring it (POSIX; Python installs its
    # KeyboardInterrupt handler only over the default disposition), and a test run started
    # in the background by a non-interactive shell (`nox ... &`, CI wrappers) inherits
    # exactly that. panday is right to honour it, so the test gives its child the default
    # disposition: a handler installed here is reset to the default by exec, where an
    # ignored signal would stay ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [exe, "run", *extra, "--", "sh", "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=where,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    if not ready or proc.stdout.readline() != b"ready\n":
        finished(proc)
        pytest.fail("inconclusive: control failed: the jailed command did not start")
    deadline = time.monotonic() + 10
    tree: list[int] = []
    while time.monotonic() < deadline:
        tree = procs.descendants(proc.pid)
        if len(tree) >= 4:  # bwrap, the jail's init, sh, two sleeps (at least 4 seen)
            break
        time.sleep(0.05)
    return proc, tree


def _ignored_signals(pid: int) -> set[int]:
    """The signals `pid` ignores (SigIgn in /proc/PID/status, a bit mask from signal 1)."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    mask = int(
        next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16
    )
    return {n + 1 for n in range(64) if mask >> n & 1}


@pytest.mark.parametrize("path", ["cached", "full"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.usefixtures("launch")
def test_a_signal_to_panday_kills_the_jailed_tree_and_leaves_nothing(
    sig: int, path: str, *, procs: Procs, exe: str, finished: Finish, tmp_path: Path
) -> None:
    # `run` from a cached plan (panday.cli_fast), and the full path (--debug, which the
    # cached path leaves alone): each installs its own handlers.
    extra = ["--pids", "256"] if _cgroups_here() else []
    extra += ["--debug"] if path == "full" else []
    token = f"panday-signal-test-{os.getpid()}"
    proc, tree = _start_sleeper(exe, extra, token, procs, finished, where=tmp_path)
    try:
        # Control: the tree (and, with a ceiling, its cgroup) exists before the signal.
        if len(tree) < 4:
            pytest.fail(f"inconclusive: control failed: only {tree} under panday")
        if extra and not procs.cgroups_of(proc.pid):
            pytest.fail("inconclusive: control failed: no session cgroup seen")
        if sig in _ignored_signals(proc.pid):
            pytest.fail(f"inconclusive: control failed: panday started with signal {sig} ignored")
        proc.send_signal(sig)
        code = proc.wait(timeout=20)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
    finally:
        finished(proc)
    assert b"Traceback" not in stderr
    assert code == exitcodes.SIGNAL_BASE + sig
    deadline = time.monotonic() + 10
    while procs.alive(tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs.alive(tree) == [], "jailed processes outlived panday"
    assert procs.cgroups_of(proc.pid) == [], "a session cgroup outlived panday"


@pytest.mark.serial  # another worker's panday would sweep the cgroups it watches first
def test_a_sigkilled_pandays_cgroups_are_swept_by_the_next_session_in_every_hierarchy(
    cli: Cli, procs: Procs, exe: str, finished: Finish, tmp_path: Path
) -> None:
    # The first panday uses the memory, pids and cpuacct hierarchies (--cpu adds the last);
    # the next one uses only memory and pids (the host's own bounds): it must still sweep
    # all three. Without a writable cgroup nothing is created, so nothing can be left.
    if not _cgroups_here():
        proc, _tree = _start_sleeper(
            exe, ["--cpu", "1h"], "no-cgroup", procs, finished, where=tmp_path
        )
        proc.kill()
        finished(proc)
        assert procs.cgroups_of(proc.pid) == []
        return
    token = f"sweep-{os.getpid()}"
    proc, tree = _start_sleeper(exe, ["--cpu", "1h"], token, procs, finished, where=tmp_path)
    try:
        made = procs.cgroups_of(proc.pid)
        hierarchies = {Path(p).relative_to("/sys/fs/cgroup").parts[0] for p in made}
        if len(hierarchies) < 3:  # memory, pids, cpuacct (v1), or one v2 tree
            on_v2 = any(p.startswith("/sys/fs/cgroup/unified") for p in made) or len(made) == 1
            if not on_v2:
                pytest.fail(f"inconclusive: control failed: session cgroups seen: {made}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=20)
    finally:
        finished(proc)
    deadline = time.monotonic() + 10
    while procs.alive(tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs.alive(tree) == [], "jailed processes outlived a SIGKILLed panday"
    # Control: a SIGKILLed panday cannot remove them itself.
    left = procs.cgroups_of(proc.pid)
    if sorted(left) != sorted(made):
        pytest.fail(f"inconclusive: control failed: {made} became {left} before the sweep")
    result = cli("run", "--", "true")
    assert result.returncode == 0, result.stderr
    assert procs.cgroups_of(proc.pid) == [], "a SIGKILLed panday's cgroups were not swept"


def test_a_closed_pipe_stops_the_command(tmp_path: Path, exe: str, finished: Finish) -> None:
    proc = subprocess.Popen(
        [exe, "run", "--", "yes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.read(10) == b"y\ny\ny\ny\ny\n"
        proc.stdout.close()
        code = proc.wait(timeout=20)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
    finally:
        finished(proc)
    assert code == exitcodes.SIGNAL_BASE + signal.SIGPIPE
    assert b"Traceback" not in stderr


# ------------------------------------------------------------ --json, slice by slice


def _whole(data: bytes) -> bytes:
    import msgspec  # noqa: PLC0415 - only these tests encode

    return msgspec.json.encode(data.decode("utf-8", "replace"))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"plain",
        "é€😀 split everywhere".encode(),
        b"\xff\xfe invalid \xc3",  # invalid bytes, and a sequence cut off at the end
        b'quote " backslash \\ newline \n nul \x00 tab \t',
        "\u2028\u2029".encode() * 5,
    ],
)
@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 1 << 20])
def test_json_output_encoded_in_slices_is_the_whole_encoding(
    data: bytes, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--json encodes kept output a slice at a time (its peak memory, issue 13): a
    character cut between two slices, an invalid byte and an unfinished sequence at the
    end must come out exactly as one decode and one encode of the whole give them."""
    from panday.cli import run  # noqa: PLC0415 - the module under test, imported as the CLI does

    monkeypatch.setattr(run, "JSON_SLICE", size)
    pieces: list[bytes] = []
    run._json_string(data, pieces.append)  # pyright: ignore[reportPrivateUsage] - the encoder is what is under test
    assert b"".join(pieces) == _whole(data)


@pytest.fixture(params=["session-jail", "bwrap"])
def launch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a T2 command starts (as packages/tier_linux/tests/conftest.py's)."""
    if request.param == "bwrap":
        monkeypatch.setenv("PANDAY_T2_SESSION_JAIL", "0")
    else:
        monkeypatch.delenv("PANDAY_T2_SESSION_JAIL", raising=False)
    return str(request.param)
