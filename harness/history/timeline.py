"""The timeline model of a history (docs/reports.md): its proxied connections, the client's own attempts
and operations, fault windows, node markers and roles - what the timeline picture
(:mod:`harness.report.timeline_svg`) draws, one lane per node and per session. Pure; no drawing here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.history.core import Event, History

#: The events drawn as vertical markers across every lane (the picture styles each one).
MARKER_TYPES = ("role.change", "node.start", "node.stop", "node.kill", "node.pause", "node.resume")

#: A client attempt's outcome -> the outcome colour it is drawn with.
ATTEMPT_OUTCOME = {"opened": "opened", "refused": "refused", "inactive": "refused",
                   "timeout": "timeout", "reset": "reset", "error": "reset"}


@dataclass
class Conn:
    """One proxied connection: ``conn.accepted`` .. ``conn.closed`` at a proxy (a Network-lane bar)."""

    key: tuple[Any, Any]
    accepted: Event
    closed: Event | None = None
    upstream_ok: Event | None = None
    upstream_failed: Event | None = None
    attempt: Attempt | None = None

    @property
    def lane(self) -> str:
        return str(self.accepted.get("node") or self.accepted.get("proxy") or "proxy")


@dataclass
class Attempt:
    """One of the client's own attempts: ``attempt.start`` .. ``attempt.end`` (a Client-lane bar)."""

    process: str
    start: Event
    end: Event | None = None
    conn: Conn | None = None


@dataclass
class Op:
    """One client operation: ``op.invoke`` .. ``op.ok`` / ``op.fail`` / ``op.info`` (a Client-lane tick)."""

    process: str
    invoke: Event | None
    done: Event | None

    @property
    def status(self) -> str:
        if self.done is None:
            return "info"
        return self.done.type.split(".", 1)[1]


@dataclass
class TimelineModel:
    """Everything a timeline draws of one history: connections, attempts, operations, faults,
    markers, roles."""

    events: list[Event]
    t0: float
    t1: float
    node_lanes: list[str] = field(default_factory=list)
    client_lanes: list[str] = field(default_factory=list)
    conns: list[Conn] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    delays: list[Event] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    faults: list[tuple[Event, Event | None]] = field(default_factory=list)
    markers: list[Event] = field(default_factory=list)
    roles: dict[str, list[str]] = field(default_factory=dict)


def coerce_events(source: History | Iterable[Event] | Iterable[Mapping[str, Any]],
            meta: Mapping[str, Any] | None) -> tuple[list[Event], dict[str, Any]]:
    """A history, a list of events or of their dict form as ``(events in order, meta)``; ``meta``
    overrides the history's."""
    if isinstance(source, History):
        return source.events(), dict(source.meta if meta is None else meta)
    events = [e if isinstance(e, Event) else Event.from_dict(dict(e)) for e in source]
    return sorted(events, key=lambda e: e.index), dict(meta or {})


def _addr_match(a: Any, b: Any) -> bool:
    if not a or not b:
        return False
    a, b = str(a), str(b)
    if a == b:
        return True
    return a.rsplit(":", 1)[-1] == b.rsplit(":", 1)[-1] and (":" in a and ":" in b)


