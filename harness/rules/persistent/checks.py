"""The PER-1 … PER-10 checkers (PolarProxy persistent connections, RULEBOOK seed 002): pure functions
``(events, **params) -> Verdict`` over the model of :mod:`harness.rules.persistent.model`, each
registered under its rule ID with :func:`~harness.rules.registry.rule`. A front connection is *closed*
at a switchover when an operation on it ends with ``conn_lost`` (or the session reconnects away from
it) after the switchover started; it is *kept* when an operation on it succeeds after the switchover
ended and none lost it. Timing tolerances are parameters."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.persistent.model import (
    DISCONNECTED_ENDPOINTS,
    NETWORK_OR_SERVER_FAULTS,
    PERSISTENT_ENDPOINTS,
    Case,
    Removal,
    Switchover,
    View,
    alive_conn_at,
    build_view,
    closure,
    fmt,
    held_state,
    judged_processes,
    no_switchover,
    node_of_port,
    on_node,
    open_transactions,
    ops_after,
    removals_of,
    requests_in_flight,
    served_by,
    used_after,
)
from harness.rules.registry import rule
from harness.rules.verdict import UNKNOWN, Verdict, tallied, tally

# ------------------------------------------------------------------------------------- PER-1


#: The maintenance operations PER-1 publishes 100 % kept for that the harness enacts as faults: a
#: switchover (also the middle of a rolling restart, "minor upgrade"), node add and node remove.
MAINTENANCE_FAULTS = ("switchover", "add_node", "remove_node")


@rule("PER-1")
def check_keepalive_on_switchover(events: list[Event], *, min_keep_rate: float = 1.0, max_errors: int = 0,
                                  processes: list[str] | None = None,
                                  faults: Sequence[str] = ("switchover",)) -> Verdict:
    """PER-1: across each switchover every front connection that was open before it is still the same
    connection afterwards (keep rate >= ``min_keep_rate``, 100 % by default), and the application
    saw at most ``max_errors`` failed operations (0: no client-visible error at all).

    A session is judged at a switchover when it completed an operation on connection ``c`` before the
    switchover started; it is kept when an operation on ``c`` succeeds after the switchover ended
    (before the next one) and no operation lost ``c`` in between. ``faults`` names the maintenance
    operations judged the same way (PER-1's node add / remove: ``["add_node", "remove_node"]``; any
    of :data:`MAINTENANCE_FAULTS`)."""
    kinds = (faults,) if isinstance(faults, str) else tuple(faults)
    unknown = [f for f in kinds if f not in MAINTENANCE_FAULTS]
    if unknown or not kinds:
        raise ConfigError(f"PER-1: faults={list(kinds)!r} names no maintenance fault; use some of "
                          f"{', '.join(MAINTENANCE_FAULTS)} (e.g. faults='[\"add_node\",\"remove_node\"]')")
    what = " / ".join(k.replace("_", " ") for k in kinds)
    expected = (f"keep rate >= {min_keep_rate:.0%} of the front connections across every {what} and "
                f"<= {max_errors} client-visible error(s)")
    view = build_view(events, kinds)
    if not view.switchovers:
        if kinds == ("switchover",):
            return no_switchover("PER-1", expected)
        return Verdict("PER-1", UNKNOWN, expected=expected,
                       observed=f"no {what} (fault.start fault={'|'.join(kinds)}) in the history")
    names = judged_processes(view, processes)
    judged = kept = 0
    lost_evidence: list[int] = []
    lost_names: list[str] = []
    unjudged = 0
    for k, s in enumerate(view.switchovers):
        nxt = view.switchovers[k + 1].t0 if k + 1 < len(view.switchovers) else float("inf")
        for p in names:
            conn = alive_conn_at(view, p, s.t0)
            if conn is None:
                continue
            closed = closure(view, p, conn, s.t0)
            if closed is not None and closed.t < nxt:
                judged += 1
                lost_evidence.append(closed.index)
                lost_names.append(f"{fmt(p, conn)} at {s.start.get('fault')} {k + 1}: "
                                  f"{closed.get('error') or closed.type}")
                continue
            if used_after(view, p, conn, s.t1) is None:
                unjudged += 1
                continue
            judged += 1
            kept += 1
    participants = set(names)
    errors = [op.done for op in view.ops if op.done is not None and op.done.type in ("op.fail", "op.info")
              and op.process in participants]
    details: dict[str, Any] = {"switchovers": len(view.switchovers), "judged": judged, "kept": kept,
                               "not_judged": unjudged, "errors": len(errors), "sessions": len(names),
                               "lost": lost_names[:50]}
    if judged == 0:
        return Verdict("PER-1", UNKNOWN, expected=expected,
                       observed=f"no session had an operation both before and after a {what} "
                                f"({len(names)} session(s))", details=details)
    rate = kept / judged
    details["keep_rate"] = rate
    error_samples = [f"{e.get('process')}: {e.get('error')}" for e in errors[:3]]
    observed = (f"{kept}/{judged} front connections kept ({rate:.1%}) over {len(view.switchovers)} "
                f"{what}(s); {len(errors)} client-visible error(s)")
    if error_samples:
        observed += " e.g. " + "; ".join(error_samples)
    ok = rate >= min_keep_rate and len(errors) <= max_errors
    evidence = [s.start.index for s in view.switchovers] + lost_evidence[:20] + [e.index for e in errors[:20]]
    return Verdict("PER-1", ok, expected=expected, observed=observed,
                   evidence=sorted(set(evidence)) if not ok else [s.start.index for s in view.switchovers],
                   details=details)


# ------------------------------------------------------------------------------------- PER-2


def _norm(value: Any) -> str:
    return " ".join(str(value).split()) if value is not None else "None"


@rule("PER-2")
def check_session_state_restored(events: list[Event]) -> Verdict:
    """PER-2: every piece of session state the application established (``state.set``: GUCs of each
    kind, prepared statements, encoding) reads back unchanged after the switchover (``state.read``
    phase ``after``), on the same front connection."""
    expected = "every session setting / prepared statement reads back unchanged after the switchover, " \
               "on the same connection"
    view = build_view(events)
    if not view.switchovers:
        return no_switchover("PER-2", expected)
    first = view.switchovers[0].t0
    last = view.switchovers[-1].t1
    sets: dict[tuple[str, str], Event] = {}
    for e in view.events:
        if e.type == "state.set" and e.t < first:
            sets[(e.get("process"), e.get("key"))] = e
    reads_after: dict[tuple[str, str], Event] = {}
    reads_before: dict[tuple[str, str], Event] = {}
    for e in view.events:
        if e.type != "state.read":
            continue
        key = (e.get("process"), e.get("key"))
        if e.get("phase") == "after" and e.t > last:
            reads_after[key] = e
        elif e.get("phase") == "before" and e.t < first:
            reads_before[key] = e
    if not sets:
        return Verdict("PER-2", UNKNOWN, expected=expected, observed="no state.set before the switchover")
    broken: list[str] = []
    evidence: list[int] = []
    missing = 0
    kinds: dict[str, int] = defaultdict(int)
    for key, s in sorted(sets.items()):
        r = reads_after.get(key)
        kinds[s.get("kind")] += 1
        if r is None:
            missing += 1
            continue
        why = None
        if r.get("error") is not None:
            why = f"read failed: {r.get('error')}"
        elif r.get("conn") != s.get("conn"):
            why = f"connection changed ({s.get('conn')} -> {r.get('conn')}): state not restored on the same session"
        elif _norm(r.get("value")) != _norm(s.get("value")):
            why = f"set {s.get('value')!r}, read {r.get('value')!r}"
        if why is not None:
            b = reads_before.get(key)
            if b is not None and _norm(b.get("value")) != _norm(s.get("value")):
                why += f" (already {b.get('value')!r} before the switchover)"
            broken.append(f"{key[0]} {s.get('kind')} {key[1]}: {why}")
            evidence += [s.index, r.index]
    details = {"settings": len(sets), "broken": broken, "not_read": missing, "kinds": dict(kinds)}
    judged = len(sets) - missing
    valid = tally(judged, broken)
    if valid == UNKNOWN:
        return Verdict("PER-2", UNKNOWN, expected=expected,
                       observed=f"none of {len(sets)} setting(s) was read back after the switchover", details=details)
    if valid is False:
        return Verdict("PER-2", False, expected=expected,
                       observed=f"{len(broken)} of {judged} setting(s) not restored: " + "; ".join(broken[:4]),
                       evidence=evidence[:40], details=details)
    return Verdict("PER-2", True, expected=expected,
                   observed=f"all {judged} setting(s) of {len(kinds)} kind(s) unchanged after "
                            f"{len(view.switchovers)} switchover(s)",
                   evidence=[view.switchovers[0].start.index], details=details)


# ------------------------------------------------------------------------------------- PER-3


def _principal_back_at(view: View, s: Switchover) -> float:
    """When the new principal became reachable: the switchover's end, or later if a network or
    server fault on that node overlapped it."""
    t = s.t1
    if s.new_principal is None:
        return t
    starts: dict[Any, Event] = {}
    for e in view.events:
        if e.type == "fault.start" and e.get("fault") in NETWORK_OR_SERVER_FAULTS and e.get("node") == s.new_principal:
            starts[e.get("id")] = e
        elif e.type == "fault.end" and e.get("id") in starts:
            st = starts.pop(e.get("id"))
            if st.t <= s.t1 and e.t > t:
                t = e.t
    for st in starts.values():  # never ended
        if st.t <= s.t1:
            t = float("inf")
    return t


@rule("PER-3")
def check_recovery_window(events: list[Event], *, recovery_window: float = 60.0, tolerance: float = 1.0,
                          processes: list[str] | None = None) -> Verdict:
    """PER-3: if the new principal accepts traffic within ``recovery_window`` of the switchover, the
    sessions continue (kept); if not, each front connection is closed with an error no later than
    the window (+ ``tolerance``) - never left hanging, never silently continued afterwards."""
    expected = (f"principal back within {recovery_window} s: sessions kept; otherwise every front connection "
                f"closed with an error within {recovery_window} s (+{tolerance} s)")
    view = build_view(events)
    if not view.switchovers:
        return no_switchover("PER-3", expected)
    names = judged_processes(view, processes)
    bad: list[str] = []
    evidence: list[int] = []
    judged = good = 0
    outcomes: list[str] = []
    for s in view.switchovers:
        back = _principal_back_at(view, s)
        in_window = back - s.t0 <= recovery_window
        outcomes.append(f"principal back after {back - s.t0:.2f} s" if back != float("inf") else "principal never back")
        for p in names:
            conn = alive_conn_at(view, p, s.t0)
            if conn is None:
                continue
            closed = closure(view, p, conn, s.t0)
            used = used_after(view, p, conn, s.t1)
            if in_window:
                if closed is None and used is not None:
                    judged += 1
                    good += 1
                elif closed is not None:
                    judged += 1
                    bad.append(f"{fmt(p, conn)} closed although the principal was back in the window: "
                               f"{closed.get('error')}")
                    evidence.append(closed.index)
                continue
            deadline = s.t0 + recovery_window + tolerance
            if closed is None:
                if used is not None:
                    judged += 1
                    bad.append(f"{fmt(p, conn)} not closed: an operation succeeded on it "
                               f"{used.t_end - s.t0:.2f} s after the switchover")
                    evidence.append(used.done.index if used.done is not None else used.invoke.index)
                continue
            judged += 1
            late = closed.t > deadline
            timed_out = bool(closed.get("timed_out"))
            if timed_out or late:
                why = "the client gave up waiting" if timed_out else "closed late"
                bad.append(f"{fmt(p, conn)} {why} {closed.t - s.t0:.2f} s after the switchover "
                           f"(window {recovery_window} s): {closed.get('error')}")
                evidence.append(closed.index)
            elif not closed.get("error") and closed.type != "session.reconnect":
                bad.append(f"{fmt(p, conn)} closed without an error message")
                evidence.append(closed.index)
            else:
                good += 1
    details = {"judged": judged, "good": good, "bad": bad[:50], "outcomes": outcomes}
    valid = tally(judged, bad)
    if valid == UNKNOWN:
        return Verdict("PER-3", UNKNOWN, expected=expected, observed="no session was observed after the switchover",
                       details=details)
    if valid is False:
        return Verdict("PER-3", False, expected=expected,
                       observed=f"{len(bad)} of {judged} session(s) wrong ({'; '.join(outcomes)}): "
                                + "; ".join(bad[:3]),
                       evidence=[view.switchovers[0].start.index] + evidence[:30], details=details)
    return Verdict("PER-3", True, expected=expected,
                   observed=f"{good}/{judged} session(s) as required ({'; '.join(outcomes)})",
                   evidence=[view.switchovers[0].start.index], details=details)


def _judge_cases(rule: str, view: View, expected: str, cases_of: Any, drain_window: float | None,
                 margin: float, expect_kept_in_window: bool) -> Verdict:
    """Cases whose condition ended inside the drain window must be kept (PER-4) when
    ``expect_kept_in_window``; the others must be closed (their front connection lost, no success
    on it after the switchover)."""
    bad: list[str] = []
    evidence: list[int] = []
    judged = good = skipped = 0
    summary: list[str] = []
    for s in view.switchovers:
        for case in cases_of(s):
            in_window = (drain_window is not None and case.ended_at is not None
                         and case.ended_at - s.t0 <= drain_window - margin)
            edge = (drain_window is not None and case.ended_at is not None
                    and abs(case.ended_at - s.t0 - drain_window) < margin)
            if edge:
                skipped += 1
                continue
            closed = closure(view, case.process, case.conn, s.t0)
            who = f"{fmt(case.process, case.conn)} ({case.what})"
            if in_window:
                if not expect_kept_in_window:
                    skipped += 1
                    continue
                judged += 1
                used = used_after(view, case.process, case.conn, s.t1)
                if closed is not None:
                    bad.append(f"{who} ended {case.ended_at - s.t0:.2f} s into the {drain_window} s drain window "
                               f"but was closed: {closed.get('error')}")
                    evidence += [case.evidence, closed.index]
                elif used is None:
                    judged -= 1
                    skipped += 1
                else:
                    good += 1
                    summary.append(f"{who} kept")
                continue
            judged += 1
            after = s.t0 if drain_window is None else s.t0 + drain_window + margin
            used = used_after(view, case.process, case.conn, after)
            if closed is not None and (used is None or used.t_end < closed.t):
                good += 1
                summary.append(f"{who} closed: {closed.get('error')}")
            elif used is not None:
                bad.append(f"{who} not closed: an operation succeeded on the same connection "
                           f"{used.t_end - s.t0:.2f} s after the switchover started")
                evidence += [case.evidence, used.done.index if used.done is not None else used.invoke.index]
            else:
                judged -= 1
                skipped += 1
    details = {"judged": judged, "good": good, "not_judged": skipped, "bad": bad[:50], "ok": summary[:50]}
    if not view.switchovers:
        return no_switchover(rule, expected)
    valid = tally(judged, bad)
    if valid == UNKNOWN:
        return Verdict(rule, UNKNOWN, expected=expected,
                       observed="no session in the rule's condition could be judged at the switchover", details=details)
    first = view.switchovers[0].start.index
    if valid is False:
        return Verdict(rule, False, expected=expected,
                       observed=f"{len(bad)} of {judged} session(s) wrong: " + "; ".join(bad[:3]),
                       evidence=[first] + evidence[:30], details=details)
    return Verdict(rule, True, expected=expected, observed=f"{good}/{judged} session(s) as required: "
                   + "; ".join(summary[:3]), evidence=[first], details=details)


@rule("PER-4")
def check_drain_window(events: list[Event], *, drain_window: float = 60.0, margin: float = 0.25) -> Verdict:
    """PER-4: a session busy when the switchover starts (an open transaction, a request running) whose
    work ends inside the drain window is kept; one whose work does not end within it is closed.
    Cases ending within ``margin`` s of the window's edge are not judged."""
    expected = (f"work ending inside the {drain_window} s drain window: connection kept; "
                f"work not ended by then: connection closed")
    view = build_view(events)
    return _judge_cases("PER-4", view, expected,
                        lambda s: open_transactions(view, s)
                        + requests_in_flight(view, s, ("stream", "copy", "slow_query"), False),
                        drain_window, margin, True)


