"""T0: file tools an agent calls (read, write, list, glob, grep, stat), served in-process.

No exec and no network; the whole defence is `panday_core.paths`. What that does and does
not defend against is in docs/tiers/t0.md.
"""

from __future__ import annotations

from panday_core.t0.capabilities import T0_NO_NETWORK, declared_capabilities
from panday_core.t0.sandbox import T0Sandbox
from panday_core.t0.search import InvalidArgument
from panday_core.t0.session import (
    Entry,
    GlobResult,
    GrepMatch,
    GrepResult,
    ListResult,
    ReadResult,
    StatResult,
    T0Session,
    WriteResult,
)

__all__ = [
    "T0_NO_NETWORK",
    "Entry",
    "GlobResult",
    "GrepMatch",
    "GrepResult",
    "InvalidArgument",
    "ListResult",
    "ReadResult",
    "StatResult",
    "T0Sandbox",
    "T0Session",
    "WriteResult",
    "declared_capabilities",
]
