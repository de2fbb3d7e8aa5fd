"""The hazard rules: which changes are held back rather than applied.

Each rule looks at what actually changed, at any depth, created or modified alike (not at
a list of paths that existed when the command started). A rule that matches by name
(the protected-entry table, Python's start-up files) can never list every tool's name,
so the guarantee built on the names alone is partial; the rules that read content
(git configuration, build systems) and kinds (set-id bits, devices, outward links) do
not depend on a name being listed. The table `RULES` is what docs/workspace.md shows.
"""

# ruff: noqa: PTH112, PTH113, PTH118, PTH208 - os terms beside dir_fd calls pathlib lacks

from __future__ import annotations

import json
import os
import posixpath
import stat
import sys
import tomllib
from typing import TYPE_CHECKING, Final

from panday_core.protected_names import DEFAULT_ENTRIES, HOME_ENTRIES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from panday_core.changes.model import Change
    from panday_core.protected_names import Entry


class Rule:
    __slots__ = ("id", "reason", "what")

    def __init__(self, rule_id: str, what: str, reason: str) -> None:
        self.id = rule_id
        self.what = what
        self.reason = reason


RULES: Final = (
    Rule(
        "git-directory",
        "anything at or under a `.git` (a directory or a gitfile), at any depth",
        "git runs hooks and reads configuration (core.fsmonitor, aliases, filters) from it "
        "on the user's next git command; a gitfile points git at another repository",
    ),
    Rule(
        "git-repository-shape",
        "a directory that has git's repository shape (HEAD, objects and refs), for the "
        "entries that make or configure it",
        "git treats such a directory as a bare repository when a command runs in it (a "
        "shell prompt's `git status`) and runs the programs its config names",
    ),
    Rule(
        "git-config-program",
        "a git configuration file (.gitconfig, .gitmodules, .lfsconfig, a repository's "
        "config) that names a program: core.fsmonitor, core.hooksPath, core.sshCommand, "
        "core.pager, core.editor, include.path, includeIf, filters, diff/merge drivers, "
        "credential helpers, aliases",
        "git runs the named program when a command reads that configuration",
    ),
    Rule(
        "protected-name",
        "a name of the protected-entry table (agent, editor, shell and tool configuration: "
        ".vscode, .claude, .envrc, .npmrc, ...) at any depth, and the session's own "
        "protected entries at the workspace root",
        "an editor, agent or tool reads it and runs what it names when the user opens the "
        "folder or starts the tool; the table is a list, so this row alone is partial",
    ),
    Rule(
        "build-system",
        "pyproject.toml whose [build-system] or build hooks changed, any setup.py or "
        "setup.cfg, package.json whose scripts changed",
        "a build or an install runs the backend, setup script or lifecycle scripts named there",
    ),
    Rule(
        "python-start-up",
        "a .pth file, sitecustomize.py or usercustomize.py, at any depth",
        "Python runs them at start-up when their directory is on its path",
    ),
    Rule(
        "module-shadow",
        "a new Python module or package whose top-level name is a standard-library module "
        "or one importable on the caller's sys.path",
        "a later `python` started in that directory imports it instead of the real module",
    ),
    Rule(
        "caller-import-path",
        "any Python module (.py, .pyc, an extension, a package's files) created or modified "
        "in a workspace that is on the calling Python's sys.path",
        "the caller's own Python imports from the workspace, outside any jail, later in the "
        "same process: its next lazy import would run what the command wrote",
    ),
    Rule(
        "set-id",
        "a file with the set-user-id or set-group-id bit",
        "run by anyone, it runs with its owner's or group's rights",
    ),
    Rule(
        "special-file",
        "a device node, FIFO or socket",
        "not data: a device reaches hardware, a FIFO or socket blocks or talks to a process",
    ),
    Rule(
        "outward-link",
        "a symbolic link whose target leaves the workspace",
        "what follows it later (an editor, a build, the user) reads or writes outside the "
        "workspace",
    ),
    Rule(
        "inside-held",
        "anything inside a held directory",
        "applying it would create the held directory",
    ),
)
_BY_ID: Final = {r.id: r for r in RULES}
CONFLICT: Final = (
    "the workspace's copy changed after the command started (by identity and ctime): "
    "applying would overwrite someone else's edit"
)

