"""Where an HTTP/1.1 message ends in a byte stream: one request per allow decision.

A plain-HTTP request is checked once, against its own host; anything the client sends on
the same connection after that request would reach the same upstream unchecked. So the
proxy follows the framing of both directions (RFC 9112 §6): the request body
(``Content-Length``, ``chunked`` or none) and the response (its head, then
``Content-Length``, ``chunked``, no body, or until the upstream closes). Bytes after the
request are never forwarded, and once the response is complete the connection is closed;
the client opens a new connection, and so makes a new request that is checked on its own.

The scanners only find boundaries; they never copy a body. Each `scan` takes the bytes
that arrived and returns `MORE` (all of them belong to the message, which goes on) or the
offset just past the message's end.
"""

from __future__ import annotations

MORE = -1
_HEX = frozenset(b"0123456789abcdefABCDEF")
_MAX_CHUNK_LINE = 4096
_MAX_CHUNK_DIGITS = 15
_TRAILER_REFUSED = (b"proxy-authorization", b"proxy-connection")


class FramingError(Exception):
    """The body's framing is broken at `offset` of the bytes just scanned."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        super().__init__(reason)


_SIZE, _DATA, _DATA_CR, _DATA_LF, _TRAILER, _DONE = range(6)


class Body:
    """The end of one message body: `length` bytes, or chunked (`length` None)."""

    __slots__ = ("checked", "chunked", "line", "raw", "remaining", "state", "strict")

    def __init__(self, length: int | None, *, strict: bool) -> None:
        self.chunked = length is None
        self.remaining = length or 0
        self.state = _SIZE if self.chunked else (_DATA if length else _DONE)
        self.line = bytearray()
        self.strict = strict
        """A request: a bare CR, or trailer fields carrying proxy credentials, are errors,
        and trailer lines are passed on only once checked (see `raw`, `checked`)."""
        self.raw = 0
        """Strict: how many bytes of the last scan may be passed on as they are (what
        follows is trailer, held back until checked)."""
        self.checked = bytearray()
        """Strict: trailer lines checked since the last `take_checked`, to pass on after
        the raw bytes."""

    def take_checked(self) -> bytes:
        out = bytes(self.checked)
        self.checked.clear()
        return out

    @property
    def done(self) -> bool:
        return self.state == _DONE

    def scan(self, data: bytes | bytearray | memoryview) -> int:  # noqa: C901, PLR0912 - one branch per state
        """`MORE`, or the offset just past the body's end; raises `FramingError`."""
        size = len(data)
        self.raw = 0 if self.state == _TRAILER else size
        if self.state == _DONE:
            self.raw = 0
            return 0
        if self.state == _DATA and self.remaining > size:
            self.remaining -= size  # the common case of a large body: no per-byte work
            return MORE
        pos = 0
        while pos < size:
            state = self.state
            if state == _DATA:
                step = min(self.remaining, size - pos)
                pos += step
                self.remaining -= step
                if self.remaining == 0:
                    if not self.chunked:
                        self.state = _DONE
                        self.raw = min(self.raw, pos)
                        return pos
                    self.state = _DATA_CR
                continue
            byte = data[pos]
            pos += 1
            if state == _DATA_CR:
                if byte != 0x0D:  # noqa: PLR2004 - CR
                    raise FramingError(pos - 1, "chunk data not followed by CRLF")
                self.state = _DATA_LF
            elif state == _DATA_LF:
                if byte != 0x0A:  # noqa: PLR2004 - LF
                    raise FramingError(pos - 1, "chunk data not followed by CRLF")
                self.state = _SIZE
            elif byte != 0x0A:  # noqa: PLR2004 - LF
                self.line.append(byte)
                if len(self.line) > _MAX_CHUNK_LINE:
                    raise FramingError(pos - 1, "chunk size or trailer line too long")
            elif not self.line.endswith(b"\r"):
                raise FramingError(pos - 1, "bare LF in chunked framing")
            else:
                line = bytes(self.line[:-1])
                self.line.clear()
                if self.strict and (b"\r" in line or b"\x00" in line):
                    raise FramingError(pos - 1, "bare CR or NUL in chunked framing")
                if state == _SIZE:
                    self._size(line, pos - 1)
                    if self.state == _TRAILER and self.strict:
                        self.raw = pos  # the trailer waits to be checked
                elif self._trailer_ends(line, pos - 1):
                    self.state = _DONE
                    self.raw = min(self.raw, pos)
                    return pos
        return MORE

    def _size(self, line: bytes, at: int) -> None:
        digits = line.split(b";", 1)[0].strip(b" \t")
        if not digits or len(digits) > _MAX_CHUNK_DIGITS or not set(digits) <= _HEX:
            raise FramingError(at, "invalid chunk size")
        self.remaining = int(digits, 16)
        self.state = _DATA if self.remaining else _TRAILER

    def _trailer_ends(self, line: bytes, at: int) -> bool:
        """True at the empty line that ends the trailer section."""
        if self.strict:
            if line and line.split(b":", 1)[0].strip().lower() in _TRAILER_REFUSED:
                raise FramingError(min(at, self.raw), "proxy credentials in a trailer field")
            self.checked += line + b"\r\n"
        return not line


