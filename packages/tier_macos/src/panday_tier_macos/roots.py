"""What a T2 macOS session may see and write, decided once at `create`: the module to read
for "can a jail's writes change what a later jail sees, or run outside it later?".

Seatbelt matches paths, not inodes, so nothing is held open here (T2 Linux binds held
descriptors instead). What keeps the paths honest:

* **Roots are opened, never resolved** (`check_root`). The workspace and every staged
  path are opened component by component from ``/`` without following a link
  (`panday_core.protect.open_root`); a link anywhere is refused, naming it and the real
  path. On macOS ``/tmp``, ``/var`` and ``/etc`` are links into ``/private``, so the refusal
  names the ``/private`` spelling to use. A jail that planted a link in its workspace can
  therefore never make a later session's profile name a host directory of its choosing.
  The places no jail may mount (``/usr``, ``/etc``, ``/System``, a home directory unless
  ``fs.allow_home`` ...) are refused too (`panday_core.protect.root_refusal`), as is a
  workspace on the caller's import path, and anything inside a protected path.
* **Roots are spelled as the file system spells them.** macOS volumes are case-insensitive
  by default: ``/users/a`` opens ``/Users/a``, but every check here (a home directory, a
  system directory) and every Seatbelt rule compares strings. A root whose spelling
  differs from its directory entries is refused, naming the spelling to give.
* **Protected entries** of a writable workspace (`protected_paths`: ``.git``, editor and
  agent configuration, panday's own code, a home's start-up files...) are walked beneath
  the workspace without following links. An existing entry is protected as it is; a
  missing one that must not be created is protected at its first missing component (so
  neither it nor a directory that would hold it can be made, or renamed into place); a
  missing one that may be created is left out. A link on the way is refused
  (``fs.protect``): Seatbelt judges a write through a link by its target, so a linked
  ``.vscode`` would leave its target writable.
* The profile then denies writes to each protected entry and, with
  `panday_tier_macos.profile.workspace_guards`, unlinking (so renaming) of every directory
  that holds one, a staged path or a home, the workspace included. A rule written for a path
  can no longer be dodged by moving that path.

Protected entries are computed once, at `create`, like the profile. An entry that may be
created (``.envrc``, a submodule's ``.git``) and is created by a command stays writable for
the rest of the session: creating it is harmless by the entry's own definition (direnv asks
before running a new ``.envrc``), and writing it later adds nothing to writing it then.
"""

from __future__ import annotations

import contextlib
import os
import stat
import unicodedata
from typing import TYPE_CHECKING, NamedTuple

from panday_core.capabilities import Refusal
from panday_core.errors import PolicyViolation
from panday_core.protect import (
    HOME_ENTRIES,
    MACOS_HOME_ENTRIES,
    Entry,
    RootRefused,
    ancestry,
    git_directory_refusal,
    git_entries,
    home_directories,
    normal_path,
    open_root,
    path_identity,
    protected_entries,
    root_refusal,
    sys_path_refusal,
)
from panday_tier_macos.profile import protecting, workspace_guards

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.policy import FsPolicy
    from panday_tier_macos.placeholders import Kind

TIER = "t2-macos"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class Roots(NamedTuple):
    """A session's checked paths (all absolute and resolved)."""

    workspace: str
    staged: tuple[str, ...]
    protected: tuple[str, ...]
    """Protected entries of a writable workspace (none when it is read-only)."""
    ancestors: tuple[str, ...]
    """Directories that must not be renamed or removed (`workspace_guards`)."""
    missing: tuple[tuple[str, Kind], ...] = ()
    """The protected paths that do not exist and must not be created, with the kind of
    placeholder that holds each while a command runs (`panday_tier_macos.placeholders`)."""


def _violation(refusals: list[Refusal]) -> PolicyViolation:
    return PolicyViolation(TIER, refusals)


def _fold(name: str) -> str:
    return unicodedata.normalize("NFD", name).casefold()


def _entry_name(listing: list[str], name: str) -> str | None:
    """The entry of `listing` that a lookup of `name` finds: `name` itself, or on a
    case- or normalization-insensitive volume the one entry that folds to it."""
    if name in listing:
        return name
    found = [n for n in listing if _fold(n) == _fold(name)]
    return found[0] if len(found) == 1 else None


def disk_spelling(path: str) -> str:
    """`path` (absolute, normalised, no link on the way) with each component as its
    directory spells it. A directory that cannot be listed keeps the given name."""
    spelled = ""
    for part in (p for p in path.split("/") if p):
        try:
            listing = os.listdir(spelled or "/")  # noqa: PTH208 - names, as os gives them
        except OSError:
            listing = [part]
        spelled += "/" + (_entry_name(listing, part) or part)
    return spelled or "/"


