"""What a jail's writes must never become: code that runs outside it, or a mount of a later
jail. Shared by every tier (T2 Linux binds, T2 macOS profile rules, T0's write tools).

Three rules live here, as data and small pure functions:

1. **Roots are opened, never resolved.** A workspace or staged path is opened component by
   component from ``/`` without following a symbolic link (`open_root`); a link anywhere
   on the way is refused, naming it. A jail can plant links inside its workspace, and a
   later session (or a later bind of this one) that followed one would mount whatever the
   link names -- ``~/.ssh``, ``/etc``, the host's ``/proc``. The tiers then hold the
   descriptor and bind from it, so the path is never looked up again.
2. **Some places can never be a root** (`root_refusal`): the jail's own mount points and
   their ancestors (``/``, ``/usr``, ``/etc``, ``/tmp`` ...), the kernel's and the host's
   service directories beneath which nothing may be exposed (``/proc``, ``/etc``, ``/run``
   ...), and a home directory -- whose start-up files run the next time its owner logs in
   -- unless the policy says ``fs.allow_home``.
3. **Protected entries stay read-only inside a writable workspace** (`protected_entries`):
   files and directories that tools outside the jail run without being asked (git's
   metadata, editor and agent configuration, panday's own interpreter and code). Each
   default entry carries the reason it is on the list; ``fs.protect`` adds entries and
   ``fs.unprotect`` lets a policy leave a default one writable, by name.

Why these defaults (anchors: Anthropic's sandbox-runtime denies writes to a list of such
files and directories; OpenAI's Codex keeps ``.git`` read-only inside writable roots): an
entry is listed when a *common* tool runs code from it on the user's next ordinary action
(``git status`` from a shell prompt, opening the folder in an editor, starting an agent),
without the user running the workspace's code on purpose. The workspace's own source code
is not on the list: running it is what the user does on purpose.
"""

from __future__ import annotations

import os
import stat
import sys

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)
if TYPE_CHECKING:
    from typing import Final, Literal

# ------------------------------------------------------------------------------ roots


class RootRefused(Exception):
    """A workspace or staged path that cannot be a root of a jail; `reason` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


_O_PATH = getattr(os, "O_PATH", 0)
# Without O_PATH (macOS) each component is opened for reading: O_NONBLOCK so that a FIFO a
# jail left where a later root is looked up cannot hang the caller.
_LOOKUP = (_O_PATH or (os.O_RDONLY | os.O_NONBLOCK)) | os.O_CLOEXEC | os.O_NOFOLLOW


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part and part != "."]


def normal_path(path: str) -> str:
    """`path` normalised the way the kernel reads it. ``os.path.normpath`` keeps a leading
    ``//`` (POSIX leaves its meaning to the system; Linux and macOS read it as ``/``), so
    ``//etc`` would pass every string comparison with ``/etc`` while opening it."""
    if not path:
        return path
    normal = os.path.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def fd_path(fd: int) -> str | None:
    """The path the kernel gives for an opened directory (Linux: ``/proc/self/fd``; macOS:
    ``F_GETPATH``): one spelling whatever the caller typed (``//``, ``/./``). None when the
    system cannot say, or the directory was removed."""
    try:
        if _O_PATH:
            found = os.readlink(f"/proc/self/fd/{fd}")
        else:
            import fcntl

            raw = fcntl.fcntl(fd, getattr(fcntl, "F_GETPATH", 50), b"\0" * 1024)
            found = raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    except OSError:
        return None
    if not found.startswith("/") or found.endswith(" (deleted)"):
        return None
    return found


def open_root(path: str) -> int:
    """A descriptor on `path` (absolute), reached without following any symbolic link.

    On Linux the descriptor is ``O_PATH`` (no read permission needed, usable as a bind
    source through ``/proc/self/fd``); elsewhere a plain read-only descriptor. Raises
    `RootRefused` naming the first link (and where it points) or the component that
    cannot be opened.
    """
    if not path.startswith("/"):
        raise RootRefused(f"{path!r} is relative; give an absolute path")
    fd = os.open("/", _LOOKUP | os.O_DIRECTORY)
    walked = ""
    problem: str | None = None
    for part in _components(path):
        walked += "/" + part
        try:
            child = os.open(part, _LOOKUP, dir_fd=fd)
        except OSError as exc:
            problem = _open_failure(path, walked, fd, part, exc)
            break
        os.close(fd)
        fd = child
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            problem = _link_message(path, walked)
            break
    if problem is not None:
        os.close(fd)
        raise RootRefused(problem)
    return fd


def _link_message(path: str, walked: str) -> str:
    try:
        target = os.readlink(walked)
    except OSError:
        target = "?"
    real = os.path.realpath(path)
    where = "is" if walked == path.rstrip("/") else f"passes through {walked!r}, which is"
    return (
        f"{path!r} {where} a symbolic link (to {target!r}); panday never follows a link to "
        f"choose what a jail sees, because a jail can plant one (give the real path: {real!r})"
    )


def _open_failure(path: str, walked: str, parent: int, name: str, exc: OSError) -> str:
    # Without O_PATH (macOS) O_NOFOLLOW on a link fails with ELOOP: name the link.
    try:
        if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
            return _link_message(path, walked)
    except OSError:
        pass
    return f"{path!r}: {walked!r}: {exc.strerror}"


# Places that are the jail's own mount points, or hold them: never a workspace or a staged
# path, in any access mode (mounting one would replace part of the jail itself, or expose
# every user's files at once). "/" is refused as the ancestor of everything.
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

_NOLOGIN_SHELLS: Final = ("nologin", "false", "sync", "shutdown", "halt")


def home_directories() -> frozenset[str]:
    """Home directories a jail's writes could turn into code run at someone's next login:
    the caller's (``$HOME`` and its password-file entry) and, for a root caller (whose jail
    writes as root), every account that can log in."""
    env_home = os.environ.get("HOME")
    try:
        passwd = os.stat("/etc/passwd")
        stamp: object = (passwd.st_ino, passwd.st_size, passwd.st_mtime_ns)
    except OSError:
        stamp = None
    key = (env_home, os.geteuid(), stamp)
    if _HOMES and _HOMES[0][0] == key:
        return _HOMES[0][1]
    homes: set[str] = set()
    if env_home and env_home.startswith("/"):
        homes.add(os.path.normpath(env_home))
    try:
        import pwd

        homes.add(pwd.getpwuid(os.geteuid()).pw_dir)
        if os.geteuid() == 0:
            for entry in pwd.getpwall():
                if not entry.pw_shell.endswith(_NOLOGIN_SHELLS):
                    homes.add(entry.pw_dir)
    except (ImportError, KeyError):
        pass
    found = frozenset(h for h in homes if h.startswith("/") and h != "/")
    _HOMES[:] = [(key, found)]
    return found


_HOMES: list[tuple[object, frozenset[str]]] = []
"""The last answer of `home_directories` and what it depended on ($HOME, the euid, the
password file's identity): every command asks, and a root caller's answer reads the whole
password file."""


