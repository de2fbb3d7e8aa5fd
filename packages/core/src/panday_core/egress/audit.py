"""Audit events: one per request the egress proxy answers, allowed or not.

An event is emitted when the proxy is done with a request: at once for a refusal, at the
end of the tunnel for an allowed one (so it carries byte counts and duration). Events go to
a callback and, optionally, to a JSONL file (one JSON object per line, the fields of
`AuditEvent`, appended and flushed per event so a crash loses at most the event in flight).
"""

from __future__ import annotations

from typing import IO, Literal

import msgspec

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
    bytes_up: int = 0
    """Bytes from the client to the upstream (after the request head)."""
    bytes_down: int = 0
    """Bytes from the upstream to the client."""
    duration_ms: float = 0.0


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
