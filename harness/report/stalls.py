"""Client-visible stalls from success times (the persistent-proxy benchmarks, docs/persistent-proxy.md; PER-1
context): pure functions over one session's sorted success times.

Two measures of the stall a switchover causes one session, and the control that tells them apart:

* :func:`spanning_stall` - the longest gap between two successes that overlaps the pair's outage
  (from the old principal's stop to the new one accepting writes): the wait the switchover forced on
  that session. Every session has such a gap: no operation succeeds while no node accepts writes.
* :func:`window_stall` - the longest gap anywhere in a window around the switchover (1 s before to
  1.5 s after): also counts a session's own hiccups near it (a lock wait, a busy core, the old
  principal's rewind and restart afterwards).
* :func:`quiet_windows` - windows of the same length over a run *without* switchovers: what
  :func:`window_stall` reports when nothing happens at all. On a 2-core machine under 20 sessions
  its p99 was 0.17-0.46 s (2026-12-02), near or above the 0.2 s stall target: there the window
  measure alone could not show that target met, whatever the client did.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence


def spanning_stall(times: Sequence[float], outage: tuple[float, float],
                   window: tuple[float, float]) -> tuple[float, bool]:
    """``(gap, censored)``: the longest gap between consecutive success ``times`` (sorted) that
    overlaps ``outage`` = ``(start, end)``, from the last success before the outage began (from
    ``window[0]`` when the session had none before) to the first one after it ended. With no success
    after ``outage[1]`` up to ``window[1]`` the gap runs to ``window[1]`` and is *censored* (the
    session had not recovered when the window closed)."""
    start, end, censored = spanning_gap(times, outage, window)
    return end - start, censored


def spanning_gap(times: Sequence[float], outage: tuple[float, float],
                 window: tuple[float, float]) -> tuple[float, float, bool]:
    """``(from, to, censored)``: where the gap of :func:`spanning_stall` lies - what
    :mod:`harness.report.switchover_phases` cuts into phases (PER-1 context)."""
    lo, hi = window
    start, end = outage
    if not (lo <= start <= end <= hi):
        raise ValueError(f"outage {outage} must lie inside window {window}")
    k = bisect.bisect_left(times, start)
    previous = times[k - 1] if k > 0 else lo
    best = (previous, previous)
    for t in times[k:]:
        if t > hi:
            break
        if t - previous > best[1] - best[0]:
            best = (previous, t)
        if t > end:
            return best[0], best[1], False
        previous = t
    if hi - previous > best[1] - best[0]:
        best = (previous, hi)
    return best[0], best[1], True


def window_stall(times: Sequence[float], window: tuple[float, float], end: float) -> tuple[float, bool]:
    """``(gap, censored)``: the longest gap between consecutive success ``times`` (sorted) inside
    ``window``, counted from the last success before it (from the first one in it when the session
    had none before); censored - counted up to ``window[1]`` -
    when no success follows ``end`` (the switchover's end) in the window."""
    lo, hi = window
    i, j = bisect.bisect_left(times, lo), bisect.bisect_right(times, hi)
    points = ([times[i - 1]] if i > 0 else []) + list(times[i:j])
    censored = not any(t > end for t in times[i:j])
    if censored:
        points.append(hi)
    gap = max((b - a for a, b in zip(points, points[1:], strict=False)), default=hi - lo)
    return gap, censored


def quiet_windows(start: float, stop: float, length: float, count: int) -> list[tuple[float, float]]:
    """Up to ``count`` consecutive windows of ``length`` seconds in ``[start, stop]`` (fewer when the
    run is shorter): the control windows of a run without switchovers."""
    if length <= 0:
        raise ValueError(f"window length must be positive, not {length}")
    out = []
    t = start
    while len(out) < count and t + length <= stop:
        out.append((t, t + length))
        t += length
    return out
