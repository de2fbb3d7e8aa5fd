"""Escape probes: exhausting the host (processes, memory, CPU, disk, time, output).

Each probe runs its bomb twice: without the ceiling (the positive control: the same load
succeeds) and with it (it must be stopped, and reported as a typed breach, never just an
exit code). Memory, pid and CPU ceilings need a cgroup this caller can write; where there
is none (an unprivileged user on a cgroup v1 host) the probe asserts that `create` refuses
the field by name before anything runs: a refusal, counted in the suite's summary. Setting
PANDAY_ESCAPE_REQUIRE_CGROUPS=1 (the CI's root run) turns such a refusal into a failure.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

import pytest

from panday_core.errors import PolicyViolation
from panday_core.types import LimitKind
from panday_tier_linux import cgroups, hostguard
from panday_tier_linux.session import open_session


class Ceilings(TypedDict, total=False):
    cpu_ms: int
    mem_bytes: int
    pids: int


if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

    from panday_core.types import ExecResult


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


@pytest.mark.usefixtures("launch")
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


@pytest.mark.usefixtures("launch")
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


@pytest.mark.usefixtures("launch")
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
    control = esc.run(flood, output_bytes=64 << 20)  # a ceiling above the flood keeps it all
    if len(control.stdout) != 50_000_000:
        pytest.fail(f"inconclusive: control failed: {len(control.stdout)} bytes")
    result = esc.run(flood, output_bytes=4096)
    assert len(result.stdout) < 4096 + 200
    assert result.truncated_stdout
    assert result.breach is not None
    assert result.breach.kind is LimitKind.OUTPUT
    # A policy that says nothing about it is bounded too: the model's default, 16 MiB.
    default = esc.run(flood)
    assert (16 << 20) <= len(default.stdout) < (16 << 20) + 200
    assert default.breach is not None
    assert default.breach.kind is LimitKind.OUTPUT
    esc.held()


# ---------------------------------------------------------------------- the host's own bounds
#
# Under a policy that sets no limits.pids or limits.mem_bytes (the default policy), a bomb
# must still leave the host usable: the tier adds its own bounds (hostguard.py), cgroup
# ceilings where this caller can write a cgroup (root here), else rlimits on the jail
# (RLIMIT_NPROC, RLIMIT_AS: an unprivileged user here). Each probe watches the host while
# the bomb runs: it must still fork and allocate, and the bomb must stay within the bound.


def _tasks_of(marker: bytes) -> int:
    """Processes on the host whose command line is exactly `marker` (NUL-separated)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            count += (entry / "cmdline").read_bytes() == marker
        except OSError:
            continue
    return count


def _nproc_limit_of(marker: bytes) -> int | None:
    """The soft RLIMIT_NPROC the kernel holds for a process whose command line is `marker`
    (None: none is running, or its limit is unlimited)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes() != marker:
                continue
            limits = (entry / "limits").read_text(encoding="ascii").splitlines()
        except OSError:
            continue
        for line in limits:
            if line.startswith("Max processes"):
                soft = line.split()[2]
                return int(soft) if soft.isdigit() else None
    return None


HOLD_S = 3.0
"""How long the host watches a fork bomb held at its bound before stopping it. A bomb with
no ceiling forks hundreds of processes a second even on a loaded 2-core host, so it would
pass the bound (and fail the test) within this hold."""


class _Watch:
    """Runs `argv` in a default-policy session on a thread; samples the host meanwhile."""

    def __init__(self, esc: Escape, argv: list[str], *, seconds: float) -> None:
        self.result: ExecResult | None = None
        self.error: BaseException | None = None
        self.samples: list[tuple[bool, bool, int]] = []
        self.host_tasks: list[int] = []
        """The host's task count at each sample (the bomb's included)."""
        self.nproc: int | None = None
        """The RLIMIT_NPROC the bomb's processes carry (read once they run; None: none)."""
        self.session = esc.open()

        def work() -> None:
            try:
                self.result = self.session.run(argv, timeout_ms=int(seconds * 1000))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.error = exc

        self.thread = threading.Thread(target=work, daemon=True)

    def sample(self, marker: bytes) -> tuple[bool, bool, int]:
        forked = subprocess.run(["/bin/true"], check=False, timeout=30).returncode == 0
        try:
            block = bytearray(64 << 20)  # the host still allocates (touched: zero-filled)
            allocated = len(block) == 64 << 20
            del block
        except MemoryError:
            allocated = False
        return forked, allocated, _tasks_of(marker)

    def run(
        self, marker: bytes, *, every_s: float = 0.5, stop: Callable[[], None] | None = None
    ) -> None:
        """Samples until the command ends. With `stop`: calls it once the count has held at
        90% of the host's bound or more for `HOLD_S` (so a loaded host that forks slowly
        still reaches the bound, and an idle one is not kept waiting for the wall clock)."""
        bound = hostguard.ceilings()["pids"]
        held_since: float | None = None
        self.thread.start()
        try:
            while self.thread.is_alive():
                self.samples.append(self.sample(marker))
                self.host_tasks.append(hostguard.running_tasks())
                if self.nproc is None and self.samples[-1][2]:
                    self.nproc = _nproc_limit_of(marker)
                if stop is not None and held_since is None and self.samples[-1][2] >= bound * 0.9:
                    held_since = time.monotonic()
                if held_since is not None and time.monotonic() - held_since >= HOLD_S:
                    assert stop is not None
                    stop()
                    stop, held_since = None, None
                self.thread.join(every_s)
        finally:
            self.thread.join(180)
            self.session.close()
        if self.error is not None:
            raise self.error


