"""panday_tier_linux: T2 on Linux through bubblewrap, seccomp and cgroups."""

from panday_tier_linux.capabilities import declared_capabilities, unavailable_reason

__all__ = ["declared_capabilities", "unavailable_reason"]
