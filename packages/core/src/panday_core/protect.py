"""What a jail's writes must never become: code that runs outside it, or a mount of a later
jail. Shared by every tier (T2 Linux binds, T2 macOS profile rules, T0's write tools).

Three rules, each in its own module and all re-exported here:

1. **Roots are opened, never resolved, and judged by identity** (`panday_core.identity`):
   a workspace or staged path is opened component by component from ``/`` without
   following a symbolic link (`open_root`); a link anywhere on the way is refused, naming
   it. A jail can plant links inside its workspace, and a later session that followed one
   would mount whatever the link names. The tiers then hold the descriptor and bind from
   it, so the path is never looked up again.
2. **Some places can never be a root** (`panday_core.rootrules.root_refusal`), decided by
   the opened root's identity and its ancestry, never by spelling.
3. **Protected entries stay read-only inside a writable workspace** (`protected_entries`,
   here): the names of `panday_core.protected_names`, what git's discovery adds
   (`panday_core.gitfind`), and what lies inside of panday's own interpreter, code,
   project and state and of any home (`panday_core.hostpaths`).

Env names that load code are `panday_core.envhooks`'.
"""

from __future__ import annotations

import os
import sys

from panday_core.envhooks import ENV_HOOK_PREFIXES, ENV_HOOKS, env_hook_reason, is_env_hook
from panday_core.gitfind import git_entries, host_git_configs
from panday_core.hostpaths import (
    caller_code_paths,
    home_directories,
    interpreter_paths,
    missing_import_paths,
    panday_packages,
    state_directories,
)
from panday_core.identity import (
    RootRefused,
    ancestry,
    fd_path,
    forget_prefixes,
    ident,
    lexists_all,
    listing_subtree_mounts,
    normal_path,
    open_root,
    path_identity,
    remember_prefixes,
    within,
)
from panday_core.protected_names import (
    DEFAULT_ENTRIES,
    HOME_ENTRIES,
    MACOS_HOME_ENTRIES,
    MAX_ENTRIES,
    OPT_OUT_NAMES,
    Entry,
)
from panday_core.rootrules import (
    git_directory_refusal,
    root_refusal,
    roots_refusals,
    sys_path_refusal,
)

__all__ = [
    "DEFAULT_ENTRIES",
    "ENV_HOOKS",
    "ENV_HOOK_PREFIXES",
    "HOME_ENTRIES",
    "MACOS_HOME_ENTRIES",
    "MAX_ENTRIES",
    "OPT_OUT_NAMES",
    "Entry",
    "RootRefused",
    "ancestry",
    "env_hook_reason",
    "fd_path",
    "git_directory_refusal",
    "git_entries",
    "home_directories",
    "host_git_configs",
    "interpreter_paths",
    "is_env_hook",
    "missing_import_paths",
    "normal_path",
    "open_root",
    "own_project_entries",
    "path_identity",
    "protected_entries",
    "root_refusal",
    "roots_refusals",
    "state_directories",
    "sys_path_refusal",
    "within",
]

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from typing import Final, Literal


_PROJECT_FILES: Final = (
    ("pyproject.toml", False),
    ("uv.lock", False),
    ("setup.py", False),
    ("setup.cfg", False),
    ("uv.toml", True),
    (".python-version", True),
    (".python-versions", True),
)
"""A Python project's build and environment files, and whether a missing one must not be
created either: uv reads each before it runs anything (a changed build backend, source or
interpreter pin is rebuilt or re-resolved on the host at the next ``uv run``)."""


def own_project_entries(root: tuple[int, int]) -> list[Entry]:
    """When panday runs from a checkout inside the workspace (`root`): the build files of
    every project directory between the workspace and panday's own code (the uv workspace
    root and each member), so the quickstart's next ``uv run panday`` cannot rebuild
    panday with a build backend the jail wrote. Found from where panday's packages are
    loaded from now, not from a list of paths."""
    levels: dict[str, str] = {}
    for module in panday_packages():
        for path in getattr(module, "__path__", ()):
            real = os.path.realpath(path)
            rel = within(real, root)
            if rel is None:
                continue
            base = real[: len(real) - len(rel)]  # the workspace, as this path spells it
            parts = rel.split("/")
            for depth in range(len(parts)):
                level = "/".join(parts[:depth])
                levels[level] = base + level
    out: list[Entry] = []
    for level, directory in sorted(levels.items()):
        prefix = level + "/" if level else ""
        try:
            os.lstat(os.path.join(directory, "pyproject.toml"))
        except OSError:
            continue
        why = "panday's own project: uv rebuilds panday from it at the next `uv run panday`"
        out += [Entry(prefix + name, "file", why, create=make) for name, make in _PROJECT_FILES]
    return out


def _root_identity(workspace: str, root_fd: int | None) -> tuple[int, int] | None:
    try:
        return ident(os.fstat(root_fd) if root_fd is not None else os.stat(workspace))
    except OSError:
        return None


def _inside_entries(root: tuple[int, int], skip: frozenset[str]) -> list[Entry]:
    """What lies inside the workspace whose identity is `root` and must stay read-only
    there: panday's interpreter and code, import paths that do not exist yet, panday's own
    project, the places the caller's own environment runs code from (`caller_code_paths`),
    its state, and any home directory's start-up files. The same answer as last
    time while what it is made of is the same (every command asks)."""
    absolute = [e for e in sys.path if e and os.path.isabs(e)]
    missing = tuple(
        e for e, found in zip(absolute, lexists_all(absolute), strict=True) if not found
    )
    homes, state = home_directories(), state_directories()
    # Where each lies is decided through the bind mounts of subtrees too (`within`): a
    # mount made or gone changes the answer, and the kernel says when (`subtree_mounts`:
    # the same list object until then, never changed in place).
    mounts = listing_subtree_mounts()
    key = (root, skip, interpreter_paths(), missing, state, homes, caller_code_paths(), mounts)
    kept = _INSIDE[0] if _INSIDE else None  # read once: another thread may replace it
    if kept is not None and kept[0] == key:
        return list(kept[1])
    entries = _find_inside(root, skip, homes, state)
    _INSIDE[:] = [(key, tuple(entries))]
    return entries