def _ident(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _chain(path: str) -> tuple[list[tuple[int, int]], bool]:
    """The identities of ``/`` and of each existing component of `path` (absolute,
    normalised), opened one by one without following a link, and whether the whole path
    was reached. A component that cannot be opened for lookup (macOS, no read permission)
    is looked at with ``lstat`` instead; a link or a missing component ends the chain."""
    out: list[tuple[int, int]] = []
    fd = os.open("/", _LOOKUP | os.O_DIRECTORY)
    walked = ""
    try:
        out.append(_ident(os.fstat(fd)))
        for part in _components(path):
            walked += "/" + part
            try:
                child = os.open(part, _LOOKUP, dir_fd=fd)
            except OSError:
                try:
                    st = os.lstat(walked)
                except OSError:
                    return out, False
                if stat.S_ISLNK(st.st_mode):
                    return out, False
                out.append(_ident(st))
                continue  # fd stays on an ancestor: later components fail and lstat too
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                return out, False
            out.append(_ident(st))
        return out, True
    finally:
        os.close(fd)


def ancestry(fd: int) -> list[tuple[int, int]]:
    """The identity of the directory `fd` first, then of every directory above it: through
    ``..`` from the descriptor itself (never from a path) up to ``/``, and, where one of
    them is a bind mount of a subtree (``mount --bind /etc/ssl x``: its ``..`` is the
    mount point's parent), the ancestry of the place that subtree really is, so an alias
    of a directory beneath ``/etc`` is beneath ``/etc``."""
    out = [_ident(os.fstat(fd))]
    aliases: list[str] = []
    current = os.dup(fd)
    mount = _mount_id(current)
    try:
        for _ in range(4096):  # deeper than any real tree; a loop cannot be made with ..
            try:
                parent = os.open("..", _LOOKUP | os.O_DIRECTORY, dir_fd=current)
            except OSError:
                break
            parent_mount = _mount_id(parent)
            if mount is not None and parent_mount != mount:
                aliases += _bind_source(mount)
            os.close(current)
            current, mount = parent, parent_mount
            here = _ident(os.fstat(current))
            if here == out[-1]:
                break  # "/" is its own parent
            out.append(here)
    finally:
        os.close(current)
    for real in aliases:
        out += _chain(real)[0]
    return out


def _mount_id(fd: int) -> int | None:
    """The mount a descriptor is on (Linux's ``/proc/self/fdinfo``), None elsewhere."""
    if not _O_PATH:
        return None
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as fh:
            for line in fh.read().splitlines():
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


_MOUNT_DEVICE, _MOUNT_ROOT, _MOUNT_POINT = 2, 3, 4
"""Columns of ``/proc/self/mountinfo``."""


def _bind_source(mount: int) -> list[str]:
    """Where the subtree that mount `mount` shows lies, as paths of this mount namespace:
    for a bind mount of ``/etc/ssl`` (its root field in ``/proc/self/mountinfo``), the
    mount point of each mount of the whole file system plus that root. [] for a mount of
    a whole file system, or one whose file system is mounted nowhere else here."""
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            rows = [line.split(b" ") for line in fh.read().splitlines()]
    except OSError:
        return []

    def text(raw: bytes) -> str:  # mountinfo escapes space, tab, newline and backslash
        for code, char in ((b"\\040", b" "), (b"\\011", b"\t"), (b"\\012", b"\n")):
            raw = raw.replace(code, char)
        return raw.replace(b"\\134", b"\\").decode("utf-8", "surrogateescape")

    # Fields: mount id, parent id, major:minor, root within the file system, mount point.
    rows = [r for r in rows if len(r) > _MOUNT_POINT]
    mine = next((r for r in rows if r[0] == str(mount).encode()), None)
    if mine is None or mine[_MOUNT_ROOT] == b"/":
        return []
    root = text(mine[_MOUNT_ROOT])
    return [
        normal_path(text(r[_MOUNT_POINT]) + root)
        for r in rows
        if r[_MOUNT_DEVICE] == mine[_MOUNT_DEVICE] and r[_MOUNT_ROOT] == b"/" and r[0] != mine[0]
    ]


def _identities(paths: tuple[str, ...] | frozenset[str] | list[str]) -> dict[tuple[int, int], str]:
    """The identity of each existing path (links followed: ``/lib`` may be ``/usr/lib``)."""
    out: dict[tuple[int, int], str] = {}
    for path in sorted(paths):
        try:
            out.setdefault(_ident(os.stat(path)), path)
        except (OSError, ValueError):
            continue
    return out


def path_identity(path: str) -> tuple[int, int] | None:
    """The identity of `path` (links followed), None when it does not exist."""
    try:
        return _ident(os.stat(path))
    except (OSError, ValueError):
        return None


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
    chain, reached = _chain(path)
    here = chain[-1] if reached else None
    if not reached:
        real, real_reached = _chain(os.path.realpath(path))
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
            home_chain, home_reached = _chain(normal_path(home))
            if home_reached and here in home_chain:
                what = "is" if home_chain[-1] == here else f"holds {home!r}, which is"
                return (
                    f"{path!r} {what} a home directory: its start-up files and .ssh would be "
                    "open to the command (choose a project directory, or set fs.allow_home)"
                )
    exact = _identities(_NEVER_EXACT)
    if here is not None and here in exact:
        same = exact[here]
        alias = "" if same == path else f" (it is {same!r})"
        return (
            f"{path!r}{alias} is part of the jail's own file system (or holds it) and cannot "
            "be mounted"
        )
    for ident, top in _identities(_NEVER_BENEATH).items():
        if ident in above:
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
    for ident, top in _identities(_NEVER_WRITABLE_BENEATH).items():
        if ident in above:
            return f"{path!r} lies in {top}, which holds the host's programs; stage it read-only"
    # A workspace that holds panday's state gets it as a protected entry; one inside it
    # would let a jail rewrite the cached seccomp programs and jail plans themselves.
    for ident, state in _identities(state_directories()).items():
        if ident in above:
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
    parts = _components(path)
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


# --------------------------------------------------------------------------- protected


class Entry:
    """A path inside a writable root that a jail may read but never write or create.

    A plain slotted class rather than a NamedTuple: this module is on `panday run`'s
    start-up path, and NamedTuple needs typing (milliseconds to import).
    """

    __slots__ = ("create", "kind", "rel", "why")

    def __init__(
        self,
        rel: str,
        kind: Literal["dir", "file"],
        why: str,
        create: bool = True,  # noqa: FBT001, FBT002 - the NamedTuple's positional signature
    ) -> None:
        self.rel = rel
        """Relative to the root, without ``..`` or a leading slash."""
        self.kind: Literal["dir", "file"] = kind
        """What stands in for it when it is missing (a read-only empty placeholder, on tiers
        that need one to block creation). A file holds the name as well as a directory
        does, and costs a fraction as much to create and remove (a directory has a data
        block to free); ``.git`` needs a directory, which git treats as absent, where an
        empty ``.git`` file would stop every git command above it."""
        self.why = why
        self.create = create
        """Whether a missing one must not be created either. False only where creating it
        is harmless until something already protected refers to it (say, a hook manager's
        configuration that only a protected git hook would read)."""

    def _fields(self) -> tuple[str, str, str, bool]:
        return (self.rel, self.kind, self.why, self.create)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Entry) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Entry(rel={self.rel!r}, kind={self.kind!r}, why={self.why!r}, create={self.create})"
        )


