"""Saving and loading histories as JSON lines, so that a run can be re-checked offline.

File format (``*.jsonl``, UTF-8, one JSON object per line)::

    {"format": "failover-harness-history", "version": 1, "meta": {...}}
    {"index": 0, "t": 12345.678901, "type": "node.start", "node": "pg1", ...}
    {"index": 1, ...}

The first line is the header; every later line is one :class:`~harness.history.core.Event` in its
``to_dict`` form. Events keep their ``index`` and ``t`` exactly (floats are written with Python's
shortest round-trip representation). Values JSON cannot hold are written as text (tuples become
lists, sets sorted lists, bytes/paths/exceptions strings). Every string written goes through
:func:`harness.redact.redact_data` first: no password reaches a history file (no password in any output), whatever
field it was recorded in (``connstring``, ``error``, ``dsn``, the topology's meta …). Only the
written copy is redacted; the live history keeps what was recorded.

:class:`HistoryWriter` streams the same format while a run is going on (one line per event, flushed),
so a crashed run still leaves its history behind; the loader tolerates a torn last line.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import IO, Any

from harness.errors import ConfigError
from harness.history.core import Event, History
from harness.redact import redact, redact_data

FORMAT = "failover-harness-history"
VERSION = 1


def _json_default(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return redact_data(sorted(value, key=repr))
    if isinstance(value, bytes):
        return redact(value.decode("utf-8", "backslashreplace"))
    if isinstance(value, BaseException):
        return redact(f"{type(value).__name__}: {value}")
    if hasattr(value, "to_dict"):
        return redact_data(value.to_dict())
    return redact(str(value))


def dumps_line(obj: dict[str, Any]) -> str:
    """One JSON-lines record (no trailing newline), passwords redacted (no password in any output); non-JSON values
    are written as text."""
    return json.dumps(redact_data(obj), default=_json_default, ensure_ascii=False, separators=(",", ":"))


def header(meta: dict[str, Any]) -> dict[str, Any]:
    """The first line of a history file."""
    return {"format": FORMAT, "version": VERSION, "meta": meta}


def save_jsonl(history: History | list[Event], path: str | os.PathLike[str],
               meta: dict[str, Any] | None = None) -> Path:
    """Write ``history`` (or a list of events plus ``meta``) to ``path`` as JSON lines and return the
    path. The file is written to a temporary name and renamed, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(history, History):
        events = history.events()
        meta = dict(history.meta if meta is None else meta)
    else:
        events = list(history)
        meta = dict(meta or {})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(dumps_line(header(meta)) + "\n")
        for event in events:
            f.write(dumps_line(event.to_dict()) + "\n")
    os.replace(tmp, path)
    return path


def read_jsonl(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[Event]]:
    """Read a history file into ``(meta, events)`` (events ordered by index).

    Raises :class:`~harness.errors.ConfigError` naming the file and line for anything that is not a
    history. A torn *last* line (a run that crashed while writing) is skipped."""
    from harness.history.schema import check_history_path, validate_header  # header and meta: a schema

    path = Path(path)
    check_history_path(path)
    try:
        # split on "\n" only: str.splitlines() would also split inside strings holding U+0085/U+2028
        lines = [line.rstrip("\r") for line in path.read_text(encoding="utf-8").split("\n")]
        while lines and not lines[-1].strip():
            lines.pop()
    except FileNotFoundError:
        raise ConfigError(f"history file {path} does not exist (save one with History.save or the "
                          "pytest plugin, which writes reports/histories/*.jsonl)") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"history file {path} is not UTF-8 text: {exc}") from None
    if not lines or not lines[0].strip():
        raise ConfigError(f"history file {path} is empty; expected a header line with 'meta'")
    try:
        head = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:1: the header is not JSON ({exc})") from None
    if not isinstance(head, dict) or "meta" not in head:
        raise ConfigError(f"{path}:1: the first line must be the header "
                          f'{{"format": "{FORMAT}", "version": {VERSION}, "meta": {{...}}}}')
    validate_header(path, head)
    if head.get("version", VERSION) > VERSION:
        raise ConfigError(f"{path}: history format version {head['version']} is newer than this "
                          f"harness understands ({VERSION}); upgrade failover-harness")
    events: list[Event] = []
    seen: set[int] = set()
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            event = Event.from_dict(data)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            if number == len(lines):  # torn last line of a crashed writer
                break
            raise ConfigError(f"{path}:{number}: not an event line ({type(exc).__name__}: {exc}); "
                              'each line after the header needs "index", "t" and "type"') from None
        if event.index in seen:
            raise ConfigError(f"{path}:{number}: event index {event.index} appears twice")
        seen.add(event.index)
        events.append(event)
    events.sort(key=lambda e: e.index)
    return dict(head["meta"] or {}), events


def load_jsonl(path: str | os.PathLike[str]) -> History:
    """Load a history file written by :func:`save_jsonl` or :class:`HistoryWriter` back into a
    :class:`History` (events keep their index and t; ``meta`` is restored)."""
    meta, events = read_jsonl(path)
    return History.from_events(events, meta)


class HistoryWriter:
    """Streams a live history to a JSON-lines file: the header at open, then each event as it is
    recorded (thread-safe, flushed per line). Use as a context manager::

        with HistoryWriter(history, "run.jsonl"):
            ...  # everything recorded meanwhile lands in the file

    Events already in the history when the writer opens are written first. Lines may be out of index
    order when several threads record at once; :func:`load_jsonl` sorts them."""

    def __init__(self, history: History, path: str | os.PathLike[str]) -> None:
        self.history = history
        self.path = Path(path)
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._unsubscribe: Any = None
        self._written: set[int] = set()

    def open(self) -> HistoryWriter:
        """Create the file, write the header and the events so far, and follow new events."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w", encoding="utf-8")
        self._file.write(dumps_line(header(self.history.meta)) + "\n")
        self._unsubscribe = self.history.subscribe(self._write)
        for event in self.history.events():
            self._write(event)
        return self

    def _write(self, event: Event) -> None:
        with self._lock:
            if self._file is None or event.index in self._written:
                return
            self._written.add(event.index)
            self._file.write(dumps_line(event.to_dict()) + "\n")
            self._file.flush()

    def close(self) -> None:
        """Stop following the history and close the file."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> HistoryWriter:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