BOMB_LOCKS = "/tmp/panday-escape-{kind}-bombs.lock"  # fixed names: both passes share them


@contextlib.contextmanager
def one_bomb_on_the_host(kind: str) -> Generator[None]:
    """The root and unprivileged passes run side by side (nox -s escape): each bomb may take
    one of the host's protection ceilings (half the RAM, or 4096 tasks) for itself, so two
    bombs of the same `kind` at once would measure each other. Bombs of different kinds
    may overlap: a fork bomb's few hundred MiB leave the memory bomb's host room to
    allocate, and a memory bomb's one process moves no task count. Taken read-only (flock
    needs no write access), so either pass may create the file and the other still opens
    it under fs.protected_regular."""
    lock = BOMB_LOCKS.format(kind=kind)
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            os.fchmod(fd, 0o644)
        except FileExistsError:
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _sleeper() -> str:
    """A sleep length no other process on the host uses (600 s and a random fraction), so
    the count of the bomb's processes is not moved by another test's or user's `sleep`.
    Long, so that the bomb's population only grows while it runs: with 30 s sleeps a shell
    forking slowly on a loaded host (about 50 a second at load 10) levels off where forks
    and exits balance (1,542 of 4,096), and the test's control failed under load. They
    die with the jail (asserted at the end)."""
    return f"600.{secrets.randbelow(10**6):06d}"


def test_a_fork_bomb_under_the_default_policy_leaves_the_host_usable(esc: Escape) -> None:
    bound = hostguard.ceilings()["pids"]
    # Control: this user can run more processes than the bound on this host, outside.
    outside = [subprocess.Popen(["sleep", "60"]) for _ in range(bound + 100)]
    try:
        if sum(p.poll() is None for p in outside) < bound + 100:
            pytest.fail("inconclusive: control failed: the host refused the processes")
    finally:
        for p in outside:
            p.kill()
        for p in outside:
            p.wait()
    control = esc.run(["/bin/sh", "-c", "for i in $(seq 200); do sleep 30 & done; echo made"])
    if b"made" not in control.stdout:
        pytest.fail(f"inconclusive: control failed inside: {control}")
    with one_bomb_on_the_host("fork"):
        _fork_bomb(esc, bound)


BOMB_LOOPS = 8
"""Forking loops in the fork bomb (see `_fork_bomb`)."""


