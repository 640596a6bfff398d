"""The attempt model the MIR-1 … MIR-13 checkers judge (RULEBOOK, seeds 000/001). Pure, no I/O.

Observation model ("observe from outside", ARCHITECTURE):

* An **open** is ``op.invoke`` (``f="open"``) of a client process up to its ``op.ok`` / ``op.fail`` /
  ``op.info`` (same ``process`` and ``op_id``); an open without an end is still running.
* An **attempt** is one TCP connection to a partner as seen at that partner's fault proxy:
  ``conn.accepted`` … ``conn.closed`` (same ``proxy`` and ``conn_id``). A partner is named by the
  checker parameters ``initial`` / ``failover``; a name matches an event's ``proxy``, ``node`` or
  ``listen`` field (``host:port``). Only connections to the named partners count: pass proxy names
  or listen addresses when replication links are proxied too (their ``node`` is a database node).
  The attempt belongs to the open whose time window contains its ``conn.accepted``; a connection
  inside two opens' windows (concurrent opens of two processes) makes both opens undecidable.
* A refused connect (proxy disabled, port closed) never reaches a proxy. The harness sees it from
  outside: the refused-connect capture records ``conn.refused`` (the client's SYN to the proxy's
  listen address and the kernel's RST; ``t`` = the SYN, ``seconds`` = until the RST), an attempt of
  ``source="capture"`` with outcome ``refused``. Besides, the checker falls back to the client's own
  ``attempt.start``/``attempt.end`` events: a client attempt that no proxy or capture attempt matches
  (by the client socket's ``local`` address = ``conn.accepted.client`` / ``conn.refused.client``, else
  same partner with the accept inside the attempt ±``MATCH_SLACK``) is counted, marked
  ``source="client"``, and the verdict's ``details["client_view_attempts"]`` lists the event indices
  used (``use_client_view=False`` turns the fallback off). A matched attempt is ordered by the
  client's start (a busy proxy may stamp its accept late) and timed by the proxy or the capture.
* Where neither the capture nor the client saw a partner's refused connects (a ``partition
  how=refuse`` during the open while the capture was unavailable - ``harness.capture`` with
  ``available: false`` or no ``harness.capture`` at all - and no ``attempt.*`` from the client), the
  open's attempt sequence is incomplete: ``Open.unobserved`` says why
  (:mod:`~harness.rules.mirroring.coverage`), and the rules that need the whole sequence do not judge
  that open (OBS-1).
* The outcome of a proxy-observed attempt is read from the wire: ``conn.upstream_failed`` → refused
  (the partner's port refused the proxy); the last attempt of a successful open that stays open →
  opened; bytes from the server and then closed → inactive (the server answered and the login did not
  succeed) unless the client calls it ``error`` (a non-retryable answer); closed by the client with
  no byte from the server → timeout (abandoned at its retry time); closed by the server/proxy/toxic
  with no byte → reset; never closed → held. When the client's matching ``attempt.end`` says
  ``timeout`` it wins over ``inactive`` (a slow server that answered part of the login).
* Rounds: with a failover partner, attempt ``k`` (1-based, in time order) is in round ``ceil(k/2)``
  (the initial and the failover attempt of the round), whatever partner it actually went to.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.history.core import Event
from harness.rules.mirroring.coverage import Observability
from harness.rules.mirroring.names import PartnerNames, event_ids, matches, partner_names, same_partner

DEFAULT_TOLERANCE = 0.020
MAX_TOLERANCE = 0.050
RETRY_FRACTION = 0.08
DEFAULT_DELAYS: tuple[float, ...] = (0.1, 0.2, 0.4, 0.8, 1.0)
FAST_OUTCOMES = frozenset({"refused", "inactive"})
DEFAULT_FAST_RESET = 0.050
#: How far a proxy's conn.accepted may lie outside the client's attempt.start..attempt.end and still
#: be that attempt (when the client did not record its socket's ``local`` address).
MATCH_SLACK = 0.010
END_TYPES = ("op.ok", "op.fail", "op.info")
SHUTDOWN_FAULTS = frozenset({"stop", "kill", "shutdown"})

_Key = tuple[Any, Any]
_ClientAttempt = tuple[Event, Event | None]
_SEEN = ("proxy", "capture")  # attempts the harness saw itself (a client attempt is matched to one)


@dataclass
class Attempt:
    """One connection attempt of one open, merged from the proxy view and the client's view."""

    n: int
    role: str  # "initial" / "failover"
    start: float
    end: float | None
    outcome: str
    source: str  # "proxy" / "capture" (a refused connect seen from outside) / "client"
    events: tuple[int, ...]
    ids: frozenset[str]
    round: int = 0
    proxy: str | None = None
    conn_id: Any = None
    closed_by: str | None = None
    client_outcome: str | None = None
    bytes_down: int = 0
    matched: bool = False
    peer: str | None = None  # the client's host:port as the proxy saw it (conn.accepted.client)
    node: str | None = None  # the node the proxy fronts (conn.accepted.node)
    order_t: float | None = None  # the matched client attempt.start: orders attempts (proxy clocks lag)

    @property
    def duration(self) -> float | None:
        """Seconds the attempt was held (None while it is still held)."""
        return None if self.end is None else self.end - self.start

    def label(self) -> str:
        """``attempt 3 (initial, round 2)``."""
        where = f", round {self.round}" if self.round else ""
        return f"attempt {self.n} ({self.role}{where})"


