"""`auto` on Linux chooses between T2 and T1 and never falls back silently.

The strongest tier that runs here and enforces the whole policy is chosen; a policy only
a tier that cannot run here would enforce is refused, naming the field, the reason, and
why that stronger tier cannot run. Availability is injected (this host runs both tiers);
the tables are the declared ones.
"""

from __future__ import annotations

import pytest

from panday import tiers
from panday_core.errors import PolicyViolation, TierUnavailable
from panday_core.policy import Limits, SandboxPolicy

BOTH = ("t2-linux", "t1-linux")
NO_USERNS = "bwrap: No permissions to create new namespace (test)"


def _hosts(monkeypatch: pytest.MonkeyPatch, down: dict[str, str]) -> None:
    monkeypatch.setattr(tiers, "unavailable_reason", down.get)


def test_t2_is_chosen_where_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    _hosts(monkeypatch, {})
    chosen = tiers.choose(SandboxPolicy(), "auto", candidates=BOTH, capabilities=tiers.declared)
    assert chosen == "t2-linux"


def test_t1_is_chosen_where_t2_cannot_run_and_t1_enforces_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hosts(monkeypatch, {"t2-linux": NO_USERNS})
    chosen = tiers.choose(SandboxPolicy(), "auto", candidates=BOTH, capabilities=tiers.declared)
    assert chosen == "t1-linux"


def test_a_policy_only_t2_enforces_is_refused_with_both_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hosts(monkeypatch, {"t2-linux": NO_USERNS})
    policy = SandboxPolicy(limits=Limits(mem_bytes=1 << 28))
    with pytest.raises(PolicyViolation) as info:
        tiers.choose(policy, "auto", candidates=BOTH, capabilities=tiers.declared)
    assert info.value.tier == "t1-linux"
    (refusal,) = info.value.violations
    assert refusal.field == "limits.mem_bytes"
    assert "cgroup" in refusal.reason  # T1's own reason
    assert f"t2-linux cannot run here: {NO_USERNS}" in refusal.reason  # and T2's


def test_where_no_tier_runs_every_reason_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    _hosts(monkeypatch, {"t2-linux": NO_USERNS, "t1-linux": "no Landlock (test)"})
    with pytest.raises(TierUnavailable) as info:
        tiers.choose(SandboxPolicy(), "auto", candidates=BOTH, capabilities=tiers.declared)
    assert info.value.tier == "t2-linux"
    assert NO_USERNS in info.value.reason
    assert "no Landlock (test)" in info.value.reason


def test_a_named_tier_is_never_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    _hosts(monkeypatch, {"t2-linux": NO_USERNS})
    assert tiers.choose(SandboxPolicy(), "t2-linux") == "t2-linux"
