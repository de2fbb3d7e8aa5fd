"""`panday run` from a cached jail plan (panday.cli_fast), end to end through the installed
console script against the real T2 Linux tier.

What is checked: a planned run does what the full path does (output, exit codes, breaches,
the environment inside); the plan is made once and then used; a changed policy, host fact,
panday version or a tampered or foreign plan file means a fresh plan; everything that must
be judged per command is judged again on a cached run (a workspace that became a link or a
home directory, a protected entry that became a link) with the full path's message and exit
code; secrets from the environment never reach the cache; and the start-up path imports
neither the policy model nor typing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import panday
from panday import cli_fast, cli_plan, exitcodes
from panday_core import userstate
from panday_tier_linux import host
from panday_tier_linux import plan as jail

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

pytestmark = pytest.mark.usefixtures("linux_tier")

Result = tuple[str, str, int]


HOME_HOOK_ENV = "PANDAY_TEST_PASSWD_HOME"
SITECUSTOMIZE = f"""\
import os
import pwd

_home = os.environ.get({HOME_HOOK_ENV!r})
if _home:
    _real = pwd.getpwuid

    def _getpwuid(uid, _real=_real, _home=_home):
        entry = _real(uid)
        if uid != os.geteuid():
            return entry
        return pwd.struct_passwd((*entry[:5], _home, entry[6]))

    pwd.getpwuid = _getpwuid
