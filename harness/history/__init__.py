"""One append-only history of everything observed in a run, on one monotonic clock (Jepsen-style).

See ``docs/events.md`` for the event types and their fields."""

from harness.history.core import Event, History

__all__ = ["Event", "History"]