@dataclass
class Open:
    """One ``open`` operation of one client process and the attempts attributed to it."""

    process: Any
    op_id: Any
    invoke: Event
    end: Event | None
    value: Any
    attempts: list[Attempt] = field(default_factory=list)
    ambiguous: bool = False
    client_view: list[int] = field(default_factory=list)
    client_reported: bool = False  # the client recorded attempt.* events of its own for this open
    unobserved: list[str] = field(default_factory=list)  # why some attempts may be missing (OBS-1)

    @property
    def t0(self) -> float:
        return self.invoke.t

    @property
    def ok(self) -> bool:
        return self.end is not None and self.end.type == "op.ok"

    @property
    def failed(self) -> bool:
        """Ended ``op.fail`` by the client itself (an open the application aborted does not count)."""
        return self.end is not None and self.end.type == "op.fail" and not self.aborted

    @property
    def aborted(self) -> bool:
        """The application aborted the open (``op.fail`` with ``reason="aborted"``)."""
        return self.end is not None and self.end.type == "op.fail" and self.end.get("reason") == "aborted"

    def rel(self, t: float) -> float:
        """Seconds since the open was invoked."""
        return t - self.t0


__all__ = ["PartnerNames", "event_ids", "matches", "partner_names", "same_partner"]  # re-exported names


# ------------------------------------------------------------------------------------ partner roles


def _role_of(ids: Iterable[str], initial: Sequence[str], failover: Sequence[str]) -> str | None:
    """``initial`` / ``failover`` for a connection to one of those partners, else None."""
    ids = list(ids)
    if any(matches(n, ids) for n in initial):
        return "initial"
    if any(matches(n, ids) for n in failover):
        return "failover"
    return None


# --------------------------------------------------------------------------------------- time helpers


def retry_time(round_: int, base: float) -> float:
    """MIR-5: ``RetryTime(round r) = r × 0.08 × LT``."""
    return round_ * RETRY_FRACTION * base


def retry_delay(round_: int, delays: Sequence[float] = DEFAULT_DELAYS) -> float:
    """MIR-7: the delay after round ``round_`` (1-based): 0.1, 0.2, 0.4, 0.8, then 1.0 s."""
    return float(delays[min(round_, len(delays)) - 1])


def ordered(events: Iterable[Event]) -> list[Event]:
    """The events in time order (index breaks ties) - the order every MIR rule reads a history in."""
    return sorted(events, key=lambda e: (e.t, e.index))


def horizon(events: Iterable[Event]) -> float:
    """The time of the last event: how far the history saw (MIR-5, MIR-6, MIR-8)."""
    return max((e.t for e in events), default=0.0)


