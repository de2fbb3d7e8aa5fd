# Over 500 lines: two resolution backends (openat2, the no-follow walk) that must agree.
"""Path resolution that a hostile path string or a hostile workspace cannot trick.

Shared by T0's file tools and by every tier's `put` / `get`. Two steps, both required:

1. **Lexical** (`PathResolver.resolve`): the user's path (relative to the workspace, or
   absolute) is refused if it holds a NUL byte or is over-long, then canonicalised
   (``.``, ``..`` and repeated slashes collapsed) *before* the root check, and must then lie
   in the workspace or a read-only staged root. The result is a root plus the components
   beneath it -- never a host path string that is later handed to ``open``.
2. **Confined open** (`PathResolver.open`): the components are opened relative to a file
   descriptor held on the root, so nothing on disk can redirect the open outside it, even if
   it changes between the check and the open:

   * Linux (5.6+): ``openat2(root_fd, rel, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)``. The
     kernel refuses any resolution that would leave ``root_fd`` (``..``, absolute symbolic
     links, relative ones climbing out) with ``EXDEV``, and every /proc magic link with
     ``ELOOP``, atomically with the open.
   * Elsewhere (macOS, old kernels, a seccomp filter that hides ``openat2``): a walk, one
     component at a time, each opened with ``O_NOFOLLOW`` relative to the directory
     descriptor of the previous one. A symbolic link met on the way is read and spliced into
     the remaining path by us; ``..`` pops our own stack of descriptors and is refused at
     the root. Every step is a single-name, no-follow lookup on a descriptor we hold, so a
     swap between steps changes which (inside) object is found, never where the walk is.

Rules both backends apply identically (the tests run every case against both):

* Relative symbolic links are followed while they stay beneath the root; an absolute
  symbolic link is refused even when it points inside (``RESOLVE_BENEATH`` semantics: its
  meaning depends on the host's root, which is exactly what the session must not depend on).
* At most 40 symbolic links per resolution (Linux's own limit); loops are refused.
* Reads refuse anything but a regular file, and a regular file with more than one hard link:
  its other name may be outside the workspace (``ln /etc/shadow ws/x``), and nothing can tell
  where. Writes never modify an existing file in place: they write a new file and rename it
  over the name (`replace_file`), so a hard link's other name keeps its old content.
* Writes refuse a final symbolic link rather than write through it, and refuse read-only
  roots (staged paths, or a workspace whose ``fs.access`` is ``ro``).

The remaining gap (documented in docs/tiers/t0.md): a directory we already hold a descriptor
for can be *moved* outside the root by a concurrent process that can write both inside and
outside the root; lookups below it then happen outside. A sandboxed process cannot write
outside its workspace, so only an unsandboxed process of the same user can do this. Mount
points inside the workspace are crossed (only root can create them).
"""

from __future__ import annotations

import errno
import os
import posixpath
import secrets
import stat
import sys
from typing import TYPE_CHECKING, Final, Literal, Self

from panday_core.errors import PathRefused, PolicyError
from panday_core.protect import RootRefused, normal_path, open_root

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from types import TracebackType

Backend = Literal["openat2", "walk"]
EntryKind = Literal["file", "dir", "symlink", "other"]

MAX_PATH_BYTES: Final = 4096
"""Longest user path accepted, in bytes (Linux's PATH_MAX)."""
MAX_NAME_BYTES: Final = 255
"""Longest single component, in bytes (NAME_MAX on Linux and macOS)."""
MAX_SYMLINKS: Final = 40
"""Symbolic links followed in one resolution before it is refused as a loop."""

_LINUX = sys.platform.startswith("linux")
_CLOEXEC = os.O_CLOEXEC
_NOFOLLOW = os.O_NOFOLLOW
# O_PATH opens a directory for lookups only (no read permission needed); macOS has none.
_DIR_LOOKUP = (getattr(os, "O_PATH", 0) or os.O_RDONLY) | os.O_DIRECTORY | _CLOEXEC
_DIR_READ = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC
# O_NONBLOCK: opening a FIFO someone left in the workspace must not hang the caller.
_FILE_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
# For fstat only: O_PATH where it exists (no permission needed, no side effects).
_META = getattr(os, "O_PATH", 0) | _CLOEXEC if _LINUX else _FILE_READ