@rule("PER-5")
def check_temp_tables_not_kept(events: list[Event]) -> Verdict:
    """PER-5: a session holding temporary tables (``state.set`` kind ``temp_table``) when the
    switchover starts is closed."""
    view = build_view(events)
    return _judge_cases("PER-5", view, "a session holding temporary tables at switchover time is closed",
                        lambda s: held_state(view, s, ("temp_table",)), None, 0.0, False)


@rule("PER-6")
def check_partial_result_not_kept(events: list[Event], *, drain_window: float = 60.0, margin: float = 0.25) -> Verdict:
    """PER-6: a session whose result is only partly delivered when the switchover fires (an ``f=stream``
    operation with ``stream.progress`` before the start, not finished within the drain window) is closed."""
    view = build_view(events)
    return _judge_cases("PER-6", view, "a session with a partly delivered result at switchover time is closed",
                        lambda s: requests_in_flight(view, s, ("stream",), True), drain_window, margin, False)


@rule("PER-7")
def check_open_transaction_not_kept(events: list[Event], *, drain_window: float = 60.0,
                                    margin: float = 0.25) -> Verdict:
    """PER-7: a session inside a transaction when the switchover begins that does not end it within
    the drain window is closed."""
    view = build_view(events)
    return _judge_cases("PER-7", view,
                        f"a transaction open at switchover time and not ended within {drain_window} s: closed",
                        lambda s: open_transactions(view, s), drain_window, margin, False)