def lost_time(events: Iterable[Event], t0: float, t1: float, tolerance: float) -> float:
    """MIR-5, MIR-6, MIR-7: seconds the harness demonstrably lost around a measured interval ``t0 … t1`` -
    the sum of the ``harness.stall`` events (the stall monitor's wake-ups that late: it was not
    scheduled from ``t`` to ``t + seconds``, and neither, then, was the fault proxy that stamps
    ``conn.*`` nor the client whose timing is measured) whose stalled span meets ``[t0 - tolerance,
    t1]`` (a stall just before ``t0`` delays the stamp of ``t0``). 0 when none was recorded."""
    lost = 0.0
    for e in events:
        if e.type == "harness.stall":
            late = float(e.get("seconds") or 0.0)
            if e.t <= t1 and e.t + late >= t0 - tolerance:
                lost += late
    return lost


def principal_at(events: Iterable[Event], t: float) -> str | None:
    """The node the history names as principal at ``t`` (MIR-4, MIR-10): the last ``topology.up``
    role list, ``node.start`` with ``role="principal"`` or ``role.change`` to ``principal`` before it."""
    principal = None
    for e in ordered(events):
        if e.t > t:
            break
        if e.type == "role.change" and e.get("new_role") == "principal":
            principal = str(e.get("node"))
        elif e.type == "node.start" and e.get("role") == "principal":
            principal = str(e.get("node"))
        elif e.type == "topology.up":
            for node in e.get("nodes") or []:
                if isinstance(node, dict) and node.get("role") == "principal":
                    principal = str(node.get("name"))
    return principal


def role_changes(events: Iterable[Event], t0: float, t1: float) -> list[Event]:
    """The ``role.change`` events after ``t0`` up to ``t1`` (MIR-4, MIR-10: roles moving under an open)."""
    return [e for e in events if e.type == "role.change" and t0 < e.t <= t1]


def end_time(a: Attempt, o: Open, horizon: float) -> float:
    """When the attempt stopped being an attempt (MIR-5, MIR-6): the open's success for the opened one
    (the connection lives on), its close otherwise, or the end of the history while still held."""
    if a.outcome == "opened" and o.end is not None:
        return o.end.t
    if a.end is not None:
        return a.end
    return horizon


def classify(a: Attempt, o: Open, last: bool) -> str:
    """The outcome of a proxy-observed attempt (see the module docstring), which MIR-3 … MIR-7 and
    MIR-13 judge: refused, opened, held, error, timeout, inactive or reset."""
    if a.client_outcome == "refused" and a.closed_by != "client":
        return "refused"
    if last and o.ok and (a.end is None or (o.end is not None and a.end >= o.end.t)):
        return "opened"
    if a.end is None:
        return "held"
    down = a.bytes_down
    if a.client_outcome == "error":
        return "error"
    if a.closed_by == "client":
        if down == 0 or a.client_outcome == "timeout":
            return "timeout"
        return "inactive"
    if down > 0:
        return "inactive"
    return "reset"


# ----------------------------------------------------------------------------------- building opens


def build_opens(
    events: Iterable[Event],
    initial: Sequence[str],
    failover: Sequence[str],
    *,
    use_client_view: bool = True,
    rounds: bool = True,
) -> list[Open]:
    """Group a history into opens with their numbered, classified attempts (every MIR rule; see the
    module docstring). ``rounds=False`` numbers each attempt its own round (MIR-3: no failover)."""
    ev = ordered(events)
    opens = _collect_opens(ev)
    _attach_proxy_attempts(ev, opens, initial, failover)
    _attach_refused_attempts(ev, opens, initial, failover)
    _attach_client_attempts(ev, opens, initial, failover, use_client_view=use_client_view)
    seen = Observability.of(ev)
    names = {"initial": initial, "failover": failover}
    for o in opens:
        _number_attempts(o, rounds=rounds)
        end = o.end.t if o.end is not None else horizon(ev)
        o.unobserved = seen.unobserved(names, o.t0, end, client_reported=o.client_reported and use_client_view)
    return opens


