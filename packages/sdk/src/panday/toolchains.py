"""Why a program that exists on the host was not found inside the sandbox, and what to stage.

Agents run their project's own toolchains: ``.venv/bin/python`` (a symbolic link into
``~/.pyenv`` or uv's Python directory), ``node`` from ``~/.nvm``, ``cargo`` from
``~/.cargo``. The jail shows the workspace, the staged paths and the system directories, so
those programs, or what they link to, or the interpreter their ``#!`` line names, are not
there, and the command exits 127. The fix is to stage the toolchain read-only; this module
finds, on the host, the first path of that chain the jail cannot see and the directory to
stage, so the error can say so (docs/recipes.md has a recipe per toolchain manager).

It only ever reads the host (stat, readlink, the first line of a script), and only after a
command was not found: nothing here is on a command's normal path.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panday_core.policy import SandboxPolicy

# What a T2 Linux jail shows of the host besides the workspace and staged paths
# (panday_tier_linux.argv: /usr, the top-level links or directories beside it, an /etc
# allowlist). A program under one of these is visible, or missing for some other reason.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_MAX_HOPS = 8
_SHEBANG_BYTES = 256


class Unseen(NamedTuple):
    """A path the command needs that exists on the host but not inside the sandbox."""

    path: str
    """The first path of the chain the sandbox cannot see (a link target, an interpreter)."""
    via: str
    """How the command leads there: 'is', 'links to' or 'runs its interpreter'."""
    stage: tuple[str, ...]
    """The directories to stage read-only (``--ro``, ``fs.staged_ro``) so that the whole
    chain is visible (usually one: the toolchain's prefix)."""
    env: tuple[str, ...] = ()
    """``NAME=VALUE`` the toolchain needs inside (rustup: where its toolchains are)."""


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _visible_roots(policy: SandboxPolicy) -> tuple[str, ...]:
    roots = [*_SYSTEM]
    for path in (policy.fs.workspace, *policy.fs.staged_ro):
        if path is not None:
            roots += [path, os.path.realpath(path)]
    return tuple(roots)


def stage_root(path: str) -> str:
    """The directory to stage for a program at `path`: a toolchain's prefix when the program
    sits in its ``bin`` (``~/.pyenv/versions/3.12.1``, ``~/.nvm/versions/node/v22.1.0``,
    uv's ``cpython-3.12...`` directory), else the program's own directory."""
    parent = os.path.dirname(path)
    prefix = os.path.dirname(parent)
    home = os.path.expanduser("~")
    if os.path.basename(parent) == "bin" and prefix not in {"/", "/usr", home, ""}:
        return prefix
    return parent


def _interpreter(path: str) -> str | None:
    """The absolute interpreter a script's ``#!`` line names, if any."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    if not words or not words[0].startswith(b"/"):
        return None
    return os.fsdecode(words[0])


def _first_unseen(start: str, roots: Sequence[str]) -> tuple[str, str] | None:
    """Follow `start` (links one hop at a time, then a script's interpreter) to the first
    path outside `roots` that exists on the host: (that path, how the chain got there)."""
    path, via = start, "is"
    for _ in range(_MAX_HOPS):
        if not os.path.exists(path):
            return None  # dangling, or not there at all: nothing to stage
        inside = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if not (_under(path, roots) and _under(inside, roots)):
            return path, via
        if os.path.islink(path):
            path = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
            via = "links to"
            continue
        interpreter = _interpreter(path)
        if interpreter is None:
            return None
        path, via = interpreter, "runs its interpreter"
    return None


def _chain(start: str, roots: Sequence[str]) -> Unseen | None:
    """The first unseen path from `start`, and every directory to stage so that nothing of
    the chain stays unseen (staging one toolchain prefix may reveal a link into another)."""
    first = _first_unseen(start, roots)
    if first is None:
        return None
    stages: list[str] = []
    found: tuple[str, str] | None = first
    while found is not None and len(stages) < _MAX_HOPS:
        stage = stage_root(found[0])
        if stage in stages:
            break
        stages.append(stage)
        found = _first_unseen(start, (*roots, *stages))
    env: list[str] = []
    for stage in tuple(stages):
        # rustup's proxies (~/.cargo/bin/cargo, rustc...) find their toolchains under
        # $RUSTUP_HOME, by default ~/.rustup; inside, HOME is the workspace.
        rustup = os.path.join(os.path.dirname(stage), ".rustup")
        if os.path.basename(stage) == ".cargo" and os.path.isdir(rustup):
            stages.append(rustup)
            env += [f"RUSTUP_HOME={rustup}", f"CARGO_HOME={stage}"]
    return Unseen(path=first[0], via=first[1], stage=tuple(stages), env=tuple(env))


def _on_path(program: str, search: str) -> str | None:
    for directory in search.split(os.pathsep):
        if directory and os.path.isabs(directory):
            candidate = os.path.join(directory, program)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def _fix(unseen: Unseen) -> str:
    """The flags that stage `unseen` (and what its manager needs), then the policy field."""
    flags = [f"--ro {path}" for path in unseen.stage]
    flags += [f"--env {assignment}" for assignment in unseen.env]
    fix = f"stage it read-only with {' '.join(flags)} (in a policy: fs.staged_ro"
    fix += ", env)" if unseen.env else ")"
    if os.path.basename(os.path.dirname(unseen.path)) == "shims":
        fix += (
            "; a pyenv shim runs pyenv itself: rather stage the version's prefix "
            "(`pyenv prefix`) and run the program `pyenv which` names"
        )
    return fix


def diagnose(
    program: str, *, policy: SandboxPolicy, cwd: str | None, sandbox_path: str
) -> tuple[str, Unseen | None]:
    """Why `program` was not found inside the sandbox, as a clause for the error message,
    and the unseen path when there is one ("" and None when the host has no answer).

    `sandbox_path` is the PATH the command ran with inside; `cwd` its working directory
    (None: the workspace).
    """
    roots = _visible_roots(policy)
    found = (
        os.path.normpath(os.path.join(cwd or policy.fs.workspace or os.getcwd(), program))
        if "/" in program
        else _on_path(program, sandbox_path)
    )
    if found is not None:
        unseen = _chain(found, roots)
        if unseen is None:
            return "", None
        clause = f"; on this host it {unseen.via} {unseen.path}, which the sandbox cannot see"
        return f"{clause}: {_fix(unseen)}", unseen
    host = _on_path(program, os.environ.get("PATH", ""))
    if host is None:
        return "", None
    clause = f"; it is not on the sandbox's PATH ({sandbox_path}); on this host it is {host}"
    unseen = _chain(host, roots)
    if unseen is None:
        return f"{clause}: run it by that path", None
    return f"{clause}: run it by that path, and {_fix(unseen)}", unseen