DEFAULT_ENTRIES: Final = (
    Entry(
        ".git",
        "dir",
        "git runs its hooks and the commands its config names (core.fsmonitor, "
        "core.hooksPath, filters, aliases) on the next git command, a shell prompt's "
        "included; the whole directory, so no file git executes is missed",
    ),
    Entry(
        ".gitmodules",
        "file",
        "where the next `git submodule update` fetches code from and checks it out "
        "(only that explicit command reads it: may be created)",
        create=False,
    ),
    Entry(
        ".envrc",
        "file",
        "direnv runs it when a shell enters the directory (a new one needs `direnv allow`: "
        "may be created)",
        create=False,
    ),
    Entry(
        ".vscode",
        "file",
        "VS Code runs tasks on folder open and takes interpreters, terminals and tool paths "
        "from its settings",
    ),
    Entry(".idea", "file", "JetBrains IDEs run configured tools and startup tasks from it"),
    Entry(
        ".devcontainer",
        "file",
        "initializeCommand runs on the host when the folder is opened in a dev container",
    ),
    Entry(".mcp.json", "file", "agents start the MCP servers it lists, as host processes"),
    Entry(".claude", "file", "Claude Code runs the hooks, commands and agents defined in it"),
    Entry(".codex", "file", "Codex reads its configuration and rules from it"),
    Entry(".cursor", "file", "Cursor starts the MCP servers and applies the rules defined in it"),
    Entry(".gemini", "file", "Gemini CLI starts the MCP servers and tools its settings name"),
    Entry(
        ".devcontainer.json",
        "file",
        "the one-file form of .devcontainer: initializeCommand runs on the host when the "
        "folder is opened in a dev container",
    ),
    Entry("opencode.json", "file", "opencode starts the MCP servers (commands) it lists"),
    Entry("opencode.jsonc", "file", "the same, with comments"),
    Entry(".opencode", "file", "opencode loads the plugins (JavaScript) and commands in it"),
    Entry(".roo", "file", "Roo Code starts the MCP servers in .roo/mcp.json, applies its rules"),
    Entry(".zed", "file", "Zed's project settings and tasks: language servers, context servers"),
    Entry(".continue", "file", "Continue starts the MCP servers in .continue/mcpServers"),
    Entry(".kiro", "file", "Kiro starts the MCP servers in .kiro/settings and runs its hooks"),
    Entry(".amazonq", "file", "Amazon Q starts the MCP servers in .amazonq/mcp.json"),
    Entry(
        ".windsurf",
        "file",
        "Windsurf's rules and workflows steer what its agent runs (as .cursor's rules do)",
    ),
    Entry(
        ".npmrc",
        "file",
        "npm reads it for every command, `npm ci --ignore-scripts` too: its git, script-shell "
        "and node-options settings run a program of its choosing",
    ),
    Entry(
        ".yarnrc.yml",
        "file",
        "yarnPath and plugins: every yarn command there, `yarn --version` too, runs the "
        "JavaScript it names",
    ),
    Entry(".yarnrc", "file", "yarn 1's yarn-path: the same"),
    Entry(
        ".hg",
        "file",
        "Mercurial runs the [hooks] of .hg/hgrc on the next hg command, a shell prompt's "
        "included (a file placeholder, which hg treats as absent)",
    ),
    Entry(
        ".jj",
        "file",
        "Jujutsu reads the repository's configuration (pager, diff tools, aliases) from it "
        "(a file placeholder, which jj treats as absent)",
    ),
    Entry(
        ".gitconfig",
        "file",
        "git reads it only through an include.path in the protected .git/config (then it "
        "can set core.fsmonitor): may be created",
        create=False,
    ),
    *(
        Entry(
            name,
            "file",
            "mise runs its hooks, tasks and env._.source when a shell enters the directory "
            "(a new one needs `mise trust`: may be created)",
            create=False,
        )
        for name in ("mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml", ".mise")
    ),
    Entry(
        ".ripgreprc",
        "file",
        "rg's --pre runs a program on every file searched, when RIPGREP_CONFIG_PATH names "
        "this file (a new one is inert until it does: may be created)",
        create=False,
    ),
    Entry(
        ".pre-commit-config.yaml",
        "file",
        "an installed pre-commit hook runs the commands it lists on the next commit (the "
        "hook lives in the protected .git: may be created)",
        create=False,
    ),
    Entry(
        ".husky",
        "dir",
        "husky's git hooks, run on the next commit once .git/config points there (protected: "
        "may be created)",
        create=False,
    ),
)
"""Protected in every writable workspace unless ``fs.unprotect`` names them."""

MACOS_HOME_ENTRIES: Final = (
    Entry("Library/LaunchAgents", "dir", "launchd starts the agents it holds at the next login"),
    Entry(
        "Library/Python",
        "dir",
        "the user site-packages of macOS's Pythons: a .pth there runs in every Python",
    ),
    Entry(
        "Library/Preferences",
        "dir",
        "applications' settings, Terminal's and iTerm2's start-up commands among them",
    ),
    Entry(
        "Library/Application Support/Code/User",
        "dir",
        "VS Code's user settings and tasks: terminals, interpreters, tool paths",
    ),
    Entry("Library/Application Support/Cursor/User", "dir", "the same for Cursor"),
    Entry(
        "Library/Application Support/iTerm2",
        "dir",
        "Scripts/AutoLaunch: Python iTerm2 runs when it starts",
    ),
    Entry(
        "Library/Application Support/Claude",
        "dir",
        "claude_desktop_config.json: the MCP servers Claude Desktop starts",
    ),
)
"""Home entries on macOS only (part of `HOME_ENTRIES` there; elsewhere nothing reads them,
and a placeholder would only litter the home)."""

