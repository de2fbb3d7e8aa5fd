"""Places that can never be a root of a jail, judged by identity (`panday_core.protect`).

The jail's own mount points and their ancestors (``/``, ``/usr``, ``/etc``, ``/tmp`` ...),
the kernel's and the host's service directories beneath which nothing may be exposed
(``/proc``, ``/etc``, ``/run`` ...), program and service-state trees that may be staged
read-only but never written, a home directory -- whose start-up files run the next time its
owner logs in -- unless the policy says ``fs.allow_home``, a home's protected entry
(``~/.config``), panday's own state, a git directory, and the caller's import path.
"""

from __future__ import annotations

import os
import stat
import sys

from panday_core.hostpaths import caller_code_paths, home_directories, state_directories
from panday_core.identity import (
    RootRefused,
    ancestry,
    chain_of,
    components,
    fd_path,
    ident,
    identities,
    normal_path,
    open_root,
    path_identity,
    within,
)
from panday_core.protected_names import HOME_ENTRIES

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from typing import Final


_NEVER_EXACT: Final = frozenset(
    {
        "/",
        "/usr",
        "/etc",
        "/tmp",  # noqa: S108 - refused as a root, not used
        "/var",
        "/var/tmp",  # noqa: S108 - as above
        "/run",
        "/home",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/boot",
        "/opt",
        "/srv",
        "/mnt",
        "/media",
        "/proc",
        "/sys",
        "/dev",
        # macOS spellings of the same places (T2 macOS uses the same rules).
        "/private",
        "/private/etc",
        "/private/tmp",
        "/private/var",
        "/Users",
        "/System",
        "/Library",
        "/Applications",
        "/Volumes",
    }
)

# Trees beneath which nothing may be a root at all: kernel interfaces, the host's
# configuration and secrets (/etc/shadow, ssh host keys, TLS private keys), and the
# sockets of host services (/run holds the docker, dbus and ssh-agent sockets; inside the
# jail, /run/panday is where the egress bridge appears).
_NEVER_BENEATH: Final = (
    "/proc",
    "/sys",
    "/dev",
    "/etc",
    "/run",
    "/var/run",
    "/boot",
    "/private/etc",
    "/private/var/run",
    "/System",
)

# Trees that may be staged read-only (a toolchain under /usr/local, say) but never written:
# they hold the programs every later process on the host runs.
_NEVER_WRITABLE_BENEATH: Final = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/Library",
    "/Applications",
    # Other services' state that a host process runs or trusts: dpkg's maintainer scripts
    # (/var/lib/dpkg/info), crontabs and mail spools (/var/spool), logs an administrator
    # reads (/var/log), package caches installed from (/var/cache).
    "/var/lib",
    "/var/spool",
    "/var/log",
    "/var/cache",
    "/var/mail",
    "/var/backups",
    "/private/var/db",
)


def _judged(path: str, fd: int | None) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """The identities a root is judged by (`ancestry`), and its own (None when it does not
    exist): from `fd`, else from `path` opened without following a link, else (a link or a
    missing part: the tier's own open refuses it) from the part of `path` that exists and
    from where it leads."""
    opened = None
    if fd is None:
        try:
            fd = opened = open_root(path)
        except (RootRefused, OSError):
            fd = None
    if fd is not None:
        try:
            chain = ancestry(fd)
        finally:
            if opened is not None:
                os.close(opened)
        return chain, chain[0]
    chain, reached = chain_of(path)
    here = chain[-1] if reached else None
    if not reached:
        real, real_reached = chain_of(os.path.realpath(path))
        chain += real
        if here is None and real_reached:
            here = real[-1]
    return chain, here


def root_refusal(
    path: str, *, writable: bool, allow_home: bool, fd: int | None = None
) -> str | None:
    """Why `path` cannot be a workspace or staged path; None when it can.

    Decided by identity, never by spelling: the root (`fd` when the caller holds it open,
    else `path` opened without following a link) and each directory above it are compared
    by ``(st_dev, st_ino)`` with the refused places, so ``//etc``, ``/./etc``, a bind-mount
    alias of ``/etc`` and ``/etc`` get one answer. `path` is only used in the message.
    """
    path = normal_path(path)
    chain, here = _judged(path, fd)
    above = set(chain)
    if not allow_home and here is not None:
        for home in sorted(home_directories()):
            home_chain, home_reached = chain_of(normal_path(home))
            if home_reached and here in home_chain:
                what = "is" if home_chain[-1] == here else f"holds {home!r}, which is"
                return (
                    f"{path!r} {what} a home directory: its start-up files and .ssh would be "
                    "open to the command (choose a project directory, or set fs.allow_home)"
                )
    exact = identities(_NEVER_EXACT)
    if here is not None and here in exact:
        same = exact[here]
        alias = "" if same == path else f" (it is {same!r})"
        return (
            f"{path!r}{alias} is part of the jail's own file system (or holds it) and cannot "
            "be mounted"
        )
    for found, top in identities(_NEVER_BENEATH).items():
        if found in above:
            return f"{path!r} lies in {top}, which no jail may see (host state and secrets)"
    if not writable:
        return None
    return _writable_refusal(path, above) or _home_entry_refusal(path, above)