"""


def passwd_home_hook(tmp: Path) -> str:
    """A directory for PYTHONPATH whose sitecustomize gives the effective uid the home
    ``$PANDAY_TEST_PASSWD_HOME`` in `pwd` (for this test's console scripts only): panday
    finds its state from the password file, never from the environment, so this is how a
    test gets a cache of its own."""
    hook = tmp / "passwd-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    return os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)


class Runner:
    """The installed `panday` in `cwd`, with a cache (a password-file home) and
    configuration of the test's own. $XDG_CACHE_HOME points elsewhere: panday ignores it."""

    def __init__(self, exe: str, tmp: Path) -> None:
        self.exe = exe
        self.tmp = tmp
        self.cwd = tmp / "cwd"
        self.cwd.mkdir()
        self.home = tmp / "pwhome"
        self.cache = self.home / ".cache"
        self.cache.mkdir(parents=True)
        self.env = {
            **os.environ,
            "PYTHONPATH": passwd_home_hook(tmp),
            HOME_HOOK_ENV: str(self.home),
            "XDG_CACHE_HOME": str(tmp / "xdg-cache"),
            "XDG_CONFIG_HOME": str(tmp / "config"),
        }

    def __call__(
        self, *args: str, env: Mapping[str, str] | None = None, cache: Path | None = None
    ) -> Result:
        """`cache`: another password-file home (another cache) for this run."""
        full = {**self.env, **(env or {})}
        if cache is not None:
            full[HOME_HOOK_ENV] = str(cache)
        done = subprocess.run(
            [self.exe, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=self.cwd,
            env=full,
            stdin=subprocess.DEVNULL,
        )
        return done.stdout, done.stderr, done.returncode

    def fresh(self, *args: str, env: Mapping[str, str] | None = None) -> Result:
        """The same command with an empty cache: no plan, so the full path's answer when
        anything is refused."""
        cache = self.tmp / f"fresh-{os.urandom(4).hex()}"
        cache.mkdir()
        return self(*args, env=env, cache=cache)

    def plans(self) -> dict[str, tuple[int, int]]:
        """The cached plan files: name -> (inode, mtime)."""
        where = self.cache / "panday" / "plans"
        if not where.is_dir():
            return {}
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in where.glob("*.plan")}


@pytest.fixture
def run(exe: str, tmp_path: Path) -> Runner:
    return Runner(exe, tmp_path)


def full_path(run: Runner, *args: str) -> Result:
    """`panday run --debug ...`: a flag the cached path leaves alone, so this is the full
    path. With --debug an error comes with its traceback first; only panday's own line
    (the last) is kept of it, as the run would print it without --debug."""
    out, err, code = run("run", "--debug", *args)
    if "Traceback (most recent call last)" in err:
        err = err.splitlines(keepends=True)[-1]
    return out, err, code


# ---------------------------------------------------------------------- same as the full path


@pytest.mark.parametrize(
    "command",
    [
        ["sh", "-c", "echo out; echo err >&2; exit 3"],
        ["sh", "-c", "env | sort"],
        ["sh", "-c", 'echo "$HOME $PWD"; id -u; ls -a'],
        ["sh", "-c", "kill -TERM $$"],
        ["sh", "-c", "printf 'bwrap: not really\\n' >&2; exit 1"],
    ],
)
def test_a_planned_run_does_what_the_full_path_does(run: Runner, command: list[str]) -> None:
    expected = full_path(run, "--", *command)
    first = run("run", "--", *command)
    assert len(run.plans()) == 1  # planned on the first run ...
    plans = run.plans()
    second = run("run", "--", *command)
    assert run.plans() == plans  # ... and used, untouched, on the second
    assert first == expected
    assert second == expected


def test_breaches_are_reported_as_the_full_path_reports_them(run: Runner) -> None:
    policy = run.tmp / "p.toml"
    policy.write_text("[limits]\noutput_bytes = 1024\nwall_clock_ms = 400\n", encoding="utf-8")
    flood = ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a; echo done >&2"]
    for command in (flood, ["sleep", "30"]):
        expected = full_path(run, "--policy", str(policy), "--", *command)
        assert run("run", "--policy", str(policy), "--", *command) == expected
        assert run("run", "--policy", str(policy), "--", *command) == expected
    out, err, code = run("run", "--policy", str(policy), "--", *flood)
    assert code == exitcodes.LIMIT_OUTPUT
    assert out.endswith("[panday: stdout exceeded 1024 bytes; the rest was discarded]\n")
    assert "panday: limit exceeded: output: " in err
    _out, err, code = run("run", "--policy", str(policy), "--", "sleep", "30")
    assert code == exitcodes.LIMIT_WALL_CLOCK
    assert "limit exceeded: wall_clock: still running after 400 ms" in err


def test_cgroup_ceilings_hold_as_on_the_full_path(run: Runner) -> None:
    """Where a cgroup can hold them, each ceiling ends its bomb with the full path's
    breach; where none can, both refuse the same way (and nothing is planned)."""
    from panday_tier_linux.capabilities import probe_cgroups  # noqa: PLC0415

    cases = [
        (("--pids", "16"), "for i in $(seq 40); do sleep 5 & done; wait", exitcodes.LIMIT_PIDS),
        (("--mem", "64M"), "x=$(head -c 300000000 /dev/zero | tr '\\0' a)", exitcodes.LIMIT_MEMORY),
        (("--cpu", "300ms"), "while :; do :; done", exitcodes.LIMIT_CPU),
    ]
    held = not probe_cgroups()
    for option, bomb, code in cases:
        expected = full_path(run, *option, "--", "sh", "-c", bomb)
        assert expected[2] == (code if held else exitcodes.POLICY_REFUSED), expected
        if code == exitcodes.LIMIT_CPU:  # CPU time is sampled: the figure in the line varies
            expected = (expected[0], expected[1].split(" used ")[0], expected[2])
        for _ in range(2):  # planned, then from the plan
            got = run("run", *option, "--", "sh", "-c", bomb)
            if code == exitcodes.LIMIT_CPU:
                got = (got[0], got[1].split(" used ")[0], got[2])
            assert got == expected
    assert len(run.plans()) == (3 if held else 0)


def test_a_program_the_jail_cannot_find_is_reported_as_the_full_path_does(run: Runner) -> None:
    expected = full_path(run, "--", "no-such-program-here")
    assert expected[2] == exitcodes.NOT_FOUND  # control
    run("run", "--", "true")  # a plan for this directory exists ...
    assert run("run", "--", "no-such-program-here") == expected  # ... and bwrap's exec fails


def test_options_and_stdin_forms_it_leaves_alone_take_the_full_path(run: Runner) -> None:
    assert run("run", "--json", "--", "true")[2] == 0
    assert run("run", "--stdin", "--", "true")[2] == 0
    assert run("run", "--timeout=5s", "--", "true")[2] == 0
    assert run.plans() == {}


# ---------------------------------------------------------------------- fresh plans


def test_a_changed_policy_makes_a_fresh_plan(run: Runner) -> None:
    policy = run.tmp / "p.toml"
    policy.write_text('[env]\nFOO = "one"\n', encoding="utf-8")
    echo = ("run", "--policy", str(policy), "--", "sh", "-c", 'echo "$FOO"')
    assert run(*echo) == ("one\n", "", 0)
    assert run(*echo) == ("one\n", "", 0)
    assert len(run.plans()) == 1
    policy.write_text('[env]\nFOO = "two"\n', encoding="utf-8")
    assert run(*echo) == ("two\n", "", 0)
    assert len(run.plans()) == 2


def test_a_changed_per_user_policy_or_option_makes_a_fresh_plan(run: Runner) -> None:
    echo = ("--", "sh", "-c", 'echo "$FOO"')
    assert run("run", "--env", "FOO=a", *echo)[0] == "a\n"
    assert run("run", "--env", "FOO=b", *echo)[0] == "b\n"
    user = run.tmp / "config" / "panday" / "policy.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[env]\nFOO = "user"\n', encoding="utf-8")
    assert run("run", *echo)[0] == "user\n"
    user.write_text('[env]\nFOO = "edited"\n', encoding="utf-8")
    assert run("run", *echo)[0] == "edited\n"
    user.unlink()
    assert run("run", *echo)[0] == "\n"
    assert len(run.plans()) == 5


def test_the_callers_locale_is_part_of_the_key(run: Runner) -> None:
    """The embedded default copies the caller's locale and terminal type into the jail."""
    show = ("run", "--", "sh", "-c", 'echo "$LANG $TERM"')
    assert run(*show, env={"LANG": "C.UTF-8", "TERM": "dumb"})[0] == "C.UTF-8 dumb\n"
    assert run(*show, env={"LANG": "C.UTF-8", "TERM": "xterm"})[0] == "C.UTF-8 xterm\n"
    assert run(*show, env={"LANG": "C.UTF-8", "TERM": "dumb"})[0] == "C.UTF-8 dumb\n"
    assert len(run.plans()) == 2


def test_the_cache_is_where_the_password_file_says_whatever_xdg_cache_home_says(
    run: Runner,
) -> None:
    """Issue 22 case 3 began with ``XDG_CACHE_HOME=$PWD/.cache``: the plan was stored in
    the workspace, where the next command could rewrite it."""
    inside = run.cwd / ".cache"
    assert run("run", "--", "true", env={"XDG_CACHE_HOME": str(inside)}) == ("", "", 0)
    plans = run.plans()
    assert len(plans) == 1  # in the password file's home ...
    assert not inside.exists() or not any(inside.rglob("*"))  # ... and nothing in the workspace
    assert run("run", "--", "true", env={"XDG_CACHE_HOME": str(run.tmp / "other")}) == (
        "",
        "",
        0,
    )
    assert run.plans() == plans  # the same plan, used: the setting changed nothing
    assert not (run.tmp / "other").exists()


def test_a_tampered_plan_is_replaced_not_used(run: Runner) -> None:
    assert run("run", "--", "sh", "-c", "echo ok") == ("ok\n", "", 0)
    ((name, (inode, _mtime)),) = run.plans().items()
    path = run.cache / "panday" / "plans" / name
    blob = bytearray(path.read_bytes())
    where = str(run.cwd).encode()
    at = blob.rindex(where) + len(where) - 1  # the workspace, as the jail's spec holds it
    blob[at : at + 1] = b"X"  # one byte of the jail, the MAC left as it was
    tampered = bytes(blob[at - len(where) + 1 : at + 1])
    path.write_bytes(bytes(blob))
    assert run("run", "--", "sh", "-c", "echo ok") == ("ok\n", "", 0)
    assert run.plans()[name][0] != inode  # rewritten
    assert tampered not in path.read_bytes()


# The host facts, panday's version and its sources are read in-process here: the console
# script cannot be handed another kernel. `_plan` is the whole lookup-or-make step.


@pytest.fixture
def in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], tuple[jail.Plan, bool]]:
    """`cli_fast._plan` for ``run -- true`` in a workspace of its own; returns the plan and
    whether it was made (rather than read from the cache)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    home = tmp_path / "pwhome"
    home.mkdir()
    monkeypatch.setattr(userstate, "passwd_home", lambda: str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    real_make = cli_plan.make
    made: list[bool] = []

    def make(
        args: list[str],
        options: list[str],
        command: list[str],
        inputs: list[str],
        *,
        tier: str,
        again: Callable[[list[str]], list[str] | None],
    ) -> jail.Plan | None:
        made.append(True)
        return real_make(args, options, command, inputs, tier=tier, again=again)

    monkeypatch.setattr(cli_plan, "make", make)

    def plan() -> tuple[jail.Plan, bool]:
        made.clear()
        found = cli_fast._plan(["--", "true"], [], ["true"])  # pyright: ignore[reportPrivateUsage] - the step under test
        assert found is not None
        return found, bool(made)

    return plan


def test_a_changed_kernel_makes_a_fresh_plan(
    in_process: Callable[[], tuple[jail.Plan, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert in_process()[1]
    assert not in_process()[1]  # control: cached
    real = os.uname()
    other = os.uname_result(
        (real.sysname, real.nodename, real.release, real.version + " x", real.machine)
    )
    monkeypatch.setattr(os, "uname", lambda: other)
    assert in_process()[1]
    assert not in_process()[1]


def test_a_changed_bwrap_makes_a_fresh_plan(
    in_process: Callable[[], tuple[jail.Plan, bool]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    first, made = in_process()
    assert made
    assert not in_process()[1]  # control: cached
    copy = tmp_path / "bin" / "bwrap"
    copy.parent.mkdir()
    copy.write_bytes(Path(first.bwrap).read_bytes())
    copy.chmod(0o755)
    monkeypatch.setattr(host, "_BWRAP", [host.Bwrap(str(copy), "system")])
    second, made = in_process()
    assert made
    assert second.bwrap == str(copy)


def test_another_panday_version_makes_a_fresh_plan(
    in_process: Callable[[], tuple[jail.Plan, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert in_process()[1]
    assert not in_process()[1]  # control: cached
    monkeypatch.setattr(panday, "__version__", panday.__version__ + ".post1")
    assert in_process()[1]


def test_a_changed_source_file_changes_the_key(tmp_path: Path) -> None:
    tree = tmp_path / "pkg"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.py").write_text("x = 1\n", encoding="utf-8")
    (tree / "sub" / "b.py").write_text("y = 1\n", encoding="utf-8")

    def identity() -> list[str]:
        lines: list[str] = []
        cli_fast._tree(str(tree), lines)  # pyright: ignore[reportPrivateUsage] - the key's source part
        return lines

    before = identity()
    assert identity() == before  # control
    (tree / "sub" / "b.py").write_text("y = 2\n", encoding="utf-8")
    assert identity() != before


# ---------------------------------------------------------------------- refused on every run


def test_a_workspace_that_became_a_link_is_refused_as_the_full_path_refuses(run: Runner) -> None:
    ws = run.tmp / "ws"
    ws.mkdir()
    args = ("run", "--workspace", str(ws), "--", "true")
    assert run(*args) == ("", "", 0)
    plans = run.plans()
    ws.rename(run.tmp / "real")
    ws.symlink_to(run.tmp / "real")
    refused = run(*args)
    assert refused[2] == exitcodes.POLICY_REFUSED
    assert "is a symbolic link" in refused[1]
    assert refused == run.fresh(*args)
    assert run.plans() == plans


def test_a_workspace_that_became_a_home_directory_is_refused_as_the_full_path_refuses(
    run: Runner,
) -> None:
    ws = run.tmp / "ws"
    ws.mkdir()
    args = ("run", "--workspace", str(ws), "--", "true")
    assert run(*args, env={"HOME": str(run.tmp / "home")}) == ("", "", 0)
    plans = run.plans()
    refused = run(*args, env={"HOME": str(ws)})
    assert refused[2] == exitcodes.POLICY_REFUSED
    assert "home directory" in refused[1]
    assert refused == run.fresh(*args, env={"HOME": str(ws)})
    assert run.plans() == plans  # the same key: refused by the cached run's own check


def test_a_protected_entry_that_became_a_link_is_refused_as_the_full_path_refuses(
    run: Runner,
) -> None:
    assert run("run", "--", "true") == ("", "", 0)
    (run.tmp / "hooks").mkdir()
    (run.cwd / ".git").symlink_to(run.tmp / "hooks")
    refused = run("run", "--", "sh", "-c", "echo ran")
    assert refused[2] == exitcodes.POLICY_REFUSED
    assert "ran" not in refused[0]
    assert refused == run.fresh("run", "--", "sh", "-c", "echo ran")


def test_a_policy_the_host_refuses_is_refused_on_every_run_and_never_planned(run: Runner) -> None:
    policy = run.tmp / "p.toml"
    policy.write_text("[limits]\ndisk_bytes = 1048576\n", encoding="utf-8")  # needs access = ro
    args = ("run", "--policy", str(policy), "--", "true")
    first = run(*args)
    assert first[2] == exitcodes.POLICY_REFUSED
    assert "limits.disk_bytes" in first[1]
    assert run(*args) == first
    assert run.plans() == {}


def test_a_workspace_inside_pandays_state_is_refused(run: Runner) -> None:
    inside = run.cache / "panday" / "plans" / "ws"
    run("run", "--", "true")  # makes the plan directory
    inside.mkdir()
    outside = run.cache / "ws"
    outside.mkdir()
    assert run("run", "--workspace", str(outside), "--", "true")[2] == 0  # control
    _out, err, code = run("run", "--workspace", str(inside), "--", "sh", "-c", "touch x")
    assert code == exitcodes.POLICY_REFUSED
    assert "panday's own state" in err
    assert not (inside / "x").exists()


# ---------------------------------------------------------------------- what is cached, what loads


def test_values_from_the_environment_never_reach_the_cache(run: Runner) -> None:
    secret = "tok-" + os.urandom(12).hex()
    echo = ("run", "--env", "TOKEN", "--", "sh", "-c", 'echo "$TOKEN"')
    assert run(*echo, env={"TOKEN": secret}) == (secret + "\n", "", 0)
    assert run(*echo, env={"TOKEN": secret}) == (secret + "\n", "", 0)
    assert run(*echo, env={"TOKEN": "other"}) == ("other\n", "", 0)
    files = list((run.cache / "panday" / "plans").glob("*.plan"))
    assert len(files) == 2
    assert all(secret.encode() not in p.read_bytes() for p in files)
    # The last --env of a name wins, as on the full path.
    both = ("run", "--env", "TOKEN", "--env", "TOKEN=literal", "--", "sh", "-c", 'echo "$TOKEN"')
    assert run(*both, env={"TOKEN": secret}) == ("literal\n", "", 0)
    assert run(*both, env={"TOKEN": secret}) == ("literal\n", "", 0)


HEAVY = ("msgspec", "typing", "enum", "re", "contextlib", "collections", "functools", "signal")
"""What the cached start-up path must not import (each costs milliseconds at every run)."""


def test_the_start_up_path_imports_neither_the_model_nor_typing(run: Runner, exe: str) -> None:
    assert run("run", "--", "true") == ("", "", 0)  # planned
    done = subprocess.run(
        [sys.executable, "-X", "importtime", exe, "run", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=run.cwd,
        env=run.env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "panday_tier_linux.plan" in imported  # the cached path ran ...
    assert "panday.cli.run" not in imported  # ... and the full path did not
    assert not {m for m in imported if m.split(".")[0] in HEAVY}


# ---------------------------------------------------------------------- bounded as the full path

LIMITS = ("Max address space", "Max processes")


def _jail_process(top: int, comm: str, deadline: float) -> int:
    """The process named `comm` below `top` (a /proc walk), waiting for it to appear."""
    while time.monotonic() < deadline:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):  # noqa: PTH208 - /proc walk
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        todo = [top]
        while todo:
            for pid in children.get(todo.pop(), []):
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                        return pid
                todo.append(pid)
        time.sleep(0.02)
    pytest.fail(f"no {comm} process appeared below {top}")


def _bounds_seen_from_the_host(pid: int) -> dict[str, str]:
    """The cgroup ceilings and rlimits the kernel holds for `pid` (read on the host)."""
    from panday_tier_linux import cgroups  # noqa: PLC0415 - to find its cgroup directories

    where = cgroups.discover(self_cgroup=Path(f"/proc/{pid}/cgroup").read_text())
    files = {
        "memory": ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"),
        "pids": ("pids.max",),
    }
    seen: dict[str, str] = {}
    for ctrl, names in files.items():
        for name in names:
            path = Path(where.v1.get(ctrl, "/nonexistent"), name)
            if path.exists():
                seen[name] = path.read_text().strip()
    if where.v2 is not None:
        for name in ("memory.max", "memory.swap.max", "pids.max"):
            path = Path(where.v2, name)
            if path.exists():
                seen[name] = path.read_text().strip()
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(LIMITS):
            seen[line[:26].strip()] = " ".join(line[26:].split()[:2])
    return seen


def _bounds_of(run: Runner, *args: str) -> dict[str, str]:
    """Start `panday ARGS -- sleep 30` and read its jail's bounds from the host."""
    proc = subprocess.Popen(
        [run.exe, *args, "--", "sleep", "30"],
        cwd=run.cwd,
        env=run.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return _bounds_seen_from_the_host(_jail_process(proc.pid, "sleep", time.monotonic() + 30))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_planned_jail_is_bounded_as_the_full_paths(run: Runner) -> None:
    """The default policy sets no pid or memory ceiling, so the host's protection bounds
    the jail: the same cgroup ceilings (or rlimits) on both paths, read back from the jail's
    own process."""
    full = _bounds_of(run, "run", "--debug")
    bounded = "pids.max" in full or full.get("Max address space", "unlimited") != "unlimited"
    if not bounded:
        pytest.fail(f"inconclusive: the full path's jail is not bounded: {full}")
    assert run("run", "--", "true") == ("", "", 0)  # planned ...
    plans = run.plans()
    planned = _bounds_of(run, "run")  # ... and run from the plan
    assert run.plans() == plans
    if os.geteuid() != 0 and "pids.max" not in full:
        # RLIMIT_NPROC is the host's task count at the start plus hostguard.PIDS: the same
        # rule on both paths, read at two moments of a host whose task count moves.
        theirs, ours = full.pop("Max processes").split(), planned.pop("Max processes").split()
        assert theirs[0] == theirs[1]
        assert ours[0] == ours[1]
        assert abs(int(theirs[0]) - int(ours[0])) < 512  # other processes of this uid come and go
    assert planned == full
    ceilings = ("--pids", "77", "--mem", "300M")
    if "pids.max" in full:  # a cgroup here: the policy's own ceilings replace the host's
        asked = _bounds_of(run, "run", "--debug", *ceilings)
        assert asked["pids.max"] == "77"
        assert run("run", *ceilings, "--", "true") == ("", "", 0)
        assert _bounds_of(run, "run", *ceilings) == asked


def test_output_and_wall_clock_are_bounded_as_on_the_full_path(run: Runner) -> None:
    """The model's defaults (16 MiB per stream, 10 minutes) hold with no policy and with a
    policy file that leaves them out; "unbounded" removes them on both paths."""
    flood = ("--", "sh", "-c", "head -c 17000000 /dev/zero; echo done >&2")
    silent = run.tmp / "silent.toml"
    silent.write_text('[env]\nX = "1"\n', encoding="utf-8")
    unbounded = run.tmp / "unbounded.toml"
    unbounded.write_text('[limits]\noutput_bytes = "unbounded"\n', encoding="utf-8")
    for policy in ((), ("--policy", str(silent)), ("--policy", str(unbounded))):
        expected = full_path(run, *policy, *flood)
        if policy and policy[1] == str(unbounded):
            assert (len(expected[0]), expected[2]) == (17_000_000, 0), expected[1:]
        else:
            assert expected[2] == exitcodes.LIMIT_OUTPUT, expected[1:]
            assert len(expected[0]) < 17_000_000
        for _ in range(2):  # planned, then from the plan
            assert run("run", *policy, *flood) == expected
    clock = run.tmp / "clock.toml"
    clock.write_text("[limits]\nwall_clock_ms = 300\n", encoding="utf-8")
    expected = full_path(run, "--policy", str(clock), "--", "sleep", "30")
    assert expected[2] == exitcodes.LIMIT_WALL_CLOCK
    for _ in range(2):
        assert run("run", "--policy", str(clock), "--", "sleep", "30") == expected


def test_a_command_printing_bwraps_words_keeps_its_own_exit_as_on_the_full_path(
    run: Runner,
) -> None:
    command = ("--", "sh", "-c", 'echo "bwrap: execvp x: No such file or directory" >&2; exit 125')
    expected = full_path(run, *command)
    assert expected == ("", "bwrap: execvp x: No such file or directory\n", 125)
    for _ in range(2):
        assert run("run", *command) == expected
    assert len(run.plans()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="another owner's 0700 directory needs root")
def test_a_workspace_the_jail_cannot_enter_is_reported_as_the_full_path_does(run: Runner) -> None:
    assert run("run", "--", "true") == ("", "", 0)  # planned while it can be entered
    os.chown(run.cwd, 65534, 65534)
    run.cwd.chmod(0o700)
    try:
        expected = run.fresh("run", "--", "true")
        assert expected[2] == exitcodes.NO_INPUT, expected  # WorkspaceUnusable: 66
        assert "cannot be entered from inside the sandbox" in expected[1]
        assert run("run", "--", "true") == expected
    finally:
        run.cwd.chmod(0o755)
        os.chown(run.cwd, 0, 0)


# ---------------------------------------------------------------------- the CLI's own behaviour

FAST_RUN = r"""
import os, sys
how, fd, report = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if how == "closed":
    os.close(fd)
elif how == "wrong way":
    new = os.open(os.devnull, os.O_WRONLY if fd == 0 else os.O_RDONLY)
    os.dup2(new, fd)
    os.close(new)
elif how == "non-blocking":
    os.set_blocking(fd, False)
from panday import cli_fast
from panday.stdio import repair_std_fds
repair_std_fds()  # as the console script (cli_fast.console) does first
code = cli_fast.run_cached(sys.argv[4:])
os.write(report, f"{code} {'panday.cli.run' in sys.modules}".encode())
"""
"""`cli_fast.console` up to its exit, with descriptor `fd` made unusable (or non-blocking)
first; reports the exit code and whether the full path was loaded."""


def _fast(
    run: Runner,
    how: str,
    fd: int,
    *args: str,
    stdout: int | None = None,
) -> tuple[bytes, bytes, str]:
    r, w = os.pipe()
    try:
        done = subprocess.run(
            # -P: the workspace (the current directory) stays off sys.path, where a plan
            # would refuse it; PYTHONPATH (a mutated copy under falsify) still applies.
            [sys.executable, "-P", "-c", FAST_RUN, how, str(fd), str(w), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=subprocess.PIPE,
            pass_fds=(w,),
            cwd=run.cwd,
            env=run.env,
            timeout=60,
            check=False,
        )
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as fh:
        report = fh.read().decode()
    return done.stdout or b"", done.stderr, report


@pytest.mark.parametrize("how", ["closed", "wrong way"])
@pytest.mark.parametrize("fd", [0, 1, 2])
def test_each_standard_descriptor_is_repaired_on_the_cached_path(
    run: Runner, fd: int, how: str
) -> None:
    args = ("run", "--", "sh", "-c", "cat; echo out; echo err >&2")
    assert run(*args) == ("out\n", "err\n", 0)  # control, and the plan
    out, err, report = _fast(run, "none", -1, *args)
    assert (out, err, report) == (b"out\n", b"err\n", "0 False")  # control: served from it
    out, err, report = _fast(run, how, fd, *args)
    assert report == "0 False"  # served from the plan, not handed to the full path
    assert out == (b"" if fd == 1 else b"out\n")  # a repaired stdout is /dev/null
    assert err == (b"" if fd == 2 else b"err\n")


def test_writes_are_looped_on_the_cached_path(run: Runner) -> None:
    args = ("run", "--", "head", "-c", "3000000", "/dev/zero")
    assert run(*args)[2] == 0  # planned
    # stdout non-blocking, read only after a pause: a write stops at a full pipe buffer
    # (EAGAIN), and the rest must follow once the reader drains it.
    import threading  # noqa: PLC0415 - this test only

    r, w = os.pipe()
    got = bytearray()

    def slow_reader() -> None:
        time.sleep(0.5)
        while data := os.read(r, 1 << 16):
            got.extend(data)

    reader = threading.Thread(target=slow_reader)
    reader.start()
    try:
        _out, err, report = _fast(run, "non-blocking", 1, *args, stdout=w)
    finally:
        os.close(w)
        reader.join(60)
        os.close(r)
    assert (len(got), err, report) == (3_000_000, b"", "0 False")


def test_control_sequences_are_filtered_on_the_cached_path(run: Runner) -> None:
    import pty  # noqa: PLC0415 - this test only

    script = "printf 'a\\033]52;c;ZXZpbA==\\007b\\033[32mok\\033[0m\\n'"
    args = ("run", "--", "sh", "-c", script)
    assert run(*args)[2] == 0  # planned
    out, _err, report = _fast(run, "none", -1, "run", "--sanitize", *args[1:])
    assert (out, report) == (b"a^[]52;c;ZXZpbA==^Gb\x1b[32mok\x1b[0m\n", "0 False")
    out, _err, report = _fast(run, "none", -1, *args)
    assert (out, report) == (b"a\x1b]52;c;ZXZpbA==\x07b\x1b[32mok\x1b[0m\n", "0 False")
    leader, follower = pty.openpty()
    try:  # a terminal: filtered unless --no-sanitize
        for flag, expected in (
            ((), b"a^[]52;c;ZXZpbA==^Gb\x1b[32mok\x1b[0m"),
            (("--no-sanitize",), b"a\x1b]52;c;ZXZpbA==\x07b\x1b[32mok\x1b[0m"),
        ):
            _out, _err, report = _fast(run, "none", -1, "run", *flag, *args[1:], stdout=follower)
            assert report == "0 False"
            seen = os.read(leader, 65536)
            assert seen.startswith(expected), (flag, seen)
    finally:
        os.close(leader)
        os.close(follower)


def test_only_the_locale_passes_into_the_default_policy_on_the_cached_path(run: Runner) -> None:
    show = ("run", "--", "sh", "-c", 'echo "${LC_SECRET-unset} $LC_ALL $LC_TIME"')
    env = {"LC_SECRET": "hunter2", "LC_ALL": "C.UTF-8", "LC_TIME": "C"}
    expected = run("run", "--debug", *show[1:], env=env)  # the full path
    assert expected == ("unset C.UTF-8 C\n", "", 0)
    for _ in range(2):
        assert run(*show, env=env) == expected
    assert len(run.plans()) == 1


# ------------------------------------------- issue 28: the current directory is in the key


def test_a_run_from_another_directory_gets_that_directorys_workspace(run: Runner) -> None:
    """The default workspace is the current directory: a plan made in one directory must
    never serve a run in another (kills "cli fast: the current directory left out of the
    plan key"). Both runs share one cache, so only the key can tell them apart."""
    first, second = run.tmp / "a", run.tmp / "b"
    show = ("run", "--", "sh", "-c", "pwd; echo here > mark")
    for where in (first, second):
        where.mkdir()
        run.cwd = where
        out, err, code = run(*show)
        assert (out, code) == (f"{where}\n", 0), err
        assert (where / "mark").read_text() == "here\n"
    assert len(run.plans()) == 2
