"""The dead-control lint fails on a field nobody reads and passes when every field is
read, refused with a reason, or not applicable with a reason."""

from __future__ import annotations

import ast
import inspect
from typing import TYPE_CHECKING

import msgspec
import pytest

import fields_lint
from panday_core.capabilities import FieldSupport, Support, TierCapabilities
from panday_core.policy import Limits
from panday_core.types import SandboxTier

if TYPE_CHECKING:
    from pathlib import Path

FIELDS = ("fs.workspace", "limits.mem_bytes", "limits.pids", "net.allow", "env")
LIMITS_ONLY = """
def f(policy):
    return policy.fs.workspace, policy.limits.mem_bytes, getattr(policy.limits, "pids")
"""


def caps(**support: Support) -> TierCapabilities:
    entries = tuple(
        FieldSupport(
            field=f,
            support=support.get(f.replace(".", "__"), Support.STRICT),
            mechanism="m",
            note="why",
        )
        for f in FIELDS
    )
    return TierCapabilities(tier=SandboxTier.T2_LINUX, fields=entries)


def tier_dir(tmp_path: Path, source: str) -> Path:
    root = tmp_path / "tier"
    root.mkdir()
    (root / "jail.py").write_text(source)
    return root


READS_ALL = """
def build(policy):
    ws = policy.fs.workspace
    limits = policy.limits
    return [ws, limits.mem_bytes, getattr(limits, "pids"), policy.env, policy.net.allow]
"""


def test_every_field_read_passes(tmp_path: Path) -> None:
    source = fields_lint.TierSource("t2-linux", caps(), [tier_dir(tmp_path, READS_ALL)])
    verdict = fields_lint.check_tier(source, FIELDS)
    assert verdict.problems == []
    assert sorted(verdict.read) == sorted(FIELDS)


def test_an_unread_field_fails_naming_field_and_tier(tmp_path: Path) -> None:
    source = fields_lint.TierSource(
        "t2-linux", caps(), [tier_dir(tmp_path, READS_ALL.replace("limits.mem_bytes, ", ""))]
    )
    verdict = fields_lint.check_tier(source, FIELDS)
    assert verdict.problems == [
        "t2-linux: limits.mem_bytes: declared strict but no enforcement code reads it"
    ]


def test_refused_or_not_applicable_fields_need_no_reader_but_need_a_reason(tmp_path: Path) -> None:
    source = fields_lint.TierSource(
        "t2-linux",
        caps(net__allow=Support.NOT_ENFORCED, env=Support.NOT_APPLICABLE),
        [tier_dir(tmp_path, LIMITS_ONLY)],
    )
    verdict = fields_lint.check_tier(source, FIELDS, {("t2-linux", "env"): "reviewed"})
    assert verdict.problems == []
    assert verdict.refused == ["net.allow"]
    assert verdict.not_applicable == ["env"]


def test_not_applicable_only_from_the_reviewed_list(tmp_path: Path) -> None:
    # A new field nobody implemented, declared n/a: no reader is needed, so only the
    # reviewed list stands between it and a green gate.
    source = fields_lint.TierSource(
        "t2-linux",
        caps(
            env=Support.NOT_APPLICABLE,
            limits__pids=Support.NOT_APPLICABLE,
            net__allow=Support.NOT_ENFORCED,
        ),
        [tier_dir(tmp_path, LIMITS_ONLY)],
    )
    verdict = fields_lint.check_tier(source, FIELDS, {("t2-linux", "env"): "reviewed"})
    assert verdict.not_applicable == ["env"]
    assert len(verdict.problems) == 1
    assert verdict.problems[0].startswith(
        "t2-linux: limits.pids: declared not applicable, but ('t2-linux', 'limits.pids') is "
        "not in the reviewed list"
    )


def test_a_reviewed_pair_no_tier_declares_any_more_fails(tmp_path: Path) -> None:
    source = fields_lint.TierSource("t2-linux", caps(), [tier_dir(tmp_path, READS_ALL)])
    reviewed = {("t2-linux", "env"): "reviewed once", ("t0", "env"): "another tier"}
    stale = fields_lint.stale_reviews([source], reviewed)
    assert [line.split(": in the reviewed")[0] for line in stale] == ["t0: env", "t2-linux: env"]
    assert all(line.endswith("no longer declares it so; remove the pair") for line in stale)


