"""HAM-1 … HAM-6 - what Patroni and pg_auto_failover document of themselves (RULEBOOK HAM,
docs/rules.md), judged on the servers' and the manager's view (:mod:`harness.rules.ham.model`). Pure checkers
``checker(events, **params) -> Verdict``, each named by what it checks and registered under its rule
ID with ``@rule("HAM-N")``; every bound is computed from the settings the run recorded
(``ham.settings``), with an explicit tolerance for the observation and the promotion.

Each checker ends with the shared tally (:func:`harness.rules.verdict.tallied`): any violation ->
violated (the first one observed, with its evidence), nothing judged -> *unknown* (never a
violation: no settings, no observation after the fault, or an observation that ends before the
bound), else kept. A case the history cannot judge (a fault whose observation ends too early) is
left out of the tally and listed in ``details["not_judged"]`` beside judged ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from harness.history.core import Event
from harness.rules.durability import check_no_acknowledged_write_lost
from harness.rules.ham.model import (
    MACHINE_LOSS,
    PATRONI,
    PGAF_PRIMARY_STATES,
    PGAF_STANDBY_STATES,
    ROLE_EVENTS,
    Observation,
    leader_cuts,
    observations,
    of_type,
    settings,
    write_stretches,
)
from harness.rules.registry import rule
from harness.rules.verdict import UNKNOWN, Count, Text, Verdict, tallied

#: A violation: what was observed, and the events that show it.
Violation = tuple[str, tuple[int, ...]]


def _unknown(rule_id: str, expected: str, why: str) -> Verdict:
    """The verdict of a history that lacks what the rule needs before any case can be looked at."""
    return Verdict(rule_id, UNKNOWN, expected, why)


def _verdict(rule_id: str, expected: str, *, judged: Count, bad: list[Violation], kept: Text, unknown: str,
             not_judged: Sequence[str] = (), details: dict[str, Any] | None = None) -> Verdict:
    """The HAM tally: the first violation (``+ (and N more)``) with its evidence; *unknown* with
    ``unknown`` when nothing was judged; else kept with ``kept``. ``not_judged`` (the cases the
    history could not judge) go to ``details["not_judged"]``."""
    extra = {"not_judged": list(not_judged)} if not_judged else {}

    def violated() -> str:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return bad[0][0] + more

    return tallied(rule_id, expected, judged=judged, violations=bad, kept=kept, unknown=unknown,
                   violated=violated, violated_evidence=lambda: bad[0][1], details={**(details or {}), **extra})


@rule("HAM-1")
def check_one_writer_at_a_time(events: Sequence[Event]) -> Verdict:
    """HAM-1: never two nodes accepting writes at once, as the servers themselves answer.

    Each node's maximal stretch of observations that accepted the harness's write covers the closed
    interval from its first observation's start to its last one's end; two stretches of different
    nodes that intersect (touching counts) are two writers at once."""
    expected = "at most one node accepting writes at any moment"
    stretches = write_stretches(observations(events))
    bad: list[Violation] = []
    for i, a in enumerate(stretches):
        for b in stretches[i + 1:]:
            if b.start > a.end:
                break
            if b.node != a.node:
                bad.append((f"{a.node} accepted writes from t={a.start:.3f} to t={a.end:.3f} and {b.node} "
                            f"from t={b.start:.3f} to t={b.end:.3f}", (a.first, a.last, b.first, b.last)))
    nodes = sorted({s.node for s in stretches})
    return _verdict("HAM-1", expected, judged=stretches, bad=bad,
                    kept=lambda: f"{len(stretches)} write stretch(es) on {', '.join(nodes)}, none overlapping",
                    unknown="no node was observed accepting a write")


def _demotion(obs: list[Observation], since: float) -> tuple[Observation | None, Observation | None]:
    """The last writable observation at or after ``since`` before the first one that is not, and that one."""
    last_ok: Observation | None = None
    for o in obs:
        if o.t < since:
            continue
        if o.writable:
            last_ok = o
        else:
            return last_ok, o
    return last_ok, None


@rule("HAM-2")
def check_dcs_loss_demotion_window(events: Sequence[Event], *, tolerance_s: float = 1.0) -> Verdict:
    """HAM-2: a leader cut from the DCS stops accepting writes within ttl of the cut, and a cut
    shorter than retry_timeout does not demote it ("DCS or network issues shorter than retry_timeout
    will not cause Patroni to demote the leader"); a demotion less than retry_timeout after the cut
    is early. Bounds from the recorded settings, ± ``tolerance_s``."""
    rule_id = "HAM-2"
    s = settings(events)
    if s is None:
        return _unknown(rule_id, "a leader cut from the DCS demotes within ttl, not before retry_timeout",
                        "no ham.settings in the history")
    if s.manager != PATRONI or s.ttl is None or s.retry_timeout is None or s.loop_wait is None:
        return _unknown(rule_id, "a leader cut from the DCS demotes within ttl, not before retry_timeout",
                        f"HAM-2 is Patroni's DCS rule; this run's manager is {s.manager}")
    expected = (f"a leader cut from the DCS stops accepting writes between retry_timeout ({s.retry_timeout:g} s) "
                f"and ttl ({s.ttl:g} s) after the cut; not at all for a cut shorter than retry_timeout")
    judged: list[str] = []
    bad: list[Violation] = []
    not_judged: list[str] = []
    for cut, heal in leader_cuts(events, "dcs"):
        node = str(cut.get("node"))
        obs = observations(events, node)
        last_ok, first_not = _demotion(obs, cut.t)
        if heal is not None and heal.t - cut.t < s.retry_timeout - tolerance_s:  # a short cut
            quiet_until = heal.t + s.loop_wait + s.retry_timeout  # the loop that was retrying has ended
            if first_not is not None and first_not.t_end <= quiet_until:
                bad.append((f"{node} was cut from the DCS for {heal.t - cut.t:.2f} s (< retry_timeout) and "
                            f"stopped accepting writes at t={first_not.t:.3f}, {first_not.t - cut.t:.2f} s "
                            "after the cut", (cut.index, heal.index, first_not.index)))
            elif not any(o.t >= quiet_until for o in obs):
                not_judged.append(f"{node}'s observation ends before the cut's effects would be over")
            else:
                judged.append(f"{node}: {heal.t - cut.t:.2f} s cut, no demotion")
            continue
        if first_not is None:
            late = [o for o in obs if o.t > cut.t + s.ttl + tolerance_s and o.writable]
            if late and (heal is None or heal.t > late[0].t):
                bad.append((f"{node} still accepted writes at t={late[0].t:.3f}, {late[0].t - cut.t:.2f} s "
                            f"after the DCS cut (ttl {s.ttl:g} s)", (cut.index, late[0].index)))
            else:
                not_judged.append(f"{node} was not observed after the cut long enough to see it demote")
            continue
        lo = last_ok.t_end if last_ok is not None else cut.t  # demoted in (lo, first_not.t_end]
        if first_not.t_end < cut.t + s.retry_timeout - tolerance_s:
            bad.append((f"{node} stopped accepting writes {first_not.t_end - cut.t:.2f} s after the DCS cut, "
                        f"before retry_timeout ({s.retry_timeout:g} s)", (cut.index, first_not.index)))
        elif lo > cut.t + s.ttl + tolerance_s:
            bad.append((f"{node} accepted writes until {lo - cut.t:.2f} s after the DCS cut (ttl {s.ttl:g} s)",
                        (cut.index, first_not.index)))
        else:
            judged.append(f"{node} demoted {lo - cut.t:.2f}-{first_not.t_end - cut.t:.2f} s after the cut")
    return _verdict(rule_id, expected, judged=judged, bad=bad, kept=lambda: "; ".join(judged),
                    unknown=not_judged[0] if not_judged else "no DCS cut of the leader in the history",
                    not_judged=not_judged, details={"settings": dataclasses.asdict(s)})


@rule("HAM-3")
def check_failover_within_bound(events: Sequence[Event], *, tolerance_s: float = 5.0,
                                keeper_steps_s: float = 4.0) -> Verdict:
    """HAM-3: after the leader's machine is lost (the manager and PostgreSQL killed), another node
    accepts writes within the documented bound computed from the recorded settings, +
    ``tolerance_s`` for the promotion and the observation. Patroni: ttl + loop_wait (the leader key
    expires at most ttl after its last update; the replicas race in their next loop).
    pg_auto_failover: the monitor's failure detection (``node_considered_unhealthy_timeout`` and the
    health checks) + ``primary_demote_timeout`` (:func:`harness.rules.ham.model.pgaf_failover_bound`).
    **(interpretation)** On pg_auto_failover each step of the failover's state machine after the
    decision (report_lsn when there are several secondaries, prepare_promotion, stop_replication,
    wait_primary) waits for a keeper's report, which no setting bounds: ``keeper_steps_s`` (1 s per
    step) is added to the tolerance. In Patroni's synchronous_mode only the synchronous standby may be
    promoted: a loss recorded with none (``sync_standby`` empty) is *unknown*."""
    rule_id = "HAM-3"
    s = settings(events)
    if s is None:
        return _unknown(rule_id, "a new leader within the manager's documented bound of the leader's loss",
                        "no ham.settings")
    bound = s.failover_bound
    if s.manager != PATRONI:
        tolerance_s += keeper_steps_s
    expected = (f"a new leader accepting writes within {s.bound_formula} = {bound:g} s (+{tolerance_s:g} s) "
                "of the loss")
    kills = [e for e in of_type(events, "ham.kill") if e.get("was_leader") and e.get("what") in MACHINE_LOSS]
    obs = observations(events)
    judged: list[str] = []
    bad: list[Violation] = []
    not_judged: list[str] = []
    details: list[dict[str, Any]] = []
    for kill in kills:
        dead = str(kill.get("node"))
        if s.manager == PATRONI and s.synchronous_mode and "sync_standby" in kill.fields \
                and not kill.get("sync_standby"):
            not_judged.append(f"no synchronous standby when {dead} was lost: in synchronous_mode "
                              "Patroni promotes none (HAM-4 comes first)")
            continue
        deadline = kill.t + bound + tolerance_s
        after = [o for o in obs if o.t >= kill.t and o.node != dead]
        first_ok = next((o for o in after if o.writable), None)
        if first_ok is None:
            if any(o.t > deadline for o in after):
                bad.append((f"no other node accepted writes within {bound + tolerance_s:g} s of {dead}'s loss",
                            (kill.index,)))
            else:
                not_judged.append(f"the observation ends before a new leader was seen after {dead}'s loss")
            continue
        before = [o for o in after if o.node == first_ok.node and o.t < first_ok.t]
        still_not = before[-1].t if before else kill.t  # surely not yet writable then
        if still_not > deadline:
            bad.append((f"{first_ok.node} was not yet accepting writes {still_not - kill.t:.2f} s after "
                        f"{dead}'s loss", (kill.index, first_ok.index)))
            continue
        seconds = first_ok.t_end - kill.t
        details.append({"node": first_ok.node, "seconds": round(seconds, 3)})
        judged.append(f"{first_ok.node} accepted writes {seconds:.2f} s after {dead}'s loss")
    return _verdict(rule_id, expected, judged=judged, bad=bad, kept=lambda: "; ".join(judged),
                    unknown=not_judged[0] if not_judged else "no loss of the leader's machine in the history",
                    not_judged=not_judged, details={"failovers": details})


@rule("HAM-4")
def check_sync_mode_keeps_acknowledged_commits(events: Sequence[Event]) -> Verdict:
    """HAM-4: in synchronous_mode no acknowledged commit is lost across a failover (a standby is
    promoted only if it may hold every acknowledged commit) - DUR-1's checker on the same history,
    whose tally is the verdict."""
    s = settings(events)
    if s is None or not s.synchronous_mode:
        return _unknown("HAM-4", "no acknowledged commit lost in synchronous_mode",
                        "the run did not record synchronous_mode on")
    verdict = check_no_acknowledged_write_lost(list(events), mode="sync")
    return dataclasses.replace(verdict, rule_id="HAM-4")


def _monitor_disagrees(o: Observation) -> str | None:
    """Why the pg_auto_failover monitor's state of the node contradicts the server's own view in ``o``
    (None when it does not, or claims no role)."""
    if o.recovery is True and o.monitor_state in PGAF_PRIMARY_STATES:
        return f"the monitor has the node in state {o.monitor_state} while the server is in recovery"
    if o.recovery is False and o.monitor_state in PGAF_STANDBY_STATES:
        return f"the monitor has the node in state {o.monitor_state} while the server is out of recovery"
    return None


def _disagrees(o: Observation) -> str | None:
    """Why the REST API's answer contradicts the server's own view in ``o`` (None when it does not)."""
    if o.recovery is True and o.api_primary == 200:
        return "/primary answered 200 while the server is in recovery"
    if o.recovery is False and o.api_replica == 200:
        return "/replica answered 200 while the server is out of recovery"
    if o.recovery is False and o.writable and o.api_primary is not None and o.api_primary != 200:
        return f"/primary answered {o.api_primary} while the server accepted a write"
    return None


@rule("HAM-5")
def check_health_endpoints_agree_with_servers(events: Sequence[Event], *, report_lag_s: float = 3.0) -> Verdict:
    """HAM-5: the manager's view of each node agrees with the server's own ``pg_is_in_recovery()``.

    Patroni: ``/primary`` and ``/replica``. A disagreement counts only when the node's observations
    just before and just after it show the same server role and no fault or role operation falls
    between them (the two answers are taken a few milliseconds apart, so a role change inside that
    window is not a disagreement).

    pg_auto_failover: the monitor's state of the node (the state its keeper last reported): a
    primary state (single, wait_primary, primary ...) while the server is in recovery, or a standby
    state (secondary, catchingup) while it is out of recovery. The keepers report about once a
    second, so a disagreement counts only when it holds, the server's role unchanged, over more
    than ``report_lag_s`` of consecutive observations with no fault or role operation among them."""
    expected = "the manager's view of each node agrees with pg_is_in_recovery() whenever no role changes"
    obs = observations(events)
    compared = [o for o in obs if o.up and (o.api_primary is not None or o.api_replica is not None
                                            or o.monitor_state is not None)]
    role_times = [e.t for e in events if e.type in ROLE_EVENTS]
    by_node: dict[str, list[Observation]] = {}
    for o in obs:
        by_node.setdefault(o.node, []).append(o)
    bad: list[Violation] = []
    transient = 0
    for seq in by_node.values():
        for i in range(1, len(seq) - 1):
            o = seq[i]
            why = _disagrees(o)
            if why is None:
                continue
            prev, nxt = seq[i - 1], seq[i + 1]
            stable = (prev.recovery == o.recovery == nxt.recovery and prev.writable == o.writable == nxt.writable
                      and not any(prev.t <= t <= nxt.t_end for t in role_times))
            if stable:
                bad.append((f"{o.node} at t={o.t:.3f}: {why}", (prev.index, o.index, nxt.index)))
            else:
                transient += 1
        run: list[Observation] = []
        for o in [*seq, None]:
            why = _monitor_disagrees(o) if o is not None else None
            if o is not None and why is not None and (not run or (_monitor_disagrees(run[0]) == why
                                                                  and run[0].recovery == o.recovery)):
                run.append(o)
                continue
            if run:
                first, last = run[0], run[-1]
                quiet = not any(first.t <= t <= last.t_end for t in role_times)
                if last.t_end - first.t > report_lag_s and quiet:
                    bad.append((f"{first.node} from t={first.t:.3f} to t={last.t_end:.3f} "
                                f"({last.t_end - first.t:.1f} s): {_monitor_disagrees(first)}",
                                (first.index, last.index)))
                else:
                    transient += 1
            run = [o] if o is not None and why is not None else []
    return _verdict("HAM-5", expected, judged=compared, bad=bad,
                    kept=lambda: f"{len(compared)} observations agree ({transient} transient disagreement(s) "
                                 "at a role change)",
                    unknown="no observation with both the server's and the manager's answer")


@rule("HAM-6")
def check_former_leader_rejoins_new_timeline(events: Sequence[Event], *, rejoin_timeout_s: float = 60.0) -> Verdict:
    """HAM-6: a former leader that runs again rejoins as a replica streaming the new leader's
    timeline within ``rejoin_timeout_s`` of the moment it is back (the leader change, or its
    ``ham.start`` when it was down)."""
    expected = f"a former leader rejoins as a replica of the new timeline within {rejoin_timeout_s:g} s"
    obs = observations(events)
    stretches = write_stretches(obs)
    changes = [(a, b) for a, b in zip(stretches, stretches[1:], strict=False) if a.node != b.node]
    starts = of_type(events, "ham.start")
    judged: list[str] = []
    bad: list[Violation] = []
    not_judged: list[str] = []
    for old, new in changes:
        new_tl = next((o.timeline for o in obs if o.index == new.first), None)
        mine = [o for o in obs if o.node == old.node and o.t > new.start]
        # the node's own restart counts only while it was down since the change (a later restart,
        # after it ran again, belongs to a later fault of a longer history)
        first_up = next((o.t for o in mine if o.up), float("inf"))
        start = next((e for e in starts if e.get("node") == old.node and old.end <= e.t <= first_up), None)
        since = max(new.start, start.t if start is not None else new.start)
        rejoined = next((o for o in mine if o.recovery is True and o.streaming and new_tl is not None
                         and (o.timeline or 0) >= new_tl), None)
        late_up = next((o for o in mine if o.up and o.t > since + rejoin_timeout_s), None)
        if rejoined is not None and (late_up is None or rejoined.t <= late_up.t):
            judged.append(f"{old.node} streams timeline {rejoined.timeline} {rejoined.t - since:.2f} s later")
            continue
        up_late = [late_up] if late_up is not None else []
        if up_late:
            o = up_late[0]
            bad.append((f"{old.node} runs at t={o.t:.3f} ({o.t - since:.1f} s later) but is not a replica "
                        f"streaming timeline {new_tl} (recovery={o.recovery}, streaming={o.streaming}, "
                        f"timeline={o.timeline})", (new.first, o.index)))
        else:
            not_judged.append(f"{old.node} was not observed back long enough after losing the lead")
    return _verdict("HAM-6", expected, judged=judged, bad=bad, kept=lambda: "; ".join(judged),
                    unknown=not_judged[0] if not_judged else "no change of leader observed",
                    not_judged=not_judged)


@rule("HAM-7")
def check_monitor_loss_alone_keeps_the_primary(events: Sequence[Event]) -> Verdict:
    """HAM-7 (pg_auto_failover): a primary whose keeper loses the monitor while a standby still streams
    from it is not demoted - the keeper demotes only when it reaches neither the monitor nor any
    standby for ``network_partition_timeout``, and the monitor fails over only a node its health
    checks find unhealthy (which still reach it here). From the cut (``ham.monitor.cut``) to its heal
    (or the end of the observation), every observation of the node shows its server up and out of
    recovery; a write that merely waited too long for the synchronous standby is not a demotion.
    A cut during which no standby was observed streaming is not judged."""
    rule_id = "HAM-7"
    expected = "a primary cut only from the monitor, its standbys streaming, stays up and out of recovery"
    obs = observations(events)
    judged: list[str] = []
    bad: list[Violation] = []
    not_judged: list[str] = []
    for cut, heal in leader_cuts(events, "monitor"):
        node = str(cut.get("node"))
        end = heal.t if heal is not None else max((o.t_end for o in obs), default=cut.t)
        inside = [o for o in obs if o.t >= cut.t and o.t_end <= end]
        mine = [o for o in inside if o.node == node]
        if not any(o.node != node and o.recovery is True and o.streaming for o in inside):
            not_judged.append(f"no standby was observed streaming while {node} was cut from the monitor")
            continue
        if not mine:
            not_judged.append(f"{node} was not observed while cut from the monitor")
            continue
        demoted = next((o for o in mine if o.recovery is not False), None)
        if demoted is not None:
            state = "down" if demoted.recovery is None else "in recovery"
            bad.append((f"{node} was {state} at t={demoted.t:.3f}, {demoted.t - cut.t:.2f} s after its keeper "
                        "lost the monitor, while a standby streamed", (cut.index, demoted.index)))
            continue
        judged.append(f"{node} stayed primary for {end - cut.t:.1f} s cut from the monitor ({len(mine)} observations)")
    return _verdict(rule_id, expected, judged=judged, bad=bad, kept=lambda: "; ".join(judged),
                    unknown=not_judged[0] if not_judged else "no cut of the primary from the monitor in the history",
                    not_judged=not_judged)
