"""Capabilities as data: check_policy refuses every requested field a tier cannot enforce."""

from __future__ import annotations

import pytest

from panday_core.capabilities import (
    NO_EGRESS_PROXY,
    FieldSupport,
    Support,
    TierCapabilities,
    check_policy,
    is_requested,
    policy_fields,
    require_enforceable,
)
from panday_core.errors import PolicyViolation
from panday_core.policy import SandboxPolicy, policy_from_dict
from panday_core.types import SandboxTier

ALL_FIELDS = policy_fields()


def table(**overrides: Support) -> TierCapabilities:
    fields: list[FieldSupport] = []
    for name in ALL_FIELDS:
        support = overrides.get(name.replace(".", "__"), Support.STRICT)
        note = NO_EGRESS_PROXY if name == "net.allow" else "cannot here"
        fields.append(FieldSupport(field=name, support=support, mechanism="test", note=note))
    return TierCapabilities(tier=SandboxTier.T2_LINUX, fields=tuple(fields))


def test_policy_fields_are_derived_from_the_model() -> None:
    assert "net.allow" in ALL_FIELDS
    assert "limits.mem_bytes" in ALL_FIELDS
    assert "fs.workspace" in ALL_FIELDS
    assert "env" in ALL_FIELDS
    assert len(ALL_FIELDS) == len(set(ALL_FIELDS))


def test_default_policy_is_enforceable_by_a_tier_that_enforces_everything() -> None:
    policy = SandboxPolicy().with_workspace("/w")
    assert check_policy(policy, table()) == ()
    require_enforceable(policy, table())


def test_a_named_host_is_refused_with_field_hosts_and_reason() -> None:
    policy = policy_from_dict({"net": {"allow": ["api.github.com"]}}).with_workspace("/w")
    caps = table(net__allow=Support.NOT_ENFORCED)
    with pytest.raises(PolicyViolation) as info:
        require_enforceable(policy, caps)
    error = info.value
    assert error.field == "net.allow"
    assert "api.github.com" in str(error)
    assert "net.allow" in str(error)
    assert "no egress proxy" in str(error)


def test_every_refused_field_is_listed() -> None:
    policy = policy_from_dict(
        {"net": {"allow": ["a.com"]}, "limits": {"pids": 5, "disk_bytes": 1 << 20}}
    ).with_workspace("/w")
    caps = table(
        net__allow=Support.NOT_ENFORCED,
        limits__pids=Support.NOT_ENFORCED,
        limits__disk_bytes=Support.NOT_ENFORCED,
    )
    with pytest.raises(PolicyViolation) as info:
        require_enforceable(policy, caps)
    assert [v.field for v in info.value.violations] == [
        "net.allow",
        "limits.pids",
        "limits.disk_bytes",
    ]


def test_silence_is_not_permission() -> None:
    policy = policy_from_dict({"limits": {"pids": 5}}).with_workspace("/w")
    caps = TierCapabilities(tier=SandboxTier.T2_LINUX, fields=())
    refused = {r.field for r in check_policy(policy, caps)}
    assert refused == {"fs.workspace", "limits.pids"}


def test_unrequested_fields_are_not_refused() -> None:
    policy = SandboxPolicy().with_workspace("/w")
    caps = table(limits__pids=Support.NOT_ENFORCED, net__allow=Support.NOT_ENFORCED)
    assert check_policy(policy, caps) == ()


def test_deny_and_ports_ask_for_nothing_without_an_allowlist() -> None:
    policy = policy_from_dict({"net": {"deny": ["x.com"], "ports": [22]}})
    assert not is_requested(policy, "net.deny")
    assert not is_requested(policy, "net.ports")
    with_allow = policy_from_dict({"net": {"allow": ["a.com"], "deny": ["x.com"]}})
    assert is_requested(with_allow, "net.deny")


def test_partial_support_is_accepted() -> None:
    policy = policy_from_dict({"fs": {"staged_ro": ["/x"]}}).with_workspace("/w")
    assert check_policy(policy, table(fs__staged_ro=Support.PARTIAL)) == ()


def test_a_not_applicable_field_is_accepted_only_at_its_default() -> None:
    caps = table(env=Support.NOT_APPLICABLE, limits__pids=Support.NOT_APPLICABLE)
    # Control: left at their defaults, n/a fields ask for nothing and pass.
    assert check_policy(SandboxPolicy().with_workspace("/w"), caps) == ()
    # Given a value, each would be a setting that does nothing: refused by name.
    policy = policy_from_dict({"env": {"A": "1"}, "limits": {"pids": 8}}).with_workspace("/w")
    refusals = check_policy(policy, caps)
    assert [r.field for r in refusals] == ["limits.pids", "env"]
    assert all("not applicable on t2-linux" in r.reason for r in refusals)
    assert refusals[0].reason.startswith("8: ")


def test_env_values_are_never_shown_in_refusals() -> None:
    policy = policy_from_dict({"env": {"TOKEN": "s3cret-value"}}).with_workspace("/w")
    refusals = check_policy(policy, table(env=Support.NOT_ENFORCED))
    assert refusals
    assert "TOKEN" in refusals[0].reason
    assert "s3cret" not in refusals[0].reason


def test_the_model_defaults_ask_nothing_and_unbounded_asks_nothing_either() -> None:
    # The finite wall clock and output defaults are in every policy, and every command
    # tier enforces them; they are not a request a tier could refuse. "unbounded" asks a
    # tier for less, never more: it is shown (Limits.unbounded), not refused.
    caps = table(
        limits__wall_clock_ms=Support.NOT_ENFORCED, limits__output_bytes=Support.NOT_ENFORCED
    )
    assert check_policy(SandboxPolicy().with_workspace("/w"), caps) == ()
    unbounded = policy_from_dict(
        {"limits": {"wall_clock_ms": "unbounded", "output_bytes": "unbounded"}}
    ).with_workspace("/w")
    assert check_policy(unbounded, caps) == ()
    # Control: a finite value other than the default is a request, and is refused here.
    asked = policy_from_dict({"limits": {"wall_clock_ms": 1000}}).with_workspace("/w")
    assert [r.field for r in check_policy(asked, caps)] == ["limits.wall_clock_ms"]
