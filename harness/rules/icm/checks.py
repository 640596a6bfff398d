"""ICM-1 … ICM-7 - Domino Internet Cluster Manager server selection (RULEBOOK, seed 004).

Pure checkers ``checker(events, **params) -> Verdict`` (each registered with ``@rule("ICM-N")``)
over the request model (:mod:`harness.rules.icm.model`). Each judges the requests sent to the router
(``target="router"``) whose cluster state did not change while they were in flight; with nothing to
judge the verdict is *unknown*, never a pass. ``tie_break`` (``any`` / ``first`` / ``last``) is the
explicit choice among servers of equal availability (the docs do not say); ``probe_window`` how many
seconds before the request the probe of the chosen port may lie (ICM-3) - and it must lie before the
decision in the history's order (event index, never timestamps: equal timestamps are normal)."""

from __future__ import annotations

from typing import Any

from harness.history.core import Event
from harness.rules.icm.model import TIE_BREAKS, Model, Request, build, expectation
from harness.rules.registry import rule
from harness.rules.verdict import UNKNOWN, Verdict, tally

DEFAULT_PROBE_WINDOW = 5.0


def _routed(model: Model) -> list[Request]:
    return [r for r in model.requests if r.target == "router" and r.result is not None and not r.changed_during]


def _no_layout(rule: str) -> Verdict:
    return Verdict(rule, UNKNOWN, "the cluster's layout in the history (icm.cluster.up)",
                   "no icm.cluster.up event: the history holds no ICM cluster")


def _verdict(rule: str, judged: int, bad: list[tuple[Request, str, list[int]]], expected: str,
             nothing: str) -> Verdict:
    valid = tally(judged, bad)
    if valid is False:
        req, why, extra = bad[0]
        more = f" (and {len(bad) - 1} more request(s))" if len(bad) > 1 else ""
        evidence = sorted(set(req.evidence() + extra))
        return Verdict(rule, False, expected, f"request {req.request_id} ({req.scheme} {req.database}): {why}{more}",
                       evidence, {"violations": [{"request_id": r.request_id, "why": w} for r, w, _ in bad[:20]]})
    if valid == UNKNOWN:
        return Verdict(rule, UNKNOWN, expected, nothing)
    return Verdict(rule, True, expected, f"{judged} request(s) judged, every one as the rule says")


def _check_tie_break(tie_break: str) -> None:
    if tie_break not in TIE_BREAKS:
        from harness.errors import ConfigError

        raise ConfigError(f"tie_break must be one of {', '.join(TIE_BREAKS)}, not {tie_break!r}")


@rule("ICM-1")
def check_candidate_servers(events: list[Event]) -> Verdict:
    """ICM-1 Candidates: a request goes only to a server holding a replica not marked Out of Service
    or Pending Delete; with no such replica it gets an error."""
    model = build(events)
    if not model.seen_layout:
        return _no_layout("ICM-1")
    bad, judged = [], 0
    for req in _routed(model):
        snap = req.snapshot
        candidates = snap.candidates(req.database)
        chosen = req.chosen
        if chosen is None and candidates:
            continue  # nothing sent anywhere: other rules judge the error
        judged += 1
        if chosen is None:
            continue
        if req.database not in snap.layout.get(chosen, ()):
            bad.append((req, f"sent to {chosen}, which holds no replica of it", snap.evidence))
        elif (chosen, req.database) in snap.marks:
            bad.append((req, f"sent to {chosen}, whose replica is marked {snap.marks[(chosen, req.database)]}",
                        snap.evidence))
    return _verdict("ICM-1", judged, bad, "only servers with an unmarked replica are sent requests",
                    "no request was routed")


