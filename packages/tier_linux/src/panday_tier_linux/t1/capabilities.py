"""What T1 Linux enforces on this kernel (whether it runs here at all is
`panday_tier_linux.t1.probe`'s answer, from a real session; doctor's rows are
`panday_tier_linux.t1.doctor`'s).

The table (`panday_core.declared.t1_linux`) depends on the ABI (signal scoping needs 6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from panday_core.declared.t1_linux import TIER, capabilities, declared_capabilities
from panday_tier_linux.t1.landlock import kernel_abi

if TYPE_CHECKING:
    from panday_core.capabilities import TierCapabilities

__all__ = [
    "TIER",
    "declared_capabilities",
    "host_capabilities",
    "kernel_abi",
]


def host_capabilities() -> TierCapabilities:
    """The table on this kernel (the declared one where T1 cannot run: it refuses anyway)."""
    abi = kernel_abi()
    return capabilities(abi) if isinstance(abi, int) else declared_capabilities()