HOME_ENTRIES: Final = (
    # -- what the shell and the login session run
    *(
        Entry(name, "file", "the shell runs it at the next login or new terminal")
        for name in (
            ".profile",
            ".bashrc",
            ".bash_profile",
            ".bash_login",
            ".bash_logout",
            ".zshrc",
            ".zshenv",
            ".zprofile",
            ".zlogin",
            ".zlogout",
            ".xprofile",
            ".xsessionrc",
        )
    ),
    Entry(".bash_aliases", "file", "Debian's and Ubuntu's .bashrc sources it"),
    Entry(".bashrc.d", "dir", "Fedora's .bashrc sources every file in it"),
    Entry(".bash_completion", "file", "bash-completion sources it in every interactive bash"),
    Entry(".oh-my-zsh", "dir", "the framework and plugins .zshrc sources"),
    Entry(".p10k.zsh", "file", "the prompt configuration .zshrc sources"),
    Entry(".fzf.bash", "file", "fzf's key bindings, sourced by .bashrc"),
    Entry(".fzf.zsh", "file", "fzf's key bindings, sourced by .zshrc"),
    Entry(".inputrc", "file", "readline's key bindings: a macro bound to Enter types a command"),
    Entry(".pam_environment", "file", "variables set at login (LD_PRELOAD among them)"),
    Entry(".xinitrc", "file", "startx runs it as the X session"),
    Entry(".xsession", "file", "the display manager runs it as the X session"),
    Entry(
        ".Xresources",
        "file",
        "loaded at X login: terminals take commands and extensions from it (urxvt's perl-lib)",
    ),
    Entry(
        "bin",
        "dir",
        "Debian's and Ubuntu's .profile put it first on PATH: a program there shadows ls, git",
    ),
    Entry(
        ".local",
        "dir",
        "bin (first on PATH), lib (user site-packages: a .pth runs in every Python), share "
        "(systemd user units, fish's vendor_conf.d, bash-completion scripts, editor plugins, "
        "desktop entries, uv's interpreters and tools): the whole directory, so no file run "
        "from it is missed",
    ),
    Entry(
        ".config",
        "dir",
        "autostart entries, systemd user units, fish and git configuration, panday's own policy",
    ),
    # -- who may log in, and keys
    Entry(".ssh", "dir", "authorized_keys and config: who may log in, what ssh runs"),
    Entry(".gnupg", "dir", "keys and the agent's configuration"),
    Entry(".forward", "file", "the mail system runs a |command it names on each delivery"),
    # -- editors, terminals, pagers, downloaders
    Entry(".vimrc", "file", "vim runs it at start-up (:! runs commands)"),
    Entry(".vim", "dir", "plugins vim loads at start-up"),
    Entry(".emacs", "file", "Emacs Lisp that Emacs runs at start-up"),
    Entry(".emacs.d", "dir", "init.el and the packages Emacs loads at start-up"),
    Entry(".tmux.conf", "file", "tmux runs it (run-shell) when its server starts"),
    Entry(".tmux", "dir", "the tmux plugins its configuration loads"),
    Entry(".screenrc", "file", "screen runs its commands at start-up"),
    Entry(".lesskey", "file", "less reads it: its #env section sets LESSOPEN, run on every file"),
    Entry(".lessfilter", "file", "lesspipe runs it on every file less opens"),
    Entry(".selected_editor", "file", "sensible-editor starts the program it names"),
    Entry(
        ".curlrc",
        "file",
        "options curl takes on every call (a proxy, certificate checks off): the next "
        "`curl ... | sh` runs what that proxy serves",
    ),
    Entry(".wgetrc", "file", "the same for wget"),
    # -- version control
    Entry(
        ".gitconfig", "file", "git's user configuration: hooks and commands for every repository"
    ),
    Entry(".hgrc", "file", "Mercurial's user configuration: [hooks] run on the next hg command"),
    Entry(".jjconfig.toml", "file", "Jujutsu's user configuration: pager, diff tools, aliases"),
    Entry(".subversion", "dir", "svn's configuration: diff-cmd, tunnel commands"),
    Entry(
        ".ripgreprc",
        "file",
        "where RIPGREP_CONFIG_PATH usually points: --pre runs a program on every file searched",
    ),
    # -- language runtimes and their package managers
    Entry(".pythonrc.py", "file", "where PYTHONSTARTUP usually points: run by interactive Python"),
    Entry(".pythonrc", "file", "the same, another common name"),
    Entry(".pdbrc", "file", "pdb runs its commands (Python statements) when it starts"),
    Entry(".ipython", "dir", "profile_default/startup/ and ipython_config.py: Python IPython runs"),
    Entry(".jupyter", "dir", "jupyter_*_config.py: Python run when Jupyter starts"),
    Entry(".pip", "dir", "pip.conf (old location): the index the next pip install takes code from"),
    Entry(".condarc", "file", "the channels the next conda install takes code from"),
    Entry(".Rprofile", "file", "R code every R session runs first"),
    Entry(".Renviron", "file", "R's start-up environment (R_PROFILE_USER, R_LIBS)"),
    Entry(".julia/config", "dir", "startup.jl: Julia code every julia runs first"),
    Entry(".irbrc", "file", "Ruby code irb runs at start-up"),
    Entry(".pryrc", "file", "Ruby code pry runs at start-up"),
    Entry(".gemrc", "file", "gem's sources and options: where the next gem install takes code"),
    Entry(".bundle", "dir", "bundler's configuration (mirrors) and plugins, run by bundle"),
    Entry(".npmrc", "file", "npm's configuration: script-shell, node-options, git, prefix"),
    Entry(".yarnrc", "file", "yarn 1's configuration: yarn-path runs a file on every yarn"),
    Entry(".yarnrc.yml", "file", "yarn's configuration: yarnPath and plugins run on every yarn"),
    Entry(".bunfig.toml", "file", "bun's configuration: preload scripts run in every bun"),
    Entry(".node_modules", "dir", "where node's require looks, for every program"),
    Entry(".node_libraries", "dir", "the same"),
    # A package manager's home that holds both its configuration and the code its next
    # build runs is protected whole (a build in the jail then needs CARGO_HOME,
    # GRADLE_USER_HOME or maven.repo.local pointed elsewhere, or fs.unprotect).
    Entry(
        ".cargo",
        "dir",
        "bin (on PATH), env (sourced by .profile), config.toml (rustc-wrapper, runners), and "
        "registry sources whose build.rs the next build runs, unverified",
    ),
    Entry(
        ".m2",
        "dir",
        "settings.xml (mirrors: where plugins come from) and the repository's jars the next "
        "build runs, unverified",
    ),
    Entry(".mavenrc", "file", "shell every mvn sources"),
    Entry(
        ".gradle",
        "dir",
        "init.d and init.gradle (scripts every build runs), gradle.properties (jvmargs: a "
        "-javaagent), and the cached jars the next build runs",
    ),
    Entry(".cache/pre-commit", "dir", "the hook environments the next git commit runs"),
    # -- toolchains: code the next ordinary command runs
    *(
        Entry(name, "dir", what)
        for name, what in (
            (".rustup", "rustup's toolchains: the rustc and cargo the next build runs"),
            (".nvm", "nvm.sh, sourced by .bashrc, and the node versions it puts on PATH"),
            (".pyenv", "pyenv's shims and Python versions, on PATH"),
            (".rbenv", "rbenv's shims and Ruby versions, on PATH"),
            (".sdkman", "sdkman-init.sh, sourced by .bashrc, and its JDKs"),
            (".asdf", "asdf.sh, sourced by .bashrc, and its shims"),
            (".volta", "Volta's shims and node versions, on PATH"),
            (".bun", "bun and its global packages, on PATH"),
            (".deno", "deno and its installed scripts, on PATH"),
            ("go/bin", "the programs go install puts there, on PATH"),
        )
    ),
    # -- cloud, container and infrastructure tools
    Entry(".aws", "dir", "config: credential_process runs a command on the next aws call"),
    Entry(".kube", "dir", "config: an exec credential plugin runs on the next kubectl"),
    Entry(".azure", "dir", "az's configuration and cliextensions (Python it runs)"),
    Entry(".docker", "dir", "the cli-plugins docker runs, credential helpers, contexts"),
    Entry(
        ".terraformrc",
        "file",
        "provider_installation: where terraform's providers (programs it runs) come from",
    ),
    Entry(".terraform.d", "dir", "plugins: providers terraform runs"),
    # -- debuggers and database shells
    Entry(".gdbinit", "file", "gdb runs it at start-up (shell, python)"),
    Entry(".lldbinit", "file", "lldb runs it at start-up (platform shell, script)"),
    Entry(".psqlrc", "file", "psql runs it at start-up (its \\! runs a shell command)"),
    Entry(".sqliterc", "file", "sqlite3 runs it at start-up (.shell runs a command)"),
    Entry(".my.cnf", "file", "mysql's client options: pager, plugin-dir (libraries it loads)"),
    # -- editors' and agents' user configuration
    Entry(".vscode", "dir", "VS Code's extensions (code it runs) and argv.json"),
    Entry(".vscode-server", "dir", "VS Code remote's server and extensions, run on connect"),
    Entry(".cursor", "dir", "Cursor's extensions and user MCP servers (mcp.json)"),
    Entry(".claude", "dir", "Claude Code's user settings: hooks, commands, MCP servers"),
    Entry(".claude.json", "file", "Claude Code's user state: the MCP servers it starts"),
    Entry(".codex", "dir", "Codex's configuration: MCP servers, notify commands"),
    Entry(".gemini", "dir", "Gemini CLI's settings: MCP servers, tools"),
    Entry(".continue", "dir", "Continue's configuration: MCP servers"),
    Entry(".codeium", "dir", "Windsurf's user MCP configuration (windsurf/mcp_config.json)"),
    Entry(".kiro", "dir", "Kiro's user MCP configuration and hooks"),
    *(MACOS_HOME_ENTRIES if sys.platform == "darwin" else ()),
)
"""Protected relative to a home directory that lies inside a writable workspace (only
possible with ``fs.allow_home``): what runs at the next login or new terminal, or in the
next ordinary command (a shell's rc files and what they source, PATH directories and
toolchains, tools' user configuration that names code). A list is never complete, so the
guarantee says partial. Left out on purpose: package caches and stores the next install
or build takes code from (``.cache``'s pip and uv caches, ``.npm``, ``go/pkg/mod``,
``.julia/packages``, ``.gem``, ``.ivy2``, ``.sbt``), which a build in the jail must write,
and files whose writing gains nothing the jail cannot already read (``.netrc``,
``.pypirc``: credentials)."""