@rule("ICM-2")
def check_server_availability(events: list[Event]) -> Verdict:
    """ICM-2 Availability: the router tells BUSY / MAXUSERS / RESTRICTED servers by their availability
    index and thresholds: what it reports (``icm.router.decision``) matches them, and it never treats a
    server the thresholds make BUSY, MAXUSERS or RESTRICTED as available while an available one answers."""
    model = build(events)
    if not model.seen_layout:
        return _no_layout("ICM-2")
    bad, judged = [], 0
    for req in _routed(model):
        snap = req.snapshot
        if req.decision is not None:
            judged += 1
            for c in req.decision.get("candidates") or []:
                truth = snap.servers.get(c.get("server"))
                if truth is None:
                    continue
                if int(c.get("index", -1)) != truth.index or tuple(c.get("states") or ()) != truth.states():
                    bad.append((req, f"the router saw {c.get('server')} as index {c.get('index')} "
                                     f"{list(c.get('states') or []) or 'available'}; its thresholds give index "
                                     f"{truth.index} {list(truth.states()) or 'available'}",
                                [req.decision.index, *snap.evidence]))
                    break
            continue
        exp = expectation(req)
        stated = [s for s in snap.candidates(req.database) if snap.servers[s].states()]
        if not stated:
            continue
        judged += 1
        chosen = req.chosen
        if exp.kind == "available" and chosen in stated:
            bad.append((req, f"sent to {chosen} ({', '.join(snap.servers[chosen].states())}: sessions "
                             f"{snap.servers[chosen].sessions}, index {snap.servers[chosen].index}) while "
                             f"{', '.join(exp.pool)} was available", snap.evidence))
    return _verdict("ICM-2", judged, bad, "BUSY / MAXUSERS / RESTRICTED as the thresholds give them",
                    "no request met a server in a threshold state, and no router decision was reported")


def _pings(model: Model, req: Request, server: str, scheme: str, probe_window: float) -> list[Event]:
    """The pings ``server`` answered on its ``scheme`` port before ``req``'s decision became visible (a
    smaller event index: log order, not clocks) and no more than ``probe_window`` s before the request."""
    low = req.t0 - probe_window
    return [e for e in model.events if e.type == "icm.ping" and e.index < req.decided_index
            and e.get("server") == server and e.get("scheme") == scheme and e.t >= low]


def _proxied(model: Model, req: Request, server: str, scheme: str, probe_window: float) -> list[Event]:
    """Connections ``server``'s ``scheme`` fault proxy accepted from ``probe_window`` s before the request
    on (a history whose pings do not say which way they came: ``via`` absent). No upper bound: a fault
    proxy whose events are derived from its log stamps them when the line arrives, possibly after
    the decision."""
    low = req.t0 - probe_window
    return [e for e in model.events if e.type == "conn.accepted"
            and model.ports.get(e.get("proxy")) == (server, scheme) and e.t >= low]


def _declared(model: Model) -> tuple[str, list[int]]:
    """What the router says about probing (ICM-3), for a violation's text, and its event."""
    if model.router is None:
        return "", []
    if model.declares_probing():
        return f"; {model.router.get('router')} declares that it probes (no ICM-3 limitation)", [model.router.index]
    why = (model.router.get("limitations") or {}).get("ICM-3", "")
    return f"; {model.router.get('router')} declares it cannot: {why}", [model.router.index]


