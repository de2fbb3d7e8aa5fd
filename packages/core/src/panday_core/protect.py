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


class RootRefused(Exception):  # noqa: N818 - a refusal, carried to the tier's Refusal list
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
)

_NOLOGIN_SHELLS: Final = ("nologin", "false", "sync", "shutdown", "halt")


def _beneath(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def home_directories() -> frozenset[str]:
    """Home directories a jail's writes could turn into code run at someone's next login:
    the caller's (``$HOME`` and its password-file entry) and, for a root caller (whose jail
    writes as root), every account that can log in."""
    homes: set[str] = set()
    env_home = os.environ.get("HOME")
    if env_home and env_home.startswith("/"):
        homes.add(os.path.normpath(env_home))
    try:
        import pwd  # noqa: PLC0415 - not on macOS's start-up path unless a root is checked

        homes.add(pwd.getpwuid(os.geteuid()).pw_dir)
        if os.geteuid() == 0:
            for entry in pwd.getpwall():
                if not entry.pw_shell.endswith(_NOLOGIN_SHELLS):
                    homes.add(entry.pw_dir)
    except (ImportError, KeyError):
        pass
    return frozenset(h for h in homes if h.startswith("/") and h != "/")


def root_refusal(path: str, *, writable: bool, allow_home: bool) -> str | None:
    """Why `path` (absolute, normalised, links already refused) cannot be a workspace or
    staged path; None when it can."""
    if not allow_home:
        for home in sorted(home_directories()):
            if _beneath(home, path):
                what = "is" if home == path else f"holds {home!r}, which is"
                return (
                    f"{path!r} {what} a home directory: its start-up files and .ssh would be "
                    "open to the command (choose a project directory, or set fs.allow_home)"
                )
    if path in _NEVER_EXACT:
        return f"{path!r} is part of the jail's own file system (or holds it) and cannot be mounted"
    for top in _NEVER_BENEATH:
        if _beneath(path, top):
            return f"{path!r} lies in {top}, which no jail may see (host state and secrets)"
    return _writable_refusal(path) if writable else None


def _writable_refusal(path: str) -> str | None:
    """Why `path` may be staged read-only but never written."""
    for top in _NEVER_WRITABLE_BENEATH:
        if _beneath(path, top):
            return f"{path!r} lies in {top}, which holds the host's programs; stage it read-only"
    # A workspace that holds panday's state gets it as a protected entry; one inside it
    # would let a jail rewrite the cached seccomp programs and jail plans themselves.
    for state in state_directories():
        real = os.path.realpath(state)
        if _beneath(path, real):
            return (
                f"{path!r} lies in panday's own state ({real}: cached jail plans and seccomp "
                "programs, /etc views, the default policy), which decides every later jail; "
                "stage it read-only"
            )
    return None


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

HOME_ENTRIES: Final = (
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
    Entry(".ssh", "dir", "authorized_keys and config: who may log in, what ssh runs"),
    Entry(".gnupg", "dir", "keys and the agent's configuration"),
    Entry(
        ".gitconfig", "file", "git's user configuration: hooks and commands for every repository"
    ),
    Entry(
        ".config",
        "dir",
        "autostart entries, systemd user units, fish and git configuration, panday's own policy",
    ),
    Entry(".local/bin", "dir", "programs found first on PATH"),
    Entry(".pam_environment", "file", "variables set at login (LD_PRELOAD among them)"),
)
"""Protected relative to a home directory that lies inside a writable workspace (only
possible with ``fs.allow_home``)."""

OPT_OUT_NAMES: Final = frozenset(e.rel for e in (*DEFAULT_ENTRIES, *HOME_ENTRIES))
"""What ``fs.unprotect`` may name."""

MAX_ENTRIES: Final = 256
"""More protected entries than this (a hostile .gitmodules, say) is refused, not truncated."""


def _inside(path: str, root: str) -> str | None:
    """`path` relative to `root` when it lies strictly inside it, else None."""
    root = root.rstrip("/")
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    return None


def _real_dir(path: str) -> str | None:
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    return real if os.path.exists(real) else None


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
    for name in ("panday_core", "panday_tier_linux", "panday_tier_macos", "panday"):
        module = sys.modules.get(name)
        candidates += list(getattr(module, "__path__", ()))
    out: list[str] = []
    for candidate in candidates:
        real = _real_dir(candidate)
        if real is not None and real not in out:
            out.append(real)
    return tuple(out)


def state_directories() -> tuple[str, ...]:
    """panday's own per-user state (cached seccomp programs, /etc views and jail plans; the
    user's default policy): a jail that rewrote them would widen every later jail."""
    home = os.path.expanduser("~")
    out: list[str] = []
    # As the caches and the per-user policy look them up: the XDG variable when it is an
    # absolute path, else the default under the home directory.
    for variable, default in (("XDG_CACHE_HOME", ".cache"), ("XDG_CONFIG_HOME", ".config")):
        base = os.environ.get(variable, "")
        if not os.path.isabs(base):
            base = os.path.join(home, default)
        if os.path.isabs(base):
            out.append(os.path.join(base, "panday"))
    return tuple(out)


def sys_path_refusal(workspace: str, *, writable: bool) -> str | None:
    """Why a writable `workspace` cannot be used by this Python: it is itself on
    ``sys.path`` (``python -m`` or ``-c`` run from it puts it first), so a module the
    command writes there would shadow the standard library in the caller's next import."""
    if not writable:
        return None
    cwd = os.getcwd() if "" in sys.path else None
    for entry in sys.path:
        path = cwd if entry == "" else entry
        if path and _real_dir(path) == workspace:
            return (
                f"{workspace!r} is on this Python's import path (sys.path), so a module the "
                "command writes there would run in the caller's next import; start Python "
                "with -P (or PYTHONSAFEPATH=1), or choose another workspace"
            )
    return None


def _dedupe(entries: list[Entry]) -> tuple[Entry, ...]:
    """Entries in order, dropping repeats and any entry inside another (already covered)."""
    kept: list[Entry] = []
    for entry in sorted(entries, key=lambda e: (e.rel.count("/"), e.rel)):
        if any(entry.rel == k.rel or entry.rel.startswith(k.rel + "/") for k in kept):
            continue
        kept.append(entry)
    return tuple(kept)


def protected_entries(
    workspace: str,
    *,
    protect: tuple[str, ...] = (),
    unprotect: tuple[str, ...] = (),
    derived: tuple[Entry, ...] = (),
) -> tuple[Entry, ...]:
    """Every protected entry of a writable `workspace` (real path), relative to it: the
    defaults not opted out, the policy's own, what `derived` adds (`git_entries`), panday's
    interpreter and state inside it, and the start-up files of any home directory inside
    it. Raises `RootRefused` past `MAX_ENTRIES`."""
    skip = frozenset(unprotect)
    entries = [e for e in DEFAULT_ENTRIES if e.rel not in skip]
    for rel in protect:
        kind: Literal["dir", "file"] = "dir" if rel.endswith("/") else "file"
        entries.append(Entry(rel.rstrip("/"), kind, "listed in fs.protect"))
    entries += derived
    for path in interpreter_paths():
        rel = _inside(path, workspace)
        if rel is not None:
            entries.append(Entry(rel, "dir", "panday's own interpreter or code", create=False))
    for path in state_directories():
        rel = _inside(os.path.realpath(path), workspace)
        if rel is not None:
            entries.append(Entry(rel, "dir", "panday's own state (filter cache, plans, policy)"))
    for home in home_directories():
        base = workspace if home == workspace else None
        rel_home = _inside(home, workspace)
        if base is None and rel_home is None:
            continue
        prefix = "" if rel_home is None else rel_home + "/"
        entries += [Entry(prefix + e.rel, e.kind, e.why) for e in HOME_ENTRIES if e.rel not in skip]
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


def _clean_rel(value: str, base: str = "") -> str | None:
    """`value` (a path from a git file) as a relative path inside the root, or None."""
    value = value.strip().strip('"')
    if not value or value.startswith("~"):
        return None
    joined = os.path.normpath(os.path.join(base, value))
    if joined.startswith(("/", "..")) or joined == ".":
        return None
    return joined


def _config_value(text: str, section: str, key: str) -> str | None:
    """The last ``key`` of ``[section]`` in a git config (enough of the format for the
    keys read here: case-insensitive names, optional quotes, ``#``/``;`` comments)."""
    current = ""
    found: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = line[1 : line.find("]")].strip().lower() if "]" in line else ""
            continue
        name, sep, value = line.partition("=")
        if sep and current == section and name.strip().lower() == key:
            found = value.split(" #")[0].split(" ;")[0].strip()
    return found


def git_entries(root_fd: int) -> tuple[Entry, ...]:
    """Entries that the repository at `root_fd` adds: the git directory a ``.git`` *file*
    points to (worktrees, submodules), the hooks directory ``core.hooksPath`` names, and
    the git metadata of each submodule ``.gitmodules`` lists -- when they lie inside."""
    out: list[Entry] = []
    pointer = _read_beneath(root_fd, ".git")
    if pointer is not None and pointer.startswith("gitdir:"):
        rel = _clean_rel(pointer[len("gitdir:") :].splitlines()[0])
        if rel is not None:
            out.append(Entry(rel, "dir", "the git directory .git points to", create=False))
    config = _read_beneath(root_fd, ".git/config")
    hooks = _config_value(config, "core", "hookspath") if config else None
    rel = _clean_rel(hooks) if hooks else None
    if rel is not None:
        out.append(Entry(rel, "dir", "git runs the hooks core.hooksPath names"))
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


# ------------------------------------------------------------------------ environment

ENV_HOOK_PREFIXES: Final = ("LD_", "DYLD_")
"""The dynamic linker's variables: a library of the policy's choosing in every program."""

ENV_HOOKS: Final = frozenset(
    {
        "BASH_ENV",  # a script non-interactive bash runs first
        "ENV",  # the same for sh
        "PROMPT_COMMAND",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PERL5OPT",
        "PERL5DB",
        "RUBYOPT",
        "NODE_OPTIONS",  # --require a module in every node process
        "JAVA_TOOL_OPTIONS",  # -javaagent in every JVM
        "JDK_JAVA_OPTIONS",
        "_JAVA_OPTIONS",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_GLOBAL",
    }
)
"""Interpreter start-up hooks: code (or a flag that loads code) every program of that
language runs before its own. Refused in ``env`` unless ``allow_env_hooks`` lists them."""


def is_env_hook(name: str) -> bool:
    return name in ENV_HOOKS or name.startswith(ENV_HOOK_PREFIXES)
