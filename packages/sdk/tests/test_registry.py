"""The tier registry: what `pip install panday` alone gives a user on this OS.

`pip install panday` installs only this OS's tier (environment markers); the other OS's
tier package is absent. `doctor`, `policy check` and `panday.open` must then answer with
the reason a tier is unavailable, never a `ModuleNotFoundError`. A tier package is made
absent here the way Python itself reports one: ``sys.modules[name] = None`` makes every
import of it raise `ModuleNotFoundError` naming it, as on a machine without it. The build
gate (tools/artifacts.py) does the same with a real `pip install` of the built wheels.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import panday
from panday import cli, exitcodes, tiers
from panday.cli_doctor import collect
from panday_core.errors import TierUnavailable
from panday_core.policy import Limits, SandboxPolicy

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
HOST = tiers.host_command_tier()
needs_host_tier = pytest.mark.skipif(HOST is None, reason="panday has no command tier here")


def _package(tier: str) -> str:
    return tiers.entry(tier).package


@pytest.fixture
def without_host_tier(monkeypatch: pytest.MonkeyPatch) -> str:
    """This OS's tier package made absent (as on a machine where it is not installed)."""
    assert HOST is not None
    package = _package(HOST)
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)
    return HOST


def test_the_registry_is_one_table() -> None:
    names = [row.name for row in tiers.REGISTRY]
    assert list(tiers.ALL_TIERS) == names
    assert len(set(names)) == len(names)
    assert tuple(r.name for r in tiers.REGISTRY if r.runs_commands) == tiers.COMMAND_TIERS
    assert not tiers.entry("t0").runs_commands
    # Every tier's declared table is in core, whatever is installed.
    for row in tiers.REGISTRY:
        assert row.table.startswith("panday_core."), row
        assert str(tiers.declared(row.name).tier) == row.name


@needs_host_tier
def test_a_missing_tier_package_is_unavailable_with_its_reason(
    without_host_tier: str, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = tiers.unavailable_reason(without_host_tier)
    distribution = tiers.entry(without_host_tier).distribution
    assert reason is not None
    assert f"its package {distribution} is not installed" in reason
    with pytest.raises(TierUnavailable) as info:
        panday.open()
    assert info.value.tier == without_host_tier
    assert "is not installed" in info.value.reason
    # doctor: the tier unavailable with that reason, the table it declares, exit 69.
    report = collect(probe=False)
    row = next(r for r in report.tiers if r.tier == without_host_tier)
    assert not row.available
    assert row.unavailable_reason == reason
    assert report.fields == tiers.declared(without_host_tier).fields
    assert cli.main(["doctor"]) == exitcodes.TIER_UNAVAILABLE
    out = capsys.readouterr().out
    assert f"{without_host_tier}: unavailable (this host's command tier): its package" in out
    assert "(as declared; the tier is unavailable here)" in out


@needs_host_tier
def test_policy_check_without_the_tier_package_judges_by_the_declared_table(
    without_host_tier: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["policy", "check", "--json", str(EXAMPLES / "default.toml")])
    doc = json.loads(capsys.readouterr().out)
    assert code == exitcodes.FAILED  # valid, but nothing here can run it
    assert doc["valid"] is True
    row = next(r for r in doc["tiers"] if r["tier"] == without_host_tier)
    assert row["judged_by"] == "declared"
    assert row["refused"] == []  # the declared table enforces the default
    assert "is not installed" in row["unavailable_reason"]


@needs_host_tier
def test_the_installed_host_tier_is_judged_by_its_host_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Control for the two tests above: with the package present, the same commands see
    # the tier available and judge by the probed table.
    assert tiers.absent_reason(HOST or "") is None
    code = cli.main(["policy", "check", "--json", str(EXAMPLES / "default.toml")])
    doc = json.loads(capsys.readouterr().out)
    row = next(r for r in doc["tiers"] if r["host_tier"])
    assert row["judged_by"] == "host"
    assert code == (exitcodes.OK if row["available"] else exitcodes.FAILED)


@needs_host_tier
def test_another_os_tier_is_judged_by_core_without_its_package(tmp_path: Path) -> None:
    # The other OS's tier package is never imported: not to say it is unavailable, not to
    # judge a policy by its table (a fresh interpreter shows what was loaded).
    other = next(t for t in tiers.COMMAND_TIERS if t != HOST)
    policy = tmp_path / "mem.toml"
    policy.write_text("[limits]\nmem_bytes = 1073741824\n")
    script = (
        "import json, sys; from panday import cli; "
        f"code = cli.main(['policy', 'check', {str(policy)!r}]); "
        f"print(json.dumps([code, {_package(other)!r} in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    out = done.stdout.splitlines()
    _, imported = json.loads(out[-1])
    assert imported is False, done.stdout + done.stderr
    text = "\n".join(out[:-1])
    declared = tiers.declared(other).for_field("limits.mem_bytes")
    assert declared is not None
    if declared.support.value == "not-enforced":  # T2 macOS cannot hold a memory ceiling
        assert f"{other} (not this host: " in text
        assert "its declared table would refuse:\n    limits.mem_bytes: 1073741824: " in text
    else:
        assert f"{other} (not this host: " in text
        assert "its declared table enforces every field" in text


def test_a_named_tier_of_another_os_is_unavailable_not_a_module_error() -> None:
    for tier in tiers.COMMAND_TIERS:
        if tier == HOST:
            continue
        with pytest.raises(TierUnavailable, match=r"needs .*; this host is "):
            panday.open(tier=tier)
        with pytest.raises(TierUnavailable):
            tiers.host_capabilities(tier)
        assert tiers.declared(tier).fields  # its declared table still answers


def test_choose_refuses_by_the_registry_before_importing() -> None:
    policy = SandboxPolicy(limits=Limits(pids=8))
    with pytest.raises(ValueError, match="is not a tier"):
        tiers.choose(policy, "t9")
