"""LPQ-1 … LPQ-6 - libpq's documented multi-host rules (RULEBOOK LPQ), checked on the network's and
the servers' view of each open (:mod:`harness.rules.lpq.model`). Pure checkers
``checker(events, **params) -> Verdict``, each registered under its rule ID with ``@rule("LPQ-N")``.

A verdict is *unknown* (never a violation) when the history holds nothing the rule can judge, or
when refused connects to a listed host may have gone unseen (a ``partition how=refuse`` while the
refused-connect capture was unavailable, OBS-1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness.history.core import Event
from harness.rules.lpq.model import (
    HostListOpen,
    acceptable,
    host_list_opens,
    ordinal,
    reset_windows,
    silent_windows,
)
from harness.rules.mirroring.coverage import Observability
from harness.rules.registry import rule
from harness.rules.verdict import UNKNOWN, Verdict, tally

#: Chi-square critical values at alpha = 0.001 by degrees of freedom (LPQ-6).
CHI2_CRITICAL_0001 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}


def _observable(events: Sequence[Event], opens: list[HostListOpen]) -> tuple[list[HostListOpen], list[str]]:
    """The opens whose attempts were all observable, and why the others were not (OBS-1: a refused
    connect nobody saw would make a driver look as if it had skipped a host)."""
    obs = Observability.of(sorted(events, key=lambda e: (e.t, e.index)))
    seen: list[HostListOpen] = []
    why: list[str] = []
    for o in opens:
        partners = {o.name(h): [h] for h in o.hosts}
        reasons = obs.unobserved(partners, o.invoke.t, o.window_end, client_reported=False)
        if reasons:
            why.append(f"{o.label()}: {reasons[0]}")
        else:
            seen.append(o)
    return seen, why


def _verdict(rule: str, expected: str, judged: int, bad: list[tuple[str, tuple[int, ...]]],
             good: list[str], unobserved: list[str], what: str = "opens") -> Verdict:
    valid = tally(judged, bad)  # only observable opens are judged: a violation stands beside unobservable ones
    if valid is False:
        text, ev = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return Verdict(rule, False, expected=expected, observed=text + more, evidence=ev,
                       details={"violations": [b[0] for b in bad]})
    if valid == UNKNOWN:
        why = unobserved[0] if unobserved else f"no {what} this rule can judge"
        return Verdict(rule, UNKNOWN, expected=expected, observed=why)
    return Verdict(rule, True, expected=expected, observed="; ".join(good[:3]) + (" …" if len(good) > 3 else ""),
                   details={"judged": judged})


def _ordered(o: HostListOpen) -> bool:
    return o.load_balance_hosts != "random"


def _seq(o: HostListOpen, attempts: Sequence[Any] | None = None) -> str:
    shown = [f"{o.name(a.host).split(' ')[0]}:{a.kind}" for a in (attempts if attempts is not None else o.attempts)]
    return " → ".join(shown[:8]) + (" …" if len(shown) > 8 else "") if shown else "no attempt"


@rule("LPQ-1")
def check_hosts_in_order(events: Sequence[Event], process: Any = None) -> Verdict:
    """LPQ-1 Hosts in order: with a host list (not ``load_balance_hosts=random``) the hosts are tried
    in the order given - the first pass of each open attempts host 1, then host 2, … (a later
    return to the top is LPQ-2's or ``prefer-standby``'s second pass)."""
    expected = "the hosts tried in the order listed (1st, then 2nd, …)"
    opens, unseen = _observable(events, [o for o in host_list_opens(events, process) if _ordered(o)])
    bad, good, judged = [], [], 0
    for o in opens:
        first = o.first_pass()
        if not first:
            continue
        judged += 1
        positions = [a.position for a in first]
        want = list(range(len(positions)))
        if positions != want:
            wrong = next(i for i, p in enumerate(positions) if p != i)
            bad.append((f"{o.label()} tried {o.name(first[wrong].host)} as its {ordinal(wrong + 1)} host "
                        f"({_seq(o, first)})", (o.invoke.index, first[wrong].index)))
        else:
            good.append(f"{o.label()}: {_seq(o, first)}")
    return _verdict("LPQ-1", expected, judged, bad, good, unseen)


@rule("LPQ-2")
def check_next_host_on_failure(events: Sequence[Event], process: Any = None, grace: float = 1.0,
                judge_reset: bool = False) -> Verdict:
    """LPQ-2 Next host on failure: a host that cannot be connected to is followed by the next host;
    the open fails only when every host has failed. **(interpretation)** Once every host has failed
    (one pass; two for ``prefer-standby``) the open fails: a client that starts over more often, or
    whose open is still pending ``grace`` s after its last attempt ended, keeps trying forever.
    **(interpretation)** The rule lists refused, unreachable and timed-out hosts: a connection the
    network accepted and then reset (``partition how=reset``) counts as *established*, as libpq
    treats it (it reports the error and does not go on), so such an open is not judged here
    (``judge_reset=True`` judges it all the same)."""
    expected = "next host after a failed one; the open fails once every host failed (one pass)"
    resets = [] if judge_reset else reset_windows(events)
    opens, unseen = _observable(events, [
        o for o in host_list_opens(events, process) if not o.auth_failed
        and not any(w.node == a.node and w.start <= a.t < w.end for w in resets for a in o.attempts)])
    bad: list[tuple[str, tuple[int, ...]]] = []
    good, judged = [], 0
    for o in opens:
        if not o.attempts and o.outcome != "fail":
            continue
        judged += 1
        tried = {a.host for a in o.attempts}
        passes = 2 if o.target_session_attrs == "prefer-standby" else 1
        restarts = sum(1 for prev, a in zip(o.attempts, o.attempts[1:], strict=False) if a.position <= prev.position)
        untried = [h for h in o.hosts if h not in tried]
        ev = (o.invoke.index,) + ((o.end.index,) if o.end is not None else ())
        if o.outcome in ("fail", "info") and untried and _ordered(o):
            bad.append((f"{o.label()} failed after {o.duration():.2f} s without trying "
                        f"{', '.join(o.name(h) for h in untried)} ({_seq(o)}): {o.error[:100]}", ev))
        elif restarts >= passes:
            bad.append((f"{o.label()} started over {restarts} time(s) after every host failed "
                        f"({len(o.attempts)} attempts: {_seq(o)}; {o.outcome} after {o.duration():.2f} s)", ev))
        elif o.outcome == "pending" and not untried:
            last = max((a.closed_t or a.t) for a in o.attempts)
            if o.window_end - last > grace:
                bad.append((f"{o.label()} had not failed {o.window_end - last:.2f} s after every host had "
                            f"failed ({_seq(o)})", ev))
            else:
                judged -= 1
        elif o.outcome == "pending" and _ordered(o):
            nxt = o.hosts[max(a.position for a in o.attempts) + 1] if o.attempts else o.hosts[0]
            bad.append((f"{o.label()} never tried {o.name(nxt)} and had not returned after {o.duration():.2f} s "
                        f"({_seq(o)})", ev))
        else:
            good.append(f"{o.label()} {o.outcome}: {_seq(o)}")
    return _verdict("LPQ-2", expected, judged, bad, good, unseen)


@rule("LPQ-3")
def check_per_host_timeout(events: Sequence[Event], process: Any = None, early: float = 1.0, late: float = 1.0,
                minimum: float = 2.0) -> Verdict:
    """LPQ-3 Per-host timeout: ``connect_timeout`` applies to each host separately - a host that
    answers nothing (black hole, or a latency of at least the timeout) is given up after about
    ``connect_timeout`` (raised to ``minimum`` = 2 s, as libpq does) and the next host tried then.
    Tolerances: ``early`` s before (libpq 15 counts whole seconds) and ``late`` s after."""
    opens = host_list_opens(events, process)
    windows = silent_windows(events)
    expected = f"a silent host given up after connect_timeout (-{early:g} s/+{late:g} s), then the next tried"
    bad: list[tuple[str, tuple[int, ...]]] = []
    good, judged = [], 0
    for o in opens:
        timeout = o.effective_timeout(minimum)
        if timeout is None:
            continue
        for i, a in enumerate(o.attempts):
            if a.kind != "accepted":
                continue
            w = next((w for w in windows if w.node == a.node and w.start <= a.t < w.end
                      and w.ms >= timeout * 1000), None)
            if w is None:
                continue
            judged += 1
            nxt = o.attempts[i + 1] if i + 1 < len(o.attempts) else None
            until = nxt.t if nxt is not None else (o.end.t if o.end is not None else o.window_end)
            then = f"then {o.name(nxt.host)}" if nxt is not None else f"then the open {o.outcome}"
            held = until - a.t
            ev = (a.index,) + ((nxt.index,) if nxt is not None else ((o.end.index,) if o.end else ()))
            text = f"{o.label()} held {o.name(a.host)} ({w.what}) {held:.2f} s, {then}; connect_timeout={timeout:g}"
            if held < timeout - early or held > timeout + late:
                bad.append((text, ev))
            else:
                good.append(text)
    return _verdict("LPQ-3", expected, judged, bad, good, [], what="attempts at a silent host")


@rule("LPQ-4")
def check_session_attributes(events: Sequence[Event], process: Any = None) -> Verdict:
    """LPQ-4 Session attributes: the open lands on a server acceptable for its
    ``target_session_attrs`` (read-write / primary / standby / read-only / prefer-standby / any), as
    the landed server reports itself through the client's connection; ``prefer-standby`` lands on a
    standby when a reachable listed host is one; an open fails only when no reachable listed host is
    acceptable (roles from ``lpq.servers``); an open that closed an acceptable host's connection and
    never opened rejected it (violated)."""
    opens = host_list_opens(events, process)
    expected = "the session on a server acceptable for target_session_attrs (an unacceptable one skipped)"
    bad: list[tuple[str, tuple[int, ...]]] = []
    good, judged, unknown = [], 0, []
    for o in opens:
        tsa = o.target_session_attrs
        reachable = [h for h in o.hosts if (o.servers.get(h) or {}).get("reachable", True)]
        fit = [h for h in reachable if o.servers.get(h) and acceptable(tsa, o.servers[h].get("in_recovery"),
                                                                        o.servers[h].get("read_only"))]
        standbys = [h for h in reachable if (o.servers.get(h) or {}).get("in_recovery")]
        if o.outcome == "ok":
            if o.landed is None:
                unknown.append(f"{o.label()} opened but no server view of its session was recorded")
                continue
            judged += 1
            ok = acceptable(tsa, o.landed.in_recovery, o.landed.read_only)
            where = (f"{o.label()} with target_session_attrs={tsa} landed on {o.landed.node} "
                     f"(in_recovery={o.landed.in_recovery}, read_only={o.landed.read_only})")
            ev = (o.invoke.index, o.landed.index)
            if ok is None:
                judged -= 1
                unknown.append(f"{where}: the server did not say enough to judge")
            elif not ok:
                writes = [e for e in events if e.type == "lpq.write" and e.get("process") == o.process
                          and e.get("op_id") == o.op_id]
                tail = f"; the first write failed: {str(writes[0].get('error'))[:80]}" if writes and \
                    not writes[0].get("ok") else ""
                bad.append((where + tail, ev + tuple(w.index for w in writes[:1])))
            elif tsa == "prefer-standby" and standbys and not o.landed.in_recovery:
                bad.append((f"{where} although {o.name(standbys[0])} is a reachable standby", ev))
            else:
                good.append(where)
        elif o.outcome == "pending" and o.servers:
            rejected = [a for a in o.attempts if a.kind == "accepted" and a.closed_t is not None and a.host in fit]
            if rejected:
                judged += 1
                a = rejected[0]
                bad.append((f"{o.label()} with target_session_attrs={tsa} closed {o.name(a.host)}, which is "
                            f"acceptable, and had not opened after {o.duration():.2f} s ({_seq(o)})",
                            (o.invoke.index, a.index)))
        elif o.outcome in ("fail", "info") and o.servers and not o.auth_failed:
            judged += 1
            ev = (o.invoke.index,) + ((o.end.index,) if o.end else ())
            if fit:
                bad.append((f"{o.label()} with target_session_attrs={tsa} failed although {o.name(fit[0])} is "
                            f"reachable and acceptable: {o.error[:100]}", ev))
            else:
                good.append(f"{o.label()} failed: no listed host is acceptable for {tsa}")
    if not bad and unknown and not judged:
        return Verdict("LPQ-4", UNKNOWN, expected=expected, observed=unknown[0])
    return _verdict("LPQ-4", expected, judged, bad, good, [])


@rule("LPQ-5")
def check_auth_failure_stops(events: Sequence[Event], process: Any = None) -> Verdict:
    """LPQ-5 Authentication failure stops: when a connection is established but authentication
    fails, the remaining hosts are not tried - the open fails with no attempt at another host after
    the first host that accepted the connection. An open that did not fail on authentication (as
    its error says) cannot be judged (unknown)."""
    opens, unseen = _observable(events, host_list_opens(events, process))
    expected = "after an authentication failure the open fails, no further host tried"
    bad: list[tuple[str, tuple[int, ...]]] = []
    good, judged, unknown = [], 0, []
    for o in opens:
        first = next((a for a in o.attempts if a.kind == "accepted"), None)
        if first is None:
            continue
        later = [a for a in o.attempts if a.t > first.t and a.host != first.host]
        ev = (o.invoke.index, first.index) + ((later[0].index,) if later else ())
        if later and (o.auth_failed or o.outcome == "pending"):
            judged += 1
            bad.append((f"{o.label()} tried {o.name(later[0].host)} after authentication failed at "
                        f"{o.name(first.host)} ({_seq(o)}; {o.outcome}: {o.error[:80]})", ev))
        elif o.auth_failed:
            judged += 1
            good.append(f"{o.label()} failed at {o.name(first.host)} only: {o.error[:80]}")
        elif o.outcome == "ok":
            judged += 1
            bad.append((f"{o.label()} opened although the password is wrong ({_seq(o)})", ev))
        else:
            unknown.append(f"{o.label()} {o.outcome} without an authentication error: {o.error[:100]}")
    if not bad and not judged and unknown:
        return Verdict("LPQ-5", UNKNOWN, expected=expected, observed=unknown[0])
    return _verdict("LPQ-5", expected, judged, bad, good, unseen)


def chi_square(counts: Sequence[int]) -> float:
    """Pearson's statistic of ``counts`` against a uniform spread."""
    n = sum(counts)
    if not counts or n == 0:
        return math.inf
    exp = n / len(counts)
    return sum((c - exp) ** 2 / exp for c in counts)