@rule("PER-8")
def check_cursor_not_kept(events: list[Event], *, drain_window: float = 60.0, margin: float = 0.25) -> Verdict:
    """PER-8: a session with an open server cursor (``state.set`` kind ``cursor``) or an unfinished COPY
    (``f=copy`` in progress, not finished within the drain window) at switchover time is closed."""
    view = build_view(events)

    def cases(s: Switchover) -> list[Case]:
        held = held_state(view, s, ("cursor",))
        copies = [c for c in requests_in_flight(view, s, ("copy",), False)
                  if c.ended_at is None or c.ended_at - s.t0 > drain_window + margin]
        return held + copies

    return _judge_cases("PER-8", view, "a session with an open cursor or an unfinished COPY at switchover "
                        "time is closed", cases, None, margin, False)


def _removal_verdict(rule_id: str, expected: str, removals: Sequence[Removal], judged: int, bad: list[str],
                     evidence: list[int], details: dict[str, Any], *, unknown: str, violated: str,
                     kept: str) -> Verdict:
    """The tally of a read-only node removal rule (PER-9, PER-10): the removals' first events are the
    evidence, with up to 30 of the violations' when violated; ``violated`` is followed by the first
    three violations."""
    first = [r.start.index for r in removals]
    return tallied(rule_id, expected, judged=judged, violations=bad, kept=kept, unknown=unknown,
                   violated=violated + "; ".join(bad[:3]), evidence=first, violated_evidence=first + evidence[:30],
                   details=details)