OPT_OUT_NAMES: Final = frozenset(
    e.rel for e in (*DEFAULT_ENTRIES, *HOME_ENTRIES, *MACOS_HOME_ENTRIES)
)
"""What ``fs.unprotect`` may name (the macOS home entries on every platform, so one policy
means the same everywhere)."""

MAX_ENTRIES: Final = 256
"""More protected entries than this (a hostile .gitmodules, say) is refused, not truncated."""


def within(path: str, root: tuple[int, int], *, resolved: bool = False) -> str | None:
    """`path` (absolute; links in it are resolved first, as the tools that use it will)
    relative to the directory whose identity is `root`, when it lies strictly inside it,
    else None. Decided by the identity of each directory above `path`, not by spelling:
    the workspace may have been named ``//ws``, or be a bind-mount alias of it.
    `resolved`: `path` has no link in it already (the caller resolved it)."""
    try:
        real = path if resolved else os.path.realpath(path)
    except (OSError, ValueError):
        return None
    parts = _components(real)
    top = ""
    for depth in range(len(parts)):
        here = _prefix_identity(top or "/")
        if here is None:
            return None
        if here == root:
            return "/".join(parts[depth:])
        top += "/" + parts[depth]
    return None


_PREFIXES: list[dict[str, tuple[int, int] | None]] = []
"""While `protected_entries` runs (one memo on the list): the identity of each directory
`within` looked at, so twenty paths under one ``.venv`` cost one ``lstat`` per directory,
not twenty."""


def _prefix_identity(path: str) -> tuple[int, int] | None:
    memo = _PREFIXES[-1] if _PREFIXES else None
    if memo is not None and path in memo:
        return memo[path]
    try:
        found: tuple[int, int] | None = _ident(os.lstat(path))
    except OSError:
        found = None
    if memo is not None:
        memo[path] = found
    return found


def _root_identity(workspace: str, root_fd: int | None) -> tuple[int, int] | None:
    try:
        return _ident(os.fstat(root_fd) if root_fd is not None else os.stat(workspace))
    except OSError:
        return None


def _real_dir(path: str) -> str | None:
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    return real if os.path.exists(real) else None


def _panday_packages() -> list[object]:
    """panday's own top-level packages loaded now (``panday``, ``panday_core``, every
    ``panday_tier_*``): a tier shipped as its own distribution is protected like the rest
    without being named here."""
    return [
        module
        for name, module in sorted(sys.modules.items())
        if name == "panday" or (name.startswith("panday_") and "." not in name)
    ]


def interpreter_paths() -> tuple[str, ...]:
    """Where the calling Python (panday's own interpreter) loads code from: its prefixes,
    its executable, every ``sys.path`` entry, and panday's own packages (an editable
    install may map them from anywhere). A jail that could write any of these would run
    its code in the caller's next import or the user's next ``panday`` command."""
    candidates = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        sys.executable,
        *(p for p in sys.path if p),
    ]
    for module in _panday_packages():
        candidates += list(getattr(module, "__path__", ()))
    # Which exist is part of the key: one created since (by the user) must be resolved.
    key = (*candidates, *(str(os.path.lexists(c)) for c in candidates))
    if _INTERPRETER and _INTERPRETER[0][0] == key:
        return _INTERPRETER[0][1]
    out: list[str] = []
    for candidate in candidates:
        real = _real_dir(candidate)
        if real is not None and real not in out:
            out.append(real)
    _INTERPRETER[:] = [(key, tuple(out))]
    return tuple(out)


_INTERPRETER: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
"""The last answer of `interpreter_paths` for the same candidates, each existing or not as
then: resolving ~20 paths is a few hundred ``lstat`` calls, and every command asks."""


def missing_import_paths() -> tuple[str, ...]:
    """``sys.path`` entries (``PYTHONPATH``'s among them) that do not exist yet: a jail that
    could create one would put a ``sitecustomize.py`` in it, run by the next ``panday``."""
    out: list[str] = []
    for entry in sys.path:
        if not entry or not os.path.isabs(entry) or _real_dir(entry) is not None:
            continue
        real = os.path.realpath(entry)
        if real not in out:
            out.append(real)
    return tuple(out)


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
    for module in _panday_packages():
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


def state_directories() -> tuple[str, ...]:
    """panday's own per-user state (cached seccomp programs, /etc views, jail plans and the
    key that seals them; the user's default policy): a jail that rewrote them would widen
    every later jail."""
    from panday_core import userstate

    # The caches and their key where `userstate` keeps them (the password file's home, never
    # $XDG_CACHE_HOME); the per-user policy where `panday.defaults` reads it
    # ($XDG_CONFIG_HOME when absolute, else ~/.config) and the password file's ~/.config.
    home = os.path.expanduser("~")
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(home, ".config")
    candidates = [
        userstate.state_dir(),
        os.path.join(base, "panday") if os.path.isabs(base) else None,
        userstate.config_dir(),
    ]
    out: list[str] = []
    for path in candidates:
        if path is not None and path not in out:
            out.append(path)
    return tuple(out)


def sys_path_refusal(workspace: str, *, writable: bool, fd: int | None = None) -> str | None:
    """Why a writable `workspace` cannot be used by this Python: it is itself on
    ``sys.path`` (``python -m`` or ``-c`` run from it puts it first), so a module the
    command writes there would shadow the standard library in the caller's next import."""
    if not writable:
        return None
    here = path_identity(workspace) if fd is None else _ident(os.fstat(fd))
    cwd = os.getcwd() if "" in sys.path else None
    for entry in sys.path:
        path = cwd if entry == "" else entry
        if path and here is not None and path_identity(path) == here:
            return (
                f"{workspace!r} is on this Python's import path (sys.path), so a module the "
                "command writes there would run in the caller's next import; start Python "
                "with -P (or PYTHONSAFEPATH=1), or choose another workspace"
            )
    return None


def _inside_entries(root: tuple[int, int], skip: frozenset[str]) -> list[Entry]:
    """What lies inside the workspace whose identity is `root` and must stay read-only
    there: panday's interpreter and code, import paths that do not exist yet, panday's own
    project, its state, and any home directory's start-up files. The same answer as last
    time while what it is made of is the same (every command asks)."""
    missing = tuple(e for e in sys.path if e and os.path.isabs(e) and not os.path.lexists(e))
    homes, state = home_directories(), state_directories()
    key = (root, skip, interpreter_paths(), missing, state, homes)
    if _INSIDE and _INSIDE[0][0] == key:
        return list(_INSIDE[0][1])
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


