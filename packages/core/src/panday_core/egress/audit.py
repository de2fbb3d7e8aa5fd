"""Audit events: what the egress proxy did with each client connection.

Every connection ends with one ``close`` event: at once for a refusal, at the end of the
tunnel for an allowed request (with its byte counts and duration). An allowed tunnel also
gets an ``open`` event the moment it starts, so a tunnel that is still running (or that a
crash cut short) is on record, with the command its credentials were issued for.

Refusals before valid credentials (and connections closed at the edge to keep the proxy
within its budgets) are not logged one by one beyond `Throttle.PER_SECOND` a second per
source: the rest of each second is one event whose `count` says how many it stands for.
So a flood of connections costs the log a line a second, not a line a connection.

Events go to a callback and, optionally, to a JSONL file (one JSON object per line, the
fields of `AuditEvent`, appended and flushed per event so a crash loses at most the event
in flight).
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Literal

import msgspec

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

Verdict = Literal["allowed", "refused", "failed"]
"""allowed: the policy admitted it and the tunnel ran; refused: the proxy said no (policy,
credentials, malformed input, bounds); failed: admitted, but the upstream could not be
reached (resolution, connect error or timeout)."""

ClientProtocol = Literal["http", "http-connect", "socks5", "unknown"]


class AuditEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One request as the proxy saw it."""

    time: float
    """Wall-clock time the connection was accepted (Unix seconds)."""
    session_id: str
    command_id: str | None
    """The command the credentials were issued for; None for session-level credentials or
    when the client never authenticated."""
    protocol: ClientProtocol
    host: str | None
    """The requested host, normalised; None when the request never got that far."""
    port: int | None
    address: str | None
    """The resolved address the proxy checked and connected to (or refused)."""
    verdict: Verdict
    reason: str
    phase: Literal["open", "close"] = "close"
    """open: an allowed tunnel started (its close event follows); close: the connection
    ended (every connection gets exactly one)."""
    bytes_up: int = 0
    """Bytes from the client to the upstream (after the request head)."""
    bytes_down: int = 0
    """Bytes from the upstream to the client."""
    duration_ms: float = 0.0
    count: int = 1
    """Connections this event stands for: more than one for a summary of refusals that
    were not logged one by one (see `Throttle`); the fields are the last one's."""


_encoder = msgspec.json.Encoder()


def encode_event(event: AuditEvent) -> bytes:
    """The event as one JSON line (with the trailing newline)."""
    return _encoder.encode(event) + b"\n"


class JsonlAuditLog:
    """Appends events to a file, one JSON object per line."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fh: IO[bytes] | None = open(path, "ab")  # noqa: PTH123, SIM115 - held open for the proxy's life

    def __call__(self, event: AuditEvent) -> None:
        if self._fh is not None:
            self._fh.write(encode_event(event))
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class _Window:
    __slots__ = ("held", "last", "passed")

    def __init__(self) -> None:
        self.passed = 0
        self.held = 0
        self.last: AuditEvent | None = None


class Throttle:
    """Passes up to `PER_SECOND` events a second per key, and sums up the rest.

    The key names where the events come from (a jail, the proxy's listeners) and what they
    are (refusals before credentials, closes at the edge). Within a one-second window the
    first `PER_SECOND` events pass as they are; the others are counted, and when the window
    ends one event stands for them all (`count`, the last one's fields, and a reason that
    says so).
    """

    PER_SECOND = 20
    WINDOW_S = 1.0

    def __init__(self, loop: asyncio.AbstractEventLoop, emit: Callable[[AuditEvent], None]) -> None:
        self._loop = loop
        self._emit = emit
        self._windows: dict[str, _Window] = {}

    def offer(self, key: str, event: AuditEvent) -> None:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window()
            self._loop.call_later(self.WINDOW_S, self._close, key)
        if window.passed < self.PER_SECOND:
            window.passed += 1
            self._emit(event)
            return
        window.held += event.count
        window.last = event

    def _close(self, key: str) -> None:
        window = self._windows.pop(key, None)
        if window is None or not window.held or window.last is None:
            return
        last = window.last
        reason = (
            f"{window.held} connections like this one in {self.WINDOW_S:g} s, logged as one; "
            f"the last: {last.reason}"
        )
        self._emit(msgspec.structs.replace(last, count=window.held, reason=reason))

    def flush(self) -> None:
        """Emit every pending summary now (the proxy is closing)."""
        for key in list(self._windows):
            self._close(key)