@rule("PER-9")
def check_readonly_node_removal(events: list[Event], *, window: float = 60.0, tolerance: float = 1.0,
                                routing_grace: float = 0.5) -> Verdict:
    """PER-9: when a read-only node is removed, new connections and idle queries go elsewhere at once
    (no operation invoked ``routing_grace`` s after the removal started is served by it); an idle
    session on it is kept (its next operations succeed on the same front connection); a query
    running on it gets up to ``window`` s: its connection is kept if it finishes in time, closed (no
    later than ``window`` + ``tolerance``) if not."""
    expected = (f"after a read-only node removal nothing new runs on it (grace {routing_grace} s); idle "
                f"sessions on it kept; a running query kept if it ends within {window} s, else closed")
    view = build_view(events)
    removals = removals_of(events)
    if not removals:
        return Verdict("PER-9", UNKNOWN, expected=expected, observed="no read-only node removal in the history")
    ports = node_of_port(events)
    if not ports:
        return Verdict("PER-9", UNKNOWN, expected=expected,
                       observed="no node.ports event: the node serving each query cannot be told")
    # direct connections to a node are routed by nobody, connection-balanced ones are disconnected
    # when their node goes: PER-10 judges both
    direct = {e.get("process") for e in events
              if e.type == "session.endpoint" and e.get("endpoint") in DISCONNECTED_ENDPOINTS}
    bad: list[str] = []
    evidence: list[int] = []
    judged = good = 0
    for r in removals:
        for op in view.ops:  # routed away at once
            if op.process in direct:
                continue
            if op.invoke.t >= r.t0 + routing_grace and served_by(op, ports) == r.node:
                judged += 1
                bad.append(f"{op.process} op {op.invoke.get('op_id')} invoked {op.invoke.t - r.t0:.2f} s after the "
                           f"removal ran on {r.node}")
                evidence.append(op.done.index if op.done is not None else op.invoke.index)
        for s in on_node(view, ports, r):
            if s.process in direct:
                continue
            later = [op for op in ops_after(view, s.process, s.conn, r.t0) if op is not s.running]
            lost = next((op for op in ([s.running] if s.running else []) + later if op.lost), None)
            used = next((op for op in later if op.ok and op.invoke.t >= r.t0), None)
            running = s.running
            in_time = running is not None and running.ok and running.t_end - r.t0 <= window
            if running is None or in_time:
                what = "idle" if running is None else f"query ending {running.t_end - r.t0:.2f} s in"
                if lost is not None:
                    judged += 1
                    bad.append(f"{fmt(s.process, s.conn)} ({what}) closed: {lost.done.get('error')}")  # type: ignore[union-attr]
                    evidence.append(lost.done.index)  # type: ignore[union-attr]
                elif used is not None:
                    judged += 1
                    good += 1
                continue
            # a query still running at the end of the window: the connection must be closed by then
            deadline = r.t0 + window + tolerance
            if lost is not None and lost.t_end <= deadline and not lost.done.get("timed_out"):  # type: ignore[union-attr]
                judged += 1
                good += 1
            elif used is not None or (lost is not None and lost.t_end > deadline) or running.ok:
                judged += 1
                bad.append(f"{fmt(s.process, s.conn)} query running past the {window} s window was not "
                           "closed in time")
                evidence.append(running.invoke.index)
    details = {"judged": judged, "good": good, "bad": bad[:50], "removals": [r.node for r in removals]}
    return _removal_verdict("PER-9", expected, removals, judged, bad, evidence, details,
                            unknown="no session was on the removed node and nothing ran after the removal",
                            violated=f"{len(bad)} of {judged} observation(s) wrong: ",
                            kept=f"{good}/{judged} as required over {len(removals)} removal(s)")


