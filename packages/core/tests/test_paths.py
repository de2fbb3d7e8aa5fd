"""The path resolver: every escape class is refused, on both backends, each with a positive
control showing the same operation succeeds on a path that stays inside."""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from panday_core import paths
from panday_core.errors import PathRefused, PolicyError
from panday_core.paths import (
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    PathResolver,
    Resolved,
    backend_description,
    c_string,
    default_backend,
    fd_path,
    open_regular_for_read,
    openat2_available,
    read_bytes,
    replace_file,
    walk_tree,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from panday_core.paths import Backend

SECRET = b"SECRET-outside-the-workspace"
INSIDE = b"inside content"
LINUX = sys.platform.startswith("linux")

# Both backends run everywhere they exist; on Linux the walk is forced so the fallback that
# macOS (and old kernels) rely on is tested here too.
BACKENDS: list[Backend] = ["walk"]
if LINUX:
    BACKENDS.insert(0, "openat2")


def test_openat2_is_present_on_linux() -> None:
    """The host's own mechanism must be there: a missing openat2 fails loudly, not skips."""
    if not LINUX:
        pytest.skip("openat2 is Linux-only; this host uses the walk (tested below)")
    assert openat2_available(), "this Linux kernel (or a seccomp filter) hides openat2"


class Tree:
    """tmp/outside/{secret.txt, dir/secret2.txt} and tmp/ws/{inside.txt, sub/inner.txt}."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.outside = base / "outside"
        self.ws = base / "ws"
        (self.outside / "dir").mkdir(parents=True)
        (self.ws / "sub").mkdir(parents=True)
        (self.outside / "secret.txt").write_bytes(SECRET)
        (self.outside / "dir" / "secret2.txt").write_bytes(SECRET)
        (self.ws / "inside.txt").write_bytes(INSIDE)
        (self.ws / "sub" / "inner.txt").write_bytes(INSIDE)

    def link(self, name: str, target: str) -> None:
        (self.ws / name).symlink_to(target)

    def outside_state(self) -> dict[str, bytes | None]:
        state: dict[str, bytes | None] = {}
        for path in sorted(self.outside.rglob("*")):
            state[str(path)] = None if path.is_dir() else path.read_bytes()
        return state


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


@pytest.fixture(params=BACKENDS)
def resolver(request: pytest.FixtureRequest, tree: Tree) -> Iterator[PathResolver]:
    backend: Backend = request.param
    with PathResolver(str(tree.ws), backend=backend) as r:
        assert r.backend == backend
        yield r


def read(r: PathResolver, path: str) -> bytes:
    fd, _st = open_regular_for_read(r, r.resolve(path))
    try:
        return read_bytes(fd, 1 << 20)
    finally:
        os.close(fd)


def write(r: PathResolver, path: str, data: bytes = b"written") -> None:
    replace_file(r, r.resolve(path), data)


def control(what: str, op: Callable[[], object]) -> None:
    """A positive control: the operation must succeed, or the test proves nothing."""
    try:
        op()
    except Exception as exc:  # noqa: BLE001 - any failure makes the test inconclusive
        pytest.fail(f"inconclusive: control failed ({what}): {type(exc).__name__}: {exc}")


def outside_is_readable(tree: Tree) -> None:
    """Without the resolver, the outside secret is right there: the refusals are the guard."""
    control("read the outside file directly", (tree.outside / "secret.txt").read_bytes)


# ------------------------------------------------------------------ escape classes


# (setup, escaping user path, inside user path of the same shape)
Case = tuple[Callable[[Tree], None], Callable[[Tree], str], Callable[[Tree], str]]


def _none(_t: Tree) -> None:
    return None


def _links(**links: str) -> Callable[[Tree], None]:
    def setup(t: Tree) -> None:
        for name, target in links.items():
            t.link(name, target.replace("@OUT", str(t.outside)).replace("@WS", str(t.ws)))

    return setup


def _hardlink(t: Tree) -> None:
    os.link(t.outside / "secret.txt", t.ws / "hard.txt")


READ_CASES: dict[str, Case] = {
    "dotdot": (_none, lambda _t: "../outside/secret.txt", lambda _t: "sub/../inside.txt"),
    "absolute-elsewhere": (
        _none,
        lambda t: str(t.outside / "secret.txt"),
        lambda t: str(t.ws / "inside.txt"),
    ),
    "symlink-file-absolute": (
        _links(l_abs="@OUT/secret.txt", ok="inside.txt"),
        lambda _t: "l_abs",
        lambda _t: "ok",
    ),
    "symlink-file-relative": (
        _links(l_rel="../outside/secret.txt", ok="sub/inner.txt"),
        lambda _t: "l_rel",
        lambda _t: "ok",
    ),
    "symlink-dir-relative": (
        _links(d_out="../outside/dir", d_in="sub"),
        lambda _t: "d_out/secret2.txt",
        lambda _t: "d_in/inner.txt",
    ),
    "symlink-dir-absolute": (
        _links(d_out="@OUT/dir", d_in="sub"),
        lambda _t: "d_out/secret2.txt",
        lambda _t: "d_in/inner.txt",
    ),
    "symlink-chain": (
        _links(c1="c2", c2="sub/c3", k1="k2", k2="sub/k3"),
        lambda t: (t.ws / "sub" / "c3").symlink_to("../../outside/secret.txt") or "c1",
        lambda t: (t.ws / "sub" / "k3").symlink_to("inner.txt") or "k1",
    ),
    "symlink-then-dotdot": (
        _links(s="sub"),
        lambda _t: "s/../../outside/secret.txt",
        lambda _t: "s/../inside.txt",
    ),
    "hardlink-to-outside": (_hardlink, lambda _t: "hard.txt", lambda _t: "inside.txt"),
    "proc-self-root-link": (
        _links(p="/proc/self/root"),
        lambda t: "p" + str(t.outside / "secret.txt"),
        lambda _t: "inside.txt",
    ),
    "proc-self-root-path": (
        _none,
        lambda t: "/proc/self/root" + str(t.outside / "secret.txt"),
        lambda t: str(t.ws / "inside.txt"),
    ),
    "proc-fd-relative-link": (
        _links(fdl="../../../../../../../../../../proc/self/cwd"),
        lambda _t: "fdl/x",
        lambda _t: "inside.txt",
    ),
}


@pytest.mark.escape
@pytest.mark.parametrize("case", sorted(READ_CASES))
def test_read_escape_is_refused(case: str, tree: Tree, resolver: PathResolver) -> None:
    setup, bad, good = READ_CASES[case]
    setup(tree)
    good_path, bad_path = good(tree), bad(tree)
    outside_is_readable(tree)
    control(f"read {good_path!r} inside", lambda: read(resolver, good_path))
    assert read(resolver, good_path) == INSIDE
    with pytest.raises(PathRefused):
        read(resolver, bad_path)


@pytest.mark.escape
@pytest.mark.parametrize("case", sorted(set(READ_CASES) - {"hardlink-to-outside"}))
def test_write_escape_is_refused_and_outside_untouched(
    case: str, tree: Tree, resolver: PathResolver
) -> None:
    setup, bad, good = READ_CASES[case]
    setup(tree)
    good_path, bad_path = good(tree), bad(tree)
    before = tree.outside_state()
    target = posixpath.join(posixpath.dirname(good_path), "fresh.txt")
    control(f"write {target!r} inside", lambda: write(resolver, target))
    with pytest.raises(PathRefused):
        write(resolver, bad_path, b"PWNED")
    assert tree.outside_state() == before


@pytest.mark.escape
def test_write_to_hard_link_replaces_the_name_not_the_outside_file(
    tree: Tree, resolver: PathResolver
) -> None:
    _hardlink(tree)
    resolved = resolver.resolve("hard.txt")
    replace_file(resolver, resolved, b"new")
    assert (tree.ws / "hard.txt").read_bytes() == b"new"
    assert (tree.outside / "secret.txt").read_bytes() == SECRET
    assert (tree.outside / "secret.txt").stat().st_nlink == 1


@pytest.mark.escape
def test_write_through_dangling_link_does_not_create_the_outside_target(
    tree: Tree, resolver: PathResolver
) -> None:
    tree.link("dang", "../outside/created.txt")
    tree.link("dang_in", "made_inside.txt")
    control("write a new file inside", lambda: write(resolver, "brand_new.txt"))
    with pytest.raises(PathRefused):
        write(resolver, "dang")
    with pytest.raises(PathRefused):  # writes never go through links, even inside ones
        write(resolver, "dang_in")
    assert not (tree.outside / "created.txt").exists()
    assert not (tree.ws / "made_inside.txt").exists()


def test_dangling_link_reads_as_missing(tree: Tree, resolver: PathResolver) -> None:
    tree.link("dang", "nowhere.txt")
    control("read inside", lambda: read(resolver, "inside.txt"))
    with pytest.raises(FileNotFoundError):
        read(resolver, "dang")


@pytest.mark.escape
def test_symlink_loop_is_refused(tree: Tree, resolver: PathResolver) -> None:
    tree.link("loop1", "loop2")
    tree.link("loop2", "loop1")
    tree.link("self", "self/x")
    tree.link("chain", "sub/inner.txt")
    control("follow a finite chain", lambda: read(resolver, "chain"))
    for path in ("loop1", "self", "loop1/x"):
        with pytest.raises(PathRefused):
            read(resolver, path)


@pytest.mark.escape
def test_magic_link_beneath_a_staged_root_is_refused(tree: Tree) -> None:
    """/proc/<pid> as a (silly) staged root (the resolver alone; sessions refuse /proc):
    /proc/<pid>/root and /proc/<pid>/cwd are magic links that jump to the host's root;
    RESOLVE_NO_MAGICLINKS (or the walk's absolute-link rule) refuses them. (/proc/self is
    itself a link, which no root may be.)"""
    if not LINUX:
        pytest.skip("/proc magic links are Linux-only")
    me = f"/proc/{os.getpid()}"
    for backend in BACKENDS:
        with PathResolver(str(tree.ws), staged_ro=[me], backend=backend) as r:
            control("read /proc/<pid>/status", lambda r=r: read(r, f"{me}/status"))
            for path in (f"{me}/root/etc/hostname", f"{me}/cwd/inside.txt"):
                with pytest.raises(PathRefused):
                    read(r, path)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("inside.txt\x00", "NUL"),
        ("", "empty"),
        ("a/" * (MAX_PATH_BYTES // 2 + 1), "longer than"),
        ("x" * (MAX_NAME_BYTES + 1), "component longer"),
        ("\udcff\ud800", "encoded"),
    ],
)
def test_malformed_paths_are_refused(
    path: str, why: str, tree: Tree, resolver: PathResolver
) -> None:
    name = "y" * MAX_NAME_BYTES
    (tree.ws / name).write_bytes(INSIDE)
    control("read a 255-byte name", lambda: read(resolver, name))
    control("read inside.txt", lambda: read(resolver, "inside.txt"))
    with pytest.raises(PathRefused, match=why):
        resolver.resolve(path)


def test_non_regular_files_are_not_read(tree: Tree, resolver: PathResolver) -> None:
    os.mkfifo(tree.ws / "fifo")
    control("read a regular file", lambda: read(resolver, "inside.txt"))
    with pytest.raises(PathRefused, match="not a regular file"):
        read(resolver, "fifo")  # and does not hang: opened O_NONBLOCK
    with pytest.raises(PathRefused, match="directory"):
        read(resolver, "sub")


def test_staged_roots_are_read_only(tree: Tree) -> None:
    staged = tree.base / "staged"
    staged.mkdir()
    (staged / "input.txt").write_bytes(INSIDE)
    for backend in BACKENDS:
        with PathResolver(str(tree.ws), staged_ro=[str(staged)], backend=backend) as r:
            control("read staged input", lambda r=r: read(r, str(staged / "input.txt")))
            control("write the workspace", lambda r=r: write(r, "out.txt"))
            with pytest.raises(PathRefused, match="read-only staged"):
                write(r, str(staged / "input.txt"))
            assert (staged / "input.txt").read_bytes() == INSIDE
            # A relative path always means the workspace, never a staged root.
            with pytest.raises(FileNotFoundError):
                read(r, "input.txt")


def test_read_only_workspace_refuses_writes(tree: Tree) -> None:
    for backend in BACKENDS:
        with PathResolver(str(tree.ws), writable=True, backend=backend) as rw:
            control("write with rw", lambda rw=rw: write(rw, "a.txt"))
        with PathResolver(str(tree.ws), writable=False, backend=backend) as ro:
            with pytest.raises(PathRefused, match="read-only"):
                write(ro, "b.txt")
            assert not (tree.ws / "b.txt").exists()


def test_a_root_given_through_a_symlink_is_refused_naming_the_link(tree: Tree) -> None:
    """A jail can plant links in its workspace; a later session whose root followed one
    would expose what the link names. Roots are opened without following any link."""
    with PathResolver(str(tree.ws)) as r:  # control: the real path is a root
        assert read(r, "inside.txt") == INSIDE
    alias = tree.base / "alias"
    alias.symlink_to(tree.ws)
    (tree.ws / "sub").mkdir(exist_ok=True)
    for path in (alias, alias / "sub"):
        with pytest.raises(PolicyError, match=r"fs\.workspace.*symbolic link") as caught:
            PathResolver(str(path))
        assert str(tree.ws) in str(caught.value)  # the real path, to use instead
    with pytest.raises(PolicyError, match=r"fs\.staged_ro\[0\].*symbolic link"):
        PathResolver(str(tree.ws), staged_ro=[str(alias)])


def test_missing_workspace_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"fs\.workspace"):
        PathResolver(str(tmp_path / "nope"))


def test_relative_symlinks_inside_are_followed(tree: Tree, resolver: PathResolver) -> None:
    tree.link("s", "sub")
    (tree.ws / "sub" / "deeper").mkdir()
    (tree.ws / "sub" / "deeper" / "up").symlink_to("../inner.txt")
    assert read(resolver, "s/deeper/up") == INSIDE
    assert resolver.stat(resolver.resolve("s")).st_ino == (tree.ws / "sub").stat().st_ino


def test_make_parents_creates_directories_beneath_only(tree: Tree, resolver: PathResolver) -> None:
    tree.link("out", "../outside")
    replace_file(resolver, resolver.resolve("a/b/c.txt"), b"x", make_parents=True)
    assert (tree.ws / "a" / "b" / "c.txt").read_bytes() == b"x"
    before = tree.outside_state()
    with pytest.raises(PathRefused):
        replace_file(resolver, resolver.resolve("out/new/c.txt"), b"x", make_parents=True)
    assert tree.outside_state() == before


# ------------------------------------------------------------------ properties

_PIECES = st.sampled_from(["a", "b", ".", "..", "", "outside", "ws", "~", " ", "\x00", "a\\b", "é"])


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pieces=st.lists(_PIECES, max_size=12),
    absolute=st.booleans(),
    noise=st.text(max_size=20),
)
def test_arbitrary_path_strings_never_resolve_outside(
    tree: Tree, pieces: list[str], absolute: bool, noise: str
) -> None:
    with PathResolver(str(tree.ws), backend="walk") as r:
        root = r.workspace.path
        for user_path in ("/".join(pieces), noise, "/".join([*pieces, noise])):
            candidate = (root + "/" if absolute else "") + user_path
            for text in (user_path, candidate):
                try:
                    resolved = r.resolve(text)
                except PathRefused:
                    continue
                assert resolved.root is r.workspace
                assert all(p not in {"", ".", ".."} for p in resolved.parts)
                assert "\x00" not in "".join(resolved.parts)
                full = posixpath.join(root, *resolved.parts)
                assert full == root or full.startswith(root + "/")
                assert posixpath.normpath(full) == full


def test_resolved_display_is_relative_for_the_workspace(tree: Tree, resolver: PathResolver) -> None:
    resolved = resolver.resolve(str(tree.ws / "sub" / "inner.txt"))
    assert isinstance(resolved, Resolved)
    assert resolved.display == "sub/inner.txt"
    assert resolver.resolve(".").display == "."


# ------------------------------------------------------------------ link handling details


def test_a_write_goes_through_a_directory_link_in_the_middle(
    tree: Tree, resolver: PathResolver
) -> None:
    tree.link("s", "sub")
    (tree.ws / "sub" / "deeper").mkdir()
    write(resolver, "s/deeper/new.txt", b"through the link")
    assert (tree.ws / "sub" / "deeper" / "new.txt").read_bytes() == b"through the link"


def test_a_link_target_with_a_trailing_slash_is_followed(
    tree: Tree, resolver: PathResolver
) -> None:
    tree.link("slash", "sub/")
    tree.link("dotted", "./sub/.")
    assert read(resolver, "slash/inner.txt") == INSIDE
    assert read(resolver, "dotted/inner.txt") == INSIDE


def test_exactly_forty_links_are_followed_and_one_more_is_a_loop(
    tree: Tree, resolver: PathResolver
) -> None:
    # A chain l0 -> l1 -> ... -> lN -> inside.txt makes N + 1 links to follow.
    for i in range(40):
        tree.link(f"l{i}", f"l{i + 1}")
    tree.link("l40", "inside.txt")
    assert read(resolver, "l1") == INSIDE  # 40 links: the limit, still read
    with pytest.raises(PathRefused, match="more than 40 symbolic links"):
        read(resolver, "l0")  # 41


def test_a_final_no_follow_open_still_follows_links_in_the_middle(
    tree: Tree, resolver: PathResolver
) -> None:
    # O_NOFOLLOW concerns the last component only, as open(2) has it.
    tree.link("s", "sub")
    fd = resolver.open(resolver.resolve("s/inner.txt"), os.O_RDONLY | os.O_NOFOLLOW)
    try:
        assert read_bytes(fd, 100) == INSIDE
    finally:
        os.close(fd)
    tree.link("last", "inside.txt")
    with pytest.raises(PathRefused):  # ELOOP from the kernel or the walk, as a refusal
        os.close(resolver.open(resolver.resolve("last"), os.O_RDONLY | os.O_NOFOLLOW))


def test_read_bytes_reads_exactly_the_size_asked_for(resolver: PathResolver) -> None:
    fd, _st = open_regular_for_read(resolver, resolver.resolve("inside.txt"))
    try:
        assert read_bytes(fd, 1) == INSIDE[:1]
        assert read_bytes(fd, 3) == INSIDE[1:4]
    finally:
        os.close(fd)


def test_a_new_file_is_0644_and_its_directory_must_exist_unless_asked(
    tree: Tree, resolver: PathResolver
) -> None:
    old = os.umask(0o077)  # the mode is set explicitly, whatever the umask
    try:
        write(resolver, "fresh.txt")
    finally:
        os.umask(old)
    assert (tree.ws / "fresh.txt").stat().st_mode & 0o777 == 0o644
    with pytest.raises(FileNotFoundError):
        write(resolver, "no/such/dir/file.txt")
    assert not (tree.ws / "no").exists()


# ------------------------------------------------------------------ what a refusal says
# Refusals are user-facing: each names the path exactly as the caller gave it and the rule
# that refused it. The controls above show the operations succeed inside.

_NLINK_TEXT = (
    "has 2 hard links; another name for the same file may be outside the workspace, "
    "so its content is not read"
)
_PROTECTED_TEXT = (
    "is protected (test entry); a write there could plant what runs outside the sandbox "
    "later (fs.unprotect opts a default entry out)"
)


def refusal(op: Callable[[], object]) -> tuple[str, str]:
    with pytest.raises(PathRefused) as caught:
        op()
    return caught.value.path, caught.value.reason


@pytest.mark.parametrize(
    ("path", "shown", "reason"),
    [
        ("inside.txt\x00", "inside.txt\x00", "contains a NUL byte"),
        ("", "", "is empty; use '.' for the workspace itself"),
        ("\udcff\ud800", "\udcff\ud800", "cannot be encoded as a file name"),
        ("a/" * 2049, "a/" * 32 + "...", f"is longer than {MAX_PATH_BYTES} bytes"),
        ("d/" + "x" * 256, "d/" + "x" * 256, f"has a component longer than {MAX_NAME_BYTES} bytes"),
        ("../outside/x", "../outside/x", "is outside the workspace and the staged paths"),
    ],
)
def test_lexical_refusals_name_the_path_and_the_rule(
    path: str, shown: str, reason: str, resolver: PathResolver
) -> None:
    control("resolve a plain path", lambda: resolver.resolve("sub/../inside.txt"))
    assert refusal(lambda: resolver.resolve(path)) == (shown, reason)
    assert str(PathRefused(shown, reason)) == f"{shown!r}: {reason}"


def test_the_length_limit_is_inclusive(resolver: PathResolver) -> None:
    exactly = "a/" * (MAX_PATH_BYTES // 2 - 1) + "aa"
    assert len(exactly) == MAX_PATH_BYTES
    assert resolver.resolve(exactly).parts[-1] == "aa"
    with pytest.raises(PathRefused, match="is longer than"):
        resolver.resolve(exactly + "a")


def test_a_resolved_path_keeps_the_callers_spelling(tree: Tree, resolver: PathResolver) -> None:
    resolved = resolver.resolve("sub/../inside.txt")
    assert (resolved.parts, resolved.user_path) == (("inside.txt",), "sub/../inside.txt")
    # Two leading slashes (which POSIX lets a system give a meaning) still name the root.
    doubled = resolver.resolve("//" + str(tree.ws).lstrip("/") + "/inside.txt")
    assert (doubled.root, doubled.parts) == (resolver.workspace, ("inside.txt",))


@pytest.mark.parametrize("name", ["rootX", "root ", "root/"])
def test_a_root_whose_name_ends_oddly_still_holds_its_paths(tmp_path: Path, name: str) -> None:
    root = tmp_path / name.rstrip("/")
    root.mkdir()
    (root / "a.txt").write_bytes(INSIDE)
    for backend in BACKENDS:
        with PathResolver(str(tmp_path / name), backend=backend) as r:
            for path in ("a.txt", str(root / "a.txt")):
                assert r.resolve(path).parts == ("a.txt",)
                assert read(r, path) == INSIDE


def test_refusals_on_disk_name_the_path_and_the_rule(
    tree: Tree, resolver: PathResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree.link("s", "sub")
    tree.link("up", "../outside/secret.txt")
    tree.link("l_abs", str(tree.ws / "inside.txt"))
    tree.link("loop1", "loop2")
    tree.link("loop2", "loop1")
    os.mkfifo(tree.ws / "fifo")
    _hardlink(tree)
    control("read through a relative link", lambda: read(resolver, "s/inner.txt"))
    escape = "resolves outside its root (through '..' or a symbolic link)"
    assert refusal(lambda: read(resolver, "s/../up")) == ("s/../up", escape)
    absolute = (
        "a symbolic link on the way points to an absolute path; only relative links that "
        "stay beneath the root are followed"
    )
    # The kernel reports an absolute link under RESOLVE_BENEATH as an escape (EXDEV); the
    # walk sees the link itself and says so.
    assert refusal(lambda: read(resolver, "l_abs")) == (
        "l_abs",
        escape if resolver.backend == "openat2" else absolute,
    )
    loop = "more than 40 symbolic links (a loop?), or a /proc magic link"
    assert refusal(lambda: read(resolver, "loop1")) == ("loop1", loop)
    assert refusal(lambda: read(resolver, "./fifo")) == (
        "./fifo",
        "is not a regular file; only regular files are read",
    )
    assert refusal(lambda: read(resolver, "sub/")) == (
        "sub/",
        "is a directory; only regular files are read",
    )
    assert refusal(lambda: read(resolver, "./hard.txt")) == ("./hard.txt", _NLINK_TEXT)
    # A missing file stays an ordinary error, with its number, text and the caller's path.
    monkeypatch.chdir(tree.outside)  # the name exists here; it must not be found here
    control("secret.txt is there relative to the cwd", lambda: Path("secret.txt").stat())
    with pytest.raises(FileNotFoundError) as missing:
        read(resolver, "./secret.txt")
    assert (missing.value.errno, missing.value.strerror, missing.value.filename) == (
        errno.ENOENT,
        os.strerror(errno.ENOENT),
        "./secret.txt",
    )


def test_write_refusals_name_the_path_and_the_rule(tree: Tree, resolver: PathResolver) -> None:
    tree.link("dang", "nowhere.txt")
    control("write a new file", lambda: write(resolver, "./new.txt"))
    assert refusal(lambda: write(resolver, "./dang")) == (
        "./dang",
        "is a symbolic link; writes never go through links",
    )
    assert refusal(lambda: write(resolver, ".")) == (".", "names the root itself")
    with pytest.raises(IsADirectoryError) as isdir:
        write(resolver, "./sub")
    assert (isdir.value.errno, isdir.value.strerror, isdir.value.filename) == (
        errno.EISDIR,
        "is a directory",
        "./sub",
    )
    staged = tree.base / "staged"
    staged.mkdir()
    with PathResolver(str(tree.ws), staged_ro=[str(staged)], backend=resolver.backend) as r:
        target = str(staged / "new.txt")
        assert refusal(lambda: write(r, target)) == (
            target,
            "is in a read-only staged path; this session may not write there",
        )
    with PathResolver(str(tree.ws), writable=False, backend=resolver.backend) as ro:
        assert refusal(lambda: write(ro, "./b.txt")) == (
            "./b.txt",
            "is in read-only; this session may not write there",
        )


def test_open_with_create_makes_the_file_with_the_mode_asked(
    tree: Tree, resolver: PathResolver
) -> None:
    old = os.umask(0)
    try:
        for name, mode in (("made-default", None), ("made-640", 0o640)):
            resolved = resolver.resolve(f"sub/{name}")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            fd = (
                resolver.open(resolved, flags)
                if mode is None
                else resolver.open(resolved, flags, mode)
            )
            os.close(fd)
            got = (tree.ws / "sub" / name).stat().st_mode & 0o7777
            assert got == (0o600 if mode is None else mode), name
    finally:
        os.umask(old)


# ------------------------------------------------------------------ protected entries


def _protect(r: PathResolver, *paths: Path) -> None:
    r.protected = tuple((os.path.realpath(p), "test entry") for p in paths)


def test_protected_refusals_name_the_path_even_through_links(
    tree: Tree, resolver: PathResolver
) -> None:
    tree.link("into-sub", "sub")
    _protect(resolver, tree.ws / "sub" / "inner.txt", tree.ws / "guarded")
    control("write beside the protected entry", lambda: write(resolver, "sub/other.txt"))
    assert refusal(lambda: write(resolver, "into-sub/inner.txt")) == (
        "into-sub/inner.txt",
        _PROTECTED_TEXT,
    )
    assert (tree.ws / "sub" / "inner.txt").read_bytes() == INSIDE
    # Made on the way by make_parents: refused at the first directory that would be made.
    made = lambda: replace_file(  # noqa: E731 - one call, named for the refusal helper
        resolver, resolver.resolve("guarded/deeper/x"), b"x", make_parents=True
    )
    assert refusal(made) == ("guarded/deeper/x", _PROTECTED_TEXT)
    assert not (tree.ws / "guarded").exists()


@pytest.mark.parametrize("name", ["dirX", "dir "])
def test_a_protected_entry_in_a_directory_whose_name_ends_oddly(
    tree: Tree, resolver: PathResolver, name: str
) -> None:
    (tree.ws / name).mkdir()
    _protect(resolver, tree.ws / name / "hook")
    control("write beside it", lambda: write(resolver, f"{name}/other"))
    assert refusal(lambda: write(resolver, f"{name}/hook")) == (f"{name}/hook", _PROTECTED_TEXT)


def test_a_directory_nobody_can_name_is_refused_near_protected_paths(
    tree: Tree, resolver: PathResolver
) -> None:
    fd = os.open(tree.ws, os.O_RDONLY)
    os.close(fd)  # now a descriptor number the system cannot name
    assert fd_path(fd) is None
    control("nothing protected: nothing to ask", lambda: resolver.check_protected(fd, "x", "p"))
    _protect(resolver, tree.ws / ".git")
    assert refusal(lambda: resolver.check_protected(fd, "x", "./x")) == (
        "./x",
        "cannot tell where it lies; refused near protected paths",
    )


def test_c_string_reads_up_to_the_first_nul_keeping_undecodable_bytes() -> None:
    assert c_string(b"/a b/c\0rest\0" + b"\0" * 8) == "/a b/c"
    assert c_string(b"/caf\xe9\0\0") == "/caf\udce9"
    assert c_string(b"/no-terminator") == "/no-terminator"


# ------------------------------------------------------------------ roots and backends


def test_a_root_that_is_not_a_directory_is_refused_naming_the_field(tree: Tree) -> None:
    path = str(tree.ws / "inside.txt")
    control("the workspace itself is a root", lambda: PathResolver(str(tree.ws)).close())
    with pytest.raises(PolicyError) as caught:
        PathResolver(path)
    assert (caught.value.field, caught.value.reason) == (
        "fs.workspace",
        f"{path!r} is not a directory",
    )
    with pytest.raises(PolicyError) as staged:
        PathResolver(str(tree.ws), staged_ro=[str(tree.ws / "sub"), path])
    assert (staged.value.field, staged.value.reason) == (
        "fs.staged_ro[1]",
        f"{path!r} is not a directory",
    )
    with pytest.raises(PolicyError) as missing:
        PathResolver(str(tree.base / "nope"))
    assert missing.value.field == "fs.workspace"


def test_backend_names_and_descriptions() -> None:
    assert default_backend() == ("openat2" if LINUX else "walk")
    assert backend_description("openat2") == (
        "openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) on a descriptor held on the root"
    )
    assert backend_description("walk") == (
        "component-by-component walk with O_NOFOLLOW directory descriptors held on the root"
    )


def test_a_host_without_openat2_walks_and_refuses_openat2_by_name(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a host whose probe failed (old kernel, a seccomp filter) is left with."""
    monkeypatch.setattr(paths, "_openat2_probed", True)
    monkeypatch.setattr(paths, "_openat2", None)
    assert not openat2_available()
    assert default_backend() == "walk"
    with PathResolver(str(tree.ws)) as r:  # control: the walk serves
        assert (r.backend, read(r, "inside.txt")) == ("walk", INSIDE)
    with PathResolver(str(tree.ws), backend="walk") as r:
        assert read(r, "inside.txt") == INSIDE
    with pytest.raises(PolicyError) as caught:
        PathResolver(str(tree.ws), backend="openat2")
    assert (caught.value.field, str(caught.value)) == (
        "",
        "openat2 was asked for but this host does not offer it",
    )


def test_a_host_other_than_linux_never_probes_for_openat2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "_LINUX", False)
    monkeypatch.setattr(paths, "_openat2_probed", False)
    monkeypatch.setattr(paths, "_openat2", None)
    assert not openat2_available()
    assert paths._openat2 is None  # pyright: ignore[reportPrivateUsage] - nothing was bound
    assert default_backend() == "walk"


