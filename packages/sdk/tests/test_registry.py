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
import tomllib
import types
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import panday
from panday import cli, exitcodes, tiers
from panday.cli.doctor import collect
from panday.probes import PROBES
from panday_core.capabilities import (
    FieldSupport,
    Guarantee,
    Support,
    TierCapabilities,
    check_policy,
    policy_fields,
)
from panday_core.egress.thread import ProxySettings
from panday_core.errors import PolicyViolation, TierUnavailable, Unsupported
from panday_core.policy import Limits, NetPolicy, SandboxPolicy
from panday_core.types import ExecExit, ExecSpec, OutputChunk, Snapshot

if TYPE_CHECKING:
    from collections.abc import Iterator

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
        assert row.declared.startswith("panday_core."), row
        assert str(tiers.declared(row.name).tier) == row.name


def test_every_tier_specific_thing_is_in_its_entry() -> None:
    probes = {p.name for p in PROBES}
    for row in tiers.REGISTRY:
        assert set(row.probes) <= probes, row  # a claimed probe exists
        assert row.roots, row  # the fields lint has source to read
        sandbox, cannot = tiers.consent(row.name)
        assert sandbox.startswith("panday's "), row
        assert cannot, row
    # The SDK's dependencies are the registry's requirements, nothing more or less.
    text = (REPO / "packages/sdk/pyproject.toml").read_text()
    project = tomllib.loads(text)["project"]
    tier_deps = {d for d in project["dependencies"] if d != "panday-core"}
    assert tier_deps == {r.requirement for r in tiers.REGISTRY if r.requirement}
    # The default PATH inside comes from the tier, never from another OS's tier.
    assert tiers.default_path("t2-linux").startswith("/usr/local/bin:")
    assert tiers.default_path("t0") == "/usr/bin:/bin:/usr/sbin:/sbin"


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
    without_host_tier: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default policy's workspace is the current directory: a directory of the test's
    # own, not the checkout (which `python -m pytest` puts on sys.path, a refused root).
    monkeypatch.chdir(tmp_path)
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
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # as above: the workspace is not the checkout
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
        if tier in tiers.host_command_tiers():  # this OS's tiers (T2 and T1 on Linux)
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


# ------------------------------------------------------------- a tier added by registration
# A fake tier, registered the way every tier is (`tiers.register` with one `Tier` entry):
# no existing file of panday changes for it, and `auto`, `panday.open`, `panday run` and
# `panday doctor` choose it, refuse by it and list it from that entry alone.

FAKE = "t9-fake"


def _fake_table() -> TierCapabilities:
    fields = tuple(
        FieldSupport(field=f, support=Support.NOT_ENFORCED, mechanism="none", note="fake: no net")
        if f.startswith("net.")
        else FieldSupport(field=f, support=Support.STRICT, mechanism="the fake tier")
        for f in policy_fields()
    )
    guarantee = Guarantee(name="Nothing happens", mechanism="a fake", support=Support.STRICT)
    return TierCapabilities(tier=FAKE, fields=fields, guarantees=(guarantee,))


class _FakeSession:
    def __init__(self, policy: SandboxPolicy) -> None:
        self.id = "fake-1"
        self.workspace = policy.fs.workspace or "/"

    def exec(self, spec: ExecSpec) -> Iterator[OutputChunk | ExecExit]:
        yield OutputChunk(stream="stdout", data=" ".join(spec.argv).encode())
        yield ExecExit(exit_code=7, wall_ms=0.0)

    def put(self, path: str, data: bytes) -> None:
        del path, data

    def get(self, path: str, *, max_bytes: int) -> bytes:
        del path, max_bytes
        return b""

    def snapshot(self) -> Snapshot:
        return Snapshot(session_id=self.id, entries=())

    def enforcement(self) -> object:
        return None

    def close(self) -> None:
        pass


def _fake_open(policy: SandboxPolicy, *, egress: object = None) -> _FakeSession:
    del egress
    refusals = check_policy(policy, _fake_table())  # refused by field, before anything runs
    if refusals:
        raise PolicyViolation(FAKE, refusals)
    return _FakeSession(policy)