@rule("PER-10")
def check_endpoint_support(events: list[Event], *, tolerance: float = 1.0, window: float = 60.0) -> Verdict:
    """PER-10: at a read-only node removal, an idle session through the default cluster endpoint or
    a custom endpoint with active-request-based balancing (``cluster``, ``custom-active``) on that
    node is kept; one through connection-based balancing or connected directly to the node
    (``custom-connection``, ``direct``) is disconnected (an operation on it fails with the front
    connection lost, within ``window`` + ``tolerance`` s)."""
    expected = ("idle sessions on a removed read-only node: kept through cluster / custom-active endpoints, "
                "disconnected through custom-connection endpoints and direct connections")
    view = build_view(events)
    removals = removals_of(events)
    kinds = {e.get("process"): e.get("endpoint") for e in events if e.type == "session.endpoint"}
    if not removals or not kinds:
        return Verdict("PER-10", UNKNOWN, expected=expected,
                       observed="no read-only node removal" if not removals else "no session.endpoint event")
    ports = node_of_port(events)
    if not ports:
        return Verdict("PER-10", UNKNOWN, expected=expected, observed="no node.ports event")
    bad: list[str] = []
    evidence: list[int] = []
    judged = good = 0
    per_kind: dict[str, int] = defaultdict(int)
    for r in removals:
        for s in on_node(view, ports, r):
            kind = kinds.get(s.process)
            if kind not in PERSISTENT_ENDPOINTS + DISCONNECTED_ENDPOINTS or s.running is not None:
                continue  # running queries are PER-9's
            later = ops_after(view, s.process, s.conn, r.t0)
            lost = next((op for op in later if op.lost), None)
            used = next((op for op in later if op.ok), None)
            if lost is None and used is None:
                continue  # not used again: nothing observed
            judged += 1
            per_kind[kind] += 1
            if kind in PERSISTENT_ENDPOINTS:
                if lost is None:
                    good += 1
                else:
                    bad.append(f"{fmt(s.process, s.conn)} via {kind} endpoint closed: {lost.done.get('error')}")  # type: ignore[union-attr]
                    evidence.append(lost.done.index)  # type: ignore[union-attr]
                continue
            # disconnected once the removal is over (it may serve until then): nothing succeeds on
            # it later, and the loss shows within the window
            kept_on = next((op for op in later if op.ok and op.invoke.t > r.t1 + tolerance), None)
            if kept_on is None and lost is not None and lost.t_end <= r.t1 + window + tolerance:
                good += 1
            elif kept_on is not None or lost is not None:
                how = "kept" if kept_on is not None else f"disconnected only {lost.t_end - r.t1:.2f} s"  # type: ignore[union-attr]
                bad.append(f"{fmt(s.process, s.conn)} via {kind} {how} after its node {r.node} was removed")
                evidence.append(kept_on.done.index if kept_on is not None and kept_on.done is not None
                                else s.evidence)
            else:
                judged -= 1  # neither used after the removal nor lost: nothing observed
                per_kind[kind] -= 1
    details = {"judged": judged, "good": good, "bad": bad[:50], "by_kind": dict(per_kind)}
    return _removal_verdict("PER-10", expected, removals, judged, bad, evidence, details,
                            unknown="no idle session on a removed node was used again",
                            violated=f"{len(bad)} of {judged} session(s) wrong: ",
                            kept=f"{good}/{judged} session(s) as required ({dict(per_kind)})")
