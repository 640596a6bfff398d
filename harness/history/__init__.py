"""One append-only history of everything observed in a run, on one monotonic clock (Jepsen-style).

See ``docs/events.md`` for the event types and their fields, ``docs/reports.md`` for the saved
JSON-lines form and the SVG timeline."""

from harness.history.core import Event, History
from harness.history.store import HistoryWriter, load_jsonl, read_jsonl, save_jsonl

__all__ = ["Event", "History", "HistoryWriter", "load_jsonl", "read_jsonl", "save_jsonl"]