@rule("ICM-3")
def check_port_probe(events: list[Event], probe_window: float = DEFAULT_PROBE_WINDOW) -> Verdict:
    """ICM-3 Probe: a request goes only to a server whose port of the request's scheme answers, and that
    port was pinged - through its fault proxy, as clients reach it - before the decision (earlier in
    the history) and within ``probe_window`` seconds before the request.

    A ping's path is the server's ``via`` (``proxy`` / ``direct``: the listener's own address, bypassing
    the fault proxy); a history without it falls back on connections at the port's fault proxy.
    Violated: the chosen port was down or cut; it was not pinged at all (whatever the router
    declares: a router without an ICM-3 limitation claims to probe); only the other scheme's port was
    pinged; only direct pings bypassing the fault proxy. *Unknown* only where the path of the pings
    seen cannot be observed (no ``via`` and no fault-proxy connection events: an external proxy)."""
    model = build(events)
    if not model.seen_layout:
        return _no_layout("ICM-3")
    conn_events = any(e.type.startswith("conn.") for e in model.events)
    declared, declared_evidence = _declared(model)
    bad, judged, unobserved = [], 0, 0
    for req in _routed(model):
        chosen = req.chosen
        if chosen is None:
            continue
        judged += 1
        snap = req.snapshot
        if not snap.reachable(chosen, req.scheme):
            why = "down" if chosen in snap.down else f"its {req.scheme} port cut off"
            bad.append((req, f"sent to {chosen}, which did not answer ({why})", snap.evidence))
            continue
        pings = _pings(model, req, chosen, req.scheme, probe_window)
        through = [p for p in pings if p.get("via") == "proxy"]
        direct = [p for p in pings if p.get("via") == "direct"]
        unsaid = [p for p in pings if p.get("via") not in ("proxy", "direct")]
        if through:
            continue
        if unsaid and conn_events:
            if _proxied(model, req, chosen, req.scheme, probe_window):
                continue
            bad.append((req, f"sent to {chosen}: its {req.scheme} port was pinged ({len(unsaid)}) but its fault "
                             "proxy saw no connection: the pings bypassed the fault proxy",
                        [e.index for e in unsaid[:3]]))
            continue
        if unsaid:
            unobserved += 1
            continue
        if direct:
            bad.append((req, f"sent to {chosen}, whose {req.scheme} port was pinged only directly at its listener "
                             f"({len(direct)} ping(s) with via=direct: the server's own address, bypassing its "
                             "fault proxy, so a cut port still answers)", [e.index for e in direct[:3]]))
            continue
        other = "https" if req.scheme == "http" else "http"
        wrong = _pings(model, req, chosen, other, probe_window)
        seen = f"; only its {other} port was pinged" if wrong else ""
        bad.append((req, f"sent to {chosen} with no ping of its {req.scheme} port in the {probe_window:g} s before "
                         f"the decision{seen}{declared}", [e.index for e in wrong[:3]] + declared_evidence))
    if not bad and unobserved:
        return Verdict("ICM-3", UNKNOWN, "the chosen server's port of the request's scheme pinged through its "
                       "fault proxy and answering",
                       f"{unobserved} of {judged} request(s) went to a server whose pings were seen, but not which "
                       "way they came: the pings carry no via and the history holds no fault-proxy connection "
                       "events (an external proxy)")
    return _verdict("ICM-3", judged, bad, "the chosen server's port of the request's scheme pinged through its "
                    "fault proxy and answering", "no request was sent to a server")


@rule("ICM-4")
def check_server_exclusions(events: list[Event]) -> Verdict:
    """ICM-4 Exclusions: unreachable servers are never chosen; RESTRICTED, BUSY and MAXUSERS servers are
    not chosen while an available server answers."""
    model = build(events)
    if not model.seen_layout:
        return _no_layout("ICM-4")
    bad, judged = [], 0
    for req in _routed(model):
        snap = req.snapshot
        candidates = snap.candidates(req.database)
        excludable = [s for s in candidates if not snap.reachable(s, req.scheme) or snap.servers[s].states()]
        if not excludable:
            continue
        judged += 1
        exp = expectation(req)
        chosen = req.chosen
        if chosen is None:
            continue
        if chosen in candidates and not snap.reachable(chosen, req.scheme):
            bad.append((req, f"sent to {chosen}, which is unreachable on {req.scheme}", snap.evidence))
        elif exp.kind == "available" and chosen not in exp.pool and chosen in candidates:
            bad.append((req, f"sent to {chosen} ({', '.join(snap.servers[chosen].states())}) while "
                             f"{', '.join(exp.pool)} was available", snap.evidence))
    return _verdict("ICM-4", judged, bad, "unreachable, RESTRICTED, BUSY and MAXUSERS servers excluded",
                    "no request met a server to exclude")


@rule("ICM-5")
def check_least_loaded(events: list[Event], tie_break: str = "any") -> Verdict:
    """ICM-5 Least loaded: among two or more available servers the one with the highest availability
    index is chosen (``tie_break`` decides among equals: ``any``, ``first``, ``last``)."""
    _check_tie_break(tie_break)
    model = build(events)
    if not model.seen_layout:
        return _no_layout("ICM-5")
    bad, judged = [], 0
    for req in _routed(model):
        exp = expectation(req, tie_break)
        if exp.kind != "available" or len(exp.pool) < 2:
            continue
        judged += 1
        chosen = req.chosen
        if chosen not in exp.allowed:
            idx = {s: req.snapshot.servers[s].index for s in exp.pool}
            bad.append((req, f"sent to {chosen or 'no server'}; indices {idx}, so {' or '.join(exp.allowed)} "
                             f"(tie_break={tie_break})", req.snapshot.evidence))
    return _verdict("ICM-5", judged, bad, "the available server with the highest availability index",
                    "no request had two available servers to choose from")


