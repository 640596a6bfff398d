"""APP-4 (no stale connection handed out) and APP-5 (pool size respected): what the pool did with its
connections, judged from the fault proxy's record of them."""

from __future__ import annotations

from typing import Any

from harness.history.core import Event
from harness.rules.app.history import ProxyConn, ordered, pool_settings, proxy_view, requests
from harness.rules.registry import rule
from harness.rules.verdict import UNKNOWN, Verdict

STALE_ID = "APP-4"
SIZE_ID = "APP-5"


@rule(STALE_ID)
def check_no_stale_connection(events: list[Event], *, grace_s: float = 0.1) -> Verdict:
    """APP-4: no request fails on a connection the fault proxy had already closed before the request
    began (by more than ``grace_s``, the time the close takes to reach the client). A validating pool
    (pre-ping, check callback) discards such a connection at checkout; one that hands it out breaks
    the rule, with the request and the proxy's close as evidence."""
    events = ordered(events)
    settings = pool_settings(events)
    expected = (f"no request fails on a connection closed more than {grace_s:g} s before it began "
                "(the pool validates at checkout)")
    view = proxy_view(events, settings.get("client_proxies"))
    if not view.conns:
        return Verdict(STALE_ID, UNKNOWN, expected=expected,
                       observed="the fault proxy saw no client connection: nothing to judge", details={})
    failed = [r for r in requests(events) if not r.ok]
    stale: list[dict[str, Any]] = []
    evidence: list[int] = []
    unmatched = 0
    for r in failed:
        pc = view.lookup(r.conn, r.t0) if r.conn else None
        if pc is None:
            unmatched += 1
            continue
        if pc.closed is not None and pc.closed.t + grace_s <= r.t0:
            stale.append({"op": r.done.index, "conn": r.conn, "node": pc.node, "closed_event": pc.closed.index,
                          "closed_before_s": round(r.t0 - pc.closed.t, 3), "error": r.done.get("error")})
            evidence += [pc.closed.index, r.done.index]
    details: dict[str, Any] = {"validates": settings.get("validates"), "failed": len(failed),
                               "stale": len(stale), "unmatched": unmatched, "examples": stale[:10]}
    if stale:
        first = stale[0]
        return Verdict(STALE_ID, False, expected=expected,
                       observed=f"{len(stale)} of {len(failed)} failed request(s) ran on a connection the proxy had "
                                f"closed; first: event {first['op']} on {first['conn']}, closed "
                                f"{first['closed_before_s']} s before (event {first['closed_event']})",
                       evidence=evidence, details=details)
    return Verdict(STALE_ID, True, expected=expected,
                   observed=f"{len(failed)} failed request(s), none on a connection already closed"
                            + (f" ({unmatched} without a matched connection)" if unmatched else ""),
                   details=details)


def _harness_conns(events: list[Event], view_conns: list[ProxyConn]) -> set[int]:
    """Indices of the proxy connections the harness itself opened (its probe records ``app.probe``
    with the local address it used)."""
    mine = {(str(e.get("conn")), e.t) for e in events if e.type == "app.probe" and e.get("conn")}
    out: set[int] = set()
    for c in view_conns:
        if any(addr == c.client and c.accepted.t <= t and (c.closed is None or t <= c.closed.t) for addr, t in mine):
            out.add(c.accepted.index)
    return out


@rule(SIZE_ID)
def check_pool_size(events: list[Event], *, max_connections: int | None = None, min_life_s: float = 0.05) -> Verdict:
    """APP-5: the pool never holds more connections open at once than its maximum (``max_size`` +
    ``overflow`` of ``app.pool``, or ``max_connections``), counted at the fault proxy - also while it
    recovers. Connections shorter than ``min_life_s`` are not counted (a libpq host list closes the
    standby it rejected while opening the next); the harness's own probe connections are excluded."""
    events = ordered(events)
    settings = pool_settings(events)
    if max_connections is None and settings.get("max_size") is not None:
        max_connections = int(settings["max_size"]) + int(settings.get("overflow") or 0)
    expected = (f"at most {max_connections} connection(s) open at once" if max_connections is not None
                else "at most the pool's maximum size open at once")
    if max_connections is None:
        return Verdict(SIZE_ID, UNKNOWN, expected=expected, observed="the pool's maximum size is not recorded",
                       details={})
    view = proxy_view(events, settings.get("client_proxies"))
    if not view.conns:
        return Verdict(SIZE_ID, UNKNOWN, expected=expected, observed="the fault proxy saw no client connection",
                       details={"bound": max_connections})
    end_t = events[-1].t
    own = _harness_conns(events, view.conns)
    counted = [c for c in view.conns if c.accepted.index not in own
               and ((c.closed.t if c.closed else end_t) - c.accepted.t) >= min_life_s]
    marks: list[tuple[float, int, int, ProxyConn]] = []
    for c in counted:
        marks.append((c.accepted.t, 1, c.accepted.index, c))
        if c.closed is not None:
            marks.append((c.closed.t, 0, c.closed.index, c))  # at equal times a close counts first
    marks.sort(key=lambda m: (m[0], m[1], m[2]))
    open_now: dict[int, ProxyConn] = {}
    peak, peak_at, peak_conns = 0, None, []
    for t, kind, _, c in marks:
        if kind:
            open_now[c.accepted.index] = c
            if len(open_now) > peak:
                peak, peak_at, peak_conns = len(open_now), t, list(open_now.values())
        else:
            open_now.pop(c.accepted.index, None)
    details = {"bound": max_connections, "peak": peak, "peak_t": peak_at, "counted": len(counted),
               "excluded_harness": len(own)}
    if peak > max_connections:
        return Verdict(SIZE_ID, False, expected=expected,
                       observed=f"{peak} connections open at once (bound {max_connections})",
                       evidence=[c.accepted.index for c in peak_conns], details=details)
    return Verdict(SIZE_ID, True, expected=expected,
                   observed=f"at most {peak} connection(s) open at once over {len(counted)} counted", details=details)
