"""`AuditSink`: the proxy's audit output, bounded and never blocking the proxy's loop.

Every audit consumer (the caller's callback, the JSONL file, ``panday proxy``'s stdout) can
block: a pipe nobody reads, a slow disk, a callback that takes a lock. The proxy's loop
never calls one. It `offer`\\ s each event to a bounded queue and goes on; one writer thread
per sink delivers the events in order to every consumer. When the queue is full (the
reader stalled) an event is dropped and counted, and once the writer gets going again the
drops are reported *once*, as one event whose `count` says how many were lost, ahead of
what was queued after them. Nothing the consumers do can freeze the proxy, and nothing is
lost silently.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING

from panday_core.egress.audit import AuditEvent

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_log = logging.getLogger("panday_core.egress")

CAPACITY = 4096
"""Events queued at most; beyond them events are dropped (and counted)."""
CLOSE_TIMEOUT_S = 2.0
"""How long closing waits for the writer to deliver what is queued."""


class AuditSink:
    """A bounded queue of audit events and the thread that delivers them (see module doc)."""

    def __init__(
        self,
        consumers: Sequence[Callable[[AuditEvent], None]],
        *,
        session_id: str,
        capacity: int = CAPACITY,
    ) -> None:
        self.consumers = tuple(consumers)
        self.session_id = session_id
        self.capacity = capacity
        self.dropped = 0
        """Events dropped since the last report of drops."""
        self.dropped_total = 0
        self.delivered = 0
        self._queue: collections.deque[AuditEvent] = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False
        self._thread: threading.Thread | None = None

    def offer(self, *events: AuditEvent) -> None:
        """Queue `events` for the consumers, dropping and counting what does not fit
        (never blocks)."""
        if not self.consumers or not events:
            return
        with self._cond:
            if self._closing:
                return
            room = max(0, self.capacity - len(self._queue))
            if room < len(events):
                self.dropped += len(events) - room
                self.dropped_total += len(events) - room
                events = events[:room]
                if not events:
                    return
            was_empty = not self._queue
            self._queue.extend(events)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"panday-audit-{self.session_id}", daemon=True
                )
                self._thread.start()
            if was_empty:  # else the writer was woken already, or takes it with its batch
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self.dropped and not self._closing:
                    self._cond.wait()
                if not self._queue and not self.dropped:
                    return  # closing, and everything delivered
                batch = list(self._queue)
                self._queue.clear()
                dropped, self.dropped = self.dropped, 0
                self._busy = True
            try:
                if dropped:
                    self._deliver(self._drops(dropped))
                for event in batch:
                    self._deliver(event)
                self._flush_consumers()
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _drops(self, count: int) -> AuditEvent:
        return AuditEvent(
            time=time.time(),
            session_id=self.session_id,
            command_id=None,
            protocol="unknown",
            host=None,
            port=None,
            address=None,
            verdict="failed",
            reason=(
                f"audit output stalled: {count} events were dropped (the reader did not "
                f"keep up; at most {self.capacity} wait)"
            ),
            count=count,
        )

    def _flush_consumers(self) -> None:
        """After a batch: consumers that buffer (a stream) flush once, not per event."""
        for consumer in self.consumers:
            flush = getattr(consumer, "flush", None)
            if callable(flush):
                try:
                    flush()
                except Exception:  # noqa: BLE001 - a consumer's bug must not stop the others
                    _log.exception("egress proxy: audit consumer failed to flush")

    def _deliver(self, event: AuditEvent) -> None:
        for consumer in self.consumers:
            try:
                consumer(event)
            except Exception:  # noqa: BLE001 - a consumer's bug must not stop the others
                _log.exception("egress proxy: audit consumer failed")
        self.delivered += 1

    def flush(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """Wait until everything queued was delivered; False when `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self.dropped or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """Deliver what is queued (waiting at most `timeout`) and stop the writer; False
        when the writer is still stuck in a consumer (it is left behind, a daemon)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()
