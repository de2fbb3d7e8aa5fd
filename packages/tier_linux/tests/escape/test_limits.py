"""Escape probes: exhausting the host (processes, memory, CPU, disk, time, output).

Each probe runs its bomb twice: without the ceiling (the positive control: the same load
succeeds) and with it (it must be stopped, and reported as a typed breach, never just an
exit code). Memory, pid and CPU ceilings need a cgroup this caller can write; where there
is none (an unprivileged user on a cgroup v1 host) the probe asserts that `create` refuses
the field by name before anything runs: a refusal, counted in the suite's summary. Setting
PANDAY_ESCAPE_REQUIRE_CGROUPS=1 (the CI's root run) turns such a refusal into a failure.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypedDict, Unpack

import pytest

from panday_core.errors import PolicyViolation
from panday_core.types import LimitKind
from panday_tier_linux import cgroups
from panday_tier_linux.session import open_session


class Ceilings(TypedDict, total=False):
    cpu_ms: int
    mem_bytes: int
    pids: int


if TYPE_CHECKING:
    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)


def _cgroups_writable(field: str) -> str | None:
    return cgroups.probe({field: 1 << 24})


def _refused(esc: Escape, field: str, **limits: Unpack[Ceilings]) -> bool:
    """True (after asserting the refusal) when no cgroup can hold `field` here."""
    reason = _cgroups_writable(field)
    if reason is None:
        return False
    if os.environ.get("PANDAY_ESCAPE_REQUIRE_CGROUPS") == "1":
        pytest.fail(f"limits.{field} must be enforceable on this run, but: {reason}")
    with pytest.raises(PolicyViolation) as refused:
        open_session(esc.policy(**limits))
    assert refused.value.field == f"limits.{field}", refused.value
    assert "cgroup" in refused.value.reason
    esc.count_refusal()
    return True


FORK_BOMB = [
    "/bin/sh",
    "-c",
    "n=0; while [ $n -lt 120 ]; do sleep 3 & n=$((n+1)); done; wait; echo all-forked",
]


def test_a_fork_bomb_hits_the_pid_ceiling(esc: Escape) -> None:
    control = esc.run(FORK_BOMB)
    if b"all-forked" not in control.stdout or control.breach is not None:
        pytest.fail(f"inconclusive: control failed: {control}")
    if _refused(esc, "pids", pids=32):
        return
    result = esc.run(FORK_BOMB, pids=32)
    assert b"all-forked" not in result.stdout or result.exit_code != 0
    assert result.breach is not None, result
    assert result.breach.kind is LimitKind.PIDS
    esc.held()


MEMORY_BOMB = [
    "/usr/bin/python3",
    "-c",
    "b = bytearray(512 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('allocated')",
]


def test_a_memory_bomb_hits_the_memory_ceiling(esc: Escape) -> None:
    control = esc.run(MEMORY_BOMB)
    if b"allocated" not in control.stdout:
        pytest.fail(f"inconclusive: control failed: {control}")
    if _refused(esc, "mem_bytes", mem_bytes=64 << 20):
        return
    result = esc.run(MEMORY_BOMB, mem_bytes=64 << 20)
    assert b"allocated" not in result.stdout
    assert result.breach is not None, result
    assert result.breach.kind is LimitKind.MEMORY
    esc.held()


def test_a_cpu_burn_hits_the_cpu_ceiling(esc: Escape) -> None:
    burn = (
        "import time\nt = time.process_time()\n"
        "while time.process_time() - t < {s}: pass\nprint('burnt')"
    )
    control = esc.run(["/usr/bin/python3", "-c", burn.format(s=0.6)])
    if b"burnt" not in control.stdout:
        pytest.fail(f"inconclusive: control failed: {control}")
    if _refused(esc, "cpu_ms", cpu_ms=300):
        return
    result = esc.run(["/usr/bin/python3", "-c", burn.format(s=20)], cpu_ms=300)
    assert b"burnt" not in result.stdout
    assert result.breach is not None, result
    assert result.breach.kind is LimitKind.CPU
    esc.held()
    assert result.wall_ms < 15_000


DISK_FILL = [
    "/bin/sh",
    "-c",
    "head -c 8000000 /dev/zero > /tmp/fill && echo filled; ls -l /tmp/fill",
]


def test_filling_the_disk_hits_the_disk_ceiling(esc: Escape) -> None:
    control = esc.run(DISK_FILL, access="ro")
    if b"filled" not in control.stdout:
        pytest.fail(f"inconclusive: control failed: {control}")
    result = esc.run(DISK_FILL, access="ro", disk_bytes=1 << 20)
    assert b"filled" not in result.stdout
    assert result.breach is not None, result
    assert result.breach.kind is LimitKind.DISK
    esc.held()
    # /dev/shm is /tmp: not a second place to fill.
    shm = esc.run(
        ["/bin/sh", "-c", "head -c 8000000 /dev/zero > /dev/shm/x && echo filled"],
        access="ro",
        disk_bytes=1 << 20,
    )
    assert b"filled" not in shm.stdout
    assert shm.breach is not None
    assert shm.breach.kind is LimitKind.DISK
    for where in ("/dev/planted", "/planted"):
        other = esc.run(["/bin/sh", "-c", f"echo x > {where} && echo wrote"], access="ro")
        assert b"wrote" not in other.stdout


def test_a_disk_ceiling_with_a_writable_workspace_is_refused(esc: Escape) -> None:
    with pytest.raises(PolicyViolation) as refused:
        open_session(esc.policy(disk_bytes=1 << 20))
    assert refused.value.field == "limits.disk_bytes"
    esc.count_refusal()


def test_an_output_flood_is_cut_at_the_output_ceiling(esc: Escape) -> None:
    flood = ["/bin/sh", "-c", "head -c 50000000 /dev/zero; echo done >&2"]
    control = esc.run(flood)
    if len(control.stdout) != 50_000_000:
        pytest.fail(f"inconclusive: control failed: {len(control.stdout)} bytes")
    result = esc.run(flood, output_bytes=4096)
    assert len(result.stdout) < 4096 + 200
    assert result.truncated_stdout
    assert result.breach is not None
    assert result.breach.kind is LimitKind.OUTPUT
    esc.held()