_ESCAPE = "resolves outside its root (through '..' or a symbolic link)"
_ABS_LINK = (
    "a symbolic link on the way points to an absolute path; only relative links that "
    "stay beneath the root are followed"
)
_LOOP = f"more than {MAX_SYMLINKS} symbolic links (a loop?), or a /proc magic link"
_RETRIES = 8


# ------------------------------------------------------------------------------ openat2

_SYS_OPENAT2 = 437  # the same number on every Linux architecture (unified syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08


class _Openat2:
    """ctypes binding to openat2(2), created only when first needed (ctypes costs import
    time and the CLI rarely resolves paths)."""

    def __init__(self) -> None:
        import ctypes

        class OpenHow(ctypes.Structure):
            _fields_ = (
                ("flags", ctypes.c_uint64),
                ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64),
            )

        self._ctypes = ctypes
        self._how_type = OpenHow
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = self._libc.syscall
        self._syscall.restype = ctypes.c_long

    def __call__(self, dirfd: int, path: bytes, flags: int, mode: int) -> int:
        ctypes = self._ctypes
        how = self._how_type(flags, mode, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
        for _ in range(_RETRIES):
            fd = int(
                self._syscall(
                    ctypes.c_long(_SYS_OPENAT2),
                    ctypes.c_int(dirfd),
                    ctypes.c_char_p(path),
                    ctypes.byref(how),
                    ctypes.c_size_t(ctypes.sizeof(how)),
                )
            )
            if fd >= 0:
                return fd
            err = ctypes.get_errno()
            # EAGAIN: the kernel saw a rename race on '..' and would not vouch for the
            # result; retrying is what the man page prescribes. EINTR: a signal.
            if err not in {errno.EAGAIN, errno.EINTR}:
                raise OSError(err, os.strerror(err))
        raise OSError(errno.EAGAIN, "openat2 kept racing with renames")


_openat2: _Openat2 | None = None
_openat2_probed = False


def openat2_available() -> bool:
    """Whether this host's kernel (and any seccomp filter around us) offers openat2."""
    global _openat2, _openat2_probed  # noqa: PLW0603 - a process-wide, probe-once cache
    if _openat2_probed:
        return _openat2 is not None
    _openat2_probed = True
    if not _LINUX:
        return False
    try:
        call = _Openat2()
        fd = os.open("/", _DIR_LOOKUP)
        try:
            os.close(call(fd, b".", _DIR_LOOKUP, 0))
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        # ENOSYS (kernel < 5.6), EPERM/ENOSYS from a container's seccomp profile: the walk
        # gives the same answers, one syscall per component instead of one in all.
        return False
    _openat2 = call
    return True


def default_backend() -> Backend:
    return "openat2" if openat2_available() else "walk"


def backend_description(backend: Backend) -> str:
    """One line for capability tables and docs: what confines each open on this host."""
    if backend == "openat2":
        return "openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) on a descriptor held on the root"
    return "component-by-component walk with O_NOFOLLOW directory descriptors held on the root"


# ------------------------------------------------------------------------------ model


class Root:
    """A directory a session may reach: the workspace, or a read-only staged path."""

    __slots__ = ("fd", "kind", "path", "writable")

    def __init__(self, path: str, *, kind: Literal["workspace", "staged"], writable: bool) -> None:
        self.path = path
        self.kind = kind
        self.writable = writable
        self.fd = -1

    def __repr__(self) -> str:
        return f"Root({self.path!r}, kind={self.kind!r}, writable={self.writable})"


class Resolved:
    """A user path after the lexical step: a root and the components beneath it."""

    __slots__ = ("parts", "root", "user_path")

    def __init__(self, root: Root, parts: tuple[str, ...], user_path: str) -> None:
        self.root = root
        self.parts = parts
        self.user_path = user_path

    @property
    def rel(self) -> str:
        """The path relative to its root (``.`` for the root itself)."""
        return "/".join(self.parts) or "."

    @property
    def display(self) -> str:
        """How results name this path: relative for the workspace, absolute for staged roots
        (a relative path always means the workspace)."""
        if self.root.kind == "workspace":
            return self.rel
        return posixpath.join(self.root.path, *self.parts)

    def child(self, name: str) -> Resolved:
        return Resolved(self.root, (*self.parts, name), self.user_path)

    def __repr__(self) -> str:
        return f"Resolved({self.root.path!r}, {self.rel!r})"


def _open_root(field: str, path: str) -> tuple[str, int]:
    """The root's path and a descriptor on it, reached without following any symbolic link
    (a jail may have planted one where the policy names a root; see panday_core.protect)."""
    normal = normal_path(path)
    try:
        fd = open_root(normal)
    except RootRefused as exc:
        raise PolicyError(field, exc.reason) from None
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise PolicyError(field, f"{path!r} is not a directory")
    return normal, fd


def fd_path(fd: int) -> str | None:
    """The path a directory descriptor names now (None if the system cannot say)."""
    try:
        if _LINUX:
            return os.readlink(f"/proc/self/fd/{fd}")  # noqa: PTH115 - os terms (dir_fd calls)
        import fcntl

        raw = fcntl.fcntl(fd, getattr(fcntl, "F_GETPATH", 50), b"\0" * 1024)
        return c_string(raw)
    except OSError:
        return None


def c_string(buf: bytes) -> str:
    """The NUL-terminated path at the start of a C buffer (what F_GETPATH fills in), decoded
    as the file system's names are (undecodable bytes kept, as surrogate escapes). Apart from
    `fd_path` so that Linux, which never takes that branch, still tests it."""
    return buf.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


class PathResolver:
    """Resolves user paths against one workspace and any read-only staged roots.

    Holds a descriptor on each root for its lifetime, so renaming or replacing a root's path
    after the session opened cannot redirect it. Close it (or use it as a context manager).
    """

    def __init__(
        self,
        workspace: str,
        *,
        staged_ro: Sequence[str] = (),
        writable: bool = True,
        backend: Backend | None = None,
    ) -> None:
        if backend == "openat2" and not openat2_available():
            raise PolicyError("", "openat2 was asked for but this host does not offer it")
        self.backend: Backend = backend or default_backend()
        self.protected: tuple[tuple[str, str], ...] = ()
        """(absolute path, why) of entries no write may reach (see `check_protected`)."""
        opened: list[tuple[str, int]] = []
        try:
            opened.append(_open_root("fs.workspace", workspace))
            opened += [_open_root(f"fs.staged_ro[{i}]", p) for i, p in enumerate(staged_ro)]
        except BaseException:
            for _path, fd in opened:
                os.close(fd)
            raise
        self.workspace = Root(opened[0][0], kind="workspace", writable=writable)
        self.workspace.fd = opened[0][1]
        staged: list[Root] = []
        for path, fd in opened[1:]:
            root = Root(path, kind="staged", writable=False)
            root.fd = fd
            staged.append(root)
        self.roots: tuple[Root, ...] = (self.workspace, *staged)
        # Absolute user paths name a root by the path the policy gave (normalised; no link
        # on it, see _open_root). Longest prefix first, so a staged root nested in
        # the workspace (or the reverse) wins for the paths beneath it.
        aliases: dict[str, Root] = {}
        for root, given in zip(self.roots, (workspace, *staged_ro), strict=True):
            for alias in {root.path, posixpath.normpath(given)}:
                aliases.setdefault(alias, root)
        self._aliases = sorted(aliases.items(), key=lambda item: len(item[0]), reverse=True)

    def close(self) -> None:
        for root in self.roots:
            if root.fd >= 0:
                os.close(root.fd)
                root.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -------------------------------------------------------------------- lexical step

    def resolve(self, user_path: str) -> Resolved:
        """Canonicalise `user_path` and find its root; refuse it if it has none.

        Lexical only: it never touches the disk, so it cannot be raced. What the disk then
        says (links, swaps) is handled by the confined open.
        """
        if "\x00" in user_path:
            raise PathRefused(user_path, "contains a NUL byte")
        if not user_path:
            raise PathRefused(user_path, "is empty; use '.' for the workspace itself")
        try:
            encoded = os.fsencode(user_path)
        except UnicodeEncodeError:
            raise PathRefused(user_path, "cannot be encoded as a file name") from None
        if len(encoded) > MAX_PATH_BYTES:
            raise PathRefused(user_path[:64] + "...", f"is longer than {MAX_PATH_BYTES} bytes")
        if user_path.startswith("/"):
            absolute = "/" + posixpath.normpath(user_path).lstrip("/")
        else:
            absolute = posixpath.normpath(posixpath.join(self.workspace.path, user_path))
        match = next(
            (
                (prefix, root)
                for prefix, root in self._aliases
                if absolute == prefix or absolute.startswith(prefix.rstrip("/") + "/")
            ),
            None,
        )
        if match is None:
            raise PathRefused(user_path, "is outside the workspace and the staged paths")
        prefix, root = match
        parts = tuple(p for p in absolute[len(prefix) :].split("/") if p)
        for part in parts:
            if len(os.fsencode(part)) > MAX_NAME_BYTES:
                raise PathRefused(user_path, f"has a component longer than {MAX_NAME_BYTES} bytes")
        return Resolved(root, parts, user_path)

    # ------------------------------------------------------------------- confined open

    def open(self, resolved: Resolved, flags: int, mode: int = 0o600) -> int:
        """Open `resolved` with `flags`, confined beneath its root. A final symbolic link is
        followed (beneath the root) unless `flags` holds ``O_NOFOLLOW``."""
        # openat2 insists on mode 0 unless a file may be created.
        mode = mode if flags & os.O_CREAT else 0
        try:
            if self.backend == "openat2":
                assert _openat2 is not None  # noqa: S101 - guaranteed by __init__
                return _openat2(resolved.root.fd, os.fsencode(resolved.rel), flags | _CLOEXEC, mode)
            return _walk_open(resolved, flags | _CLOEXEC, mode)
        except OSError as exc:
            raise _translate(exc, resolved) from None

    def check_protected(self, dirfd: int, name: str, user_path: str) -> None:
        """Refuse a write that would land at or beneath a protected entry. The directory's
        physical path is asked of the kernel (so a link on the way changes nothing)."""
        if not self.protected:
            return
        where = fd_path(dirfd)
        if where is None:
            raise PathRefused(user_path, "cannot tell where it lies; refused near protected paths")
        target = f"{where.rstrip('/')}/{name}"
        for path, why in self.protected:
            if target == path or target.startswith(path + "/"):
                raise PathRefused(
                    user_path,
                    f"is protected ({why}); a write there could plant what runs outside the "
                    "sandbox later (fs.unprotect opts a default entry out)",
                )

    def open_parent(self, resolved: Resolved, *, make_parents: bool = False) -> tuple[int, str]:
        """A lookup descriptor on the directory that holds `resolved`, and its final name.

        For operations on the name itself (create, replace, lstat) that must not follow it.
        With `make_parents`, missing directories on the way are created, each with
        ``mkdirat`` on a confined descriptor of its parent.
        """
        if not resolved.parts:
            raise PathRefused(resolved.user_path, "names the root itself")
        parent = Resolved(resolved.root, resolved.parts[:-1], resolved.user_path)
        name = resolved.parts[-1]
        try:
            return self.open(parent, _DIR_LOOKUP), name
        except FileNotFoundError:
            if not make_parents:
                raise
        fd = os.dup(resolved.root.fd)
        try:
            for i, part in enumerate(parent.parts):
                step = Resolved(resolved.root, parent.parts[: i + 1], resolved.user_path)
                try:
                    nxt = self.open(step, _DIR_LOOKUP)
                except FileNotFoundError:
                    # mkdirat never follows its final name, so a dangling link here fails
                    # (EEXIST) instead of creating its target.
                    self.check_protected(fd, part, resolved.user_path)
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = self.open(step, _DIR_LOOKUP)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd, name

    def lstat(self, resolved: Resolved) -> os.stat_result:
        """Metadata of the name itself (a link is not followed)."""
        if not resolved.parts:
            return os.stat(resolved.root.fd)  # noqa: PTH116 - fstat of a descriptor
        fd, name = self.open_parent(resolved)
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as exc:
            raise _translate(exc, resolved) from None
        finally:
            os.close(fd)

    def stat(self, resolved: Resolved) -> os.stat_result:
        """Metadata of what the path names, following links beneath the root."""
        fd = self.open(resolved, _META)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)