@pytest.fixture
def fake_tier(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    module = types.ModuleType("panday_fake_tier")
    module.__dict__.update(
        table=_fake_table,
        open_session=_fake_open,
        details=lambda: {"fake": "yes"},
        unavailable=lambda: None,
    )
    monkeypatch.setitem(sys.modules, "panday_fake_tier", module)
    tiers.register(
        tiers.Tier(
            name=FAKE,
            title="T9 fake",
            package="panday_fake_tier",
            distribution="panday-fake-tier",
            requirement=None,
            platform=None,
            runs_commands=True,
            strength=9,  # stronger than every real tier: `auto` tries it first
            declared="panday_fake_tier:table",
            host="panday_fake_tier:table",
            unavailable="panday_fake_tier:unavailable",
            sandbox="panday_fake_tier:NoAsyncFace",
            opener="panday_fake_tier:open_session",
            doctor="panday_fake_tier:details",
            consent=("panday's fake sandbox", "do anything at all"),
            roots=("panday_fake_tier",),
        )
    )
    try:
        yield FAKE
    finally:
        tiers.unregister(FAKE)
    assert FAKE not in tiers.ALL_TIERS


def test_a_registered_tier_is_chosen_listed_and_opened(
    fake_tier: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert tiers.COMMAND_TIERS[0] == fake_tier  # strongest first
    assert fake_tier in tiers.TIER_CHOICES
    policy = SandboxPolicy().with_workspace(str(tmp_path))
    assert tiers.choose(policy, "auto") == fake_tier  # it enforces the whole policy
    with panday.open(policy, tier=fake_tier) as session:
        result = session.run(["echo", "hi"])
    assert (result.stdout, result.exit_code, session.tier) == (b"echo hi", 7, fake_tier)
    # panday run --tier names it, and its exit code passes through.
    argv = ["run", "--workspace", str(tmp_path), "--tier", fake_tier, "--", "x", "y"]
    assert cli.main(argv) == 7
    assert capfd.readouterr().out == "x y"  # written to descriptor 1, as a run writes
    # doctor lists it with its own details.
    report = collect(probe=False)
    row = next(r for r in report.tiers if r.tier == fake_tier)
    assert row.available
    assert row.runs_commands


def test_a_registered_tier_refuses_what_it_cannot_enforce(fake_tier: str, tmp_path: Path) -> None:
    policy = SandboxPolicy(net=NetPolicy(allow=("example.com",))).with_workspace(str(tmp_path))
    # Named, it is never replaced; its own open refuses the field it does not enforce.
    with pytest.raises(PolicyViolation) as info:
        panday.open(policy, tier=fake_tier)
    assert info.value.tier == fake_tier
    assert [v.field for v in info.value.violations] == ["net.allow"]

    # Under auto it is passed over for a tier that enforces the whole policy; where none
    # does, the strongest one's refusals are raised: its own.
    def table(tier: str) -> TierCapabilities:
        return _fake_table() if tier == fake_tier else tiers.declared(tier)

    both = (fake_tier, "t2-linux")
    assert tiers.choose(policy, "auto", candidates=both, capabilities=table) == "t2-linux"
    with pytest.raises(PolicyViolation) as info:
        tiers.choose(policy, "auto", candidates=(fake_tier, "t0"), capabilities=table)
    assert info.value.tier == fake_tier
    # Proxy settings go only to tiers whose entry has a synchronous opener (which takes
    # them); another tier refuses them rather than dropping them.
    assert tiers.entry(fake_tier).opener is not None
    assert tiers.entry("t0").opener is None
    with pytest.raises(
        Unsupported, match=r"passed through on t9-fake and t2-linux and t1-linux only, not t0"
    ):
        panday.open(
            SandboxPolicy().with_workspace(str(tmp_path)), tier="t0", egress=ProxySettings()
        )


def test_a_registered_tier_is_in_doctor_s_listing(
    fake_tier: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["doctor"]) == exitcodes.OK
    out = capsys.readouterr().out
    # It runs anywhere and is the strongest, so it is this host's command tier now: its
    # own doctor rows and its declared table are what doctor shows.
    assert f"{fake_tier}: available (this host's command tier)\n  fake  yes\n" in out
    assert f"Guarantees of {fake_tier} here:\n  strict   Nothing happens" in out
