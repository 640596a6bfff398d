"""APP-1 (recovery bound) and APP-2 (failed requests per fault): the figures an application team
asks of a failover - how long until the app writes again, how many requests failed."""

from __future__ import annotations

from typing import Any

from harness.history.core import Event
from harness.rules.app.history import Episode, episodes, ordered, pool_settings, requests
from harness.rules.registry import rule
from harness.rules.verdict import UNKNOWN, Validity, Verdict, tally

RECOVERY_ID = "APP-1"
FAILED_ID = "APP-2"
#: The recovery bound when neither the test nor the pool's settings give one (seconds).
DEFAULT_RECOVERY_S = 10.0
#: Events saying the principal accepts writes again (the topology's record; else the harness's probe).
WRITABLE_TOPOLOGY = ("switchover.writable",)


def _writable_at(events: list[Event], ep: Episode) -> Event | None:
    """When the principal accepted writes again in episode ``ep``: the topology's
    ``switchover.writable`` during the fault, else the harness probe's first ``app.writable`` after
    the fault ended (a write through the same addresses the pool uses, on a fresh connection)."""
    end_t = ep.end.t if ep.end is not None else ep.start.t
    for e in events:
        if not ep.start.t <= e.t <= end_t or e.index < ep.start.index:
            continue
        if e.type in WRITABLE_TOPOLOGY:
            return e
    return next((e for e in events if e.type == "app.writable" and end_t <= e.t < ep.until
                 and (ep.end is None or e.index > ep.end.index)), None)


def _resumed_at(events: list[Event], ref: Event, ep: Episode) -> Event:
    """``ref``, or - when the application was idle then (``app.hold`` not yet followed by
    ``app.resume``) - the moment it resumed sending requests: a pool cannot write while the
    application sends nothing."""
    last = None
    for e in events:
        if e.index > ref.index:
            break
        if e.type in ("app.hold", "app.resume"):
            last = e
    if last is None or last.type != "app.hold":
        return ref
    return next((e for e in events if e.type == "app.resume" and e.index > ref.index and e.t < ep.until), ref)


def _combine(results: list[Validity]) -> Validity:
    """APP-1 / APP-2 over every fault: violated if one is, unknown if one could not be judged or there
    is none (:func:`~harness.rules.verdict.tally`), else kept."""
    if UNKNOWN in results and False not in results:
        return UNKNOWN
    return tally(results, [r for r in results if r is False])


@rule(RECOVERY_ID)
def check_recovery(events: list[Event], *, recovery_s: float | None = None, tolerance_s: float = 0.25) -> Verdict:
    """APP-1: after each fault, the pool's first acknowledged write comes within ``recovery_s`` of the
    moment the principal accepts writes again.

    The reference is the later of that moment and the application resuming its requests (when it
    was idle across the fault, ``app.hold``/``app.resume``). ``recovery_s`` defaults to the pool's
    own figure (``app.pool`` ``recovery_s``, derived from its documented settings), else 10 s;
    ``tolerance_s`` absorbs scheduling noise. An episode whose writable moment was not observed, or
    whose observation window ended before the bound without a write, is unknown; a window longer
    than the bound without a write is a violation."""
    events = ordered(events)
    settings = pool_settings(events)
    bound = float(recovery_s if recovery_s is not None else settings.get("recovery_s") or DEFAULT_RECOVERY_S)
    expected = f"first acknowledged write within {bound:g} s (+{tolerance_s:g} s) of the principal accepting writes"
    eps = episodes(events)
    if not eps:
        return Verdict(RECOVERY_ID, UNKNOWN, expected=expected, observed="no fault in the history",
                       details={"bound_s": bound})
    writes = [r for r in requests(events) if r.f == "write" and r.ok]
    last_t = events[-1].t
    figures: list[dict[str, Any]] = []
    results: list[Validity] = []
    evidence: list[int] = []
    for ep in eps:
        ref = _writable_at(events, ep)
        row: dict[str, Any] = {"fault": ep.label, "fault_event": ep.start.index}
        if ref is None:
            row.update(recovery_s=None, why="the principal's return to writes was not observed")
            results.append(UNKNOWN)
            figures.append(row)
            continue
        ref = _resumed_at(events, ref, ep)
        row.update(writable_event=ref.index, writable_by=ref.type)
        first = next((w for w in writes if ref.t <= w.done.t < ep.until), None)
        if first is not None:
            took = first.done.t - ref.t
            row.update(recovery_s=round(took, 3), first_write=first.done.index)
            ok = took <= bound + tolerance_s
            results.append(ok)
            if not ok:
                evidence += [ref.index, first.done.index]
        else:
            window = min(ep.until, last_t) - ref.t
            row.update(recovery_s=None, observed_for_s=round(window, 3))
            if window > bound + tolerance_s:
                row["why"] = f"no acknowledged write in the {window:.2f} s observed"
                results.append(False)
                evidence.append(ref.index)
            else:
                row["why"] = f"observed only {window:.2f} s after writes were possible, no write yet"
                results.append(UNKNOWN)
        figures.append(row)
    valid = _combine(results)
    shown = ", ".join(f"{r['fault']}: " + (f"{r['recovery_s']:.3f} s" if r.get("recovery_s") is not None
                                           else r.get("why", "unknown")) for r in figures)
    return Verdict(RECOVERY_ID, valid, expected=expected, observed=f"recovery per fault: {shown}",
                   evidence=evidence, details={"bound_s": bound, "tolerance_s": tolerance_s, "per_fault": figures})


@rule(FAILED_ID)
def check_failed_requests(events: list[Event], *, failed_requests: int | None = None) -> Verdict:
    """APP-2: the requests that failed (``op.fail``) or whose outcome is unknown (``op.info``) per fault
    stay within ``failed_requests`` (default: the pool's ``app.pool`` ``failed_requests``; without any
    bound the figures are reported and the rule holds). A request belongs to the fault episode in
    which it completed; failures before the first fault are reported apart."""
    events = ordered(events)
    bound = failed_requests if failed_requests is not None else pool_settings(events).get("failed_requests")
    expected = (f"at most {bound} failed request(s) per fault" if bound is not None
                else "no bound set: failed requests per fault reported")
    eps = episodes(events)
    if not eps:
        return Verdict(FAILED_ID, UNKNOWN, expected=expected, observed="no fault in the history",
                       details={"bound": bound})
    reqs = requests(events)
    figures: list[dict[str, Any]] = []
    evidence: list[int] = []
    worst = 0
    for ep in eps:
        inside = [r for r in reqs if ep.holds(r.done.t) and r.done.index > ep.start.index]
        failed = [r for r in inside if not r.ok]
        figures.append({"fault": ep.label, "fault_event": ep.start.index, "requests": len(inside),
                        "failed": len(failed), "fail": sum(r.done.type == "op.fail" for r in failed),
                        "info": sum(r.done.type == "op.info" for r in failed)})
        if bound is not None and len(failed) > bound:
            evidence += [r.done.index for r in failed[:20]]
        worst = max(worst, len(failed))
    before = sum(1 for r in reqs if not r.ok and r.done.t < eps[0].start.t)
    valid: Validity = True if bound is None else worst <= bound
    shown = ", ".join(f"{r['fault']}: {r['failed']} of {r['requests']}" for r in figures)
    return Verdict(FAILED_ID, valid, expected=expected, observed=f"failed requests per fault: {shown}",
                   evidence=evidence, details={"bound": bound, "per_fault": figures, "failed_before_faults": before})
