"""`panday policy check` and `panday policy schema` end to end, through the console script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday import exitcodes, tiers
from panday.cli import policy as cli_misc
from panday_core.capabilities import FieldSupport, Support, TierCapabilities

if TYPE_CHECKING:
    from collections.abc import Callable
    from subprocess import CompletedProcess

    Cli = Callable[..., CompletedProcess[str]]
    Line = Callable[[CompletedProcess[str]], str]
    Validate = Callable[[str, str], dict[str, object]]

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


def test_an_allowlist_is_refused_unless_the_host_tier_enforces_it(cli: Cli) -> None:
    # Refused, naming the field, the hosts and the reason, while no egress proxy serves the
    # host's tier; enforceable once one does. Either way the verdict is the host table's.
    table = tiers.host_capabilities(tiers.host_command_tier() or "t2-linux")
    entry = table.for_field("net.allow")
    result = cli("policy", "check", str(EXAMPLES / "allowlist.toml"))
    if entry is not None and entry.support is not Support.NOT_ENFORCED:
        assert result.returncode == exitcodes.OK, result.stdout + result.stderr
        assert ", enforceable here" in result.stdout.splitlines()[0]
        return
    assert result.returncode == exitcodes.FAILED, result.stdout + result.stderr
    assert "NOT enforceable here" in result.stdout
    assert "net.allow" in result.stdout
    assert "api.github.com" in result.stdout
    assert "no egress proxy" in result.stdout


def test_json_output_is_structured_and_matches_its_schema(cli: Cli, validate: Validate) -> None:
    result = cli("policy", "check", "--json", str(EXAMPLES / "allowlist.toml"))
    doc = validate(result.stdout, "cli-policy-check")
    assert doc["valid"] is True
    rows: list[dict[str, object]] = doc["tiers"]  # pyright: ignore[reportAssignmentType] - JSON
    names = {row["tier"] for row in rows}
    assert {"t2-linux", "t2-macos"} <= names
    assert (result.returncode == exitcodes.OK) == doc["enforceable_here"]


def test_the_default_policy_is_enforceable_here(cli: Cli) -> None:
    result = cli("policy", "check", str(EXAMPLES / "default.toml"))
    if tiers.host_command_tier() is None:
        pytest.skip("panday has no command tier for this OS")
    assert result.returncode == exitcodes.OK, result.stdout + result.stderr
    assert ", enforceable here" in result.stdout.splitlines()[0]


def test_the_host_tier_is_judged_by_its_probed_table_not_the_declared_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    host = tiers.host_command_tier()
    if host is None:
        pytest.skip("panday has no command tier for this OS")
    policy = tmp_path / "mem.toml"
    ws = tmp_path / "ws"  # not the current directory, which a test runner may put on sys.path
    ws.mkdir()
    policy.write_text(f'[fs]\nworkspace = "{ws}"\n[limits]\nmem_bytes = 1073741824\n')
    declared = tiers.declared(host)
    entry = declared.for_field("limits.mem_bytes")
    assert entry is not None
    # Control: against the table with a memory ceiling held, the policy is enforceable.
    held = _with_field(declared, "limits.mem_bytes", Support.STRICT, "a cgroup holds it")
    table = [held]

    def host_table(tier: str) -> TierCapabilities:
        del tier
        return table[0]

    def available(tier: str) -> None:
        del tier

    monkeypatch.setattr(tiers, "host_capabilities", host_table)
    monkeypatch.setattr(tiers, "unavailable_reason", available)
    assert cli_misc.policy_check(str(policy), as_json=False) == exitcodes.OK
    capsys.readouterr()
    # This host cannot hold it (no writable cgroup, say): refused, although declared strict.
    table[0] = _with_field(declared, "limits.mem_bytes", Support.NOT_ENFORCED, "no cgroup here")
    assert cli_misc.policy_check(str(policy), as_json=False) == exitcodes.FAILED
    out = capsys.readouterr().out
    assert "(this host's tier): refuses:\n    limits.mem_bytes: 1073741824: no cgroup here" in out


def _with_field(
    table: TierCapabilities, field: str, support: Support, note: str
) -> TierCapabilities:
    fields = tuple(
        FieldSupport(field=f.field, support=support, mechanism=f.mechanism, note=note)
        if f.field == field
        else f
        for f in table.fields
    )
    return TierCapabilities(tier=table.tier, fields=fields, guarantees=table.guarantees)


def test_missing_and_unreadable_files_are_one_line_and_no_input(
    tmp_path: Path, cli: Cli, clean_line: Line
) -> None:
    result = cli("policy", "check", str(tmp_path / "nope.toml"))
    assert result.returncode == exitcodes.NO_INPUT
    assert "cannot read policy file" in clean_line(result)
    result = cli("policy", "check", str(tmp_path))  # a directory: open() fails, also as root
    assert result.returncode == exitcodes.NO_INPUT
    assert "cannot read policy file" in clean_line(result)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[net\nallow = 1\n", "invalid TOML"),
        ("[limits]\npid = 3\n", "limits.pid: unknown key 'pid'"),
        ('[net]\nallow = ["https://x.y/"]\n', "net.allow[0]"),
        ('[limits]\nmem_bytes = "lots"\n', "limits.mem_bytes: expected an integer"),
        ('[fs]\nworkspace = "rel"\n', "fs.workspace"),
    ],
)
def test_bad_policy_is_one_line_and_invalid_policy(
    tmp_path: Path, cli: Cli, clean_line: Line, content: str, fragment: str
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(content)
    result = cli("policy", "check", str(path))
    assert result.returncode == exitcodes.INVALID_POLICY
    assert fragment in clean_line(result)


def test_usage_errors_are_one_line(cli: Cli, clean_line: Line) -> None:
    result = cli("policy", "check")
    assert result.returncode == exitcodes.USAGE
    assert clean_line(result).startswith("panday: usage:")


def test_schema_is_printed(cli: Cli) -> None:
    result = cli("policy", "schema")
    assert result.returncode == exitcodes.OK
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema == json.loads((REPO / "schemas" / "policy.schema.json").read_text())