_INSIDE: list[tuple[object, tuple[Entry, ...]]] = []


def _find_inside(
    root: tuple[int, int],
    skip: frozenset[str],
    homes: frozenset[str],
    state: tuple[str, ...],
) -> list[Entry]:
    entries: list[Entry] = []
    for path in interpreter_paths():
        rel = within(path, root, resolved=True)
        if rel is not None:
            entries.append(Entry(rel, "dir", "panday's own interpreter or code", create=False))
    for path in missing_import_paths():
        rel = within(path, root, resolved=True)
        if rel is not None:
            why = "on this Python's import path, missing: a module created there runs next"
            entries.append(Entry(rel, "dir", why))
    entries += own_project_entries(root)
    entries += _caller_entries(root)
    for path in state:
        rel = within(path, root)
        if rel is not None:
            entries.append(Entry(rel, "dir", "panday's own state (filter cache, plans, policy)"))
    for home in homes:
        home_id = path_identity(home)
        rel_home = "" if home_id == root else within(home, root)
        if rel_home is None:
            continue
        prefix = rel_home + "/" if rel_home else ""
        entries += [Entry(prefix + e.rel, e.kind, e.why) for e in HOME_ENTRIES if e.rel not in skip]
    return entries


def _caller_entries(root: tuple[int, int]) -> list[Entry]:
    """The places the caller's own environment runs code from that lie inside (a missing
    one cannot be made); the workspace itself being one is refused (`sys_path_refusal`
    refuses it at open: here the caller's environment changed since)."""
    entries: list[Entry] = []
    for path, why in caller_code_paths():
        rel = within(path, root, resolved=True)
        if rel is None and path_identity(path) == root:
            raise RootRefused(
                f"the workspace is itself a place the caller runs code from ({why}); "
                "choose another workspace, or leave it out of the caller's environment"
            )
        if rel is not None:
            entries.append(Entry(rel, "dir", why))
    return entries


def _dedupe(entries: list[Entry]) -> tuple[Entry, ...]:
    """Entries in order, dropping repeats and any entry inside another (already covered).
    Of repeats, one that must not be created wins (a home's ``.gitconfig`` over the
    workspace default that may be). The same entries give the same answer as last time
    (every command asks; most are the same objects, compared by identity first)."""
    given = tuple(entries)
    kept = _DEDUPED[0] if _DEDUPED else None
    if kept is not None and kept[0] == given:
        return kept[1]
    found = _find_dedupe(given)
    _DEDUPED[:] = [(given, found)]
    return found


_DEDUPED: list[tuple[tuple[Entry, ...], tuple[Entry, ...]]] = []


def _find_dedupe(entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
    kept: list[Entry] = []
    taken: set[str] = set()
    for entry in sorted(entries, key=lambda e: (e.rel.count("/"), e.rel, not e.create)):
        rel = entry.rel
        if rel in taken:
            continue
        cut = rel.find("/")  # each directory above it, shortest first (every command asks)
        while cut != -1 and rel[:cut] not in taken:
            cut = rel.find("/", cut + 1)
        if cut != -1:
            continue
        kept.append(entry)
        taken.add(rel)
    return tuple(kept)


def protected_entries(
    workspace: str,
    *,
    protect: tuple[str, ...] = (),
    unprotect: tuple[str, ...] = (),
    derived: tuple[Entry, ...] = (),
    root_fd: int | None = None,
) -> tuple[Entry, ...]:
    """Every protected entry of a writable `workspace`, relative to it: the defaults not
    opted out, the policy's own, what `derived` adds (`git_entries`), panday's interpreter,
    its missing import paths, its own project and its state inside it, and the start-up
    files of any home directory inside it. "Inside" is decided by identity (`within`):
    the directory `root_fd` holds open, else `workspace` as it is now. Raises
    `RootRefused` past `MAX_ENTRIES`."""
    skip = frozenset(unprotect)
    root = _root_identity(workspace, root_fd)
    remember_prefixes()
    try:
        return _protected_entries(workspace, root, skip, protect, derived)
    finally:
        forget_prefixes()


def _protected_entries(
    workspace: str,
    root: tuple[int, int] | None,
    skip: frozenset[str],
    protect: tuple[str, ...],
    derived: tuple[Entry, ...],
) -> tuple[Entry, ...]:
    entries = [e for e in DEFAULT_ENTRIES if e.rel not in skip]
    for rel in protect:
        kind: Literal["dir", "file"] = "dir" if rel.endswith("/") else "file"
        entries.append(Entry(rel.rstrip("/"), kind, "listed in fs.protect"))
    entries += derived
    if root is not None:
        entries += _inside_entries(root, skip)
    kept = _dedupe(entries)
    if len(kept) > MAX_ENTRIES:
        raise RootRefused(
            f"{len(kept)} protected entries in {workspace!r} (at most {MAX_ENTRIES}); "
            "a .gitmodules listing this many submodules is refused rather than half-protected"
        )
    return kept