HOME_PLACES: tuple[Entry, ...] = tuple(
    {e.rel: e for e in (*HOME_ENTRIES, *MACOS_HOME_ENTRIES)}.values()
)
"""The places under a home that run what is written there (`panday_core.protect`'s home
entries, the macOS ones on every OS so that this tier's tests see them anywhere)."""


def home_entry_refusal(path: str, fd: int, homes: Sequence[str] | None = None) -> str | None:
    """Why the writable root `path` (open as `fd`) cannot be one: it is, or lies inside, a
    place under a home whose contents run outside the jail later (``~/Library/LaunchAgents``,
    ``~/.config``, ``~/.local/bin``, a shell's rc directory). A workspace there needs no
    ``fs.allow_home`` (it is not a home) and would get none of the protection a home's
    entries get inside a workspace, so it is refused whatever the policy says (issue 30, 1).

    Decided by identity: each such place (links followed: ``~/.config`` may lead elsewhere,
    and there is where the tools read) is compared by ``(st_dev, st_ino)`` with the root and
    every directory above it (`panday_core.protect.ancestry`, from the descriptor)."""
    above = set(ancestry(fd))
    for home in sorted(homes if homes is not None else home_directories()):
        for entry in HOME_PLACES:
            place = f"{home.rstrip('/')}/{entry.rel}"
            ident = path_identity(place)
            if ident is not None and ident in above:
                return (
                    f"{path!r} is or lies inside {place} ({entry.why}): what a command writes "
                    "there runs outside the jail later, so it cannot be a writable root "
                    "(choose a project directory, or give it read-only)"
                )
    return None


def check_root(
    field: str,
    path: str,
    *,
    writable: bool,
    allow_home: bool,
    homes: Sequence[str],
) -> str | Refusal:
    """`path` normalised, when it may be a root of this session; else why not, by `field`.

    Opened from ``/`` without following a link (never `realpath`: a jail can plant links),
    then checked against the places no jail may mount and the paths this tier never lets
    a command touch. Nothing stays open.
    """
    path = normal_path(path)
    try:
        fd = open_root(path)
    except RootRefused as exc:
        return Refusal(field=field, reason=exc.reason)
    try:
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        # By identity (the opened descriptor and its ancestors), never by spelling.
        why = root_refusal(path, writable=writable, allow_home=allow_home, fd=fd)
        if why is None and writable:
            why = home_entry_refusal(path, fd)
        if why is None and field == "fs.workspace":
            why = sys_path_refusal(path, writable=writable, fd=fd)
            if why is None and writable:
                why = git_directory_refusal(path, fd)
    finally:
        os.close(fd)
    if not is_dir:
        return Refusal(field=field, reason=f"{path!r} is not a directory")
    spelled = disk_spelling(path)
    if spelled != path:
        return Refusal(
            field=field,
            reason=f"{path!r} is spelled {spelled!r} on disk; give that spelling (this "
            "volume ignores case, but the checks and the sandbox's rules compare paths as "
            "written)",
        )
    if why is None:
        inside = protecting(path, homes)
        if inside is not None:
            why = f"{path!r} is inside {inside}, which this tier never lets a command read or write"
    return Refusal(field=field, reason=why) if why is not None else path


def _walk(root_fd: int, rel: str) -> str | tuple[bool, str]:
    """Walk `rel` beneath `root_fd` without following a link: ``(True, reached)`` when it
    exists, ``(False, reached)`` when the component ending `reached` is the first missing
    one, or why it cannot be protected (a link, a file where a directory must be).
    `reached` spells each existing component as its directory does: on a case-insensitive
    volume ``Deploy`` finds ``deploy``, and that is the path every access presents."""
    parts = [p for p in rel.split("/") if p]
    parent = os.dup(root_fd)
    reached = ""
    try:
        for i, given in enumerate(parts):
            try:
                st = os.stat(given, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                return False, f"{reached}/{given}" if reached else given
            name = given
            with contextlib.suppress(OSError):  # an O_PATH descriptor (Linux) cannot list
                name = _entry_name(os.listdir(parent), given) or given  # noqa: PTH208 - an fd
            reached = f"{reached}/{name}" if reached else name
            if stat.S_ISLNK(st.st_mode):
                return f"{reached!r} is a symbolic link"
            if i == len(parts) - 1:
                return True, reached
            if not stat.S_ISDIR(st.st_mode):
                return f"{reached!r} is not a directory"
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=parent)
            except OSError as exc:  # replaced meanwhile, or unreadable
                return f"{reached!r}: {exc.strerror}"
            os.close(parent)
            parent = child
    finally:
        with contextlib.suppress(OSError):
            os.close(parent)
    return "an empty path"