_GIT_CONFIG_NAMES: Final = frozenset({".gitconfig", ".gitmodules", ".lfsconfig"})
_GIT_SHAPE: Final = ("HEAD", "objects", "refs")
_GIT_CONTROL: Final = frozenset(
    {
        "HEAD",
        "objects",
        "refs",
        "config",
        "hooks",
        "info",
        "packed-refs",
        "commondir",
        "gitdir",
        "worktrees",
        "modules",
        "index",
        "config.worktree",
    }
)
_PROGRAM_KEYS: Final = frozenset(
    {
        "core.fsmonitor",
        "core.hookspath",
        "core.sshcommand",
        "core.pager",
        "core.editor",
        "core.askpass",
        "core.gitproxy",
        "include.path",
        "sequence.editor",
        "gpg.program",
        "credential.helper",
        "uploadpack.packobjectshook",
        "receive.procreceive",
        "ssh.variant",
        "diff.external",
        "merge.tool",
        "diff.tool",
    }
)
_PROGRAM_SUFFIXES: Final = (
    ".clean",
    ".smudge",
    ".process",
    ".textconv",
    ".command",
    ".driver",
    ".helper",
    ".cmd",
    ".path",
    ".program",
)
_PROGRAM_SECTIONS: Final = frozenset({"alias", "includeif", "filter", "pager"})
_STARTUP: Final = frozenset({"sitecustomize.py", "usercustomize.py"})
_MAX_READ: Final = 4 << 20


def rule(rule_id: str) -> Rule:
    return _BY_ID[rule_id]


def _hold(change: Change, rule_id: str, detail: str = "") -> None:
    change.state = "held"
    change.rule = rule_id
    change.reason = _BY_ID[rule_id].reason + (f" ({detail})" if detail else "")


class Context:
    """What the rules need beyond the change itself: the upper directory (what the
    command wrote) and the workspace below it, both as descriptors."""

    def __init__(
        self,
        *,
        upper_fd: int,
        lower_fd: int,
        workspace: str,
        anchored: Sequence[Entry] = (),
        unprotect: Sequence[str] = (),
        shadowed: Callable[[], frozenset[str]] | None = None,
        on_import_path: bool = False,
    ) -> None:
        self.upper_fd = upper_fd
        self.lower_fd = lower_fd
        self.workspace = workspace
        self.anchored = tuple(e.rel for e in anchored)
        self.unprotect = frozenset(n.casefold() for n in unprotect)
        """Names the policy's ``fs.unprotect`` opened (`.git` for a command that commits):
        their name rules do not hold them; the content and kind rules still do."""
        self._shadowed = shadowed or importable_names
        self.on_import_path = on_import_path
        """The workspace is on the calling Python's sys.path (accepted only when writes
        are proposals): every Python module written in it is held."""
        self._names: frozenset[str] | None = None

    def shadowed(self) -> frozenset[str]:
        if self._names is None:
            self._names = self._shadowed()
        return self._names

    def read(self, rel: str, *, upper: bool) -> bytes | None:
        """The bytes of `rel` in the upper directory or the workspace (None: absent, not a
        regular file, or larger than the rules read)."""
        fd = -1
        try:
            fd = _open_beneath(self.upper_fd if upper else self.lower_fd, rel)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_READ:
                return None
            with os.fdopen(os.dup(fd), "rb") as fh:
                return fh.read(_MAX_READ + 1)
        except OSError:
            return None
        finally:
            if fd >= 0:
                os.close(fd)

    def exists(self, rel: str) -> bool:
        """Whether `rel` exists in the merged view (upper over the workspace)."""
        for base in (self.upper_fd, self.lower_fd):
            try:
                st = os.stat(rel, dir_fd=base, follow_symlinks=False)
            except OSError:
                continue
            return not (stat.S_ISCHR(st.st_mode) and st.st_rdev == 0)
        return False


def _open_beneath(root: int, rel: str) -> int:
    fd = os.dup(root)
    try:
        parts = rel.split("/")
        for part in parts[:-1]:
            nxt = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = nxt
        last = os.open(
            parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd
        )
    finally:
        os.close(fd)
    return last


