"""Property: random trees of files, directories, symbolic links and hard links, built in a
temp dir beside an outside tree, never let T0 read or write outside, whatever paths and
tools are thrown at them."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from hypothesis import given, settings
from hypothesis import strategies as st

from panday_core.errors import SandboxError
from panday_core.policy import FsPolicy, SandboxPolicy
from panday_core.t0 import T0Session

if TYPE_CHECKING:
    from panday_core.paths import Backend

MARK = "OUTSIDE-MARKER-7f3a"
BACKENDS: list[Backend] = ["openat2", "walk"] if sys.platform.startswith("linux") else ["walk"]

_NAMES = ["a", "b", "c", "d"]
_SEGMENT = st.sampled_from([*_NAMES, ".", ".."])
_REL = st.lists(st.sampled_from(_NAMES), min_size=1, max_size=3).map("/".join)
# Link targets: inside, climbing out, absolute outside, magic links, self-references.
_SPECIAL = st.sampled_from(
    [
        "@UP/outside/secret",  # climbs exactly out of the workspace, whatever the depth
        "@UP/outside/sub",
        "@UP/outside",
        "@UP/../outside/secret",
        "@OUT",
        "@OUT/secret",
        "@OUT/sub",
        "/proc/self/root",
        "/proc/self/cwd",
        "../../../../../../../../proc/self/root/@OUT/secret",
        ".",
    ]
)
_TARGET = st.one_of(
    _SPECIAL,
    _SPECIAL,
    _REL,
    st.lists(_SEGMENT, min_size=1, max_size=6).map("/".join),
)
_ENTRY = st.tuples(
    st.sampled_from(["file", "dir", "symlink", "symlink", "hardlink"]), _REL, _TARGET
)
_PATH = st.one_of(
    st.lists(_SEGMENT, min_size=1, max_size=6).map("/".join),
    st.sampled_from(["@OUT/secret", "@WS/../outside/secret", "/proc/self/root/@OUT/secret"]),
)
_SUFFIX = st.sampled_from(["", "", "/secret", "/deep", "/sub/deep", "/..", "/../outside/secret"])
# An op names a random path, or (more often) one of the tree's own entries plus a suffix:
# the entries are where the links are, so that is where an escape would be.
_OP = st.tuples(
    st.sampled_from(["read", "write", "list", "glob", "grep", "stat"]),
    _PATH,
    st.integers(min_value=0, max_value=11),
    _SUFFIX,
    st.integers(min_value=0, max_value=3),
)


def _build(ws: Path, outside: Path, entries: list[tuple[str, str, str]]) -> None:
    real_ws = os.path.realpath(ws)
    for kind, rel, raw_target in entries:
        path = ws / rel
        up = "/".join([".."] * rel.count("/")) or "."
        target = raw_target.replace("@UP", up).replace("@OUT", str(outside))
        # The builder itself uses ordinary (following) calls: never build through a link the
        # tree already holds, or the *test* would write outside.
        parent = os.path.realpath(path.parent)
        if parent != real_ws and not parent.startswith(real_ws + "/"):
            continue
        if path.is_symlink():
            continue
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "file":
                path.write_text("inside\n")
            elif kind == "dir":
                path.mkdir()
            elif kind == "symlink":
                path.symlink_to(target)
            else:
                os.link(outside / "secret", path)


def _state(outside: Path) -> dict[str, str]:
    return {
        str(p): ("<dir>" if p.is_dir() else p.read_text())
        for p in sorted(outside.rglob("*"))
        if not p.is_symlink()
    }


def _run(session: T0Session, op: str, path: str) -> str:
    if op == "read":
        return session.read(path).data.decode("utf-8", "replace")
    if op == "write":
        session.write(path, b"written\n")
        return ""
    if op == "list":
        return repr(session.list(path))
    if op == "glob":
        return repr(session.glob(path.rstrip("/") + "/**"))
    if op == "grep":
        return repr(session.grep(".", path, max_matches=1000))
    return repr(session.stat(path))


@settings(max_examples=150, deadline=None)
@given(
    entries=st.lists(_ENTRY, max_size=12),
    ops=st.lists(_OP, min_size=1, max_size=12),
    backend=st.sampled_from(BACKENDS),
)
def test_random_trees_never_leak_or_touch_outside(
    entries: list[tuple[str, str, str]],
    ops: list[tuple[str, str, int, str, int]],
    backend: Backend,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        ws, outside = base / "ws", base / "outside"
        ws.mkdir()
        (outside / "sub").mkdir(parents=True)
        (outside / "secret").write_text(MARK + "\n")
        (outside / "sub" / "deep").write_text(MARK + "\n")
        # /proc/self/cwd links must land in the watched area, not in the repository.
        cwd = os.getcwd()  # noqa: PTH109 - restored below
        os.chdir(outside)
        try:
            _build(ws, outside, entries)
            before = _state(outside)
            session = T0Session(SandboxPolicy(fs=FsPolicy(workspace=str(ws))), backend=backend)
        except BaseException:
            os.chdir(cwd)
            raise
        try:
            for op, raw, index, suffix, pick in ops:
                if entries and pick:
                    raw = entries[index % len(entries)][1] + suffix  # noqa: PLW2901 - chosen path
                path = raw.replace("@OUT", str(outside)).replace("@WS", str(ws))
                try:
                    out = _run(session, op, path)
                except (SandboxError, OSError):
                    continue
                assert MARK not in out, (op, path, out)
        finally:
            session.close()
            os.chdir(cwd)
        assert _state(outside) == before
