"""A T0 session: the file tools an agent calls, in-process, with no exec and no network.

Every path goes through `panday_core.paths` (lexical check, then an open confined beneath a
descriptor on the root); every result is bounded (bytes, entries, matches) and says when it
was cut short. Tools are synchronous: they are file I/O on bounded data, and an agent's tool
loop calls them one at a time. `T0Sandbox` offers the async `Sandbox` face over them.
"""

from __future__ import annotations

import os
import stat as stat_module
from typing import TYPE_CHECKING, Final, Self

import msgspec

from panday_core.capabilities import Refusal, require_enforceable
from panday_core.errors import LimitExceeded, PathRefused, PolicyError, PolicyViolation
from panday_core.paths import (
    EntryKind as Kind,  # runtime import: msgspec reads the field annotations
)
from panday_core.paths import (
    PathResolver,
    check_readable,
    open_regular_for_read,
    read_bytes,
    replace_file,
    walk_tree,
)
from panday_core.protect import (
    RootRefused,
    git_directory_refusal,
    git_entries,
    normal_path,
    protected_entries,
    root_refusal,
    sys_path_refusal,
)
from panday_core.t0.capabilities import declared_capabilities
from panday_core.t0.search import InvalidArgument, compile_regex, glob_regex

if TYPE_CHECKING:
    from panday_core.paths import Backend
    from panday_core.policy import SandboxPolicy
    from panday_core.t0.search import Regex

KIB: Final = 1024
MIB: Final = 1024 * KIB
UNBOUNDED_OUTPUT_BYTES: Final = 1024 * MIB
"""What one tool call may return when `limits.output_bytes` is ``"unbounded"``: a tool's
result is held in memory whole, so T0 still stops at the model's largest ceiling."""
MAX_ENTRIES: Final = 10_000
"""Hard ceiling on entries a list/glob call returns, whatever the caller asks."""
MAX_MATCHES: Final = 10_000
DEFAULT_GREP_FILE_BYTES: Final = 64 * MIB
BINARY_SNIFF: Final = 8 * KIB
"""A NUL byte in the first 8 KiB marks a file as binary (git's rule)."""

