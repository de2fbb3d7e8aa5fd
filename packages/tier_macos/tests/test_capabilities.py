"""The macOS tier's declared capabilities (placeholder until the tier lands)."""

from __future__ import annotations

import sys

from panday_core.capabilities import Support
from panday_core.types import SandboxTier
from panday_tier_macos import declared_capabilities, unavailable_reason


def test_allowlist_is_refused_until_a_proxy_serves_this_tier() -> None:
    caps = declared_capabilities()
    assert caps.tier is SandboxTier.T2_MACOS
    entry = caps.for_field("net.allow")
    assert entry is not None
    assert entry.support is Support.NOT_ENFORCED


def test_unavailable_off_macos_says_why() -> None:
    reason = unavailable_reason()
    if sys.platform != "darwin":
        assert reason is not None
        assert "macOS" in reason
