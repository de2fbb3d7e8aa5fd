"""Which tiers exist, which one this host uses for commands, and what each declares.

Tiers are imported only when asked for, so the CLI pays for the one it uses.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from panday_core.capabilities import TierCapabilities

COMMAND_TIERS = ("t2-linux", "t2-macos")
"""Tiers that run commands, strongest first."""
ALL_TIERS = (*COMMAND_TIERS, "t0")
"""Every tier the registry knows. T0 serves file tools in-process and never runs commands."""


def host_command_tier() -> str | None:
    """The command tier for this OS, or None when panday has none for it."""
    if sys.platform.startswith("linux"):
        return "t2-linux"
    if sys.platform == "darwin":
        return "t2-macos"
    return None


def declared(tier: str) -> TierCapabilities:
    """The capability table a tier declares on this host."""
    if tier == "t2-linux":
        from panday_tier_linux import declared_capabilities  # noqa: PLC0415 - lazy tier import

        return declared_capabilities()
    if tier == "t2-macos":
        from panday_tier_macos import declared_capabilities  # noqa: PLC0415 - lazy tier import

        return declared_capabilities()
    if tier == "t0":
        from panday_core.t0.capabilities import (  # noqa: PLC0415 - lazy tier import
            declared_capabilities,
        )

        # The table with the kernel's openat2 resolver; docs/tiers/t0.md states the
        # fallback walk's mechanism beside it.
        return declared_capabilities("openat2")
    raise KeyError(tier)


def unavailable_reason(tier: str) -> str | None:
    """None when `tier` can run on this host; otherwise why not, in one line."""
    if tier == "t2-linux":
        from panday_tier_linux import unavailable_reason as reason  # noqa: PLC0415 - lazy

        return reason()
    if tier == "t2-macos":
        from panday_tier_macos import unavailable_reason as reason  # noqa: PLC0415 - lazy

        return reason()
    if tier == "t0":
        return None  # in-process: runs wherever Python does
    raise KeyError(tier)