def _dedupe(entries: list[Entry]) -> tuple[Entry, ...]:
    """Entries in order, dropping repeats and any entry inside another (already covered).
    Of repeats, one that must not be created wins (a home's ``.gitconfig`` over the
    workspace default that may be)."""
    kept: list[Entry] = []
    taken: set[str] = set()
    for entry in sorted(entries, key=lambda e: (e.rel.count("/"), e.rel, not e.create)):
        parts = entry.rel.split("/")
        if any("/".join(parts[:depth]) in taken for depth in range(1, len(parts) + 1)):
            continue
        kept.append(entry)
        taken.add(entry.rel)
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
    _PREFIXES.append({})
    try:
        return _protected_entries(workspace, root, skip, protect, derived)
    finally:
        _PREFIXES.pop()


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


# ------------------------------------------------------------------ git, read carefully

_MAX_GIT_FILE = 256 * 1024
_MAX_SUBMODULES = 64
_MAX_WORKTREES = 64


def _read_beneath(root_fd: int, rel: str) -> str | None:
    """A small text file beneath `root_fd`, opened without following any link; None if it
    is missing, a link, not a regular file or too large. (Its content only *adds*
    protection, so a missing or odd file costs nothing but that.)"""
    fd = os.dup(root_fd) if _O_PATH else os.open(".", os.O_RDONLY, dir_fd=root_fd)
    try:
        parts = _components(rel)
        for i, part in enumerate(parts):
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            if i < len(parts) - 1:
                flags |= os.O_DIRECTORY
            child = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = child
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_GIT_FILE:
            return None
        return os.read(fd, _MAX_GIT_FILE).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _list_beneath(root_fd: int, rel: str) -> list[str]:
    """The names in a directory beneath `root_fd` (no link followed), [] if there is none."""
    fd = os.dup(root_fd) if _O_PATH else os.open(".", os.O_RDONLY, dir_fd=root_fd)
    try:
        for part in _components(rel):
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY
            child = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = child
        return sorted(os.listdir(fd))[:_MAX_WORKTREES]
    except OSError:
        return []
    finally:
        os.close(fd)


def _read_host_file(path: str) -> str | None:
    """A small configuration file of the host's (the caller's own git configuration)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_GIT_FILE + 1)
    except (OSError, ValueError):
        return None
    return None if len(data) > _MAX_GIT_FILE else data.decode("utf-8", "replace")


def _clean_rel(value: str, base: str = "") -> str | None:
    """`value` (a relative path from a git file, joined to `base`, itself relative to the
    root) as a relative path inside the root, or None."""
    value = value.strip().strip('"')
    if not value or value.startswith("~"):
        return None
    joined = os.path.normpath(os.path.join(base, value))
    if joined.startswith(("/", "..")) or joined == ".":
        return None
    return joined


def _git_path(value: str, root: tuple[int, int], *, base: str | None) -> str | None:
    """A path git reads from a configuration value, relative to the workspace whose
    identity is `root` when git would find it inside, else None. A relative value is
    joined to `base` (a directory relative to the workspace, or an absolute one outside
    it); ``~/`` is the caller's home; an absolute value is placed by identity
    (`within`), so ``//ws/x`` and a bind alias of the workspace are found too."""
    value = value.strip()
    if not value:
        return None
    if value.startswith("~"):
        value = os.path.expanduser(value)
        if value.startswith("~"):
            return None
    if not os.path.isabs(value):
        if base is None:
            return None
        if not os.path.isabs(base):
            return _clean_rel(value, base)
        value = os.path.join(base, value)
    return within(normal_path(value), root)


def _config_text(value: str) -> str:
    """A git configuration value without its quotes or a trailing comment."""
    value = value.strip()
    if value.startswith('"'):
        end = value.find('"', 1)
        return value[1:end] if end > 0 else value[1:]
    for mark in ("#", ";"):
        value = value.split(mark, 1)[0]
    return value.strip()


