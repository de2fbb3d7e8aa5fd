"""panday_tier_macos: T2 on macOS through sandbox-exec and a generated Seatbelt profile.

The profile generator and the sandbox are imported lazily (PEP 562 `__getattr__`), so asking
what the tier declares does not pay for asyncio and subprocess.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_tier_macos.capabilities import (
    declared_capabilities,
    host_capabilities,
    unavailable_reason,
)

if TYPE_CHECKING:
    from panday_tier_macos.profile import ProxyEndpoint, SeatbeltProfile
    from panday_tier_macos.sandbox import T2MacosSandbox

_LAZY = {
    "ProxyEndpoint": "panday_tier_macos.profile",
    "SeatbeltProfile": "panday_tier_macos.profile",
    "T2MacosSandbox": "panday_tier_macos.sandbox",
}

__all__ = [
    "ProxyEndpoint",
    "SeatbeltProfile",
    "T2MacosSandbox",
    "declared_capabilities",
    "host_capabilities",
    "unavailable_reason",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'panday_tier_macos' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib  # noqa: PLC0415 - part of the lazy-import mechanism

    value: object = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