def build_model(events: list[Event]) -> TimelineModel:
    """The timeline model of ``events`` (at least one): what each lane of the picture shows."""
    t0 = min(e.t for e in events)
    t1 = max(e.t for e in events)
    model = TimelineModel(events, t0, t1)
    conns: dict[tuple[Any, Any], Conn] = {}
    open_attempts: dict[tuple[str, Any], Attempt] = {}
    pending_ops: dict[tuple[str, Any], Op] = {}
    open_faults: dict[Any, Event] = {}
    fault_order: list[Any] = []
    fault_end: dict[Any, Event] = {}

    def node_lane(name: str) -> None:
        if name not in model.node_lanes:
            model.node_lanes.append(name)

    def client_lane(name: str) -> None:
        if name not in model.client_lanes:
            model.client_lanes.append(name)

    for e in events:
        kind = e.type
        if kind == "conn.accepted":
            c = Conn((e.get("proxy"), e.get("conn_id")), e)
            conns[c.key] = c
            model.conns.append(c)
            node_lane(c.lane)
        elif kind == "conn.refused":  # seen by the packet capture: an instant refused connection
            c = Conn(("refused", e.index), e, closed=e, upstream_failed=e)
            model.conns.append(c)
            node_lane(c.lane)
        elif kind.startswith("conn."):
            c = conns.get((e.get("proxy"), e.get("conn_id")))
            if c is None:
                continue
            if kind == "conn.closed":
                c.closed = e
            elif kind == "conn.upstream_connected":
                c.upstream_ok = e
            elif kind == "conn.upstream_failed":
                c.upstream_failed = e
        elif kind == "attempt.start":
            process = str(e.get("process"))
            a = Attempt(process, e)
            open_attempts[(process, e.get("attempt"))] = a
            model.attempts.append(a)
            client_lane(process)
        elif kind == "attempt.end":
            process = str(e.get("process"))
            a = open_attempts.pop((process, e.get("attempt")), None)
            if a is None:  # end without a start: draw it as an instant attempt
                a = Attempt(process, e)
                model.attempts.append(a)
                client_lane(process)
            a.end = e
        elif kind == "attempt.delay":
            model.delays.append(e)
            client_lane(str(e.get("process")))
        elif kind == "op.invoke":
            process = str(e.get("process"))
            op = Op(process, e, None)
            pending_ops[(process, e.get("op_id"))] = op
            model.ops.append(op)
            client_lane(process)
        elif kind in ("op.ok", "op.fail", "op.info"):
            process = str(e.get("process"))
            op = pending_ops.pop((process, e.get("op_id")), None)
            if op is None:
                model.ops.append(Op(process, None, e))
                client_lane(process)
            else:
                op.done = e
        elif kind == "fault.start":
            key = e.get("id", e.index)
            open_faults[key] = e
            fault_order.append(key)
        elif kind == "fault.end":
            key = e.get("id", e.index)
            if key in open_faults:
                fault_end[key] = e
        elif kind in MARKER_TYPES:
            model.markers.append(e)
            if e.get("node"):
                node_lane(str(e.get("node")))
            if kind == "role.change" and e.get("node"):
                roles = model.roles.setdefault(str(e.get("node")), [])
                if not roles and e.get("old_role"):
                    roles.append(str(e.get("old_role")))
                roles.append(str(e.get("new_role")))
            if kind == "node.start" and e.get("node") and e.get("role"):
                roles = model.roles.setdefault(str(e.get("node")), [])
                if not roles or roles[-1] != e.get("role"):
                    roles.append(str(e.get("role")))
    model.faults = [(open_faults[k], fault_end.get(k)) for k in fault_order]
    _match_attempts(model)
    return model


def _match_attempts(model: TimelineModel) -> None:
    """Pair each client attempt with the proxied connection it opened (same address, accepted while
    the attempt ran), so network bars can be coloured by the client's own outcome."""
    free = sorted(model.conns, key=lambda c: c.accepted.t)
    for a in sorted(model.attempts, key=lambda a: a.start.t):
        address = a.start.get("address")
        t_end = a.end.t if a.end is not None else model.t1
        for c in free:
            if c.attempt is None and a.start.t - 0.005 <= c.accepted.t <= t_end + 0.005 \
                    and _addr_match(address, c.accepted.get("listen")):
                c.attempt, a.conn = a, c
                break


def conn_outcome(c: Conn) -> str:
    """Body colour of a network bar: the client's outcome when known, else from ``by``/``reason``."""
    if c.attempt is not None and c.attempt.end is not None:
        outcome = ATTEMPT_OUTCOME.get(str(c.attempt.end.get("outcome")))
        if outcome:
            return outcome
    return close_category(c)


def close_category(c: Conn) -> str:
    """How a connection ended, from the proxy's ``conn.closed`` ``by``/``reason``."""
    if c.closed is None:
        return "open"
    if c.upstream_failed is not None:
        return "refused"
    by = str(c.closed.get("by") or "")
    reason = str(c.closed.get("reason") or "").lower()
    if "reset" in reason:
        return "reset"
    if "timeout" in reason or by == "toxic":
        return "timeout"
    if by == "client":
        return "client"
    if by == "proxy":
        return "reset"
    # closed by the server: a quick close with little data is a rejected login, else the server ended it
    short = c.closed.t - c.accepted.t < 1.0 and int(c.closed.get("bytes_down") or 0) < 1024
    return "refused" if short else "server"
