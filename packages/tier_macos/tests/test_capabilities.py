"""T2 macOS capability data: every policy field is declared, and the refusals name fields."""

from __future__ import annotations

import sys

import pytest

from panday_core.capabilities import (
    Support,
    check_policy,
    policy_fields,
    require_enforceable,
)
from panday_core.declared.t2_macos import ROOT_REASON, caller_reason
from panday_core.errors import PolicyViolation
from panday_core.policy import policy_from_dict
from panday_core.types import SandboxTier
from panday_tier_macos import declared_capabilities, host_capabilities, unavailable_reason


def test_every_policy_field_is_declared_exactly_once() -> None:
    caps = declared_capabilities()
    assert caps.tier is SandboxTier.T2_MACOS
    declared = [f.field for f in caps.fields]
    assert sorted(declared) == sorted(policy_fields())
    assert len(declared) == len(set(declared))
    for entry in caps.fields:
        assert entry.mechanism
        if entry.support is not Support.STRICT:
            assert entry.note, f"{entry.field}: a gap or a refusal needs its reason"


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"limits": {"pids": 64}}, "limits.pids"),
        ({"limits": {"disk_bytes": 1 << 30}}, "limits.disk_bytes"),
        ({"limits": {"mem_bytes": 1 << 30}}, "limits.mem_bytes"),
        ({"limits": {"cpu_ms": 1000}}, "limits.cpu_ms"),
    ],
)
def test_unenforceable_fields_are_refused_by_name(doc: dict[str, object], field: str) -> None:
    policy = policy_from_dict(doc).with_workspace("/w")
    with pytest.raises(PolicyViolation) as info:
        require_enforceable(policy, declared_capabilities())
    assert info.value.field == field
    assert field in str(info.value)


def test_an_allowlist_is_enforced_by_the_proxy_and_refused_when_it_cannot_start() -> None:
    policy = policy_from_dict(
        {"net": {"allow": ["api.github.com"], "deny": ["x.github.com"], "ports": [443]}}
    ).with_workspace("/w")
    assert check_policy(policy, declared_capabilities()) == ()
    assert check_policy(policy, host_capabilities()) == ()
    for field in ("net.allow", "net.deny", "net.ports"):
        entry = declared_capabilities().for_field(field)
        assert entry is not None
        assert entry.support is Support.STRICT
        assert "egress proxy" in entry.mechanism
    refused = check_policy(policy, host_capabilities(proxy_reason="it could not start: EADDRINUSE"))
    assert [r.field for r in refused] == ["net.allow", "net.deny", "net.ports"]
    assert all("could not start: EADDRINUSE" in r.reason for r in refused)


def test_what_the_tier_enforces_is_accepted() -> None:
    policy = policy_from_dict(
        {
            "fs": {"access": "ro", "staged_ro": ["/opt/data"]},
            "limits": {"wall_clock_ms": 1000, "output_bytes": 4096},
            "env": {"LANG": "C"},
        }
    ).with_workspace("/w")
    assert check_policy(policy, declared_capabilities()) == ()


def test_reads_are_a_partial_guarantee_and_the_table_says_why() -> None:
    caps = declared_capabilities()
    reads = [g for g in caps.guarantees if "cannot be read" in g.name]
    assert len(reads) == 1
    assert reads[0].support is Support.PARTIAL
    assert "readable" in reads[0].note
    workspace = caps.for_field("fs.workspace")
    assert workspace is not None
    assert workspace.support is Support.PARTIAL


def test_host_table_never_grants_more_than_the_declared_one() -> None:
    declared = {f.field: f.support for f in declared_capabilities().fields}
    rank = [Support.NOT_ENFORCED, Support.PARTIAL, Support.STRICT]
    for table in (host_capabilities(), host_capabilities(proxy_reason="down")):
        for entry in table.fields:
            if entry.support is Support.NOT_APPLICABLE:
                continue
            assert rank.index(entry.support) <= rank.index(declared[entry.field])


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the reason given on other OSes")
def test_unavailable_off_macos_says_why() -> None:
    reason = unavailable_reason()
    assert reason is not None
    assert "macOS" in reason
    assert sys.platform in reason


def test_a_root_caller_is_refused_and_an_ordinary_one_is_not() -> None:
    """Issue 12: a root jail's files would be root's, and not every way root can leave a
    privileged file behind (a set-id mode at creation, a device node, chown) has a Seatbelt
    rule this tier can rely on; so root callers are refused, with the reason, on macOS."""
    assert caller_reason(0) == ROOT_REASON
    assert "ordinary user" in ROOT_REASON
    for euid in (1, 501, 65534):
        assert caller_reason(euid) is None


def test_the_new_fields_and_guarantees_are_declared() -> None:
    caps = declared_capabilities()
    for field in ("fs.protect", "fs.unprotect", "fs.allow_home", "allow_env_hooks"):
        entry = caps.for_field(field)
        assert entry is not None
        # a list of a home's start-up files is never complete (issue 22, case 6)
        want = Support.PARTIAL if field == "fs.allow_home" else Support.STRICT
        assert entry.support is want, field
    hooks = caps.for_field("allow_env_hooks")
    assert hooks is not None
    assert "DYLD_" in hooks.mechanism
    names = " / ".join(g.name for g in caps.guarantees)
    for words in ("runs outside it later", "later jail sees", "setuid, setgid or device", "listed"):
        assert words in names
