"""The resolve-then-open race: a directory is swapped for a symbolic link to the outside,
over and over, by another process, while paths beneath it are read and written.

Positive control: the same harness against a naive resolver (canonicalise, check the prefix,
then open the path string) must be seen escaping within the bound; if it never does, the
harness did not race and the test fails as inconclusive. Then the real resolver, on each
backend, must never return the outside content nor create anything outside, and must be seen
both succeeding and refusing (proof that the swap happened under it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING

import pytest

from panday_core.errors import PathRefused
from panday_core.paths import (
    PathResolver,
    open_regular_for_read,
    openat2_available,
    read_bytes,
    replace_file,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from panday_core.paths import Backend

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="the harness swaps with renameat2(RENAME_EXCHANGE), which is Linux-only",
)

SECRET = b"SECRET-outside"
INSIDE = b"inside"
ITERATIONS = 4000
# The control stops at its first escape; on a loaded machine that can take far more tries
# than ITERATIONS, so it is bounded by a deadline instead (and fails as inconclusive after).
CONTROL_SECONDS = 30
SWAPPER_SECONDS = 90

# Runs in its own process so the swap and the resolution truly overlap (two cores, no GIL).
# RENAME_EXCHANGE swaps the two names atomically: 'd' is always either the real directory or
# the link, never missing. Bounded by a count and a deadline, and killed by the test anyway.
_SWAPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    os.chdir(sys.argv[1])
    deadline = time.monotonic() + float(sys.argv[2])
    print("ready", flush=True)
    for i in range(50_000_000):
        if libc.renameat2(AT_FDCWD, b"d", AT_FDCWD, b"alt", RENAME_EXCHANGE) != 0:
            sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
        if i % 4096 == 0 and time.monotonic() > deadline:
            break
    """
)


class Race:
    def __init__(self, base: Path, link_target: str) -> None:
        self.ws = base / "ws"
        self.outside = base / "outside"
        (self.ws / "d").mkdir(parents=True)
        self.outside.mkdir()
        (self.ws / "d" / "f").write_bytes(INSIDE)
        (self.outside / "f").write_bytes(SECRET)
        (self.ws / "alt").symlink_to(link_target.replace("@OUT", str(self.outside)))

    def outside_names(self) -> set[str]:
        return {p.name for p in self.outside.iterdir()}


@pytest.fixture(params=["../outside", "@OUT"], ids=["relative-link", "absolute-link"])
def race(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Race]:
    r = Race(tmp_path, request.param)
    proc = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, str(r.ws), str(SWAPPER_SECONDS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            pytest.fail(
                f"inconclusive: the swapper did not start: {proc.stderr and proc.stderr.read()!r}"
            )
        time.sleep(0.01)
        yield r
        if proc.poll() is not None:
            pytest.fail(f"inconclusive: the swapper stopped early (rc {proc.returncode})")
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()


def naive_read(ws: Path, rel: str) -> bytes:
    """What the seed's docs admitted to: check the canonical path, then open the string."""
    root = os.path.realpath(ws)
    real = os.path.realpath(os.path.join(root, rel))  # noqa: PTH118 - the naive way, on purpose
    if not real.startswith(root + "/"):
        raise PathRefused(rel, "outside")
    with open(os.path.join(root, rel), "rb") as fh:  # noqa: PTH118, PTH123 - as above
        return fh.read()


def tally(op: Callable[[], bytes], *, seconds: float | None = None) -> dict[str, int]:
    """Run `op` ITERATIONS times (or, with `seconds`, until that deadline), stopping at the
    first escape."""
    seen = {"inside": 0, "escaped": 0, "refused": 0, "missing": 0}
    deadline = None if seconds is None else time.monotonic() + seconds
    for i in range(10_000_000 if deadline is not None else ITERATIONS):
        if deadline is not None and i % 256 == 0 and time.monotonic() > deadline:
            break
        try:
            data = op()
        except PathRefused:
            seen["refused"] += 1
        except OSError:  # the naive resolver's realpath itself races (EINVAL, ENOENT)
            seen["missing"] += 1
        else:
            seen["escaped" if data == SECRET else "inside"] += 1
            if data == SECRET:
                break
    return seen


@pytest.mark.escape
def test_control_naive_check_then_open_loses_the_race(race: Race) -> None:
    seen = tally(lambda: naive_read(race.ws, "d/f"), seconds=CONTROL_SECONDS)
    if seen["escaped"] == 0:
        pytest.fail(f"inconclusive: the harness never raced the naive resolver: {seen}")


def _backends() -> list[Backend]:
    return ["openat2", "walk"] if openat2_available() else ["walk"]


@pytest.mark.escape
@pytest.mark.parametrize("backend", ["openat2", "walk"])
def test_resolver_never_escapes_under_the_swap(race: Race, backend: Backend) -> None:
    if backend not in _backends():
        pytest.fail("openat2 is missing on this Linux host (see test_openat2_is_present_on_linux)")
    # Positive control, in this same run: the naive resolver escapes under this swapper.
    control = tally(lambda: naive_read(race.ws, "d/f"), seconds=CONTROL_SECONDS)
    if control["escaped"] == 0:
        pytest.fail(f"inconclusive: the harness never raced the naive resolver: {control}")

    with PathResolver(str(race.ws), backend=backend) as r:

        def read_once() -> bytes:
            fd, _st = open_regular_for_read(r, r.resolve("d/f"))
            try:
                return read_bytes(fd, 1024)
            finally:
                os.close(fd)

        seen = tally(read_once)
        # On a loaded machine the swapper may get no CPU for a whole batch (every attempt
        # then sees one state): more batches, bounded, until it has shown both states.
        deadline = time.monotonic() + CONTROL_SECONDS
        while not (seen["inside"] and seen["refused"]) and not seen["escaped"]:
            if time.monotonic() > deadline:
                break
            more = tally(read_once)
            seen = {k: seen[k] + more[k] for k in seen}
        assert seen["escaped"] == 0, seen
        if not (seen["inside"] and seen["refused"]):
            pytest.fail(f"inconclusive: the swap never showed under the resolver: {seen}")

        written = {"ok": 0, "refused": 0}
        for i in range(ITERATIONS // 4):
            try:
                replace_file(r, r.resolve(f"d/new{i}"), b"w")
                written["ok"] += 1
            except (PathRefused, FileNotFoundError, NotADirectoryError):
                written["refused"] += 1
        assert not {n for n in race.outside_names() if n.startswith("new")}, written
        assert race.outside_names() == {"f"}
        assert (race.outside / "f").read_bytes() == SECRET