def _outermost(rels: list[str]) -> list[str]:
    """`rels` without repeats and without any path inside another (already covered)."""
    kept: list[str] = []
    for rel in sorted(set(rels), key=lambda r: (r.count("/"), r)):
        if not any(rel.startswith(k + "/") for k in kept):
            kept.append(rel)
    return sorted(kept)


def protected_paths(workspace: str, root_fd: int, fs: FsPolicy) -> tuple[str, ...]:
    """The absolute paths the profile keeps read-only inside the writable `workspace`
    (opened as `root_fd`); `PolicyViolation` (``fs.protect``) when one cannot be kept so."""
    return protected_and_missing(workspace, root_fd, fs)[0]


def protected_and_missing(
    workspace: str, root_fd: int, fs: FsPolicy
) -> tuple[tuple[str, ...], tuple[tuple[str, Kind], ...]]:
    """`protected_paths`, and those of them that do not exist and must not be created, with
    what holds each name while a command runs (`panday_tier_macos.placeholders`): the
    entry's own kind when the entry itself is missing, a directory when a directory that
    would hold it is."""
    try:
        entries: tuple[Entry, ...] = protected_entries(
            workspace,
            protect=fs.protect,
            unprotect=fs.unprotect,
            derived=git_entries(root_fd),
            root_fd=root_fd,
        )
    except RootRefused as exc:
        raise _violation([Refusal(field="fs.protect", reason=exc.reason)]) from None
    rels: list[str] = []
    kinds: dict[str, Kind] = {}
    for entry in entries:
        found = _walk(root_fd, entry.rel)
        if not entry.create and found == f"{entry.rel!r} is a symbolic link":
            # A link at a name that may be created (``.envrc``): a command could have made
            # it, so it must not refuse every later session; the profile denies writes by
            # path, which a replacement of the link does not escape either way.
            continue
        if isinstance(found, str):
            raise _violation(
                [
                    Refusal(
                        field="fs.protect",
                        reason=f"{workspace}/{entry.rel}: {found}; the command could write "
                        "through it, so it cannot be kept read-only (replace it with what it "
                        "points to, or leave it out with fs.unprotect)",
                    )
                ]
            )
        exists, reached = found
        if exists or entry.create:
            rels.append(reached)
        if not exists and entry.create:
            kinds[reached] = entry.kind if reached == entry.rel else "dir"
    root = workspace.rstrip("/")
    kept = _outermost(rels)
    paths = tuple(f"{root}/{rel}" for rel in kept)
    missing: tuple[tuple[str, Kind], ...] = tuple(
        (f"{root}/{rel}", kinds[rel]) for rel in kept if rel in kinds
    )
    return paths, missing


def open_roots(fs: FsPolicy, homes: Sequence[str]) -> Roots:
    """Check every root of `fs` and compute what the profile protects; `PolicyViolation`
    naming each refused field (nothing is left open either way)."""
    writable = fs.access == "rw"
    if fs.workspace is None:
        raise _violation([Refusal(field="fs.workspace", reason="no workspace was given")])
    checks = [("fs.workspace", fs.workspace, writable)]
    checks += [(f"fs.staged_ro[{i}]", p, False) for i, p in enumerate(fs.staged_ro)]
    refusals: list[Refusal] = []
    paths: list[str] = []
    for field, path, rw in checks:
        item = check_root(field, path, writable=rw, allow_home=fs.allow_home, homes=homes)
        if isinstance(item, Refusal):
            refusals.append(item)
        else:
            paths.append(item)
    if refusals:
        raise _violation(refusals)
    workspace, staged = paths[0], tuple(paths[1:])
    if not writable:
        return Roots(workspace=workspace, staged=staged, protected=(), ancestors=())
    try:
        fd = open_root(workspace)
    except RootRefused as exc:  # replaced since the check above
        raise _violation([Refusal(field="fs.workspace", reason=exc.reason)]) from None
    try:
        protected, missing = protected_and_missing(workspace, fd, fs)
    finally:
        os.close(fd)
    ancestors = workspace_guards(workspace, protected, staged, homes)
    return Roots(
        workspace=workspace,
        staged=staged,
        protected=protected,
        ancestors=ancestors,
        missing=missing,
    )