def _translate(exc: OSError, resolved: Resolved) -> OSError | PathRefused:
    """Security refusals become `PathRefused`; ordinary errors keep their type and name the
    user's path."""
    if exc.errno == errno.EXDEV:
        return PathRefused(resolved.user_path, _ESCAPE)
    if exc.errno == errno.ELOOP:
        return PathRefused(resolved.user_path, _LOOP)
    return type(exc)(exc.errno, exc.strerror, resolved.user_path)


# ------------------------------------------------------------------------------ the walk


def _walk_open(resolved: Resolved, flags: int, mode: int) -> int:  # noqa: C901, PLR0912 - one state machine over a component stack; split up, its invariants would scatter
    """`open` for hosts without openat2: see the module docstring for why this is safe."""
    follow_final = not flags & _NOFOLLOW
    stack = [os.dup(resolved.root.fd)]
    pending = list(reversed(resolved.parts))
    links = 0
    try:
        while True:
            if not pending:
                # The root itself, or a path that ended in '.'/'..' after splicing a link.
                return os.open(".", flags, mode, dir_fd=stack[-1])
            name = pending.pop()
            if name in {"", "."}:
                continue
            if name == "..":
                if len(stack) == 1:
                    raise PathRefused(resolved.user_path, _ESCAPE)
                os.close(stack.pop())
                continue
            last = not any(p not in {"", "."} for p in pending)
            try:
                st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                if last:  # O_CREAT may make it; the open below never follows.
                    return os.open(name, flags | _NOFOLLOW, mode, dir_fd=stack[-1])
                raise
            if stat.S_ISLNK(st.st_mode) and (follow_final or not last):
                links += 1
                if links > MAX_SYMLINKS:
                    raise PathRefused(resolved.user_path, _LOOP)
                try:
                    target = os.readlink(name, dir_fd=stack[-1])
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    pending.append(name)  # no longer a link (swapped): look at it again
                    continue
                if target.startswith("/"):
                    raise PathRefused(resolved.user_path, _ABS_LINK)
                if not target:
                    raise FileNotFoundError(errno.ENOENT, "empty symbolic link")
                pending.extend(reversed(target.split("/")))
                continue
            try:
                if last:
                    return os.open(name, flags | _NOFOLLOW, mode, dir_fd=stack[-1])
                stack.append(os.open(name, _DIR_LOOKUP | _NOFOLLOW, dir_fd=stack[-1]))
            except OSError as exc:
                # The name became a symbolic link after the lstat: look at it again.
                # Counted as a link so that a process flipping it forever cannot spin us.
                if exc.errno not in {errno.ELOOP, errno.ENOTDIR} or links >= MAX_SYMLINKS:
                    raise
                links += 1
                pending.append(name)
    finally:
        for fd in stack:
            os.close(fd)


