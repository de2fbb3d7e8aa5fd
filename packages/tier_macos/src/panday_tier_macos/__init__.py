"""panday_tier_macos: T2 on macOS through sandbox-exec and a generated Seatbelt profile."""

from panday_tier_macos.capabilities import declared_capabilities, unavailable_reason

__all__ = ["declared_capabilities", "unavailable_reason"]