@rule("LPQ-6")
def check_random_host_order(events: Sequence[Event], process: Any = None, min_opens: int = 20) -> Verdict:
    """LPQ-6 Random order: with ``load_balance_hosts=random`` the first host tried varies so that
    opens spread over the hosts: the first-tried counts over at least ``min_opens`` opens pass a
    chi-square test of uniformity at alpha = 0.001 (every host first at least once)."""
    opens = [o for o in host_list_opens(events, process) if o.load_balance_hosts == "random" and o.attempts]
    expected = f"first hosts spread uniformly over ≥ {min_opens} opens (chi-square, alpha 0.001)"
    if len(opens) < min_opens:
        return Verdict("LPQ-6", UNKNOWN, expected=expected,
                       observed=f"{len(opens)} random-order opens with an observed attempt")
    hosts = opens[0].hosts
    counts = [sum(1 for o in opens if o.attempts[0].host == h) for h in hosts]
    stat = chi_square(counts)
    crit = CHI2_CRITICAL_0001.get(len(hosts) - 1, 24.32)
    shown = ", ".join(f"{opens[0].name(h).split(' ')[0]}={c}" for h, c in zip(hosts, counts, strict=True))
    text = f"first host over {len(opens)} opens: {shown} (chi-square {stat:.1f}, critical {crit:g})"
    details = {"counts": dict(zip(hosts, counts, strict=True)), "chi_square": stat}
    if stat > crit or min(counts) == 0:
        return Verdict("LPQ-6", False, expected=expected, observed=text,
                       evidence=tuple(o.attempts[0].index for o in opens[:10]), details=details)
    return Verdict("LPQ-6", True, expected=expected, observed=text, details=details)