def test_the_openat2_probe_once_per_process(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe and the binding it makes, run afresh (the module caches the first result)."""
    if not LINUX:
        pytest.skip("openat2 is Linux-only; this host uses the walk (tested above)")
    monkeypatch.setattr(paths, "_openat2_probed", False)
    monkeypatch.setattr(paths, "_openat2", None)
    assert openat2_available()
    made = paths._openat2  # pyright: ignore[reportPrivateUsage] - the cache under test
    assert made is not None
    assert openat2_available()
    assert paths._openat2 is made  # pyright: ignore[reportPrivateUsage] - probed once only
    with PathResolver(str(tree.ws), backend="openat2") as r:
        assert read(r, "inside.txt") == INSIDE
        with pytest.raises(FileNotFoundError) as missing:
            read(r, "sub/nope")
        assert (missing.value.errno, missing.value.strerror) == (
            errno.ENOENT,
            os.strerror(errno.ENOENT),
        )
        tree.link("up", "../outside/secret.txt")
        assert refusal(lambda: read(r, "up")) == (
            "up",
            "resolves outside its root (through '..' or a symbolic link)",
        )


# ------------------------------------------------------------------ tree walks


def test_walk_tree_lists_kinds_and_stops_at_its_depth(tree: Tree, resolver: PathResolver) -> None:
    os.mkfifo(tree.ws / "fifo")
    tree.link("s", "sub")
    kinds = {e.rel: e.kind for e in walk_tree(resolver, resolver.resolve("."))}
    assert {k: kinds[k] for k in ("fifo", "s", "sub", "sub/inner.txt")} == {
        "fifo": "other",
        "s": "symlink",
        "sub": "dir",
        "sub/inner.txt": "file",
    }
    deep = tree.ws / "deep"
    (deep / "/".join(["d"] * 70)).mkdir(parents=True)
    # The top's entries and 64 levels beneath them: the deepest listed is 65 names down.
    depths = [e.rel.count("/") for e in walk_tree(resolver, resolver.resolve("deep"))]
    assert max(depths) == 65
    assert len(depths) == 65
    assert [e.rel for e in walk_tree(resolver, resolver.resolve("deep"), max_depth=1)] == [
        "deep/d",
        "deep/d/d",
    ]


@pytest.mark.parametrize("name", ["stagedX", "staged "])
def test_walk_tree_names_a_staged_roots_entries_absolutely(tree: Tree, name: str) -> None:
    staged = tree.base / name
    (staged / "in").mkdir(parents=True)
    (staged / "in" / "f.txt").write_bytes(INSIDE)
    for backend in BACKENDS:
        with PathResolver(str(tree.ws), staged_ro=[str(staged)], backend=backend) as r:
            rels = [e.rel for e in walk_tree(r, r.resolve(str(staged)))]
            assert rels == [f"{staged}/in", f"{staged}/in/f.txt"]


# ------------------------------------------------------------------ smaller pieces


def test_lstat_names_the_entry_itself_and_makes_nothing(tree: Tree, resolver: PathResolver) -> None:
    tree.link("s", "sub")
    assert stat.S_ISLNK(resolver.lstat(resolver.resolve("s")).st_mode)
    assert stat.S_ISDIR(resolver.stat(resolver.resolve("s")).st_mode)  # control: stat follows
    assert resolver.lstat(resolver.resolve(".")).st_ino == tree.ws.stat().st_ino
    for path in ("sub/nope", "nodir/x"):
        with pytest.raises(FileNotFoundError) as missing:
            resolver.lstat(resolver.resolve(path))
        assert (missing.value.errno, missing.value.filename) == (errno.ENOENT, path)
    assert not (tree.ws / "nodir").exists()


def test_a_child_and_the_reprs(tree: Tree, resolver: PathResolver) -> None:
    child = resolver.resolve("./sub").child("inner.txt")
    assert (child.root, child.parts, child.user_path) == (
        resolver.workspace,
        ("sub", "inner.txt"),
        "./sub",
    )
    assert repr(child) == f"Resolved({str(tree.ws)!r}, 'sub/inner.txt')"
    assert repr(resolver.workspace) == f"Root({str(tree.ws)!r}, kind='workspace', writable=True)"


def test_a_missing_directory_is_named_by_the_callers_path_and_made_0755_only_when_asked(
    tree: Tree, resolver: PathResolver
) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        write(resolver, "./no/such/file.txt")
    assert (missing.value.errno, missing.value.filename) == (errno.ENOENT, "./no/such/file.txt")
    old = os.umask(0)
    try:
        replace_file(resolver, resolver.resolve("made/deeper/f"), b"x", make_parents=True)
    finally:
        os.umask(old)
    for made in (tree.ws / "made", tree.ws / "made" / "deeper"):
        assert made.stat().st_mode & 0o7777 == 0o755


def test_the_longest_root_wins_whichever_is_nested(tree: Tree) -> None:
    sub = tree.ws / "sub"
    for backend in BACKENDS:
        # A staged root inside the workspace: paths beneath it are the staged root's.
        with PathResolver(str(tree.ws), staged_ro=[str(sub)], backend=backend) as r:
            assert r.resolve(str(sub / "inner.txt")).root.kind == "staged"
            assert r.resolve(str(tree.ws / "inside.txt")).root is r.workspace
            with pytest.raises(PathRefused, match="read-only staged"):
                write(r, str(sub / "inner.txt"))
        # The workspace inside a staged root: paths beneath it are the workspace's.
        with PathResolver(str(tree.ws), staged_ro=[str(tree.base)], backend=backend) as r:
            assert r.resolve(str(tree.ws / "inside.txt")).root is r.workspace
            assert r.resolve(str(tree.outside / "secret.txt")).root.kind == "staged"
            write(r, str(tree.ws / "written.txt"))
    assert (sub / "inner.txt").read_bytes() == INSIDE


def test_the_root_itself_opens_with_the_flags_asked(resolver: PathResolver) -> None:
    os.close(resolver.open(resolver.resolve("."), os.O_RDONLY | os.O_DIRECTORY))  # control
    with pytest.raises(IsADirectoryError) as caught:
        os.close(resolver.open(resolver.resolve("."), os.O_WRONLY))
    assert caught.value.filename == "."


def test_a_longest_name_of_multibyte_characters_is_written(
    tree: Tree, resolver: PathResolver
) -> None:
    """The temporary file beside the target must fit NAME_MAX too (it once was cut to 200
    characters, which is up to 800 bytes)."""
    name = "\u00e9" * (MAX_NAME_BYTES // 2)  # 254 bytes in UTF-8
    assert len(os.fsencode(name)) == MAX_NAME_BYTES - 1
    control("the name itself is valid", lambda: (tree.ws / name).write_bytes(b"old"))
    write(resolver, name, b"new")
    assert (tree.ws / name).read_bytes() == b"new"
    assert sorted(p.name for p in tree.ws.iterdir()) == sorted([name, "inside.txt", "sub"])