def _home_entry_refusal(path: str, above: set[tuple[int, int]]) -> str | None:
    """Why a writable `path` inside a home cannot be a root: it is, or lies in, one of the
    home's protected entries (``~/.config``, ``~/.local/bin``, ``~/Library/LaunchAgents``
    ...), whose files run at the next login or command; as a workspace none of them would
    be protected. Which home holds it is decided by identity; the entry by the path below
    the home (or, for a bind-mount alias, by each entry's identity)."""
    for home in sorted(home_directories()):
        home_id = path_identity(home)
        if home_id is None or home_id not in above:
            continue
        rel = within(path, home_id)
        for entry in HOME_ENTRIES:
            if rel is not None:
                hit = rel == entry.rel or rel.startswith(entry.rel + "/")
            else:
                hit = path_identity(os.path.join(home, entry.rel)) in above
            if hit:
                where = f"{home}/{entry.rel}"
                return (
                    f"{path!r} lies in {where}, which must stay read-only ({entry.why}); "
                    "choose a project directory"
                )
    return None


def roots_refusals(
    workspace: str | None, staged_ro: tuple[str, ...], *, writable: bool, allow_home: bool
) -> list[tuple[str, str]]:
    """``(field, reason)`` for each root a session would refuse, judged as the tiers judge
    them (opened without following a link, then by identity): what ``panday policy
    check`` reports, so it answers as ``run`` would. Paths that do not exist are left to
    the caller (reported as missing input)."""
    roots = [("fs.workspace", workspace or "", writable)] if workspace is not None else []
    roots += [(f"fs.staged_ro[{i}]", p, False) for i, p in enumerate(staged_ro)]
    out: list[tuple[str, str]] = []
    for field, path, rw in roots:
        normal = normal_path(path)
        if not os.path.lexists(normal):
            continue
        try:
            fd = open_root(normal)
        except RootRefused as exc:
            out.append((field, exc.reason))
            continue
        try:
            why = root_refusal(normal, writable=rw, allow_home=allow_home, fd=fd)
            if why is None and field == "fs.workspace":
                why = sys_path_refusal(normal, writable=rw, fd=fd)
                if why is None and rw:
                    why = git_directory_refusal(normal, fd)
        finally:
            os.close(fd)
        if why is not None:
            out.append((field, why))
    return out


def _writable_refusal(path: str, above: set[tuple[int, int]]) -> str | None:
    """Why `path` (whose own and ancestors' identities are `above`) may be staged
    read-only but never written."""
    for found, top in identities(_NEVER_WRITABLE_BENEATH).items():
        if found in above:
            return f"{path!r} lies in {top}, which holds the host's programs; stage it read-only"
    # A workspace that holds panday's state gets it as a protected entry; one inside it
    # would let a jail rewrite the cached seccomp programs and jail plans themselves.
    for found, state in identities(state_directories()).items():
        if found in above:
            return (
                f"{path!r} lies in panday's own state ({os.path.realpath(state)}: cached jail "
                "plans and seccomp programs, /etc views, the default policy), which decides "
                "every later jail; stage it read-only"
            )
    return None


def git_directory_refusal(path: str, fd: int | None = None) -> str | None:
    """Why a writable `path` cannot be a workspace: it is, or lies inside, a git directory
    (a bare repository, a ``.git``, a worktree's or submodule's git directory). Its
    ``hooks`` and ``config`` are what git runs on the host's next command there, and none
    of them would be a protected entry of the workspace."""
    directory = fd_path(fd) if fd is not None else None
    path = normal_path(directory or path)
    parts = components(path)
    for depth in range(len(parts), 0, -1):
        top = "/" + "/".join(parts[:depth])
        if parts[depth - 1] == ".git" or _git_directory_shape(top):
            return (
                f"{path!r} lies in the git directory {top!r} (or is it): git runs the hooks "
                "and the commands the config there names on the host's next git command; "
                "choose the working tree instead"
            )
    return None


def _git_directory_shape(directory: str) -> bool:
    """What git's discovery takes for a git directory: a ``HEAD`` file and ``objects`` and
    ``refs`` directories (git then reads ``HEAD``; the shape is enough to refuse)."""
    try:
        head = os.lstat(os.path.join(directory, "HEAD"))
        objects = os.stat(os.path.join(directory, "objects"))
        refs = os.stat(os.path.join(directory, "refs"))
    except OSError:
        return False
    shape = (stat.S_ISREG(head.st_mode), stat.S_ISDIR(objects.st_mode), stat.S_ISDIR(refs.st_mode))
    return all(shape)


def sys_path_refusal(workspace: str, *, writable: bool, fd: int | None = None) -> str | None:
    """Why a writable `workspace` cannot be used by this Python: it is itself on
    ``sys.path`` (``python -m`` or ``-c`` run from it puts it first), so a module the
    command writes there would shadow the standard library in the caller's next import; or
    it is itself a place the caller's environment runs code from (a directory on its
    ``PATH``, its active virtual environment: `hostpaths.caller_code_paths`)."""
    if not writable:
        return None
    here = path_identity(workspace) if fd is None else ident(os.fstat(fd))
    for path, why in caller_code_paths():
        if here is not None and path_identity(path) == here:
            return (
                f"{workspace!r} is a place the caller's own environment runs code from "
                f"({why}), so what the command writes there would run outside the sandbox; "
                "choose another workspace, or leave it out of the environment panday runs in"
            )
    cwd = os.getcwd() if "" in sys.path else None
    for entry in sys.path:
        path = cwd if entry == "" else entry
        if path and here is not None and path_identity(path) == here:
            return (
                f"{workspace!r} is on this Python's import path (sys.path), so a module the "
                "command writes there would run in the caller's next import; set "
                "fs.writes = 'checked' (T2 Linux: Python modules written there are then held "
                "for review), start Python with -P (or PYTHONSAFEPATH=1), or choose another "
                "workspace"
            )
    return None
