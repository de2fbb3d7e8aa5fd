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

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import panday
from panday import cli_fast, cli_plan, exitcodes
from panday_tier_linux import host
from panday_tier_linux import plan as jail

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

pytestmark = pytest.mark.usefixtures("linux_tier")

Result = tuple[str, str, int]


class Runner:
    """The installed `panday` in `cwd`, with a cache and configuration of the test's own."""

    def __init__(self, exe: str, tmp: Path) -> None:
        self.exe = exe
        self.tmp = tmp
        self.cwd = tmp / "cwd"
        self.cwd.mkdir()
        self.cache = tmp / "cache"
        self.cache.mkdir()
        self.env = {
            **os.environ,
            "XDG_CACHE_HOME": str(self.cache),
            "XDG_CONFIG_HOME": str(tmp / "config"),
        }

    def __call__(
        self, *args: str, env: Mapping[str, str] | None = None, cache: Path | None = None
    ) -> Result:
        full = {**self.env, **(env or {})}
        if cache is not None:
            full["XDG_CACHE_HOME"] = str(cache)
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


def test_a_tampered_plan_is_replaced_not_used(run: Runner) -> None:
    assert run("run", "--", "sh", "-c", "echo ok") == ("ok\n", "", 0)
    ((name, (inode, _mtime)),) = run.plans().items()
    path = run.cache / "panday" / "plans" / name
    blob = bytearray(path.read_bytes())
    at = blob.rindex(b"--remount-ro")
    blob[at : at + 12] = b"--remount-rw"  # one option of the jail, digest left as it was
    path.write_bytes(bytes(blob))
    assert run("run", "--", "sh", "-c", "echo ok") == ("ok\n", "", 0)
    assert run.plans()[name][0] != inode  # rewritten
    assert b"--remount-rw" not in path.read_bytes()


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
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    real_make = cli_plan.make
    made: list[bool] = []

    def make(
        args: list[str],
        options: list[str],
        command: list[str],
        inputs: list[str],
        *,
        again: Callable[[list[str]], list[str] | None],
    ) -> jail.Plan | None:
        made.append(True)
        return real_make(args, options, command, inputs, again=again)

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
    assert "panday.cli_run" not in imported  # ... and the full path did not
    assert not {m for m in imported if m.split(".")[0] in HEAVY}