def test_the_real_tables_use_only_reviewed_pairs() -> None:
    sources = fields_lint.real_tiers()
    assert fields_lint.stale_reviews(sources) == []
    for source in sources:
        verdict = fields_lint.check_tier(source, fields_lint.policy_fields())
        assert not [p for p in verdict.problems if "reviewed list" in p]


def test_an_undeclared_field_fails(tmp_path: Path) -> None:
    partial = TierCapabilities(tier=SandboxTier.T2_LINUX, fields=caps().fields[:1])
    source = fields_lint.TierSource("t2-linux", partial, [tier_dir(tmp_path, READS_ALL)])
    verdict = fields_lint.check_tier(source, FIELDS)
    assert any(
        "limits.pids: the tier's capability data says nothing" in p for p in verdict.problems
    )


def test_a_manifest_field_nobody_displays_fails(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.py"
    manifest.write_text(
        "def consent_summary(m):\n    return m.name\n\n"
        "def to_policy(m):\n    return _net(m)\n\n"
        "def _net(m):\n    return m.net\n"
    )
    count, problems = fields_lint.check_manifest(
        manifest, ["name", "capabilities.net", "description"]
    )
    assert count == 3
    assert problems == ["manifest: description: neither to_policy nor consent_summary reads it"]


def test_an_accessor_property_counts_as_a_read_of_its_field() -> None:
    tree = ast.parse("def f(limits):\n    return limits.output_cap, limits.wall_clock_cap\n")
    assert fields_lint.fields_read(tree) == {"limits.output_bytes", "limits.wall_clock_ms"}


def test_each_accessor_is_a_model_property_that_reads_its_field() -> None:
    # An accessor that stopped reading its field would let the lint count a read that is
    # not there: check the property's own source names the field it stands for.
    for accessor, field in fields_lint.ACCESSORS.items():
        section, prop = accessor.split(".")
        assert section == "limits"
        member = inspect.getattr_static(Limits, prop)
        assert isinstance(member, property), accessor
        assert member.fget is not None
        source = inspect.getsource(member.fget)
        assert f"self.{field.split('.')[1]}" in source, (accessor, field)
        default = Limits()
        assert getattr(default, prop) == getattr(default, field.split(".")[1])
        unbounded = msgspec.structs.replace(default, **{field.split(".")[1]: "unbounded"})
        assert getattr(unbounded, prop) is None


# ------------------------------------------------------- issue 28: a read is not enforcement


@pytest.mark.parametrize(
    "body",
    [
        "    _unused = limits.pids\n",  # the auditor's dead read
        "    limits.pids\n",  # a bare expression
        "    x = limits.pids\n    y = x\n",  # carried into a name nobody uses
        "    for p in [limits.pids]:\n        pass\n",  # a loop target never used
        "    del limits.pids\n",
    ],
)
def test_a_read_whose_value_goes_nowhere_is_no_read(body: str) -> None:
    tree = ast.parse(f"def f(limits, apply):\n{body}    apply(limits.mem_bytes)\n")
    assert fields_lint.fields_read(tree) == {"limits.mem_bytes"}


@pytest.mark.parametrize(
    "body",
    [
        "    apply(pids=limits.pids)\n",  # into a call
        "    n = limits.pids\n    apply(n)\n",  # through a local name
        "    if limits.pids is not None:\n        apply()\n",  # a test
        "    return {'pids.max': limits.pids}\n",  # handed back
        "    self.pids = limits.pids\n",  # state carried on
        "    n = [p for p in (limits.pids,)]\n    return n\n",
        "    for p in [limits.pids]:\n        apply(p)\n",
        "    cap = (n := limits.pids) and n\n    return cap\n",
    ],
)
def test_a_read_that_reaches_a_call_test_return_or_state_counts(body: str) -> None:
    tree = ast.parse(f"def f(self, limits, apply):\n{body}")
    assert "limits.pids" in fields_lint.fields_read(tree)


def test_a_field_with_only_dead_reads_fails_naming_them(tmp_path: Path) -> None:
    dead = READS_ALL.replace("limits.mem_bytes, ", "").replace(
        "    limits = policy.limits\n",
        "    limits = policy.limits\n    _unused = limits.mem_bytes\n",
    )
    source = fields_lint.TierSource("t2-linux", caps(), [tier_dir(tmp_path, dead)])
    verdict = fields_lint.check_tier(source, FIELDS)
    assert len(verdict.problems) == 1
    assert "limits.mem_bytes" in verdict.problems[0]
    assert "only dead reads, in jail.py" in verdict.problems[0]