@rule("ICM-6")
def check_last_resort(events: list[Event], tie_break: str = "any") -> Verdict:
    """ICM-6 Last resort: with no available server a reachable BUSY / MAXUSERS / RESTRICTED one (the
    lightest) is chosen - never an unreachable one; with none reachable the request gets an error."""
    _check_tie_break(tie_break)
    model = build(events)
    if not model.seen_layout:
        return _no_layout("ICM-6")
    bad, judged = [], 0
    for req in _routed(model):
        exp = expectation(req, tie_break)
        if exp.kind == "available":
            continue
        judged += 1
        chosen = req.chosen
        snap = req.snapshot
        if exp.kind == "none":
            marked = [s for s in snap.layout if req.database in snap.layout[s] and (s, req.database) in snap.marks]
            why = (f"no candidate answers (replicas marked on {', '.join(marked)}; others unreachable)" if marked
                   else "no candidate answers (every one unreachable)")
            if chosen is not None and req.served_ok is not None:
                bad.append((req, f"{why}, yet {chosen} served it", snap.evidence))
            elif chosen is not None:
                bad.append((req, f"{why}, yet it was sent to {chosen} (status {req.status}, "
                                 f"error {req.result.get('error') if req.result else None})", snap.evidence))
            continue
        if chosen is None or req.served_ok is None and chosen not in exp.pool:
            bad.append((req, f"got status {req.status} (error {req.result.get('error') if req.result else None}) "
                             f"though {', '.join(exp.pool)} answered as a last resort", snap.evidence))
        elif chosen not in exp.allowed:
            why = "unreachable" if chosen not in exp.pool else f"index {snap.servers[chosen].index}"
            bad.append((req, f"last resort {chosen} ({why}); the lightest reachable is "
                             f"{' or '.join(exp.allowed)} (tie_break={tie_break})", snap.evidence))
    return _verdict("ICM-6", judged, bad, "a reachable BUSY/MAXUSERS/RESTRICTED server as last resort, "
                    "never an unreachable one, else an error",
                    "no request found the cluster without an available server")


@rule("ICM-7")
def check_no_transparent_failover(events: list[Event]) -> Verdict:
    """ICM-7 No transparent failover: after the server a client used fails, the client's next request to
    it gets an error (not another server's answer); reaching another replica goes through ICM again,
    with a new login unless the user already authenticated to that server in this session."""
    model = build(events)
    if not model.seen_layout:
        return _no_layout("ICM-7")
    bad: list[tuple[Request, str, list[int]]] = []
    judged = 0
    for down in model.downs:
        server = down.get("server")
        for process in sorted({r.process for r in model.requests}):
            mine = [r for r in model.requests if r.process == process and r.result is not None]
            before = [r for r in mine if r.index < down.index and r.served_ok is not None]
            if not before or before[-1].served_ok.get("server") != server:
                continue
            after = [r for r in mine if r.index > down.index]
            if not after:
                continue
            judged += 1
            first = after[0]
            ok = first.served_ok
            if first.target != "router" and ok is not None and ok.get("server") != server:
                bad.append((first, f"{server} failed under the client, yet its next request was answered by "
                                   f"{ok.get('server')} without an error (transparent failover)", [down.index]))
                continue
            if first.target != "router" and ok is not None:
                continue  # the failed server came back and served it
            logged_in = {e.get("server") for r in before for e in r.served if e.get("status") == 200}
            for r in after:
                served = r.served_ok
                if served is None or served.get("server") == server:
                    continue
                new = served.get("server")
                if new not in logged_in and served.get("auth") != "login":
                    bad.append((r, f"served by {new} as auth={served.get('auth')} though the user never "
                                   f"authenticated to {new} in this session", [down.index]))
                elif new in logged_in and r.result is not None and (r.result.get("logins") or 0) > 0:
                    bad.append((r, f"asked to log in again at {new}, where the user had already authenticated "
                                   "in this session", [down.index]))
                break
    return _verdict("ICM-7", judged, bad, "an error from the failed server, ICM again for another replica, a new "
                    "login only where the user had none", "no client's server failed under it")


def describe_request(req: Request) -> dict[str, Any]:
    """A request as reports show it."""
    return {"request_id": req.request_id, "scheme": req.scheme, "database": req.database, "chosen": req.chosen,
            "status": req.status}