# ------------------------------------------------------------------------------ file ops


def open_regular_for_read(resolver: PathResolver, resolved: Resolved) -> tuple[int, os.stat_result]:
    """A read descriptor on a regular file with a single hard link, and its metadata."""
    fd = resolver.open(resolved, _FILE_READ)
    try:
        st = os.fstat(fd)
        check_readable(st, resolved.user_path)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def check_readable(st: os.stat_result, user_path: str) -> None:
    """Refuse content reads of anything but a singly-linked regular file."""
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise PathRefused(user_path, f"is {kind}; only regular files are read")
    if st.st_nlink > 1:
        raise PathRefused(
            user_path,
            f"has {st.st_nlink} hard links; another name for the same file may be outside "
            "the workspace, so its content is not read",
        )


def read_bytes(fd: int, size: int) -> bytes:
    """Up to `size` bytes from `fd` (fewer only at end of file)."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 16 * 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def replace_file(
    resolver: PathResolver,
    resolved: Resolved,
    data: bytes,
    *,
    make_parents: bool = False,
) -> None:
    """Atomically set the content of `resolved` to `data`.

    A temporary file is written and fsynced beside the target, then renamed over it: a crash
    leaves the old content or the new, never a mix. Existing permission bits are kept; new
    files get 0644. The rename replaces the *name*, so an existing hard link's other names
    keep the old content.
    """
    if not resolved.root.writable:
        what = "a read-only staged path" if resolved.root.kind == "staged" else "read-only"
        raise PathRefused(resolved.user_path, f"is in {what}; this session may not write there")
    dirfd, name = resolver.open_parent(resolved, make_parents=make_parents)
    # Cut in bytes, not characters: the name may be 255 bytes of multi-byte characters, and
    # the temporary name (24 bytes longer than its stem) must still fit NAME_MAX. A cut
    # through a character survives as surrogate escapes, which encode back to the same bytes.
    stem = os.fsdecode(os.fsencode(name)[:200])
    tmp = f".{stem}.panday-{secrets.token_hex(6)}.tmp"
    try:
        resolver.check_protected(dirfd, name, resolved.user_path)
        perm = 0o644
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(st.st_mode):
                raise PathRefused(
                    resolved.user_path, "is a symbolic link; writes never go through links"
                )
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", resolved.user_path)
            # Never carry a setuid or setgid bit over to the new content.
            perm = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=dirfd
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, perm)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except BaseException:
            os.unlink(tmp, dir_fd=dirfd)
            raise
    except OSError as exc:
        raise _translate(exc, resolved) from None
    finally:
        os.close(dirfd)


# ------------------------------------------------------------------------------ tree walks


class TreeEntry:
    """A name met while walking a directory tree (links are reported, never followed)."""

    __slots__ = ("dir_fd", "kind", "name", "rel")
    rel: str
    name: str
    kind: EntryKind
    dir_fd: int

    def __init__(self, rel: str, name: str, kind: EntryKind, dir_fd: int) -> None:
        self.rel = rel
        self.name = name
        self.kind = kind
        self.dir_fd = dir_fd
        """Descriptor of the containing directory; valid only until the walk moves on."""


def _kind(entry: os.DirEntry[str]) -> EntryKind:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def walk_tree(resolver: PathResolver, top: Resolved, *, max_depth: int = 64) -> Iterator[TreeEntry]:
    """Every name below `top`, depth first, sorted by name within a directory.

    Each directory is opened by a single no-follow name relative to its parent's descriptor,
    so the walk never leaves `top`'s root whatever the tree holds or becomes meanwhile.
    Symbolic links are yielded as ``symlink`` and not descended into (as ``grep -r`` does).
    """
    fd = resolver.open(top, _DIR_READ)
    prefix = "" if top.display == "." else top.display.rstrip("/") + "/"
    try:
        yield from _walk_dir(fd, prefix, max_depth)
    finally:
        os.close(fd)


def _walk_dir(fd: int, prefix: str, depth: int) -> Iterator[TreeEntry]:
    with os.scandir(fd) as it:
        entries: list[tuple[str, EntryKind]] = sorted((e.name, _kind(e)) for e in it)
    for name, kind in entries:
        yield TreeEntry(prefix + name, name, kind, fd)
        if kind == "dir" and depth > 0:
            try:
                child = os.open(name, _DIR_READ | _NOFOLLOW, dir_fd=fd)
            except OSError:
                continue  # removed or swapped for a link since the listing: skip it
            try:
                yield from _walk_dir(child, prefix + name + "/", depth - 1)
            finally:
                os.close(child)