def importable_names() -> frozenset[str]:
    """Top-level module names a Python of the caller's would import: the standard library's
    and every module or regular package on this process's sys.path (a bare directory is a
    namespace package, which a module of the same name earlier on the path does not
    replace so much as join, and counting it would hold every new ``docs/`` or ``src/``)."""
    names = set(sys.stdlib_module_names)
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        try:
            listing = os.listdir(entry)
        except OSError:
            continue
        for name in listing:
            stem, dot, ext = name.partition(".")
            if not stem.isidentifier():
                continue
            if (dot and (ext == "py" or ext.endswith(("so", "pyc", "pyd")))) or (
                not dot and os.path.isfile(os.path.join(entry, name, "__init__.py"))
            ):
                names.add(stem)
    return frozenset(names)


def judge(changes: Iterable[Change], ctx: Context) -> None:
    """Mark every change that a rule holds (``state="held"``, with the rule and reason)."""
    ordered = list(changes)
    shapes = _repository_shapes(ordered, ctx)
    held_dirs: list[str] = []
    protected = tuple(n for n in _protected_names() if "/".join(n) not in ctx.unprotect)
    git_rule = ".git" not in ctx.unprotect
    for change in ordered:
        if change.state != "pending":
            continue
        parts = change.path.split("/")
        if any(change.path.startswith(d + "/") for d in held_dirs):
            _hold(change, "inside-held")
        elif git_rule and any(p.casefold() == ".git" for p in parts):
            _hold(change, "git-directory")
        elif (shape := _in_shape(parts, shapes)) is not None:
            _hold(change, "git-repository-shape", f"{shape or 'the workspace root'}")
        elif (name := _protected(parts, protected, ctx.anchored)) is not None:
            _hold(change, "protected-name", name)
        elif change.action != "delete":
            # Deleting a protected name or part of a repository is held above like writing
            # it; the content rules read what was written, so a deletion has none.
            _content_rules(change, parts, ctx)
        if change.rule and change.kind == "dir":
            held_dirs.append(change.path)


def _protected_names() -> tuple[tuple[str, ...], ...]:
    names = {
        tuple(p.casefold() for p in e.rel.split("/")) for e in (*DEFAULT_ENTRIES, *HOME_ENTRIES)
    }
    names.discard((".git",))
    return tuple(sorted(names))


def _protected(
    parts: list[str], names: tuple[tuple[str, ...], ...], anchored: tuple[str, ...]
) -> str | None:
    folded = [p.casefold() for p in parts]
    for name in names:
        n = len(name)
        for i in range(len(folded) - n + 1):
            if tuple(folded[i : i + n]) == name:
                return "/".join(parts[: i + n])
    path = "/".join(parts)
    for rel in anchored:
        if path == rel or path.startswith(rel + "/"):
            return rel
    return None


def _repository_shapes(changes: list[Change], ctx: Context) -> list[str]:
    """Directories (relative; "" is the root) that have git's shape in the merged view and
    gained or changed part of it in this change set."""
    candidates: set[str] = set()
    for change in changes:
        head, _, name = change.path.rpartition("/")
        if name in _GIT_CONTROL:
            candidates.add(head)
    out: list[str] = []
    for directory in sorted(candidates):
        prefix = directory + "/" if directory else ""
        if all(ctx.exists(prefix + part) for part in _GIT_SHAPE):
            out.append(directory)
    return out


def _in_shape(parts: list[str], shapes: list[str]) -> str | None:
    for directory in shapes:
        depth = len(directory.split("/")) if directory else 0
        if (
            len(parts) > depth
            and parts[depth] in _GIT_CONTROL
            and parts[:depth] == (directory.split("/") if directory else [])
        ):
            return directory
    return None


