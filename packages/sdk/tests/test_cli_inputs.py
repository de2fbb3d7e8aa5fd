"""What the CLI reads and how it says what is wrong with it: several policy files, standard
input, FIFOs, file names in error lines, missing paths (66 everywhere), the per-user
default policy, refusal advice, and the help text."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday import cli, exitcodes, tiers
from panday_core.capabilities import FieldSupport, Refusal, Support, TierCapabilities
from panday_core.errors import PolicyViolation
from panday_core.types import SandboxTier

if TYPE_CHECKING:
    from collections.abc import Callable
    from subprocess import CompletedProcess

    Cli = Callable[..., CompletedProcess[str]]
    Line = Callable[[CompletedProcess[str]], str]
    Validate = Callable[[str, str], dict[str, object]]

REPO = Path(__file__).resolve().parents[3]
DEFAULT = REPO / "examples" / "default.toml"
host_tier = pytest.mark.skipif(
    tiers.host_command_tier() is None, reason="panday has no command tier for this OS"
)


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# ------------------------------------------------------------------ policy check inputs


@host_tier
def test_policy_check_takes_several_files_and_exits_with_the_worst(
    tmp_path: Path, cli: Cli
) -> None:
    good = str(DEFAULT)
    bad = _write(tmp_path / "bad.toml", "[limits]\npids = 0\n")
    gone = str(tmp_path / "gone.toml")
    # Control: each good file alone passes.
    assert cli("policy", "check", good, good).returncode == exitcodes.OK
    result = cli("policy", "check", good, bad)
    assert result.returncode == exitcodes.INVALID_POLICY
    assert f"{good}: valid policy, enforceable here" in result.stdout  # still reported
    assert f"panday: {bad}: invalid policy: limits.pids: " in result.stderr
    result = cli("policy", "check", bad, gone, good)
    assert result.returncode == exitcodes.NO_INPUT  # 66 > 65 > 1 > 0
    assert f"cannot read policy file {gone!r}" in result.stderr


@host_tier
def test_policy_check_json_for_several_files_is_a_list(
    tmp_path: Path, cli: Cli, validate: Validate
) -> None:
    bad = _write(tmp_path / "bad.toml", "[net]\nallow = 1\n")
    one = cli("policy", "check", "--json", str(DEFAULT))
    doc = validate(one.stdout, "cli-policy-check")  # one file: the object, as before
    assert doc["exit_code"] == one.returncode == exitcodes.OK
    several = cli("policy", "check", "--json", str(DEFAULT), bad)
    docs: list[dict[str, object]] = json.loads(several.stdout)
    assert isinstance(docs, list)
    for item in docs:
        validate(json.dumps(item), "cli-policy-check")
    assert [d["valid"] for d in docs] == [True, False]
    assert str(docs[1]["error"]).startswith(f"{bad}: invalid policy: net.allow: ")
    assert several.returncode == exitcodes.INVALID_POLICY == docs[1]["exit_code"]


@host_tier
def test_policy_check_reads_standard_input(cli: Cli) -> None:
    toml = DEFAULT.read_text()
    result = cli("policy", "check", "-", stdin=toml)
    assert result.returncode == exitcodes.OK, result.stderr
    assert result.stdout.startswith("<stdin>: valid policy, enforceable here")
    as_json = cli("policy", "check", "-", stdin='{"limits": {"pids": 64}}')
    assert as_json.stdout.startswith("<stdin>: valid policy")
    broken = cli("policy", "check", "-", stdin="[limits]\npids = -1\n")
    assert broken.returncode == exitcodes.INVALID_POLICY
    assert "panday: <stdin>: invalid policy: limits.pids: must be at least 1" in broken.stderr
    twice = cli("policy", "check", "-", "-", stdin=toml)
    assert twice.returncode == exitcodes.USAGE


@host_tier
def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path, cli: Cli) -> None:
    regular = _write(tmp_path / "p.toml", DEFAULT.read_text())
    assert cli("policy", "check", regular).returncode == exitcodes.OK  # control
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    # Nobody ever writes to it: reading would block forever. The timeout bounds the test.
    result = cli("policy", "check", str(fifo), timeout=30)
    assert result.returncode == exitcodes.NO_INPUT
    assert "it is a FIFO, not a regular file; pass the policy on standard input with '-'" in (
        result.stderr
    )
    run = cli("run", "--policy", str(fifo), "--", "true", timeout=30)
    assert run.returncode == exitcodes.NO_INPUT


def test_a_directory_is_no_input(tmp_path: Path, cli: Cli, clean_line: Line) -> None:
    result = cli("policy", "check", str(tmp_path))
    assert result.returncode == exitcodes.NO_INPUT
    assert "it is a directory" in clean_line(result)


# ------------------------------------------------------------------ missing paths: 66


@host_tier
def test_a_missing_workspace_is_66_however_it_is_named(tmp_path: Path, cli: Cli) -> None:
    here = tmp_path / "here"
    here.mkdir()
    gone = tmp_path / "gone"
    exists = _write(tmp_path / "exists.toml", f'[fs]\nworkspace = "{here}"\n')
    missing = _write(tmp_path / "missing.toml", f'[fs]\nworkspace = "{gone}"\n')
    staged = _write(tmp_path / "staged.toml", f'[fs]\nstaged_ro = ["{gone}"]\n')
    # Controls: the same commands with a workspace that exists succeed.
    assert cli("run", "--policy", exists, "--", "true").returncode == exitcodes.OK
    assert cli("run", "--workspace", str(here), "--", "true").returncode == exitcodes.OK
    assert cli("policy", "check", exists).returncode == exitcodes.OK
    by_option = cli("run", "--workspace", str(gone), "--", "true")
    assert by_option.returncode == exitcodes.NO_INPUT
    by_file = cli("run", "--policy", missing, "--", "true")
    assert by_file.returncode == exitcodes.NO_INPUT
    assert f"panday: fs.workspace (in {missing}): {str(gone)!r} does not exist" in (by_file.stderr)
    by_staged = cli("run", "--policy", staged, "--", "true")
    assert by_staged.returncode == exitcodes.NO_INPUT
    assert "fs.staged_ro[0]" in by_staged.stderr
    checked = cli("policy", "check", missing)
    assert checked.returncode == exitcodes.NO_INPUT
    assert "NOT enforceable here" in checked.stdout
    assert f"missing here: fs.workspace: {str(gone)!r} does not exist" in checked.stdout


# ------------------------------------------------------------------ the per-user default


@host_tier
def test_the_per_user_default_policy_applies_unless_policy_is_given(
    tmp_path: Path, cli: Cli
) -> None:
    config = tmp_path / "config"
    env = {**os.environ, "XDG_CONFIG_HOME": str(config)}
    show = ["run", "--", "sh", "-c", 'echo "${FROM_USER_POLICY:-unset}"']
    # Control: without the file, the embedded default applies.
    assert cli(*show, env=env).stdout == "unset\n"
    (config / "panday").mkdir(parents=True)
    user = config / "panday" / "policy.toml"
    user.write_text('[env]\nFROM_USER_POLICY = "yes"\n')
    assert cli(*show, env=env).stdout == "yes\n"
    overridden = cli("run", "--policy", str(DEFAULT), *show[1:], env=env)
    assert overridden.stdout == "unset\n"
    doctor = cli("doctor", "--json", env=env)
    assert json.loads(doctor.stdout)["user_policy"] == {
        "path": str(user),
        "present": True,
        "valid": True,
        "error": None,
        "unbounded": [],
    }
    assert f"Per-user default policy: {user}\n  valid: " in cli("doctor", env=env).stdout
    user.write_text("[limits]\npids = -1\n")
    broken = cli(*show, env=env)
    assert broken.returncode == exitcodes.INVALID_POLICY
    assert f"panday: {user}: invalid per-user default policy: limits.pids: " in broken.stderr
    assert "INVALID, so `panday run` without --policy fails" in cli("doctor", env=env).stdout


def test_the_per_user_default_follows_xdg(tmp_path: Path) -> None:
    from panday.defaults import user_policy_path  # noqa: PLC0415

    home = str(tmp_path)
    assert user_policy_path({"HOME": home}) == f"{home}/.config/panday/policy.toml"
    assert user_policy_path({"HOME": home, "XDG_CONFIG_HOME": "/x"}) == "/x/panday/policy.toml"
    # A relative XDG_CONFIG_HOME is ignored, as the XDG specification says.
    relative = {"HOME": home, "XDG_CONFIG_HOME": "rel"}
    assert user_policy_path(relative) == f"{home}/.config/panday/policy.toml"


@host_tier
def test_policy_from_stdin_and_stdin_for_the_command_conflict(cli: Cli) -> None:
    result = cli("run", "--policy", "-", "--stdin", "--", "cat", stdin="")
    assert result.returncode == exitcodes.USAGE
    fine = cli("run", "--policy", "-", "--", "echo", "ok", stdin=DEFAULT.read_text())
    assert fine.returncode == exitcodes.OK, fine.stderr
    assert fine.stdout == "ok\n"


# ------------------------------------------------------------------ refusals and help


def _table(support: Support) -> TierCapabilities:
    entry = FieldSupport(field="limits.mem_bytes", support=support, mechanism="m", note="n")
    return TierCapabilities(tier=SandboxTier.T2_LINUX, fields=(entry,))


def test_refusal_advice_only_for_fields_the_tier_does_not_enforce(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = Refusal(field="limits.mem_bytes", reason="1073741824: no cgroup here")
    exc = PolicyViolation("t2-linux", [refusal])
    support = [Support.NOT_ENFORCED]

    def table(tier: str) -> TierCapabilities:
        assert tier == "t2-linux"
        return _table(support[0])

    monkeypatch.setattr(tiers, "host_capabilities", table)
    assert cli.report(exc, debug=False) == exitcodes.POLICY_REFUSED
    line = capsys.readouterr().err.strip()
    assert line.endswith(
        "t2-linux does not enforce limits.mem_bytes on this host: leave it out of the policy, "
        "or run where it is enforced (`panday doctor` lists what this host enforces)"
    )
    # A tier that enforces the field refused a value: its reason stands alone.
    support[0] = Support.STRICT
    assert cli.report(exc, debug=False) == exitcodes.POLICY_REFUSED
    assert capsys.readouterr().err.strip() == f"panday: refused: {exc}"


def test_help_points_at_documentation_that_exists_outside_the_wheel(cli: Cli) -> None:
    result = cli("--help")
    assert "https://github.com/" in result.stdout
    assert "docs/cli.md" in result.stdout
    run_help = cli("run", "--help").stdout
    assert "ps" in run_help
    assert "--env NAME " in run_help  # the form that keeps a value off the command line
    assert "$XDG_CONFIG_HOME/panday/policy.toml" in run_help


@host_tier
def test_env_name_keeps_the_value_off_the_command_line(tmp_path: Path, exe: str) -> None:
    secret = f"s3cret-{os.getpid()}"
    # No per-user policy: an empty configuration directory (beside the workspace: the
    # caller's XDG_CONFIG_HOME is itself kept read-only, a workspace there refused).
    (tmp_path / "config").mkdir()
    (tmp_path / "project").mkdir()
    env = {**os.environ, "TOKEN": secret, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = subprocess.run(
        [exe, "run", "--env", "TOKEN", "--", "sh", "-c", 'printf %s "$TOKEN"'],
        env=env,
        cwd=tmp_path / "project",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.stdout == secret.encode(), proc.stderr  # the value arrived inside
    assert secret not in " ".join(proc.args)  # and was never on panday's argv
