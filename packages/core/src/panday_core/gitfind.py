"""What git's discovery and configuration make code inside a workspace, read carefully
(`panday_core.protect.protected_entries` protects what `git_entries` finds).
"""

from __future__ import annotations

import os
import stat

from panday_core.hostpaths import kept_answer
from panday_core.identity import (
    components,
    forget_prefixes,
    ident,
    normal_path,
    remember_prefixes,
    within,
)
from panday_core.protected_names import Entry

TYPE_CHECKING = False  # typing's flag without importing typing (panday run's start-up)


_MAX_GIT_FILE = 256 * 1024
_MAX_SUBMODULES = 64
_MAX_WORKTREES = 64
_CHUNK = 16 * 1024


def _read_small(fd: int, limit: int) -> bytes | None:
    """What `fd` holds, or None past `limit` bytes. Read a chunk at a time (a short read
    of a regular file is its end): one read of `limit` bytes has CPython allocate that
    much first, and 256 KiB is an mmap and a munmap, whose TLB flush interrupts every CPU
    the caller's threads run on. For a file of a few hundred bytes, 16 us against 2 here,
    and every command reads the caller's git configuration."""
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        chunk = os.read(fd, _CHUNK)
        chunks.append(chunk)
        total += len(chunk)
        if len(chunk) < _CHUNK:
            break
    return None if total > limit else b"".join(chunks)


def _open_beneath(root_fd: int, rel: str, flags: int) -> int:
    """`rel` beneath `root_fd` opened with `flags`, no link followed on the way (each
    directory opened with O_NOFOLLOW from the last; `root_fd` itself is not closed). One
    ``openat`` for a name at the root: most of what is looked for is missing, and every
    command looks."""
    parts = components(rel)
    fd = root_fd
    try:
        for part in parts[:-1]:
            child = os.open(part, _BELOW | os.O_DIRECTORY, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = child
        return os.open(parts[-1], flags | _BELOW, dir_fd=fd)
    finally:
        if fd != root_fd:
            os.close(fd)


_BELOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

_ACCESS_BELOW = (
    os.access in os.supports_dir_fd
    and os.access in os.supports_follow_symlinks
    and os.access in os.supports_effective_ids
)


def _absent_beneath(root_fd: int, rel: str) -> bool:
    """Whether `rel` is surely missing beneath `root_fd`, asked without an exception (most
    of what is looked for is missing, every command looks, and a failed open costs
    Python an exception object). Only an answer of missing is used: a path the
    no-follow walk could open has no link in it, so ``faccessat`` finds it too."""
    if not _ACCESS_BELOW:
        return False
    try:
        return not os.access(
            rel, os.F_OK, dir_fd=root_fd, effective_ids=True, follow_symlinks=False
        )
    except (OSError, ValueError):
        return False


def _read_beneath(root_fd: int, rel: str) -> str | None:
    """A small text file beneath `root_fd`, opened without following any link; None if it
    is missing, a link, not a regular file or too large. (Its content only *adds*
    protection, so a missing or odd file costs nothing but that.)"""
    if _absent_beneath(root_fd, rel):
        return None
    try:
        fd = _open_beneath(root_fd, rel, 0)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_GIT_FILE:
            return None
        data = _read_small(fd, _MAX_GIT_FILE)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if data is None else data.decode("utf-8", "replace")


def _list_beneath(root_fd: int, rel: str) -> list[str]:
    """The names in a directory beneath `root_fd` (no link followed), [] if there is none."""
    if _absent_beneath(root_fd, rel):
        return []
    try:
        fd = _open_beneath(root_fd, rel, os.O_DIRECTORY)
    except OSError:
        return []
    try:
        return sorted(os.listdir(fd))[:_MAX_WORKTREES]
    except OSError:
        return []
    finally:
        os.close(fd)


def _read_host_file(path: str) -> str | None:
    """A small configuration file of the host's (the caller's own git configuration)."""
    # os.open rather than open(): a third of the cost, and O_NONBLOCK keeps a FIFO put
    # where a configuration file is looked for from hanging the caller.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    try:
        data = _read_small(fd, _MAX_GIT_FILE)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if data is None else data.decode("utf-8", "replace")


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
    return kept_answer(_CONFIGS, _find_host_git_configs)


_CONFIGS: list[tuple[object, tuple[str, ...]]] = []


def _find_host_git_configs() -> tuple[str, ...]:
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
    * the caller's own configuration files (system, global) when they lie inside;
    * the hooks directory ``core.hooksPath`` names, in the repository's configuration or
      in the caller's own (system, global), relative or absolute;
    * every file those configurations include (``include.path``, ``includeIf``), which a
      jail could fill with ``core.fsmonitor``;
    * the git metadata of each submodule ``.gitmodules`` lists.
    """
    remember_prefixes()  # the caller's configuration files share their directories
    try:
        return _git_entries(root_fd)
    finally:
        forget_prefixes()


def _git_entries(root_fd: int) -> tuple[Entry, ...]:
    root = ident(os.fstat(root_fd))
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
        # The file itself, when it lies inside (GIT_CONFIG_GLOBAL or XDG_CONFIG_HOME naming
        # a place in the workspace): a jail that wrote it would set the caller's
        # core.fsmonitor, run by the host's next git command in any repository.
        rel = within(normal_path(path), root)
        if rel:
            why = f"the caller's git reads it in every repository ({path}): core.fsmonitor ..."
            out.append(Entry(rel, "file", why))
        text = _read_host_file(path)
        if not text:
            continue
        hooks, includes = _host_config(text)
        if hooks:
            rel = _git_path(hooks, root, base="")
            if rel is not None:
                why = f"the caller's git ({path}) runs the hooks its core.hooksPath names"
                out.append(Entry(rel, "dir", why))
        for include in includes:
            rel = _git_path(include, root, base=os.path.dirname(path))
            if rel is not None:
                why = f"the caller's git configuration ({path}) includes it"
                out.append(Entry(rel, "file", why))
    return out


def _host_config(text: str) -> tuple[str | None, list[str]]:
    """The ``core.hooksPath`` and the includes of a host configuration's `text`, kept by
    text (the same file is read again for every command; parsing it is the dearer part)."""
    found = _PARSED.get(text)
    if found is None:
        found = (_config_value(text, "core", "hookspath"), _includes(text))
        if len(_PARSED) >= _MAX_PARSED:
            _PARSED.clear()
        _PARSED[text] = found
    return found


_PARSED: dict[str, tuple[str | None, list[str]]] = {}
_MAX_PARSED = 8
