"""plugin.toml: round trips, every rejection class, the policy it implies, the consent text."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from panday_core.capabilities import (
    NO_EGRESS_PROXY,
    FieldSupport,
    Support,
    TierCapabilities,
    policy_fields,
    require_enforceable,
)
from panday_core.errors import PolicyError, PolicyViolation
from panday_core.manifest import (
    Capabilities,
    PluginManifest,
    load_manifest,
    manifest_from_dict,
    manifest_from_toml,
    manifest_to_dict,
)
from panday_core.schema import public_models, rendered_schemas
from panday_core.t0 import declared_capabilities as t0_caps
from panday_core.types import SandboxTier

REPO = Path(__file__).resolve().parents[3]

FULL = """
name = "gh-helper"
version = "1.2.0+local"
description = "Triage GitHub issues.\\nSecond line."
skills = ["triage", "label"]
hooks = ["pre-commit"]
mcp_servers = ["github"]

[capabilities]
fs = "workspace-ro"
net = ["API.GitHub.com", "*.example.com", "203.0.113.7"]
secrets = ["GITHUB_TOKEN"]
"""
HOST_ENV = {"GITHUB_TOKEN": "tok-123", "AWS_SECRET_ACCESS_KEY": "never", "HOME": "/root"}


def caps(net: Support, env: Support = Support.STRICT) -> TierCapabilities:
    """A tier that enforces everything except as told."""
    rows: list[FieldSupport] = []
    for field in policy_fields():
        support = {"net.allow": net, "env": env}.get(field, Support.STRICT)
        note = NO_EGRESS_PROXY if field == "net.allow" else "no process here"
        rows.append(
            FieldSupport(field=field, support=support, mechanism=f"mech({field})", note=note)
        )
    return TierCapabilities(tier=SandboxTier.T2_LINUX, fields=tuple(rows))


# ------------------------------------------------------------------ parsing


def test_full_manifest_round_trips() -> None:
    m = manifest_from_toml(FULL)
    assert m.capabilities.net == ("api.github.com", "*.example.com", "203.0.113.7")
    again = manifest_from_dict(manifest_to_dict(m))
    assert again == m
    assert msgspec.json.decode(msgspec.json.encode(m), type=PluginManifest) == m


def test_minimal_manifest_grants_nothing() -> None:
    m = manifest_from_toml('name = "p"\nversion = "1"\n')
    assert m.capabilities == Capabilities()
    assert m.capabilities.fs == "none"
    assert m.capabilities.net == ()
    assert m.capabilities.secrets == ()


def test_toml_trap_top_level_key_after_capabilities_is_refused() -> None:
    # Control: the same key above the table is accepted.
    ok = manifest_from_toml(
        'name = "p"\nversion = "1"\ndescription = "d"\n[capabilities]\nfs = "none"\n'
    )
    assert ok.description == "d"
    with pytest.raises(PolicyError) as info:
        manifest_from_toml(
            'name = "p"\nversion = "1"\n[capabilities]\nfs = "none"\ndescription = "d"\n'
        )
    assert info.value.field == "capabilities.description"
    assert "belongs to that table" in info.value.reason


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        ('name = "p"\nversion = "1"\nnmae = "x"', "nmae", "did you mean 'name'"),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nnetwork = []',
            "capabilities.network",
            "did you mean 'net'",
        ),
        ('name = "p"\nversion = "1"\n[extra]\na = 1', "extra", "unknown key"),
        ('version = "1"', "", "name"),
        ('name = "p"\nversion = 1', "version", "a string"),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nfs = "all"',
            "capabilities.fs",
            "'workspace-ro'",
        ),
        ('name = "p"\nversion = "1"\n[capabilities]\nnet = "a.com"', "capabilities.net", "a list"),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nnet = ["https://a.com"]',
            "capabilities.net[0]",
            "URL",
        ),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nnet = ["*.com"]',
            "capabilities.net[0]",
            "single label",
        ),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nnet = ["a.com", "A.com"]',
            "capabilities.net[1]",
            "twice",
        ),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nsecrets = ["A-B"]',
            "capabilities.secrets[0]",
            "environment variable",
        ),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nsecrets = ["1A"]',
            "capabilities.secrets[0]",
            "environment variable",
        ),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nsecrets = ["A", "A"]',
            "capabilities.secrets[1]",
            "twice",
        ),
        ('name = "a/b"\nversion = "1"', "name", "path separator"),
        ('name = "a\\\\b"\nversion = "1"', "name", "path separator"),
        ('name = "a..b"\nversion = "1"', "name", "'..'"),
        ('name = ".."\nversion = "1"', "name", "'..'"),
        ('name = "a\\u0007"\nversion = "1"', "name", "control character"),
        ('name = "a\\u202eb"\nversion = "1"', "name", "control character"),
        ('name = ""\nversion = "1"', "name", "empty"),
        ('name = ".hidden"\nversion = "1"', "name", "start with a letter"),
        ('name = "caf\\u00e9"\nversion = "1"', "name", "ASCII"),
        (f'name = "{"a" * 65}"\nversion = "1"', "name", "longer than"),
        ('name = "p"\nversion = "1 0"', "version", "ASCII"),
        ('name = "p"\nversion = "1"\nskills = ["../x"]', "skills[0]", "path separator"),
        ('name = "p"\nversion = "1"\nhooks = ["a", "a"]', "hooks[1]", "twice"),
        ('name = "p"\nversion = "1"\nmcp_servers = ["a\\u0000"]', "mcp_servers[0]", "control"),
        ('name = "p"\nversion = "1"\ndescription = "x\\u001b[31m"', "description", "control"),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nfs = "none"\n[capabilities.extra]\nx = 1',
            "capabilities.extra",
            "unknown key",
        ),
        ("name = ", "", "invalid TOML"),
    ],
)
def test_rejections_name_the_field(doc: str, field: str, words: str) -> None:
    with pytest.raises(PolicyError) as info:
        manifest_from_toml(doc)
    assert info.value.field == field, str(info.value)
    assert words in str(info.value), str(info.value)


def test_load_manifest_from_file(tmp_path: Path) -> None:
    path = tmp_path / "plugin.toml"
    path.write_text(FULL)
    assert load_manifest(str(path)).name == "gh-helper"
    with pytest.raises(PolicyError, match="cannot read"):
        load_manifest(str(tmp_path / "missing.toml"))
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(PolicyError, match="UTF-8"):
        load_manifest(str(path))


_NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,20}", fullmatch=True)


@settings(max_examples=100, deadline=None)
@given(
    name=_NAME,
    skills=st.lists(_NAME, unique=True, max_size=4),
    fs=st.sampled_from(["none", "workspace-ro", "workspace-rw"]),
    net=st.lists(
        st.sampled_from(["a.com", "b.example.org", "*.c.net", "10.0.0.1", "::1"]), unique=True
    ),
    secrets=st.lists(
        st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True), unique=True, max_size=4
    ),
)
def test_round_trip_property(
    name: str, skills: list[str], fs: str, net: list[str], secrets: list[str]
) -> None:
    doc = {
        "name": name,
        "version": "1.0",
        "skills": skills,
        "capabilities": {"fs": fs, "net": net, "secrets": secrets},
    }
    m = manifest_from_dict(doc)
    assert manifest_from_dict(manifest_to_dict(m)) == m
    assert m.capabilities.net == tuple(net)


# ------------------------------------------------------------------ to_policy


def test_net_becomes_exactly_the_allowlist() -> None:
    m = manifest_from_toml(FULL)
    policy = m.to_policy("/home/u/ws", HOST_ENV)
    assert policy.net.allow == ("api.github.com", "*.example.com", "203.0.113.7")
    assert policy.net.deny == ()
    no_net = manifest_from_toml('name = "p"\nversion = "1"\n[capabilities]\nfs = "workspace-rw"\n')
    assert no_net.to_policy("/home/u/ws", HOST_ENV).net.allow == ()


def test_secrets_pass_only_the_named_values() -> None:
    policy = manifest_from_toml(FULL).to_policy("/home/u/ws", HOST_ENV)
    assert dict(policy.env) == {"GITHUB_TOKEN": "tok-123"}
    no_secrets = manifest_from_toml(
        'name = "p"\nversion = "1"\n[capabilities]\nfs = "workspace-rw"\n'
    )
    assert dict(no_secrets.to_policy("/home/u/ws", HOST_ENV).env) == {}


def test_a_missing_secret_is_refused_not_dropped() -> None:
    with pytest.raises(PolicyError) as info:
        manifest_from_toml(FULL).to_policy("/home/u/ws", {"HOME": "/root"})
    assert info.value.field == "capabilities.secrets[0]"


@pytest.mark.parametrize(("fs", "access"), [("workspace-ro", "ro"), ("workspace-rw", "rw")])
def test_fs_capability_sets_workspace_access(fs: str, access: str) -> None:
    m = manifest_from_dict({"name": "p", "version": "1", "capabilities": {"fs": fs}})
    policy = m.to_policy("/home/u/ws", {})
    assert policy.fs.workspace == "/home/u/ws"
    assert policy.fs.access == access


def test_fs_none_never_grants_the_users_workspace() -> None:
    m = manifest_from_toml('name = "p"\nversion = "1"\n')
    with pytest.raises(PolicyError, match="scratch"):
        m.to_policy("/home/u/ws", {})
    policy = m.to_policy("/home/u/ws", {}, scratch="/tmp/panday-scratch-1")
    assert policy.fs.workspace == "/tmp/panday-scratch-1"
    with pytest.raises(PolicyError, match="overlaps"):
        m.to_policy("/home/u/ws", {}, scratch="/home/u/ws/tmp")


def test_bad_workspace_is_reported_by_field() -> None:
    m = manifest_from_toml(FULL)
    with pytest.raises(PolicyError) as info:
        m.to_policy("relative/ws", HOST_ENV)
    assert info.value.field == "fs.workspace"


def test_policy_with_allowlist_is_refused_where_it_cannot_be_enforced(tmp_path: Path) -> None:
    m = manifest_from_toml(FULL)
    policy = m.to_policy(str(tmp_path), HOST_ENV)
    require_enforceable(policy, caps(net=Support.STRICT))  # control: an enforcing tier takes it
    with pytest.raises(PolicyViolation) as info:
        require_enforceable(policy, caps(net=Support.NOT_ENFORCED))
    assert info.value.field == "net.allow"


# ------------------------------------------------------------------ consent


# Words that mean nothing to the person approving, and must not reach the prompt.
_INTERNALS = ("bwrap", "bubblewrap", "relay", "seccomp", "Seatbelt", "unix socket", "mech(")


def _no_internals(text: str) -> None:
    leaked = [word for word in _INTERNALS if word in text]
    assert not leaked, f"the consent text names internals {leaked}:\n{text}"


def test_consent_shows_network_granted_only_where_enforced() -> None:
    m = manifest_from_toml(FULL)
    granted = m.consent_summary(caps(net=Support.STRICT), HOST_ENV)
    assert granted.net_granted == m.capabilities.net
    text = granted.render()
    assert (
        "  - connect to api.github.com, *.example.com, 203.0.113.7 (ports 80 and 443), "
        "and nowhere else\n" in text
    )
    assert "  - connect to any other host\n" in text
    assert "NOT granted" not in text
    _no_internals(text)

    refused = m.consent_summary(caps(net=Support.NOT_ENFORCED), HOST_ENV)
    text = refused.render()
    assert refused.net_requested == m.capabilities.net
    assert refused.net_granted == ()
    assert "Asked for, but NOT granted here:\n  - connecting to api.github.com" in text
    assert "it runs with no network at all and those connections fail" in text
    assert "  - use the network at all\n" in text  # under "where it cannot"
    assert NO_EGRESS_PROXY in text
    assert refused.runnable  # it runs, without network, as the summary says


def test_policy_for_matches_the_consent_summary(tmp_path: Path) -> None:
    m = manifest_from_toml(FULL)
    enforcing, not_enforcing = caps(net=Support.STRICT), caps(net=Support.NOT_ENFORCED)
    assert m.policy_for(enforcing, str(tmp_path), HOST_ENV).net.allow == m.capabilities.net
    degraded = m.policy_for(not_enforcing, str(tmp_path), HOST_ENV)
    assert degraded.net.allow == ()
    require_enforceable(degraded, not_enforcing)  # what was shown is what create accepts


def test_consent_on_t0() -> None:
    m = manifest_from_toml(FULL)
    summary = m.consent_summary(t0_caps(), HOST_ENV)
    text = summary.render()
    assert summary.tier == "t0"
    assert summary.net_granted == ()
    assert summary.secrets_passed == ()
    assert "  - the values of GITHUB_TOKEN: T0 runs no process" in text
    assert "read the files in your workspace (the folder you run it in), but not change them" in (
        text
    )
    assert "It brings skills triage, label; hooks pre-commit; MCP servers github" in text
    assert text.startswith("gh-helper 1.2.0+local asks to run on this computer.\n")
    assert "  Triage GitHub issues.\n  Second line.\n" in text
    assert summary.runnable
    _no_internals(text)


def test_consent_says_when_a_tier_cannot_run_the_plugin() -> None:
    m = manifest_from_toml(FULL)
    bare = TierCapabilities(tier=SandboxTier.T2_MACOS, fields=())
    summary = m.consent_summary(bare, HOST_ENV)
    assert not summary.runnable
    assert "panday cannot run it here; t2-macos cannot enforce what it needs:" in summary.render()
    assert "/panday-workspace" not in summary.render()  # placeholders are never shown


def test_consent_secrets_where_env_is_enforced() -> None:
    m = manifest_from_toml(FULL)
    summary = m.consent_summary(caps(net=Support.STRICT), HOST_ENV)
    assert summary.secrets_passed == ("GITHUB_TOKEN",)
    text = summary.render()
    assert "tok-123" not in text
    assert "  - see the value of GITHUB_TOKEN from your environment\n" in text
    assert "  - see anything else from your environment\n" in text
    assert summary.runnable


def test_consent_names_a_secret_that_is_not_set() -> None:
    # Control: with the variable set, nothing is said about it and the plugin can run.
    m = manifest_from_toml(FULL)
    assert m.consent_summary(caps(net=Support.STRICT), HOST_ENV).secrets_missing == ()
    summary = m.consent_summary(caps(net=Support.STRICT), {"HOME": "/root"})
    text = summary.render()
    assert summary.secrets_missing == ("GITHUB_TOKEN",)
    assert not summary.runnable
    assert "GITHUB_TOKEN from your environment (not set in your environment now)" in text
    assert "are passed in" not in text  # never claims to pass a value that is not there
    assert text.rstrip().endswith(
        "panday will not start it until GITHUB_TOKEN is set in your environment."
    )


def test_the_sample_manifest_is_valid() -> None:
    sample = load_manifest(str(REPO / "examples" / "plugin.toml"))
    assert sample.capabilities.fs == "workspace-ro"
    assert sample.capabilities.secrets == ("GITHUB_TOKEN",)


def test_manifest_errors_name_the_full_field() -> None:
    for text, field in (
        (
            'name = "p"\nversion = "1"\n[capabilities]\nnet = ["https://x/"]\n',
            "capabilities.net[0]",
        ),
        (
            'name = "p"\nversion = "1"\n[capabilities]\nsecrets = ["A", "A"]\n',
            "capabilities.secrets[1]",
        ),
        ('name = "p/q"\nversion = "1"\n', "name"),
    ):
        with pytest.raises(PolicyError) as info:
            manifest_from_toml(text)
        assert info.value.field == field, info.value


def test_manifest_schema_is_public() -> None:
    assert public_models()["plugin"] is PluginManifest
    assert "plugin.schema.json" in rendered_schemas()
