"""Where a switchover's client-visible stall goes, phase by phase (the persistent-proxy benchmarks,
docs/persistent.md "Where the stall goes"; PER-1 context): pure functions over a history's event
times and one session's stall.

A coordinated planned switchover passes these marks, each an event of the history:

| mark | event |
|---|---|
| drain start | ``coord.before`` (the client starts holding new work, PER-4) |
| drained | ``coord.before_done`` (every session idle, back connections dropped; PgBouncer: ``PAUSE`` done) |
| stop | ``node.stop`` of the old principal (its ``t`` is when the stop began) |
| writable | ``switchover.writable`` (the new principal accepts writes) |
| resumed | ``coord.after_done`` (the client's resume returned: re-attached, replayed, released) |

A session's stall (its last success before the stop to its first success after it) is cut at these
marks into phases: ``lead`` (last success to drain start), ``drain``, ``hold`` (drained to the stop:
the pair's own checks before it stops the old principal), ``unwritable`` (stop to writable: the old
principal's stop and the promotion - the pair's floor, whatever the client), ``reattach`` (writable to
resumed: the client's re-attach and replay) and ``release`` (resumed to the session's first success:
the held statement's own round trip, or a session released before the resume returned finishing
later). A mark that is missing (a client that does not coordinate has no drain) or out of order
collapses its phase to zero; the phases of one session always add up to its stall.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: the phases of a stall, in time order (module docstring)
PHASES = ("lead", "drain", "hold", "unwritable", "reattach", "release")
#: the marks between them, in order
MARKS = ("drain_start", "drained", "stop", "writable", "resumed")


def split_stall(stall: tuple[float, float], marks: Mapping[str, float | None]) -> dict[str, float]:
    """The phases (:data:`PHASES`) of one session's stall ``(last success, first success)`` cut at
    ``marks`` (:data:`MARKS` -> time or None): each phase's share of the stall in seconds, summing to
    the stall (PER-1 context). A missing mark, or one outside the stall, leaves its phase empty."""
    start, end = stall
    if end < start:
        raise ValueError(f"a stall cannot end ({end}) before it starts ({start})")
    bounds = [start]
    for name in MARKS:
        t = marks.get(name)
        prev = bounds[-1]
        bounds.append(prev if t is None else min(end, max(prev, t)))
    bounds.append(end)
    return {phase: bounds[i + 1] - bounds[i] for i, phase in enumerate(PHASES)}


@dataclass(frozen=True)
class PhaseSummary:
    """Per phase, the median and the largest share over switchovers of the worst-stalled session's
    stall (the session that sets each switchover's tail), and how many switchovers it covers."""

    median: dict[str, float]
    largest: dict[str, float]
    stall_median: float
    count: int

    def row(self) -> str:
        """``lead 0.01/0.02 drain 0.05/0.08 ...``: median/largest seconds per phase."""
        return " ".join(f"{p} {self.median[p]:.3f}/{self.largest[p]:.3f}" for p in PHASES)


def summarize(per_switchover: Sequence[dict[str, float]]) -> PhaseSummary:
    """Summarize the phases (:func:`split_stall`) of each switchover's worst-stalled session
    (PER-1 context): per phase the median and the largest over switchovers."""
    if not per_switchover:
        raise ValueError("no switchover to summarize")
    median = {p: statistics.median(s[p] for s in per_switchover) for p in PHASES}
    largest = {p: max(s[p] for s in per_switchover) for p in PHASES}
    stall = statistics.median(sum(s.values()) for s in per_switchover)
    return PhaseSummary(median, largest, stall, len(per_switchover))
