"""The history of a Patroni run driven from the command line (``up --detach``, ``fault --run``):
every process that drives the run appends its ``ham.*`` events to ``<run>/history.jsonl`` (a
history file ``failover-harness check`` / ``report`` read), and ``down`` copies it to the reports
folder as ``histories/run-<ID>.jsonl`` before the run directory goes."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Any

from harness.history.core import Event
from harness.history.store import dumps_line, header
from harness.paths import reports_dir
from harness.topology.run import locked

FILE = "history.jsonl"


class RunHistory:
    """Appends events to a run's history file (one writer at a time: the run's lock)."""

    def __init__(self, run_dir: Path, meta: dict[str, Any] | None = None) -> None:
        self.path = run_dir / FILE
        self.run_dir = run_dir
        if not self.path.exists():
            self.path.write_text(dumps_line(header(meta or {})) + "\n", encoding="utf-8")

    def record(self, type: str, t: float | None = None, **fields: Any) -> Event:
        """Append one event (stamped with time.monotonic() unless ``t`` is given) and return it."""
        with locked(self.run_dir):
            index = sum(1 for _ in self.path.open(encoding="utf-8")) - 1
            event = Event(index, time.monotonic() if t is None else float(t), type, fields)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(dumps_line(event.to_dict()) + "\n")
        return event


def keep_run_history(run_dir: Path) -> Path | None:
    """Copy the run's history file to ``<reports>/histories/run-<ID>.jsonl`` (None when it has none)."""
    src = run_dir / FILE
    if not src.exists():
        return None
    with contextlib.suppress(OSError):
        dest = reports_dir() / "histories" / f"run-{run_dir.name}.jsonl"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        return dest
    return None