def _content_rules(change: Change, parts: list[str], ctx: Context) -> None:
    name = parts[-1]
    if change.kind == "special":
        _hold(change, "special-file")
    elif change.kind == "file" and change.mode & (stat.S_ISUID | stat.S_ISGID):
        _hold(change, "set-id", oct(change.mode))
    elif change.kind == "symlink" and _outward(change, ctx.workspace):
        _hold(change, "outward-link", f"-> {change.target}")
    elif name.endswith(".pth") or name in _STARTUP:
        _hold(change, "python-start-up")
    elif (
        change.kind == "file"
        and (name in _GIT_CONFIG_NAMES or name.endswith(".gitconfig"))
        and (key := _program_key(ctx.read(change.path, upper=True))) is not None
    ):
        _hold(change, "git-config-program", key)
    elif (why := _build_change(change, name, ctx)) is not None:
        _hold(change, "build-system", why)
    elif ctx.on_import_path and change.kind == "file" and _module_name(change, name):
        _hold(change, "caller-import-path")
    elif (
        change.action == "create"
        and not change.copied_up
        and ((module := _module_name(change, name)) is not None and module in ctx.shadowed())
    ):
        _hold(change, "module-shadow", module)


def _outward(change: Change, workspace: str) -> bool:
    target = change.target or ""
    if target.startswith("/"):
        real = posixpath.normpath(target)
        return not (real == workspace or real.startswith(workspace.rstrip("/") + "/"))
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(change.path), target))
    return joined == ".." or joined.startswith("../")


def _module_name(change: Change, name: str) -> str | None:
    if change.kind == "dir":
        return name if name.isidentifier() else None
    if change.kind != "file":
        return None
    stem, dot, ext = name.partition(".")
    if dot and (ext == "py" or ext.endswith(("so", "pyd", "pyc"))) and stem.isidentifier():
        return stem
    return None


def _program_key(data: bytes | None) -> str | None:
    """The first key of git configuration text that names a program (None: none, so it
    is only data); unreadable or oversized text counts as naming one."""
    if data is None:
        return "unreadable or larger than the rules read"
    section = ""
    for raw in data.decode("utf-8", "replace").splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            inner = line[1:].split("]", 1)[0].strip()
            head, _, sub = inner.partition(" ")
            section = head.casefold()
            if section in _PROGRAM_SECTIONS:
                return f"[{inner}]"
            if sub and section in {"filter", "diff", "merge", "credential"}:
                section = f"{section}.*"
            continue
        key = line.split("=", 1)[0].strip().casefold()
        dotted = f"{section}.{key}"
        if (
            dotted in _PROGRAM_KEYS
            or (section.endswith(".*") and dotted.endswith(_PROGRAM_SUFFIXES))
            or (section == "core" and key.endswith(("command", "proxy")))
        ):
            return dotted
    return None


def _flatten(doc: object, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    if isinstance(doc, dict):
        for key, value in doc.items():  # pyright: ignore[reportUnknownVariableType] - parsed TOML/JSON
            out.update(_flatten(value, f"{prefix}{key}."))  # pyright: ignore[reportUnknownArgumentType] - parsed TOML/JSON
    else:
        out[prefix.rstrip(".")] = doc
    return out


def _build_change(change: Change, name: str, ctx: Context) -> str | None:
    if change.kind != "file":
        return None
    if name in {"setup.py", "setup.cfg"}:
        return name
    if name not in {"pyproject.toml", "package.json"}:
        return None
    new = ctx.read(change.path, upper=True)
    old = ctx.read(change.path, upper=False) if change.action == "modify" else None
    try:
        if name == "pyproject.toml":
            after = _flatten(tomllib.loads((new or b"").decode()))
            before = _flatten(tomllib.loads(old.decode())) if old else {}
            keys = [k for k in after.keys() | before.keys() if _is_build_key(k)]
        else:
            after = _flatten(json.loads(new or b"null"))
            before = _flatten(json.loads(old)) if old else {}
            keys = [k for k in after.keys() | before.keys() if k.startswith("scripts.")]
    except (ValueError, UnicodeDecodeError):
        return f"{name} does not parse, so its build settings cannot be checked"
    changed = sorted(k for k in keys if after.get(k) != before.get(k))
    return ", ".join(changed[:3]) if changed else None


def _is_build_key(key: str) -> bool:
    if key.startswith("build-system."):
        return True
    if not key.startswith("tool."):
        return False
    lowered = key.casefold()
    return any(word in lowered for word in ("hook", "cmdclass", "build", "script"))