def _config_items(text: str) -> list[tuple[str, str, str]]:
    """``(section, key, value)`` of each assignment in a git configuration, lower-cased
    section (with its subsection) and key: enough of the format for the keys read here
    (case-insensitive names, a variable on the header's line, quotes, comments)."""
    current = ""
    out: list[tuple[str, str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            end = line.find("]")
            current = line[1:end].strip().lower() if end > 0 else ""
            line = line[end + 1 :].strip() if end > 0 else ""
        if not line or line[0] in "#;":
            continue
        name, sep, value = line.partition("=")
        if sep:
            out.append((current, name.strip().lower(), _config_text(value)))
    return out


def _config_value(text: str, section: str, key: str) -> str | None:
    """The last ``key`` of ``[section]`` in a git config, None when it is not set."""
    found: str | None = None
    for sect, name, value in _config_items(text):
        if sect == section and name == key:
            found = value
    return found


def _includes(text: str) -> list[str]:
    """Every file a git configuration includes (``include.path``, ``includeIf.*.path``):
    git reads each as if its text were written there."""
    return [
        value
        for sect, name, value in _config_items(text)
        if name == "path" and (sect == "include" or sect.startswith("includeif"))
    ]


def host_git_configs() -> tuple[str, ...]:
    """The configuration files the caller's own git reads in every repository: the system
    file, the user's (``~/.gitconfig`` and the XDG one, for the password file's home and
    ``$HOME``), and the ones ``GIT_CONFIG_GLOBAL``/``GIT_CONFIG_SYSTEM`` name."""
    homes = {os.path.expanduser("~")}
    try:
        import pwd

        homes.add(pwd.getpwuid(os.geteuid()).pw_dir)
    except (ImportError, KeyError):
        pass
    paths = ["/etc/gitconfig", os.environ.get("GIT_CONFIG_SYSTEM", "")]
    paths.append(os.environ.get("GIT_CONFIG_GLOBAL", ""))
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    for home in sorted(homes):
        paths += [os.path.join(home, ".gitconfig"), os.path.join(home, ".config", "git", "config")]
    if os.path.isabs(xdg):
        paths.append(os.path.join(xdg, "git", "config"))
    out: list[str] = []
    for path in paths:
        if os.path.isabs(path) and path not in out:
            out.append(path)
    return tuple(out)


_HEAD_WHY = (
    "git takes a directory holding HEAD, objects and refs for a git directory before any "
    "parent's .git: a jail that wrote them at the root would have the host's next git "
    "command there run the core.fsmonitor or hooks of its config (git checks HEAD first)"
)


def git_entries(root_fd: int) -> tuple[Entry, ...]:
    """Entries that git's discovery and configuration add to the workspace at `root_fd`
    (each only where it lies inside the workspace, decided by identity):

    * ``HEAD`` at the root, so the root itself never becomes a git directory;
    * the git directory a ``.git`` *file* points to (relative or absolute), and the
      ``.git`` file of each linked worktree its ``worktrees/*/gitdir`` names;
    * the hooks directory ``core.hooksPath`` names, in the repository's configuration or
      in the caller's own (system, global), relative or absolute;
    * every file those configurations include (``include.path``, ``includeIf``), which a
      jail could fill with ``core.fsmonitor``;
    * the git metadata of each submodule ``.gitmodules`` lists.
    """
    root = _ident(os.fstat(root_fd))
    out: list[Entry] = [Entry("HEAD", "file", _HEAD_WHY)]
    out += _repository_entries(root_fd, root)
    out += _host_git_entries(root)
    modules = _read_beneath(root_fd, ".gitmodules")
    if modules:
        paths = [
            line.partition("=")[2]
            for line in modules.splitlines()
            if line.strip().lower().startswith("path") and "=" in line
        ]
        for value in paths[:_MAX_SUBMODULES]:
            sub = _clean_rel(value)
            if sub is not None:
                out.append(Entry(sub + "/.git", "file", "a submodule's git metadata", create=False))
    return tuple(out)


def _repository_entries(root_fd: int, root: tuple[int, int]) -> list[Entry]:
    """The repository's own: where its ``.git`` file points, its hooks path, the files its
    configuration includes, and its linked worktrees' ``.git`` files."""
    out: list[Entry] = []
    git_dir = ".git"
    pointer = _read_beneath(root_fd, ".git")
    if pointer is not None and pointer.startswith("gitdir:"):
        target = pointer[len("gitdir:") :].splitlines()[0].strip()
        rel = _git_path(target, root, base="")
        if rel is not None:
            out.append(Entry(rel, "dir", "the git directory .git points to", create=False))
            git_dir = rel
    config = _read_beneath(root_fd, f"{git_dir}/config")
    if config:
        hooks = _config_value(config, "core", "hookspath")
        rel = _git_path(hooks, root, base="") if hooks else None
        if rel is not None:
            out.append(Entry(rel, "dir", "git runs the hooks core.hooksPath names"))
        for include in _includes(config):
            rel = _git_path(include, root, base=git_dir)
            if rel is not None:
                why = "the repository's git configuration includes it (core.fsmonitor ...)"
                out.append(Entry(rel, "file", why))
    for name in _list_beneath(root_fd, f"{git_dir}/worktrees"):
        text = _read_beneath(root_fd, f"{git_dir}/worktrees/{name}/gitdir")
        rel = _git_path(text.splitlines()[0], root, base=None) if text else None
        if rel is not None:
            why = "a linked worktree's .git file: where git finds that worktree's hooks"
            out.append(Entry(rel, "file", why, create=False))
    return out


def _host_git_entries(root: tuple[int, int]) -> list[Entry]:
    """What the caller's own git configuration (in every repository) makes code inside the
    workspace: a relative ``core.hooksPath`` (taken from the top of each working tree, so
    the workspace's own), an absolute one inside it, and included files inside it."""
    out: list[Entry] = []
    for path in host_git_configs():
        text = _read_host_file(path)
        if not text:
            continue
        hooks = _config_value(text, "core", "hookspath")
        if hooks:
            rel = _git_path(hooks, root, base="")
            if rel is not None:
                why = f"the caller's git ({path}) runs the hooks its core.hooksPath names"
                out.append(Entry(rel, "dir", why))
        for include in _includes(text):
            rel = _git_path(include, root, base=os.path.dirname(path))
            if rel is not None:
                why = f"the caller's git configuration ({path}) includes it"
                out.append(Entry(rel, "file", why))
    return out


# ------------------------------------------------------------------------ environment
#
# Env names that make a program load or run code of the policy's choosing: refused in a
# policy's ``env`` unless ``allow_env_hooks`` lists them. The env reaches every program the
# command starts (a shell, git, a pager, an interpreter), so a policy -- a plugin's, say --
# that set one of these would run its code in programs that never asked for it.
#
# The guarantee is PARTIAL: a list is never complete. Where the line is drawn: variables
# read implicitly by the dynamic linker and libc, the shells, the language runtimes' module
# search and start-up, git, and the helpers everyday commands start (pager, editor,
# browser, askpass). Left out on purpose, each a choice a build the command starts makes
# for itself, like the workspace's Makefile: PATH (the policy's declared program search,
# shown at consent), toolchain selection and build-tool configuration (CC, CXX, JAVA_HOME,
# GOROOT, CARGO_*, RUSTC_WRAPPER, GOFLAGS, MAKEFLAGS, npm_config_*, PIP_*, UV_*), data files
# libraries parse (TZ, TERMINFO, SSL_CERT_FILE, HOSTALIASES), behaviour switches
# (MALLOC_CHECK_, PYTHONDONTWRITEBYTECODE).

ENV_HOOK_PREFIXES: Final = {
    "LD_": "the dynamic linker: LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH load a library of the "
    "policy's choosing into every program",
    "DYLD_": "macOS's dynamic loader: DYLD_INSERT_LIBRARIES and friends, the same",
    "GIT_CONFIG_": "git configuration from the environment (COUNT/KEY_n/VALUE_n, PARAMETERS) "
    "or from a file it names (GLOBAL, SYSTEM); NOSYSTEM drops the system's: core.pager, "
    "core.fsmonitor, aliases run commands on the next git command",
    "BASH_FUNC_": "exported shell functions, defined in every bash the command starts "
    "(a real one needs %% in its name, which env refuses anyway: defence in depth)",
    "LUA_INIT": "LUA_INIT and LUA_INIT_5_x: Lua code every lua interpreter runs first",
    "LUA_PATH": "LUA_PATH and LUA_PATH_5_x: where require finds Lua modules",
    "LUA_CPATH": "LUA_CPATH and LUA_CPATH_5_x: where require finds C modules (libraries)",
    "R_PROFILE": "R_PROFILE and R_PROFILE_USER: R code every R session runs first",
    "R_ENVIRON": "R_ENVIRON and R_ENVIRON_USER: R's start-up environment file (R_PROFILE_USER, "
    "R_LIBS among what it can set)",
    "R_LIBS": "R_LIBS, R_LIBS_USER, R_LIBS_SITE: where library() loads R packages from",
}
"""Name prefixes that are start-up hooks, each with the reason."""

ENV_HOOKS: Final = {
    # shells
    "BASH_ENV": "a script non-interactive bash runs first",
    "ENV": "the same for sh (and interactive dash, ksh)",
    "PROMPT_COMMAND": "a command interactive bash runs before each prompt",
    "PS0": "bash expands $(...) in its prompts (promptvars)",
    "PS1": "bash expands $(...) in its prompts (promptvars)",
    "PS2": "bash expands $(...) in its prompts (promptvars)",
    "PS4": "expanded, $(...) included, before each traced command (set -x, SHELLOPTS)",
    "SHELLOPTS": "shell options every bash starts with (xtrace runs PS4's commands; posix "
    "and others change what bash reads at start-up)",
    "BASHOPTS": "shopt options every bash starts with (extdebug, sourcepath change what it runs)",
    "BASH_LOADABLES_PATH": "where `enable -f` loads builtins (shared libraries) from",
    "ZDOTDIR": "where zsh reads .zshenv and .zshrc from",
    "FPATH": "where zsh and ksh autoload functions from",
    "INPUTRC": "readline's key bindings: a macro bound to Enter types a command",
    "SHELL": "the shell programs start for a command (vim's :!, tmux, script, make's $(shell) "
    "in some tools)",
    "HOME": "where every program reads its start-up files (.bashrc, .gitconfig, .npmrc, "
    ".pythonrc ...); panday points it at the workspace",
    "XDG_CONFIG_HOME": "where programs read their configuration (git's config: core.pager, "
    "core.fsmonitor; fish's conf.d)",
    "XDG_CONFIG_DIRS": "the same, system-wide",
    "XDG_DATA_HOME": "where programs find start-up data that is code (fish's vendor_conf.d, "
    "bash-completion's scripts, systemd user units)",
    "XDG_DATA_DIRS": "the same, system-wide",
    # libc and system libraries
    "GCONV_PATH": "glibc's iconv loads its conversion modules (shared libraries) from there",
    "LOCPATH": "glibc loads locale data from there: not code, but a file every program "
    "parses, GCONV_PATH's sibling in glibc's list of unsafe variables (refused conservatively)",
    "NLSPATH": "where catopen finds message catalogues: format strings of the policy's "
    "choosing in programs that print them",
    "GLIBC_TUNABLES": "glibc's run-time tunables (malloc, hardware capabilities); its parser "
    "was exploitable (CVE-2023-4911)",
    "OPENSSL_CONF": "OpenSSL's configuration, which loads the engines and providers (shared "
    "libraries) it names, in every program using OpenSSL",
    "OPENSSL_ENGINES": "where OpenSSL loads engines (shared libraries) from",
    "OPENSSL_MODULES": "where OpenSSL 3 loads providers (shared libraries) from",
    "KRB5_CONFIG": "libkrb5's configuration, which loads the plugin modules it names",
    "GTK_MODULES": "modules (shared libraries) every GTK program loads",
    "GTK3_MODULES": "the same for GTK 3",
    "GTK_PATH": "where GTK looks for modules and engines",
    "GIO_EXTRA_MODULES": "modules (shared libraries) GIO loads",
    "QT_PLUGIN_PATH": "where Qt loads plugins (shared libraries) from",
    # Python
    "PYTHONPATH": "where every Python finds modules first (sitecustomize, a shadowed stdlib "
    "module)",
    "PYTHONHOME": "the standard library every Python loads",
    "PYTHONSTARTUP": "a file interactive Python runs first",
    "PYTHONUSERBASE": "the user site-packages, whose .pth files every Python runs",
    "PYTHONEXECUTABLE": "sys.executable on macOS framework builds: what multiprocessing and "
    "tools start as 'this Python'",
    "PYTHONPLATLIBDIR": "the standard library's directory name, joined to the prefix (a "
    "../ path leaves it)",
    "PYTHONBREAKPOINT": "a callable breakpoint() imports and calls",
    "PYTHONWARNINGS": "a warning category names a module, which Python imports at start-up",
    "PYTHONPYCACHEPREFIX": "where Python reads compiled bytecode from: a planted .pyc runs "
    "in place of its source",
    # Perl, Ruby, Node, JVM, Tcl, PHP, Julia, editors
    "PERL5LIB": "where every perl finds modules first",
    "PERLLIB": "the same, read when PERL5LIB is unset",
    "PERL5OPT": "command-line switches every perl takes (-M loads a module)",
    "PERL5DB": "the debugger perl -d loads",
    "RUBYLIB": "where every ruby finds libraries first",
    "RUBYOPT": "switches every ruby takes (-r requires a library)",
    "RUBYGEMS_GEMDEPS": "a Gemfile (Ruby code) RubyGems evaluates in every ruby",
    "GEM_HOME": "where RubyGems installs and activates gems from",
    "GEM_PATH": "where RubyGems activates gems from",
    "BUNDLE_GEMFILE": "the Gemfile (Ruby code) bundler evaluates",
    "NODE_OPTIONS": "--require a module in every node process",
    "NODE_PATH": "where node's require finds modules",
    "NODE_REPL_EXTERNAL_MODULE": "a module node runs instead of its REPL",
    "JAVA_TOOL_OPTIONS": "-javaagent in every JVM",
    "JDK_JAVA_OPTIONS": "the same, for the java launcher",
    "_JAVA_OPTIONS": "the same, older spelling",
    "CLASSPATH": "where the JVM loads classes from when no -cp is given",
    "TCLLIBPATH": "where tclsh finds packages",
    "TCL_LIBRARY": "the init.tcl every Tcl interpreter sources",
    "TK_LIBRARY": "the Tk scripts every Tk program sources",
    "PHPRC": "php.ini: auto_prepend_file runs a file before every script, extension loads "
    "a library",
    "PHP_INI_SCAN_DIR": "more ini files, the same",
    "JULIA_DEPOT_PATH": "where julia finds config/startup.jl and packages",
    "JULIA_LOAD_PATH": "where julia's using finds code",
    "EMACSLOADPATH": "where Emacs loads its Lisp (site-start.el) from",
    "VIMINIT": "Ex commands vim runs at start-up (:!cmd among them)",
    "EXINIT": "the same for vi and ex",
    "VIMRUNTIME": "where vim loads its runtime scripts from",
    # git and other version control
    "GIT_CONFIG": "the file `git config` reads and writes",
    "GIT_DIR": "the repository git uses, with its config (core.fsmonitor) and hooks",
    "GIT_COMMON_DIR": "where git reads the repository's config and hooks",
    "GIT_EXEC_PATH": "where git finds its own sub-commands",
    "GIT_TEMPLATE_DIR": "hooks git init and clone copy into a new repository",
    "GIT_SSH": "the program git runs to reach a remote",
    "GIT_SSH_COMMAND": "the command git runs to reach a remote",
    "GIT_PROXY_COMMAND": "the command git runs to connect over git://",
    "GIT_ASKPASS": "the program git runs to ask for a password",
    "SSH_ASKPASS": "the program ssh (and git) runs to ask for a password",
    "SUDO_ASKPASS": "the same for sudo -A",
    "GIT_EXTERNAL_DIFF": "the program git diff runs",
    "GIT_PAGER": "the program git pipes its output to",
    "GIT_EDITOR": "the program git commit and rebase run",
    "GIT_SEQUENCE_EDITOR": "the program git rebase -i runs",
    "GIT_MAN_VIEWER": "the program git help runs",
    "HGRCPATH": "Mercurial's configuration: [hooks] run on the next hg command",
    "JJ_CONFIG": "Jujutsu's configuration: its pager, diff tools, aliases",
    # helpers everyday commands start
    "PAGER": "the program man, git, psql and others pipe their output to",
    "MANPAGER": "the program man pipes its output to",
    "MANOPT": "options man takes (-P names a pager)",
    "LESS": "options every less takes (--lesskey-src names a key file whose #env sets LESSOPEN)",
    "LESSOPEN": "an input preprocessor every less runs on the file it opens",
    "LESSCLOSE": "the same, after it closes it",
    "LESSKEY": "a key file less reads (#env sets LESSOPEN)",
    "LESSKEYIN": "a key source file less reads (the same)",
    "LESSKEY_SYSTEM": "the system-wide key file (the same)",
    "LESSKEYIN_SYSTEM": "the system-wide key source file (the same)",
    "EDITOR": "the editor git, crontab, less's v, sudoedit and others start",
    "VISUAL": "the same, preferred by most",
    "FCEDIT": "the editor the shell's fc starts",
    "SUDO_EDITOR": "the editor sudoedit starts",
    "BROWSER": "the program xdg-open, Python's webbrowser and git web--browse start",
    "RIPGREP_CONFIG_PATH": "a file of rg options (--pre runs a program on every file searched)",
    "FZF_DEFAULT_COMMAND": "the command fzf runs for its input",
    "FZF_DEFAULT_OPTS": "options every fzf takes (--bind 'start:execute(...)', --preview run "
    "commands)",
}
"""Exact names that are start-up hooks, each with the reason (see the comment above)."""


def env_hook_reason(name: str) -> str | None:
    """Why `name` is a start-up hook (refused in ``env`` unless ``allow_env_hooks`` lists it),
    or None when it is not one of the listed names or prefixes."""
    reason = ENV_HOOKS.get(name)
    if reason is not None:
        return reason
    for prefix, why in ENV_HOOK_PREFIXES.items():
        if name.startswith(prefix):
            return why
    return None


def is_env_hook(name: str) -> bool:
    return env_hook_reason(name) is not None
