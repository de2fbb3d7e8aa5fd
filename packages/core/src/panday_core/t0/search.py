"""Pattern matching for T0's grep and glob, on RE2.

RE2 rather than `re`: the patterns come from a model, and `re` backtracks -- ``(a*)*b``
against a long line of ``a`` runs for hours in the caller's thread, holding the GIL, with
nothing able to interrupt it. RE2 matches in time linear in the input, so a grep's cost is
bounded by the bytes it scans. What RE2 lacks (backreferences, look-around) is refused with
a clear message rather than emulated. It also finds literal prefixes with memchr, which is
what keeps grep near GNU grep's speed (see docs/tiers/t0.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

from panday_core.errors import SandboxError

if TYPE_CHECKING:
    from types import ModuleType


class InvalidArgument(SandboxError, ValueError):
    """A tool argument is malformed (a bad pattern, a negative count); `argument` names it."""

    def __init__(self, argument: str, reason: str) -> None:
        self.argument = argument
        self.reason = reason
        super().__init__(f"{argument}: {reason}")


class Match(Protocol):
    def start(self) -> int: ...


class Regex(Protocol):
    def search(self, text: bytes | str, pos: int = ..., endpos: int = ...) -> Match | None: ...


_re2: ModuleType | None = None


def _engine() -> ModuleType:
    # google-re2 ships no type information; through ModuleType its names are typed Any,
    # and the Protocols above say what this module relies on.
    global _re2  # noqa: PLW0603 - import once, lazily: grep is not on the CLI's start-up path
    if _re2 is None:
        _re2 = importlib.import_module("re2")
    return _re2


MAX_PATTERN_BYTES = 4096


def compile_regex(argument: str, pattern: str, *, ignore_case: bool = False) -> Regex:
    """Compile a grep pattern (RE2 syntax, multi-line: ``^``/``$`` match at line ends)."""
    raw = pattern.encode("utf-8", "surrogateescape")
    if not raw:
        raise InvalidArgument(argument, "is empty")
    if len(raw) > MAX_PATTERN_BYTES:
        raise InvalidArgument(argument, f"is longer than {MAX_PATTERN_BYTES} bytes")
    re2 = _engine()
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.log_errors = False  # RE2 would print to stderr; the error is raised instead
    try:
        compiled: Regex = re2.compile(b"(?m)" + raw, options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else "invalid"
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise InvalidArgument(
            argument,
            f"{pattern!r} is not a valid RE2 regular expression ({detail}); "
            "backreferences and look-around are not supported",
        ) from None
    return compiled


def _glob_component(part: str) -> str:
    """One path component of a glob as a regex that never crosses '/'."""
    out: list[str] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := part.find("]", i + 2)) != -1:
            body = part[i + 1 : end]
            negate = body.startswith("!")
            body = body.removeprefix("!").replace("\\", "\\\\")
            out.append(f"[{'^/' if negate else ''}{body}]")
            i = end
        else:
            out.append(_engine().escape(c))
        i += 1
    return "".join(out)


def glob_regex(pattern: str) -> tuple[Regex, int | None]:
    """A regex matching relative paths (``a/b/c``) for a glob, and how deep it can match
    (None when ``**`` makes the depth unbounded).

    ``*``, ``?`` and ``[...]`` (``[!...]`` negates) stay within one component and match
    leading dots; ``**`` as a whole component matches any number of directories.
    """
    parts = [p for p in pattern.split("/") if p not in {"", "."}]
    if not parts:
        raise InvalidArgument("pattern", f"{pattern!r} has nothing to match")
    pieces: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            pieces.append(".*" if last else "(?:[^/]+/)*")
        else:
            pieces.append(_glob_component(part) + ("" if last else "/"))
    depth = None if "**" in parts else len(parts) - 1
    re2 = _engine()
    options = re2.Options()
    options.log_errors = False
    try:
        compiled: Regex = re2.compile("^" + "".join(pieces) + "$", options)
    except re2.error:
        raise InvalidArgument("pattern", f"{pattern!r} is not a valid glob") from None
    return compiled, depth
