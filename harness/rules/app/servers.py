"""APP-3 - the servers' view: no write acknowledged by a node after it was demoted, and no read served
by a node while it was out of the topology (killed, stopped or removed).

Each request's connection (``conn``, its local address) is matched to the fault proxy's
``conn.accepted`` from that address, which names the node behind the proxy. A request is judged
only when both its invocation and its completion fall inside one interval in which the node could
not legitimately serve it; a request without a matched connection is not judged."""

from __future__ import annotations

from typing import Any

from harness.history.core import Event
from harness.rules.app.history import ordered, pool_settings, proxy_view, requests
from harness.rules.registry import rule
from harness.rules.verdict import UNKNOWN, Verdict

RULE_ID = "APP-3"
DOWN = ("node.kill", "node.stop", "node.remove")


Spans = dict[str, list[tuple[float, float]]]


def _intervals(events: list[Event]) -> tuple[Spans, Spans]:
    """Per node: the intervals in which it was demoted (after a ``role.change`` away from principal,
    until it became principal again) and those in which it was down (``node.kill``/``node.stop``/
    ``node.remove`` until ``node.start``, whose ``t`` is when the start began)."""
    demoted: Spans = {}
    down: Spans = {}
    open_demoted: dict[str, float] = {}
    open_down: dict[str, float] = {}
    for e in events:
        node = e.get("node")
        if e.type == "role.change":
            if e.get("old_role") == "principal" and e.get("new_role") != "principal":
                open_demoted.setdefault(node, e.t)
            elif e.get("new_role") == "principal" and node in open_demoted:
                demoted.setdefault(node, []).append((open_demoted.pop(node), e.t))
        elif e.type in DOWN:
            open_down.setdefault(node, e.t)
        elif e.type == "node.start" and node in open_down:
            down.setdefault(node, []).append((open_down.pop(node), e.t))
    for node, t in open_demoted.items():
        demoted.setdefault(node, []).append((t, float("inf")))
    for node, t in open_down.items():
        down.setdefault(node, []).append((t, float("inf")))
    return demoted, down


def _inside(spans: list[tuple[float, float]], t0: float, t1: float) -> bool:
    return any(a <= t0 and t1 < b for a, b in spans)


@rule(RULE_ID)
def check_servers_view(events: list[Event]) -> Verdict:
    """APP-3: no write acknowledged by a demoted node, no read served by a node out of the topology
    (judged from the fault proxy's and the topology's records, not from the client's account)."""
    events = ordered(events)
    expected = "writes acknowledged only by the principal of the moment; reads only by nodes in the topology"
    view = proxy_view(events, pool_settings(events).get("client_proxies"))
    demoted, down = _intervals(events)
    judged = {"write": 0, "read": 0}
    bad: list[dict[str, Any]] = []
    evidence: list[int] = []
    for r in requests(events):
        if not r.ok or r.conn is None:
            continue
        pc = view.lookup(r.conn, r.done.t)
        if pc is None or pc.node is None:
            continue
        judged[r.f] += 1
        spans = demoted.get(pc.node, []) if r.f == "write" else down.get(pc.node, [])
        if _inside(spans, r.t0, r.done.t):
            why = "demoted" if r.f == "write" else "out of the topology"
            bad.append({"op": r.done.index, "f": r.f, "node": pc.node, "conn": r.conn, "why": why})
            evidence += [pc.accepted.index, r.done.index]
    details: dict[str, Any] = {"judged": judged, "violations": bad}
    if bad:
        first = bad[0]
        return Verdict(RULE_ID, False, expected=expected,
                       observed=f"{len(bad)} request(s) served by a node that could not serve them; first: "
                                f"{first['f']} (event {first['op']}) on {first['node']} while {first['why']}",
                       evidence=evidence, details=details)
    if not any(judged.values()):
        return Verdict(RULE_ID, UNKNOWN, expected=expected,
                       observed="no successful request could be matched to a connection the proxy saw",
                       details=details)
    return Verdict(RULE_ID, True, expected=expected,
                   observed=f"{judged['write']} write(s) and {judged['read']} read(s) matched to their node; "
                            "none on a demoted or absent node", details=details)