_NOFOLLOW_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class _Result(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Tool results are plain values, so they encode straight to JSON for a model."""


class ReadResult(_Result, frozen=True, kw_only=True):
    path: str
    data: bytes
    offset: int
    size: int
    """The file's size when it was opened."""
    truncated: bool
    """True when the file has bytes after the returned range that were not asked for or did
    not fit the cap."""


class WriteResult(_Result, frozen=True, kw_only=True):
    path: str
    bytes_written: int


class Entry(_Result, frozen=True, kw_only=True):
    name: str
    kind: Kind
    size: int | None = None
    """Size of a regular file; None for anything else."""


class ListResult(_Result, frozen=True, kw_only=True):
    path: str
    entries: tuple[Entry, ...]
    truncated: bool


class GlobResult(_Result, frozen=True, kw_only=True):
    pattern: str
    paths: tuple[str, ...]
    truncated: bool


class GrepMatch(_Result, frozen=True, kw_only=True):
    path: str
    line_number: int
    line: str
    line_truncated: bool = False


class GrepResult(_Result, frozen=True, kw_only=True):
    pattern: str
    matches: tuple[GrepMatch, ...]
    files_scanned: int
    skipped_binary: int
    skipped_unreadable: int
    """Files not searched: more than one hard link, larger than the size cap, vanished."""
    truncated: bool
    """True when `max_matches` or the output cap stopped the search early."""


class StatResult(_Result, frozen=True, kw_only=True):
    path: str
    kind: Kind
    size: int
    mode: int
    mtime_ns: int
    nlink: int


def _refuse_roots(policy: SandboxPolicy, tier: str) -> None:
    """The same places no tier accepts as a root (panday_core.protect.root_refusal)."""
    fs = policy.fs
    refusals: list[Refusal] = []
    roots = [("fs.workspace", fs.workspace or "", fs.access == "rw")]
    roots += [(f"fs.staged_ro[{i}]", p, False) for i, p in enumerate(fs.staged_ro)]
    for field, path, writable in roots:
        normal = normal_path(path)
        why = root_refusal(normal, writable=writable, allow_home=fs.allow_home)
        if why is None and field == "fs.workspace":
            why = sys_path_refusal(normal, writable=writable)
            if why is None and writable:
                why = git_directory_refusal(normal)
        if why is not None:
            refusals.append(Refusal(field=field, reason=why))
    if refusals:
        raise PolicyViolation(tier, refusals)


def _protected(resolver: PathResolver, policy: SandboxPolicy) -> tuple[tuple[str, str], ...]:
    """The workspace's protected entries as absolute paths (an entry that may be created
    and does not exist yet is left out: T0 may create it, like the jail)."""
    root = resolver.workspace
    try:
        entries = protected_entries(
            root.path,
            protect=policy.fs.protect,
            unprotect=policy.fs.unprotect,
            derived=git_entries(root.fd),
            root_fd=root.fd,
        )
    except RootRefused as exc:
        raise PolicyError("fs.protect", exc.reason) from None
    out: list[tuple[str, str]] = []
    for entry in entries:
        if not entry.create:
            try:
                os.lstat(entry.rel, dir_fd=root.fd)
            except OSError:
                continue
        out.append((f"{root.path.rstrip('/')}/{entry.rel}", entry.why))
    return tuple(out)


def _kind_of(mode: int) -> Kind:
    if stat_module.S_ISREG(mode):
        return "file"
    if stat_module.S_ISDIR(mode):
        return "dir"
    if stat_module.S_ISLNK(mode):
        return "symlink"
    return "other"


def _count(argument: str, value: int, ceiling: int) -> int:
    if isinstance(value, bool) or value < 1:  # bool is an int; callers may come from JSON
        raise InvalidArgument(argument, f"{value!r} must be a positive integer")
    return min(value, ceiling)


class T0Session:
    """One T0 session over a policy's workspace and staged paths.

    Construction refuses (PolicyViolation) a policy T0 cannot enforce before it touches the
    filesystem. Close it when done (it holds a descriptor on each root).
    """

    def __init__(
        self,
        policy: SandboxPolicy,
        *,
        session_id: str = "t0",
        backend: Backend | None = None,
    ) -> None:
        caps = declared_capabilities(backend)
        require_enforceable(policy, caps)
        if policy.fs.workspace is None:
            raise PolicyError("fs.workspace", "is not set; T0 needs a workspace directory")
        self.id = session_id
        self.policy = policy
        writable = policy.fs.access == "rw"
        _refuse_roots(policy, str(caps.tier))
        self.resolver = PathResolver(
            policy.fs.workspace,
            staged_ro=policy.fs.staged_ro,
            writable=writable,
            backend=backend,
        )
        if writable:
            self.resolver.protected = _protected(self.resolver, policy)
        limits = policy.limits
        self.output_cap: int = limits.output_cap or UNBOUNDED_OUTPUT_BYTES
        self.disk_budget: int | None = limits.disk_bytes
        self.bytes_written = 0

    @property
    def workspace(self) -> str:
        return self.resolver.workspace.path

    def close(self) -> None:
        self.resolver.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ read / write

    def read(self, path: str, *, offset: int = 0, length: int | None = None) -> ReadResult:
        """Bytes ``[offset, offset + length)`` of a file, at most `limits.output_bytes`."""
        if isinstance(offset, bool) or offset < 0:
            raise InvalidArgument("offset", f"{offset!r} must be 0 or more")
        want = self.output_cap if length is None else _count("length", length, self.output_cap)
        resolved = self.resolver.resolve(path)
        fd, st = open_regular_for_read(self.resolver, resolved)
        try:
            if offset:
                os.lseek(fd, offset, os.SEEK_SET)
            data = read_bytes(fd, want)
        finally:
            os.close(fd)
        return ReadResult(
            path=resolved.display,
            data=data,
            offset=offset,
            size=st.st_size,
            truncated=offset + len(data) < st.st_size,
        )

    def read_all(self, path: str, *, max_bytes: int) -> bytes:
        """The whole file, or `LimitExceeded` if it is larger than `max_bytes` (or the output
        cap): never a silently shortened file."""
        cap = min(_count("max_bytes", max_bytes, self.output_cap), self.output_cap)
        resolved = self.resolver.resolve(path)
        fd, st = open_regular_for_read(self.resolver, resolved)
        try:
            data = read_bytes(fd, cap + 1)
        finally:
            os.close(fd)
        if len(data) > cap:
            raise LimitExceeded(
                "output", f"{resolved.display} is {st.st_size} bytes, more than the {cap} allowed"
            )
        return data

    def write(self, path: str, data: bytes, *, make_parents: bool = False) -> WriteResult:
        """Replace a file's content atomically (only when the workspace is writable)."""
        resolved = self.resolver.resolve(path)
        if self.disk_budget is not None and self.bytes_written + len(data) > self.disk_budget:
            raise LimitExceeded(
                "disk",
                f"writing {len(data)} bytes to {resolved.display} would cross limits.disk_bytes "
                f"({self.bytes_written} of {self.disk_budget} already written in this session)",
            )
        replace_file(self.resolver, resolved, data, make_parents=make_parents)
        self.bytes_written += len(data)
        return WriteResult(path=resolved.display, bytes_written=len(data))

    # ------------------------------------------------------------------ metadata

    def stat(self, path: str) -> StatResult:
        """What `path` names, following links beneath the root (a link leaving it is refused)."""
        resolved = self.resolver.resolve(path)
        st = self.resolver.stat(resolved)
        return StatResult(
            path=resolved.display,
            kind=_kind_of(st.st_mode),
            size=st.st_size,
            mode=stat_module.S_IMODE(st.st_mode),
            mtime_ns=st.st_mtime_ns,
            nlink=st.st_nlink,
        )

    def list(self, path: str = ".", *, max_entries: int = 1000) -> ListResult:
        """The names in a directory, sorted; links are shown as links, not followed."""
        cap = _count("max_entries", max_entries, MAX_ENTRIES)
        resolved = self.resolver.resolve(path)
        entries: list[Entry] = []
        truncated = False
        for item in walk_tree(self.resolver, resolved, max_depth=0):
            if len(entries) == cap:
                truncated = True
                break
            size = None
            if item.kind == "file":
                try:
                    size = os.stat(item.name, dir_fd=item.dir_fd, follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue
            entries.append(Entry(name=item.name, kind=item.kind, size=size))
        return ListResult(path=resolved.display, entries=tuple(entries), truncated=truncated)

    def glob(self, pattern: str, *, max_results: int = 1000) -> GlobResult:
        """Paths matching a glob (``src/**/*.py``), relative to the workspace (or absolute
        under a staged path). The literal leading directories are resolved like any path."""
        cap = _count("max_results", max_results, MAX_ENTRIES)
        base, rest = _split_glob(pattern)
        resolved = self.resolver.resolve(base)
        regex, depth = glob_regex(rest)
        prefix = "" if resolved.display == "." else resolved.display.rstrip("/") + "/"
        found: list[str] = []
        truncated = False
        walk = walk_tree(self.resolver, resolved, max_depth=64 if depth is None else depth)
        for item in walk:
            if regex.search(item.rel[len(prefix) :]) is None:
                continue
            if len(found) == cap:
                truncated = True
                break
            found.append(item.rel)
        return GlobResult(pattern=pattern, paths=tuple(found), truncated=truncated)

    # ------------------------------------------------------------------ grep

    def grep(
        self,
        pattern: str,
        path: str = ".",
        *,
        ignore_case: bool = False,
        include: str | None = None,
        max_matches: int = 100,
        max_line_bytes: int = 512,
        max_file_bytes: int = DEFAULT_GREP_FILE_BYTES,
    ) -> GrepResult:
        """Lines matching an RE2 regex in a file or under a directory.

        Binary files (a NUL in the first 8 KiB) are skipped and counted, as are files with
        more than one hard link or larger than `max_file_bytes`. `include` is a glob on the
        file's name (``*.py``). Matching lines are returned in path order, each cut to
        `max_line_bytes`, until `max_matches` or the output cap is reached.
        """
        regex = compile_regex("pattern", pattern, ignore_case=ignore_case)
        cap = _count("max_matches", max_matches, MAX_MATCHES)
        line_cap = _count("max_line_bytes", max_line_bytes, self.output_cap)
        size_cap = _count("max_file_bytes", max_file_bytes, 1 << 40)
        name_filter = glob_regex(include)[0] if include else None
        resolved = self.resolver.resolve(path)
        scan = _Scan(regex, cap, line_cap, self.output_cap)
        if stat_module.S_ISDIR(self.resolver.stat(resolved).st_mode):
            for item in walk_tree(self.resolver, resolved):
                if item.kind != "file":
                    continue
                if name_filter is not None and name_filter.search(item.name) is None:
                    continue
                try:
                    fd = os.open(item.name, _NOFOLLOW_READ, dir_fd=item.dir_fd)
                except OSError:
                    scan.skipped_unreadable += 1
                    continue
                scan.file(fd, item.rel, size_cap)
                if scan.full:
                    break
        else:
            fd, _st = open_regular_for_read(self.resolver, resolved)
            scan.file(fd, resolved.display, size_cap)
        return GrepResult(
            pattern=pattern,
            matches=tuple(scan.matches),
            files_scanned=scan.files,
            skipped_binary=scan.binary,
            skipped_unreadable=scan.skipped_unreadable,
            truncated=scan.full,
        )


def _split_glob(pattern: str) -> tuple[str, str]:
    """The literal leading directories of a glob, and the rest."""
    if not pattern:
        raise InvalidArgument("pattern", "is empty")
    parts = pattern.split("/")
    literal: list[str] = []
    for part in parts[:-1]:
        if any(c in part for c in "*?["):
            break
        literal.append(part)
    rest = "/".join(parts[len(literal) :])
    base = "/".join(literal) or "."
    if pattern.startswith("/") and not literal[1:]:
        base = "/"
    if ".." in rest.split("/"):
        raise InvalidArgument("pattern", "'..' may appear only before the first wildcard")
    return base, rest


class _Scan:
    """Accumulates grep results across files under the caps."""

    __slots__ = (
        "binary",
        "cap",
        "files",
        "full",
        "line_cap",
        "matches",
        "output_left",
        "regex",
        "skipped_unreadable",
    )

    def __init__(self, regex: Regex, cap: int, line_cap: int, output_cap: int) -> None:
        self.regex = regex
        self.cap = cap
        self.line_cap = line_cap
        self.output_left = output_cap
        self.matches: list[GrepMatch] = []
        self.files = 0
        self.binary = 0
        self.skipped_unreadable = 0
        self.full = False

    def file(self, fd: int, display: str, size_cap: int) -> None:
        """Search one open file (the descriptor is closed here)."""
        try:
            st = os.fstat(fd)
            try:
                check_readable(st, display)
            except PathRefused:
                self.skipped_unreadable += 1
                return
            if st.st_size > size_cap:
                self.skipped_unreadable += 1
                return
            data = read_bytes(fd, st.st_size)
        finally:
            os.close(fd)
        self.files += 1
        if data.find(b"\0", 0, BINARY_SNIFF) != -1:
            self.binary += 1
            return
        self._search(data, display)

    def _search(self, data: bytes, display: str) -> None:
        search = self.regex.search
        pos = 0
        line_no = 1
        counted = 0
        while True:
            found = search(data, pos)
            if found is None:
                return
            start = found.start()
            line_no += data.count(b"\n", counted, start)
            counted = start
            line_start = data.rfind(b"\n", 0, start) + 1
            line_end = data.find(b"\n", start)
            if line_end == -1:
                line_end = len(data)
            take = min(line_end - line_start, self.line_cap)
            if len(self.matches) == self.cap or take > self.output_left:
                self.full = True
                return
            self.output_left -= take
            self.matches.append(
                GrepMatch(
                    path=display,
                    line_number=line_no,
                    line=data[line_start : line_start + take].decode("utf-8", "replace"),
                    line_truncated=take < line_end - line_start,
                )
            )
            pos = line_end + 1
            if pos > len(data):
                return