def _collect_opens(ev: list[Event]) -> list[Open]:
    """The ``open`` operations of the (time-ordered) history, each with its end if it has one."""
    opens: list[Open] = []
    pending: dict[_Key, Open] = {}
    for e in ev:
        if e.type == "op.invoke" and e.get("f") == "open":
            o = Open(e.get("process"), e.get("op_id"), e, None, e.get("value"))
            opens.append(o)
            pending[(o.process, o.op_id)] = o
        elif e.type in END_TYPES and e.get("f") in ("open", None):
            o = pending.pop((e.get("process"), e.get("op_id")), None)
            if o is not None:
                o.end = e
    return opens


def _owners(opens: Sequence[Open], t: float, process: Any = None) -> list[Open]:
    """The opens (of ``process``, if given) whose time window contains ``t``."""
    return [
        o for o in opens if o.t0 <= t <= (o.end.t if o.end else math.inf) and (process is None or o.process == process)
    ]


def _single_owner(opens: Sequence[Open], t: float) -> Open | None:
    """The one open whose window holds a connection seen at ``t``; None when there is none - or when
    there are several, which are then marked ambiguous (undecidable)."""
    own = _owners(opens, t)
    if len(own) > 1:
        for o in own:
            o.ambiguous = True
        return None
    return own[0] if own else None


def _proxy_connections(ev: list[Event]) -> tuple[dict[_Key, Event], dict[_Key, Event], set[_Key]]:
    """The proxies' ``conn.accepted`` and ``conn.closed`` per ``(proxy, conn_id)``, and the keys of
    the connections whose upstream refused them."""
    accepted: dict[_Key, Event] = {}
    closed: dict[_Key, Event] = {}
    upfail: set[_Key] = set()
    for e in ev:
        key = (e.get("proxy"), e.get("conn_id"))
        if e.type == "conn.accepted":
            accepted.setdefault(key, e)
        elif e.type == "conn.closed":
            closed.setdefault(key, e)
        elif e.type == "conn.upstream_failed":
            upfail.add(key)
    return accepted, closed, upfail


def _proxy_attempt(acc: Event, cl: Event | None, role: str, *, refused: bool) -> Attempt:
    """The (not yet numbered or classified) attempt of one proxy connection."""
    return Attempt(
        0,
        role,
        acc.t,
        cl.t if cl else None,
        "",
        "proxy",
        (acc.index,) + ((cl.index,) if cl else ()),
        event_ids(acc),
        proxy=acc.get("proxy"),
        conn_id=acc.get("conn_id"),
        closed_by=cl.get("by") if cl else None,
        client_outcome="refused" if refused else None,
        bytes_down=int((cl.get("bytes_down") or 0) if cl else 0),
        peer=str(acc.get("client")) if acc.get("client") else None,
        node=str(acc.get("node")) if acc.get("node") else None,
    )


def _attach_proxy_attempts(
    ev: list[Event], opens: Sequence[Open], initial: Sequence[str], failover: Sequence[str]
) -> None:
    """Give each open the proxy connections to a named partner accepted in its window; a connection
    in two opens' windows makes both ambiguous."""
    accepted, closed, upfail = _proxy_connections(ev)
    for key, acc in accepted.items():
        role = _role_of(event_ids(acc), initial, failover)
        if role is None:
            continue
        owner = _single_owner(opens, acc.t)
        if owner is not None:
            owner.attempts.append(_proxy_attempt(acc, closed.get(key), role, refused=key in upfail))


def _attach_refused_attempts(
    ev: list[Event], opens: Sequence[Open], initial: Sequence[str], failover: Sequence[str]
) -> None:
    """Give each open the refused connects the capture saw (``conn.refused``) to a named partner in
    its window, as ``source="capture"`` attempts with outcome ``refused``; one inside two opens'
    windows makes both ambiguous."""
    for e in ev:
        if e.type != "conn.refused":
            continue
        ids = event_ids(e)
        role = _role_of(ids, initial, failover)
        if role is None:
            continue
        owner = _single_owner(opens, e.t)
        if owner is not None:
            end = e.t + float(e.get("seconds") or 0.0)
            owner.attempts.append(
                Attempt(0, role, e.t, end, "refused", "capture", (e.index,), ids, proxy=e.get("proxy"),
                        peer=str(e.get("client")) if e.get("client") else None)
            )


