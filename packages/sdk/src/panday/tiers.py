"""Which tiers exist, which one this host uses for commands, and what each declares.

Tiers are imported only when asked for, so the CLI pays for the one it uses.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from panday_core.capabilities import TierCapabilities
    from panday_core.policy import SandboxPolicy

COMMAND_TIERS = ("t2-linux", "t2-macos")
"""Tiers that run commands, strongest first."""
ALL_TIERS = (*COMMAND_TIERS, "t0")
"""Every tier the registry knows. T0 serves file tools in-process and never runs commands."""
AUTO = "auto"
TIER_CHOICES = (AUTO, *ALL_TIERS)


def host_command_tier() -> str | None:
    """The command tier for this OS, or None when panday has none for it."""
    if sys.platform.startswith("linux"):
        return "t2-linux"
    if sys.platform == "darwin":
        return "t2-macos"
    return None


def host_command_tiers() -> tuple[str, ...]:
    """The tiers that can run commands on this OS, strongest first (`auto` picks from these)."""
    tier = host_command_tier()
    return (tier,) if tier is not None else ()


def check_name(tier: str) -> str:
    """`tier` when it names a tier (or auto); otherwise a `ValueError` listing the choices."""
    if tier not in TIER_CHOICES:
        choices = ", ".join(TIER_CHOICES)
        raise ValueError(f"tier: {tier!r} is not a tier; choose one of {choices}")
    return tier


def choose(
    policy: SandboxPolicy,
    tier: str,
    *,
    candidates: Sequence[str] | None = None,
    capabilities: Callable[[str], TierCapabilities] | None = None,
) -> str:
    """The tier a session opens with: `tier` itself when one is named (never replaced by
    another, whatever it can or cannot do), else the strongest candidate that enforces the
    whole policy here.

    With a single candidate (every OS today) nothing is probed here: the tier's own
    `create` checks the policy against what this host can enforce, before spawning, and
    refuses by field. With several, each one's host table is checked in order; when none
    enforces everything, the strongest one's refusals are raised.
    """
    if check_name(tier) != AUTO:
        return tier
    found = tuple(candidates) if candidates is not None else host_command_tiers()
    if not found:
        from panday_core.errors import TierUnavailable  # noqa: PLC0415 - error path

        raise TierUnavailable(AUTO, f"panday has no tier that runs commands on {sys.platform}")
    if len(found) == 1:
        return found[0]
    from panday_core.capabilities import check_policy  # noqa: PLC0415 - several candidates only
    from panday_core.errors import PolicyViolation  # noqa: PLC0415

    table = capabilities or host_capabilities
    first_refusals = None
    for name in found:
        refusals = check_policy(policy, table(name))
        if not refusals:
            return name
        first_refusals = first_refusals or refusals
    raise PolicyViolation(found[0], first_refusals or ())


def host_capabilities(tier: str) -> TierCapabilities:
    """The capability table of `tier` as it holds on this host (probed where it must be)."""
    if tier == "t2-linux":
        from panday_tier_linux import host_capabilities as linux  # noqa: PLC0415 - lazy

        return linux()
    if tier == "t2-macos":
        from panday_tier_macos import host_capabilities as macos  # noqa: PLC0415 - lazy

        return macos()
    if tier == "t0":
        from panday_core.t0.capabilities import (  # noqa: PLC0415 - lazy tier import
            declared_capabilities,
        )

        return declared_capabilities()  # with the resolver this host actually has
    raise KeyError(tier)


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