def _fork_bomb(esc: Escape, bound: int) -> None:
    before = hostguard.running_tasks()
    length = _sleeper()
    sleeper = f"sleep\0{length}\0".encode()
    # The bomb forks until the bound refuses it or, once the host has watched it held at
    # the bound for HOLD_S, the test creates `stopped` (exit 7): without a ceiling it would
    # pass the bound within that hold. The wall clock is only a backstop. The bomb is
    # BOMB_LOOPS loops forking side by side, because the scheduler shares the CPU by task:
    # one loop got so small a share on a loaded host (load 15-25, right after the other
    # pass's bomb) that it reached only 995 of 4,096 in 240 s; more loops take a share that
    # grows with them, as a real bomb's does. A loop whose fork is refused ends (the shell
    # gives up); its sleepers stay, and the first shell then waits for `stopped` with
    # builtins only (it could not fork a sleep), so the host sees the bomb held at its bound.
    stopped = esc.ws / "stopped"
    loop = f"while [ ! -e {stopped} ]; do sleep {length} & done"
    hold = f"while [ ! -e {stopped} ]; do :; done"
    bomb = [
        "/bin/sh",
        "-c",
        f"for i in $(seq {BOMB_LOOPS}); do ({loop}) & done 2>/dev/null; wait; {hold}; exit 7",
    ]
    watch = _Watch(esc, bomb, seconds=240)
    watch.run(sleeper, stop=stopped.touch)
    assert watch.samples, "the bomb ended before the host could be sampled"
    assert all(forked and allocated for forked, allocated, _ in watch.samples), watch.samples
    most = max(count for _, _, count in watch.samples)
    if most > bound:
        # Only RLIMIT_NPROC lets the bomb past the bound: it counts the uid's tasks, so the
        # tier sets it to the host's task count when the jail starts plus the bound. That
        # limit is the kernel's, read from the bomb's own processes. `before`, sampled
        # earlier, is not it: in a loaded run the bomb reached 7,588 against 4,096 + 3,375
        # (the host's count had moved with the other pass's work by the jail's start).
        limit = watch.nproc
        assert limit is not None, f"{most} tasks past the bound {bound} with no RLIMIT_NPROC"
        assert most <= limit, (most, limit)
        assert limit - bound <= max([before, *watch.host_tasks]), (limit, bound, before)
    assert most >= bound // 2, f"the bomb never neared its bound ({most} of {bound})"
    result = watch.result
    assert result is not None
    # Ended by the wall clock or the pid ceiling (cgroup), or by the refused fork itself
    # (RLIMIT_NPROC: the shell gives up with an error); never by completing.
    assert result.breach is not None or result.exit_code not in {0, None}, result
    deadline = time.monotonic() + 15
    while _tasks_of(sleeper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _tasks_of(sleeper) == 0, "the bomb's processes outlived it"
    esc.held()


MEMORY_STEPS = """
import sys
chunks = []
target = int(sys.argv[1])
try:
    while sum(map(len, chunks)) < target:
        chunks.append(bytearray(128 << 20))  # zero-filled, so every page is touched
        print("held", sum(map(len, chunks)), flush=True)
except MemoryError:
    print("refused", flush=True)
    sys.exit(3)
print("allocated", flush=True)
"""


def test_a_memory_bomb_under_the_default_policy_leaves_the_host_usable(esc: Escape) -> None:
    bound = hostguard.ceilings()["mem_bytes"]
    program = ["/usr/bin/python3", "-c", MEMORY_STEPS]
    # Control: the same program allocates (and touches) a gigabyte under the default policy.
    control = esc.run([*program, str(1 << 30)])
    if b"allocated" not in control.stdout:
        pytest.fail(f"inconclusive: control failed: {control}")
    watch = _Watch(esc, [*program, str(1 << 50)], seconds=120)  # a petabyte: a bomb
    with one_bomb_on_the_host("memory"):
        watch.run(b"")
    assert all(forked and allocated for forked, allocated, _ in watch.samples), watch.samples
    result = watch.result
    assert result is not None
    held = [int(line.split()[1]) for line in result.stdout.split(b"\n") if line.startswith(b"held")]
    assert b"allocated" not in result.stdout, "the bomb got its petabyte"
    most = max(held, default=0)
    assert most <= bound, (most, bound)
    assert most >= bound * 0.7, f"the bomb never neared its bound ({most} of {bound})"
    if result.breach is not None:  # a cgroup held it: the kernel killed the tree
        assert result.breach.kind is LimitKind.MEMORY, result
        assert "the policy sets no limits.mem_bytes" in result.breach.detail
    else:  # RLIMIT_AS held it: the allocation failed inside
        assert b"refused" in result.stdout, result
    esc.held()
