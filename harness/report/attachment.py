"""What of a test's history the report carries (docs/reports.md, "Report size"): the whole history
for a failed or broken test, compressed; for a passed one the requests and connections nearest its
faults and its verdicts' evidence, with every rare event (topology, faults, harness notes) kept and
a pointer to the saved full history. The saved ``<history dir>/<test>.jsonl`` is never trimmed. Pure: no I/O."""

from __future__ import annotations

import bisect
import gzip
from collections.abc import Iterable, Sequence
from typing import Any

from harness.history.core import Event

#: Event types that come in thousands (every request, connection and server statement): a passed
#: test's attachment keeps them only near a fault or a verdict's evidence.
BULK_PREFIXES = ("op.", "conn.", "server.", "session.", "attempt.", "icm.ping", "icm.served")

#: Seconds kept before and after each fault start and end and each evidence event ...
WINDOW_S = 1.0
#: ... and at most this many bulk events on each side of it (faults come every second in some suites).
PER_SIDE = 12


def anchors(events: Sequence[Event], evidence: Iterable[int]) -> list[float]:
    """The times a passed test's attachment keeps a window around: fault starts and ends, and the
    events a verdict cites as evidence."""
    cited = set(evidence)
    return sorted({e.t for e in events if e.type.startswith("fault.") or e.index in cited})


def trim(events: Sequence[Event], evidence: Iterable[int] = (), window: float = WINDOW_S,
         per_side: int = PER_SIDE) -> list[Event]:
    """The events of a passed test's attachment, in index order: every event that is not bulk
    (:data:`BULK_PREFIXES`), and around each anchor (:func:`anchors`) the ``per_side`` bulk events
    nearest before it and after it that lie within ``window`` s of it."""
    marks = anchors(events, evidence)
    bulk = sorted((e for e in events if e.type.startswith(BULK_PREFIXES)), key=lambda ev: (ev.t, ev.index))
    times = [e.t for e in bulk]
    near: set[int] = set()
    for m in marks:
        pos = bisect.bisect_left(times, m)
        for e in bulk[max(0, pos - per_side):pos + per_side]:
            if abs(e.t - m) <= window:
                near.add(e.index)
    return [e for e in sorted(events, key=lambda ev: ev.index)
            if not e.type.startswith(BULK_PREFIXES) or e.index in near]


def trimmed_jsonl(meta: dict[str, Any], events: Sequence[Event], evidence: Iterable[int], full_path: str,
                  window: float = WINDOW_S, kept: Sequence[Event] | None = None) -> str:
    """A passed test's history attachment: the header (with ``meta["trimmed"]`` saying how many of
    how many events it keeps, the window and where the full history is saved), then the kept events
    (``kept``: :func:`trim`'s answer when the caller has it already)."""
    from harness.history.store import dumps_line, header

    kept = trim(events, evidence, window) if kept is None else kept
    note = {"kept": len(kept), "of": len(events), "window_s": window, "per_side": PER_SIDE, "full_history": full_path,
            "why": "a passed test: bulk events kept only near faults and evidence; the saved file is whole"}
    lines = [dumps_line(header({**meta, "trimmed": note}))] + [dumps_line(e.to_dict()) for e in kept]
    return "\n".join(lines) + "\n"


def compressed(text: str | bytes) -> bytes:
    """``text`` gzip-compressed (a failed or broken test's whole history), reproducibly (no mtime)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return gzip.compress(data, compresslevel=6, mtime=0)
