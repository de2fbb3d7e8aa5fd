"""The relay's read buffers: page-aligned, and private to the process that made them.

Alignment is a performance property (the kernel's copy of received data into a buffer 16
bytes into a page cost the relay half again its CPU; `egress.buffers`), so it is asserted
on the buffer itself here and measured in `nox -s bench`. Privacy is a safety property: a
shared mapping would be shared with a forked child of the caller, relay traffic included;
it is read from the kernel's own record of the mapping.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

import pytest

from panday_core.egress import ProxyLimits
from panday_core.egress.buffers import BufferPool


def _address(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def test_large_read_buffers_start_on_a_page() -> None:
    pool = BufferPool(ProxyLimits())
    # Control: a bytearray of the same size does not (malloc puts it past a header), so
    # the check below can see the difference.
    plain = memoryview(bytearray(pool.large))
    assert _address(plain) % mmap.PAGESIZE != 0, "inconclusive: malloc gave a page-aligned block"
    taken = [pool.get() for _ in range(3)]
    for buf in taken:
        assert len(buf) == pool.large
        assert _address(buf) % mmap.PAGESIZE == 0
        pool.put(buf)
    assert _address(pool.get()) % mmap.PAGESIZE == 0, "a reused buffer is one of the same"


def _mapping_flags(address: int) -> str:
    """The permission column of /proc/self/maps for the mapping holding `address`
    (``rw-p``: private, ``rw-s``: shared)."""
    with open("/proc/self/maps", encoding="ascii") as fh:  # noqa: PTH123 - Linux's own view
        for line in fh:
            span, perms = line.split()[:2]
            low, high = (int(x, 16) for x in span.split("-"))
            if low <= address < high:
                return perms
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc/self/maps")
def test_a_read_buffer_is_a_private_mapping() -> None:
    """Not shared with a forked child of the caller (relay traffic included): the kernel's
    own record of the mapping says private."""
    # Control: a shared anonymous map is shown as shared, so the check below can tell.
    shared = memoryview(mmap.mmap(-1, mmap.PAGESIZE))
    assert _mapping_flags(_address(shared)).endswith("s"), "inconclusive: no shared mark"
    buf = BufferPool(ProxyLimits()).get()
    assert _mapping_flags(_address(buf)) == "rw-p"
