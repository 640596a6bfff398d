"""What of a test's history the report carries (docs/reports.md, "Report size"): the whole history
for a failed or broken test, compressed; for a passed one the windows around its faults and its
verdicts' evidence, with every rare event (topology, faults, harness notes) kept and a pointer to
the saved full history. The saved ``<history dir>/<test>.jsonl`` is never trimmed. Pure: no I/O."""

from __future__ import annotations

import bisect
import gzip
from collections.abc import Iterable, Sequence
from typing import Any

from harness.history.core import Event

#: Event types that come in thousands (every request, connection and server statement): a passed
#: test's attachment keeps them only near a fault or a verdict's evidence.
BULK_PREFIXES = ("op.", "conn.", "server.", "session.", "attempt.", "icm.ping", "icm.served")

#: Seconds kept before and after each fault start and end and each evidence event.
WINDOW_S = 1.0


def anchors(events: Sequence[Event], evidence: Iterable[int]) -> list[float]:
    """The times a passed test's attachment keeps a window around: fault starts and ends, and the
    events a verdict cites as evidence."""
    cited = set(evidence)
    return sorted({e.t for e in events if e.type.startswith("fault.") or e.index in cited})


def trim(events: Sequence[Event], evidence: Iterable[int] = (), window: float = WINDOW_S) -> list[Event]:
    """The events of a passed test's attachment: every event that is not bulk (:data:`BULK_PREFIXES`),
    and bulk events within ``window`` s of an anchor (:func:`anchors`), in index order."""
    marks = anchors(events, evidence)
    out = []
    for e in sorted(events, key=lambda ev: ev.index):  # index order: times may go back and forth
        if not e.type.startswith(BULK_PREFIXES):
            out.append(e)
            continue
        j = bisect.bisect_left(marks, e.t - window)
        if j < len(marks) and marks[j] <= e.t + window:
            out.append(e)
    return out


def trimmed_jsonl(meta: dict[str, Any], events: Sequence[Event], evidence: Iterable[int], full_path: str,
                  window: float = WINDOW_S) -> str:
    """A passed test's history attachment: the header (with ``meta["trimmed"]`` saying how many of
    how many events it keeps, the window and where the full history is saved), then the kept events."""
    from harness.history.store import dumps_line, header

    kept = trim(events, evidence, window)
    note = {"kept": len(kept), "of": len(events), "window_s": window, "full_history": full_path,
            "why": "a passed test: bulk events kept only near faults and evidence; the saved file is whole"}
    lines = [dumps_line(header({**meta, "trimmed": note}))] + [dumps_line(e.to_dict()) for e in kept]
    return "\n".join(lines) + "\n"


def compressed(text: str | bytes) -> bytes:
    """``text`` gzip-compressed (a failed or broken test's whole history), reproducibly (no mtime)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return gzip.compress(data, compresslevel=6, mtime=0)
