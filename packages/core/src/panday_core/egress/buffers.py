"""`BufferPool`: the relay's read buffers, large ones within a byte budget, small beyond it.

Large buffers are handed out only while their total stays within
`ProxyLimits.buffer_budget_bytes`; beyond it reads use small ones, so a thousand clients
that stop reading cost a few MiB, not a GiB. Free buffers are kept for reuse (glibc's
malloc churn on large buffers halves a relay's throughput).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from panday_core.egress.limits import ProxyLimits

SMALL_KEEP = 256
"""Free small read buffers kept for reuse."""


class BufferPool:
    """Read buffers: large ones within a byte budget (reused), small ones beyond it."""

    __slots__ = ("_free", "_keep", "_small_free", "budget", "large", "out", "small")

    def __init__(self, limits: ProxyLimits) -> None:
        self.large = limits.chunk_bytes
        self.small = min(limits.small_chunk_bytes, limits.chunk_bytes)
        self.budget = limits.buffer_budget_bytes
        self._keep = limits.pooled_buffers
        self._free: list[bytearray] = []
        self._small_free: list[bytearray] = []
        self.out = 0
        """Bytes of large buffers handed out and not yet returned."""

    def get(self) -> bytearray:
        if self.out + self.large <= self.budget:
            self.out += self.large
            return self._free.pop() if self._free else bytearray(self.large)
        return self._small_free.pop() if self._small_free else bytearray(self.small)

    def put(self, buf: bytearray) -> None:
        """Return `buf` for reuse (nothing may refer to it any more)."""
        if len(buf) == self.large:
            self.out -= self.large
            if len(self._free) < self._keep:
                self._free.append(buf)
        elif len(self._small_free) < SMALL_KEEP:
            self._small_free.append(buf)

    def forget(self, buf: bytearray) -> None:
        """`buf` may still be referenced (by a closing transport): count it returned, but
        never reuse it."""
        if len(buf) == self.large:
            self.out -= self.large
