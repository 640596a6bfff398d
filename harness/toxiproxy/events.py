"""The embedded server's connection-event log (the ``conn.*`` extension, docs/events.md): numbered
events stamped with ``time.monotonic()``, kept (the last :data:`EVENTS_KEPT`) for ``GET /events``
and passed to subscribers as they happen."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.redact import protect_logger
from harness.toxiproxy.models import ConnEvent

log = protect_logger(logging.getLogger("harness.toxiproxy.server"))  # no password in a log line (harness.redact)

EVENTS_KEPT = 100_000
EventCallback = Callable[[ConnEvent], None]


class EventLog:
    """Connection events of one server; thread-safe (subscribers run on the emitting thread)."""

    def __init__(self, kept: int = EVENTS_KEPT) -> None:
        self._seq = 0
        self._events: collections.deque[ConnEvent] = collections.deque(maxlen=kept)
        self._lock = threading.Lock()
        self._subscribers: list[EventCallback] = []

    def emit(self, type_: str, **fields: Any) -> None:
        """Record an event stamped now (numbered here) and pass it to every subscriber."""
        with self._lock:
            event = ConnEvent(self._seq, time.monotonic(), type_, fields)
            self._seq += 1
            self._events.append(event)
            subscribers = list(self._subscribers)
        self._dispatch(event, subscribers)

    def publish(self, event: ConnEvent) -> None:
        """Record a ready-made event (its own ``seq`` and ``t``) and pass it to every subscriber."""
        with self._lock:
            self._seq = max(self._seq, event.seq + 1)
            self._events.append(event)
            subscribers = list(self._subscribers)
        self._dispatch(event, subscribers)

    @staticmethod
    def _dispatch(event: ConnEvent, subscribers: list[EventCallback]) -> None:
        for callback in subscribers:
            try:
                callback(event)
            except Exception:  # a broken subscriber must not break the data path (nor the log reader)
                log.exception("connection-event subscriber %r failed", callback)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(event)`` for every later event; returns unsubscribe."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def events(self, since: int = 0, limit: int | None = None) -> tuple[list[ConnEvent], int]:
        """Kept events with ``seq >= since`` (at most ``limit`` >= 1) and the next ``since`` to use."""
        with self._lock:
            out = [e for e in self._events if e.seq >= since]
            next_seq = self._seq
        if limit is not None and len(out) > limit:
            out = out[:max(limit, 1)]
            next_seq = out[-1].seq + 1
        return out, max(next_seq, since)