_HEAD, _BODY, _UNFRAMED, _FINISHED = range(4)
_NO_BODY = (204, 304)
_SWITCHING = 101
_STATUS_DIGITS = 3


class Response:
    """Where the response to one request ends (interim 1xx heads pass through)."""

    __slots__ = ("body", "head", "head_request", "max_head", "state")

    def __init__(self, *, head_request: bool, max_head: int) -> None:
        self.head_request = head_request
        self.max_head = max_head
        self.state = _HEAD
        self.head = bytearray()
        self.body: Body | None = None

    @property
    def done(self) -> bool:
        return self.state == _FINISHED

    def scan(self, data: bytes | bytearray | memoryview) -> int:
        """`MORE`, or the offset just past the (final) response's end."""
        pos = 0
        size = len(data)
        while pos < size:
            if self.state == _UNFRAMED:
                return MORE  # ends when the upstream closes
            if self.state == _FINISHED:
                return pos
            if self.state == _HEAD:
                pos = self._head(data, pos)
                continue
            assert self.body is not None  # noqa: S101 - set with _BODY
            try:
                end = self.body.scan(data[pos:])
            except FramingError:
                self.state = _UNFRAMED
                return MORE
            if end == MORE:
                return MORE
            self.state = _FINISHED
            return pos + end
        return pos if self.state == _FINISHED else MORE

    def _head(self, data: bytes | bytearray | memoryview, pos: int) -> int:
        start = max(0, len(self.head) - 3)
        self.head += data[pos:]
        end = self.head.find(b"\r\n\r\n", start)
        if end < 0:
            if len(self.head) > self.max_head:
                self.state = _UNFRAMED
                self.head = bytearray()
            return len(data)
        used = end + 4 - (len(self.head) - (len(data) - pos))
        head = bytes(self.head[: end + 4])
        self.head.clear()
        self._framing(head)
        return pos + used

    def _framing(self, head: bytes) -> None:
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        status_text = parts[1] if len(parts) > 1 else b""
        if not lines[0].startswith(b"HTTP/1.") or len(status_text) != _STATUS_DIGITS:
            self.state = _UNFRAMED
            return
        try:
            status = int(status_text)
        except ValueError:
            self.state = _UNFRAMED
            return
        if 100 <= status < 200 and status != _SWITCHING:  # noqa: PLR2004 - interim responses
            self.state = _HEAD  # the final response follows
            return
        if status == _SWITCHING:
            self.state = _UNFRAMED
            return
        if self.head_request or status in _NO_BODY:
            self.state = _FINISHED
            return
        self.body = _body_of(lines[1:])
        if self.body is None:
            self.state = _UNFRAMED
        elif self.body.done:
            self.state = _FINISHED
        else:
            self.state = _BODY


def _body_of(lines: list[bytes]) -> Body | None:
    """The body framing a response's header lines give; None: until the upstream closes."""
    lengths: set[bytes] = set()
    codings: list[bytes] = []
    for line in lines:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            lengths.add(value.strip())
        elif key == b"transfer-encoding":
            codings += [c.strip().lower() for c in value.split(b",")]
    if codings:
        return Body(None, strict=False) if codings[-1] == b"chunked" else None
    if len(lengths) == 1 and next(iter(lengths)).isdigit():
        return Body(int(next(iter(lengths))), strict=False)
    return None
