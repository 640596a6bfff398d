"""The history: an append-only, thread-safe list of timestamped events.

Every event carries ``t``, seconds on ``time.monotonic()`` - CLOCK_MONOTONIC, which is one clock for
every process on a Linux machine, so events recorded by the embedded fault proxy, the topology and the
client under test line up. ``wall`` on the history maps that clock to wall time for display.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    """One observation: ``index`` (position in the history), ``t`` (monotonic seconds), ``type``
    (dotted name such as ``conn.accepted`` or ``op.ok``) and free-form ``fields``."""

    index: int
    t: float
    type: str
    fields: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the event, or ``default``."""
        return self.fields.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-lines form: ``{"index", "t", "type", **fields}``."""
        return {"index": self.index, "t": self.t, "type": self.type, **self.fields}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        """Inverse of :meth:`to_dict`."""
        data = dict(data)
        return cls(index=int(data.pop("index")), t=float(data.pop("t")), type=str(data.pop("type")),
                   fields=data)


Listener = Callable[[Event], None]


class History:
    """Append-only, thread-safe event log. ``record`` stamps the event with ``time.monotonic()``
    unless an explicit ``t`` is given (for events observed elsewhere on the same clock)."""

    def __init__(self, meta: dict[str, Any] | None = None) -> None:
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._settlers: list[Callable[[], None]] = []
        self._settling = threading.local()
        self.meta: dict[str, Any] = dict(meta or {})
        self.meta.setdefault("monotonic_origin", time.monotonic())
        self.meta.setdefault("wall_origin", time.time())

    def record(self, type: str, t: float | None = None, **fields: Any) -> Event:
        """Append one event and return it. Thread-safe; indices are dense and in append order."""
        with self._lock:
            index = self._events[-1].index + 1 if self._events else 0
            event = Event(index, time.monotonic() if t is None else float(t), type, fields)
            self._events.append(event)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(event)
        return event

    def extend(self, events: Iterable[tuple[str, float | None, dict[str, Any]]]) -> None:
        """Append several ``(type, t, fields)`` observations in order."""
        for type_, t, fields in events:
            self.record(type_, t, **fields)

    @classmethod
    def from_events(cls, events: Iterable[Event], meta: dict[str, Any] | None = None) -> History:
        """A history holding ``events`` as they are (their ``index`` and ``t`` are kept), ordered by
        index; later :meth:`record` calls continue after the highest index. Used to load a saved
        history (``harness.history.store``) and to build synthetic histories for checker tests."""
        history = cls(meta)
        ordered = sorted(events, key=lambda e: e.index)
        for before, after in zip(ordered, ordered[1:], strict=False):
            if before.index == after.index:
                raise ValueError(f"two events share index {after.index}")
        history._events = ordered
        return history

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` for every later event; returns a function that unsubscribes."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def add_settler(self, settle: Callable[[], None]) -> Callable[[], None]:
        """Register ``settle``, called before every snapshot (:meth:`events`): it returns once every
        observation an outside observer has made so far (a fault proxy's log, a packet capture) is
        recorded here, so no checker judges a history that lags what was seen (OBS-1). Returns the
        function that removes it again."""
        self._settlers.append(settle)

        def remove() -> None:
            if settle in self._settlers:
                self._settlers.remove(settle)

        return remove

    def settle(self) -> None:
        """Run the registered settlers (not re-entrant: a settler that reads the history is not
        called again from inside itself)."""
        if getattr(self._settling, "active", False):
            return
        self._settling.active = True
        try:
            for settle in list(self._settlers):
                settle()
        finally:
            self._settling.active = False

    def events(self, prefix: str | None = None) -> list[Event]:
        """A snapshot of the events, optionally only those whose type starts with ``prefix``, taken
        after every registered settler has delivered what its observer saw (:meth:`add_settler`)."""
        self.settle()
        with self._lock:
            snapshot = list(self._events)
        if prefix is None:
            return snapshot
        return [e for e in snapshot if e.type.startswith(prefix)]

    def wall_time(self, t: float) -> float:
        """Convert a monotonic timestamp of this history to Unix wall-clock seconds."""
        return self.meta["wall_origin"] + (t - self.meta["monotonic_origin"])

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events())
