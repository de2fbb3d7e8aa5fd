"""Reading the documents the CLI is given: policy files, plugin manifests, standard input.

Every error names the file (``p.toml: invalid policy: limits.pids: ...``), because a
command may be given several. Only regular files and standard input (``-``) are read: a
FIFO or a device would block `open` or `read` until some other process wrote to it (a
named FIFO with no writer hangs forever), so they are refused with a pointer to ``-``.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING

from panday.cli.errors import InvalidInputError, NoInputError

if TYPE_CHECKING:
    from panday_core.manifest import PluginManifest
    from panday_core.policy import SandboxPolicy

MIB = 1 << 20
POLICY_LIMIT = 4 * MIB
MANIFEST_LIMIT = 1 * MIB
STDIN = "-"

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def shown(path: str) -> str:
    """How messages name an input."""
    return "<stdin>" if path == STDIN else path


def read_input(path: str, *, what: str, limit: int) -> bytes:
    """At most `limit` bytes of `path` (a regular file, or standard input for ``-``)."""
    if path == STDIN:
        raw = sys.stdin.buffer.read(limit + 1)
    else:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as exc:
            raise NoInputError(f"cannot read {what} {path!r}: {exc.strerror}") from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                kind = next((word for test, word in _KINDS if test(mode)), "not a regular file")
                raise NoInputError(
                    f"cannot read {what} {path!r}: it is {kind}, not a regular file; "
                    f"pass the {_noun(what)} on standard input with '-' instead"
                )
            with os.fdopen(fd, "rb", closefd=True) as fh:
                fd = -1
                raw = fh.read(limit + 1)
        except OSError as exc:
            raise NoInputError(f"cannot read {what} {path!r}: {exc.strerror}") from None
        finally:
            if fd >= 0:
                os.close(fd)
    if len(raw) > limit:
        raise InvalidInputError(f"{shown(path)}: {what} is larger than {limit // MIB} MiB")
    return raw


def _text(path: str, raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{shown(path)}: {what} is not UTF-8 text") from None


def load_policy(path: str, *, what: str = "policy file") -> SandboxPolicy:
    """A policy from `path` (``.json`` as JSON; standard input as JSON when it starts with
    ``{``, which TOML never does; anything else as TOML)."""
    from panday_core.errors import PolicyError
    from panday_core.policy import policy_from_json, policy_from_toml

    text = _text(path, read_input(path, what=what, limit=POLICY_LIMIT), what)
    as_json = path.endswith(".json") or (path == STDIN and text.lstrip().startswith("{"))
    try:
        return policy_from_json(text) if as_json else policy_from_toml(text)
    except PolicyError as exc:
        raise InvalidInputError(f"{shown(path)}: invalid {_noun(what)}: {exc}") from exc


def load_manifest(path: str) -> PluginManifest:
    """A plugin manifest (``plugin.toml``) from `path` or standard input."""
    from panday_core.errors import PolicyError
    from panday_core.manifest import manifest_from_toml

    what = "manifest"
    text = _text(path, read_input(path, what=what, limit=MANIFEST_LIMIT), what)
    try:
        return manifest_from_toml(text)
    except PolicyError as exc:
        raise InvalidInputError(f"{shown(path)}: invalid plugin manifest: {exc}") from exc


def _noun(what: str) -> str:
    """'policy file' -> 'policy': what the document is, rather than where it was."""
    return what.removesuffix(" file")
