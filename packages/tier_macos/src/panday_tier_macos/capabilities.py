"""What T2 macOS enforces, as data (rendered by `doctor`, the docs and the run report)."""

from __future__ import annotations

import sys

from panday_core.capabilities import NO_EGRESS_PROXY, FieldSupport, Support, TierCapabilities
from panday_core.types import SandboxTier

NOT_BUILT = "the T2 macOS jail is not built yet"


def declared_capabilities() -> TierCapabilities:
    """The tier's declared table. Until the jail exists, only the allowlist is declared, and
    it is refused; every other field is undeclared and therefore refused as well."""
    return TierCapabilities(
        tier=SandboxTier.T2_MACOS,
        fields=(
            FieldSupport(
                field="net.allow",
                support=Support.NOT_ENFORCED,
                mechanism="none",
                note=NO_EGRESS_PROXY,
            ),
        ),
    )


def unavailable_reason() -> str | None:
    if sys.platform != "darwin":
        return f"T2 macOS needs macOS; this host is {sys.platform}"
    return NOT_BUILT