def _client_attempts(ev: list[Event]) -> list[_ClientAttempt]:
    """The clients' ``attempt.start`` with their ``attempt.end`` (None if there is none), by start."""
    starts: dict[_Key, Event] = {}
    client: list[_ClientAttempt] = []
    for e in ev:
        key = (e.get("process"), e.get("attempt"))
        if e.type == "attempt.start":
            if key in starts:
                client.append((starts.pop(key), None))
            starts[key] = e
        elif e.type == "attempt.end" and key in starts:
            client.append((starts.pop(key), e))
    client.extend((s, None) for s in starts.values())
    client.sort(key=lambda pair: (pair[0].t, pair[0].index))
    return client


def _client_role(start: Event, initial: Sequence[str], failover: Sequence[str]) -> tuple[str | None, frozenset[str]]:
    """The role of a client attempt (its ``address`` wins over its ``target``) and its partner ids."""
    role = start.get("target") if start.get("target") in ("initial", "failover") else None
    addr = start.get("address")
    ids = frozenset([str(addr)]) if addr is not None else frozenset()
    if role is None or addr is not None:
        by_addr = _role_of(ids, initial, failover) if ids else None
        role = by_addr or role
    return role, ids


def _matching_proxy_attempt(o: Open, start: Event, end: Event | None, role: str) -> Attempt | None:
    """The unmatched proxy or capture attempt of ``o`` that is this client attempt: the one from the
    client's socket address, else the earliest one to the same partner seen during the attempt."""
    local = end.get("local") if end is not None else None
    if local:  # the client's socket address, as the proxy saw it: an exact match
        exact = next(
            (
                a
                for a in o.attempts
                if a.source in _SEEN and not a.matched and a.peer is not None and same_partner(str(local), a.peer)
            ),
            None,
        )
        if exact is not None:
            return exact
    hi = (end.t if end is not None else math.inf) + MATCH_SLACK
    return next(
        (
            a
            for a in sorted(o.attempts, key=lambda x: x.start)
            if a.source in _SEEN and a.role == role and not a.matched and start.t - MATCH_SLACK <= a.start <= hi
        ),
        None,
    )


def _attach_client_attempts(
    ev: list[Event],
    opens: Sequence[Open],
    initial: Sequence[str],
    failover: Sequence[str],
    *,
    use_client_view: bool,
) -> None:
    """Merge the clients' own attempts: one a proxy saw orders and completes that proxy attempt; the
    others (refused connects) are added as ``source="client"`` attempts if ``use_client_view``."""
    for s, en in _client_attempts(ev):
        own = _owners(opens, s.t, s.get("process"))
        if len(own) != 1:
            continue
        o = own[0]
        role, ids = _client_role(s, initial, failover)
        if role is None:
            continue
        o.client_reported = True
        outcome = en.get("outcome") if en is not None else None
        match = _matching_proxy_attempt(o, s, en, role)
        if match is not None:
            match.matched = True
            match.order_t = s.t
            if match.client_outcome is None:
                match.client_outcome = outcome
        elif use_client_view:
            idx = (s.index,) + ((en.index,) if en is not None else ())
            end_t = en.t if en is not None else None
            attempt = Attempt(
                0, role, s.t, end_t, outcome or "held", "client", idx, ids or frozenset([role]), client_outcome=outcome
            )
            o.attempts.append(attempt)
            o.client_view.extend(idx)


def _number_attempts(o: Open, *, rounds: bool) -> None:
    """Order the open's attempts in time, number them and their rounds, classify the proxy ones."""
    o.attempts.sort(key=lambda a: a.start if a.order_t is None else min(a.start, a.order_t))
    for k, a in enumerate(o.attempts, 1):
        a.n = k
        a.round = (k + 1) // 2 if rounds else k
        if a.source == "proxy":
            a.outcome = classify(a, o, k == len(o.attempts))
