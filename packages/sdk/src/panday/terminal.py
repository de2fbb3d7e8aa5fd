"""Terminal control sequences in a command's output, made visible and inert.

A command's output is the command's: when `panday run` streams it to a terminal, an escape
sequence in it is an instruction to the caller's terminal, not text. OSC 52 writes the
clipboard, OSC 0/2 rewrite the window title, ``ESC [ 6 n`` makes the terminal *type* a
reply into the caller's shell, DCS and APC strings reach terminal extensions, and cursor
movement can overwrite what was printed before. `Filter` passes text, tabs, newlines and
carriage returns, and SGR (colour and style: ``ESC [ 1 ; 31 m``) unchanged, and writes
every other control character in caret notation (ESC as ``^[``, BEL as ``^G``, DEL as
``^?``, a UTF-8 C1 control such as CSI U+009B as ``^[[``), so nothing is hidden and
nothing acts. State carries across chunks, so a sequence split between two reads is
treated as one.

`panday run` filters each of its streams that is a terminal, unless ``--no-sanitize`` is
given; ``--sanitize`` filters a stream that is not one too (docs/cli.md).
"""

from __future__ import annotations

import re

_SGR_PARAMS = 32
"""Longest SGR parameter list kept (``38;2;255;255;255`` is 16): a longer one is treated
as an unknown sequence, so the carry between chunks stays small."""

_UNSAFE = re.compile(
    rb"\x1b\[[0-9;:]{0,%d}m|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]" % _SGR_PARAMS
)
"""A kept SGR sequence, or a control character to write in caret notation."""
_PARTIAL = re.compile(rb"(?:\x1b(?:\[[0-9;:]{0,%d})?|\xc2)\Z" % _SGR_PARAMS)
"""The start of something `_UNSAFE` might match once the next chunk arrives."""


def _caret(match: re.Match[bytes]) -> bytes:
    seq = match.group()
    if len(seq) > 2 or (len(seq) == 2 and seq[0] == 0x1B):  # noqa: PLR2004 - SGR, kept
        return seq
    if seq[0] == 0xC2:  # noqa: PLR2004 - a C1 control U+0080-U+009F: ESC + (code - 0x40)
        return b"^[" + bytes([seq[1] - 0x40])
    if seq[0] == 0x7F:  # noqa: PLR2004 - DEL
        return b"^?"
    return b"^" + bytes([seq[0] + 0x40])


class Filter:
    """One stream's filter: `feed` each chunk in order, `flush` at the end. What it judges
    (`_judged`), how (`_render`) and what it holds for the next chunk (`_held`, looked for
    in the last `_lookback` bytes) are class attributes, so `AppFilter` is the same
    machine with other rules."""

    __slots__ = ("carry",)
    _judged = _UNSAFE
    _held = _PARTIAL
    _lookback = _SGR_PARAMS + 2
    _render = staticmethod(_caret)

    def __init__(self) -> None:
        self.carry = b""

    def feed(self, data: bytes) -> bytes:
        if self.carry:
            data = self.carry + data
            self.carry = b""
        partial = self._held.search(data, max(0, len(data) - self._lookback))
        if partial is not None:
            self.carry = partial.group()
            data = data[: partial.start()]
        return self._judged.sub(self._render, data)

    def flush(self) -> bytes:
        """What is still held (an escape cut off by the end of the output), made inert."""
        held, self.carry = self.carry, b""
        return _UNSAFE.sub(_caret, held)


_NAME_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def inert(text: str) -> str:
    """`text` for one line of panday's own messages when part of it came from a jail (a
    path it wrote, a link target): every control character, newline and tab included,
    in caret notation (C1 controls as ``^[`` and their letter), so a name cannot move the
    cursor, retitle the window or start a new, forged line."""

    def caret(match: re.Match[str]) -> str:
        code = ord(match.group())
        if code == 0x7F:  # noqa: PLR2004 - DEL
            return "^?"
        if code >= 0x80:  # noqa: PLR2004 - a C1 control: ESC + (code - 0x40)
            return "^[" + chr(code - 0x40)
        return "^" + chr(code + 0x40)

    return _NAME_UNSAFE.sub(caret, text)


_APP = re.compile(
    rb"\x1b\[[\x30-\x3f]{0,%d}[\x20-\x2f]{0,4}[\x40-\x7e]|\x1b[\x20-\x2f]{0,4}[\x30-\x7e]"
    rb"|[\x00-\x06\x10-\x1a\x1c-\x1f\x7f]|\xc2[\x80-\x9f]" % _SGR_PARAMS
)
"""What `AppFilter` judges: a CSI sequence, a short escape, a control character, a C1."""
_APP_PARTIAL = re.compile(
    rb"(?:\x1b(?:\[[\x30-\x3f]{0,%d}[\x20-\x2f]{0,4}|[\x20-\x2f]{0,4})?|\xc2)\Z" % _SGR_PARAMS
)
_ASKS = frozenset(b"nctx")
"""CSI finals that make a terminal *answer* (status and cursor reports, device attributes,
window reports, terminal parameters): the answer would be typed into panday's input."""
_STRINGS = frozenset(b"]P_^X")
"""ESC introducers of strings (OSC: clipboard, title, hyperlinks; DCS; APC; PM; SOS)."""


def _app(match: re.Match[bytes]) -> bytes:
    seq = match.group()
    if seq[0] != 0x1B:  # noqa: PLR2004 - a lone control character or C1
        return _caret(match)
    if seq[1:2] == b"[":
        return seq if seq[-1] not in _ASKS else b"^[" + seq[1:]
    if len(seq) == 2 and seq[1] in _STRINGS:  # noqa: PLR2004 - ESC and its introducer
        return b"^[" + seq[1:]
    return seq


class AppFilter(Filter):
    """A full-screen program's output through a pseudo-terminal (`panday run --tty`): what
    an editor or a shell needs passes (cursor movement, erasing, scrolling regions, colour,
    charsets, the alternate screen), and what acts beyond the screen does not: string
    sequences (OSC 52 clipboard, titles, DCS, APC) and every request that makes the
    terminal type an answer (DSR, DA, window reports) are written in caret notation.
    An escape cut off at a chunk's end is held for the next chunk; `flush` makes what is
    held at the end inert as `Filter` does."""

    __slots__ = ()
    _judged = _APP
    _held = _APP_PARTIAL
    _lookback = _SGR_PARAMS + 8
    _render = staticmethod(_app)
