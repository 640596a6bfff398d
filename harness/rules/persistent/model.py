"""The model the PER checkers read (PolarProxy persistent connections, RULEBOOK PER-1 … PER-10, seed
002): a history's switchovers, the application's operations per front connection (:func:`build_view`),
the sessions in a condition at switchover time that decides whether they may be kept (PER-4 … PER-8:
:class:`Case`) and the read-only node removals (PER-9 / PER-10: :class:`Removal`). Pure; no I/O.

They read:
* the switchover: ``fault.start`` / ``fault.end`` with ``fault="switchover"`` (matched by ``id``);
  ``role.change`` (which node became principal) and other faults on that node (PER-3's outage);
* the application's view (``harness.workload.oltp``): ``session.open`` / ``session.reconnect``,
  ``op.invoke`` / ``op.ok`` / ``op.fail`` / ``op.info`` carrying ``process`` and ``conn`` (the front
  connection's generation - the same ``(process, conn)`` before and after means the connection was
  kept) and, on failures, ``conn_lost`` (the front connection is gone: "closed") and ``error``;
* ``state.set`` / ``state.read`` (PER-2, PER-5, PER-8) and ``stream.progress`` (PER-6).

A front connection is *closed* at a switchover when an operation on it ends with ``conn_lost`` (or
the session reconnects away from it) after the switchover started; it is *kept* when an operation on
it succeeds after the switchover ended and none lost it. Timing tolerances are parameters.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.history.core import Event
from harness.rules.verdict import UNKNOWN, Verdict

NETWORK_OR_SERVER_FAULTS = ("partition", "stop", "kill", "pause", "latency", "bandwidth", "cut_replication")


@dataclass
class Switchover:
    """One planned switchover seen in the history."""

    start: Event
    end: Event | None
    new_principal: str | None = None

    @property
    def t0(self) -> float:
        return self.start.t

    @property
    def t1(self) -> float:
        return self.end.t if self.end is not None else float("inf")


@dataclass
class Op:
    """One operation: its invoke and completion events."""

    invoke: Event
    done: Event | None = None

    @property
    def process(self) -> str:
        return self.invoke.get("process")

    @property
    def f(self) -> str:
        return self.invoke.get("f")

    @property
    def conn(self) -> Any:
        if self.done is not None and self.done.get("conn") is not None:
            return self.done.get("conn")
        return self.invoke.get("conn")

    @property
    def ok(self) -> bool:
        return self.done is not None and self.done.type == "op.ok"

    @property
    def lost(self) -> bool:
        return self.done is not None and self.done.type in ("op.fail", "op.info") and bool(self.done.get("conn_lost"))

    @property
    def t_end(self) -> float:
        return self.done.t if self.done is not None else float("inf")


@dataclass
class View:
    """The history indexed for the checkers."""

    events: list[Event]
    switchovers: list[Switchover] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    by_conn: dict[tuple[str, Any], list[Op]] = field(default_factory=lambda: defaultdict(list))
    reconnects: list[Event] = field(default_factory=list)
    opened: dict[str, Event] = field(default_factory=dict)
    ok_times: dict[str, list[tuple[float, Any]]] = field(default_factory=dict)  # per process: (t_end, conn), sorted


def build_view(events: list[Event], fault: str | Sequence[str] = "switchover") -> View:
    """Index ``events``: switchovers (or the maintenance faults named by ``fault``: one name or
    several) with their new principal, operations per front connection."""
    names = (fault,) if isinstance(fault, str) else tuple(fault)
    ordered = sorted(events, key=lambda e: e.index)
    view = View(ordered)
    starts: dict[Any, Switchover] = {}
    pending: dict[tuple[str, Any], Op] = {}
    for e in ordered:
        if e.type == "fault.start" and e.get("fault") in names:
            s = Switchover(e, None)
            starts[e.get("id")] = s
            view.switchovers.append(s)
        elif e.type == "fault.end" and e.get("fault") in names and e.get("id") in starts:
            starts[e.get("id")].end = e
        elif e.type == "role.change" and e.get("new_role") == "principal":
            for s in view.switchovers:
                if s.end is None and s.new_principal is None:
                    s.new_principal = e.get("node")
        elif e.type == "op.invoke":
            op = Op(e)
            pending[(e.get("process"), e.get("op_id"))] = op
            view.ops.append(op)
        elif e.type in ("op.ok", "op.fail", "op.info"):
            op = pending.pop((e.get("process"), e.get("op_id")), None)
            if op is not None:
                op.done = e
        elif e.type == "session.reconnect":
            view.reconnects.append(e)
        elif e.type == "session.open":
            view.opened.setdefault(e.get("process"), e)
    for op in view.ops:
        if op.conn is not None:
            view.by_conn[(op.process, op.conn)].append(op)
        if op.ok:
            view.ok_times.setdefault(op.process, []).append((op.t_end, op.conn))
    for times in view.ok_times.values():
        times.sort(key=lambda item: item[0])
    return view


def alive_conn_at(view: View, process: str, t: float) -> Any:
    """The front connection ``process`` held at time ``t`` (last op.ok completed before ``t``)."""
    times = view.ok_times.get(process, [])
    i = bisect.bisect_left(times, t, key=lambda item: item[0])
    return times[i - 1][1] if i > 0 else None


def closure(view: View, process: str, conn: Any, after: float) -> Event | None:
    """The first event at or after ``after`` showing front connection (process, conn) closed."""
    candidates = [op.done for op in view.by_conn.get((process, conn), [])
                  if op.lost and op.done is not None and op.done.t >= after]
    candidates += [e for e in view.reconnects
                   if e.get("process") == process and e.get("previous") == conn and e.t >= after]
    return min(candidates, key=lambda e: e.index) if candidates else None


def used_after(view: View, process: str, conn: Any, after: float) -> Op | None:
    """The first successful operation on (process, conn) that completed after ``after``."""
    found = [op for op in view.by_conn.get((process, conn), []) if op.ok and op.t_end > after]
    return min(found, key=lambda op: op.t_end) if found else None


def judged_processes(view: View, processes: list[str] | None) -> list[str]:
    names = list(view.opened) if processes is None else list(processes)
    return sorted(set(names))


def no_switchover(rule: str, expected: str) -> Verdict:
    return Verdict(rule, UNKNOWN, expected=expected, observed="no switchover (fault.start fault=switchover) "
                   "in the history")


def fmt(process: str, conn: Any) -> str:
    return f"{process}#{conn}"


# ----------------------------------------------------------------------------- PER-4 .. PER-8


@dataclass
class Case:
    """A session in a condition at switchover time that decides whether it may be kept."""

    process: str
    conn: Any
    what: str
    ended_at: float | None  # when the condition ended (transaction / request finished), or None
    evidence: int


def open_transactions(view: View, s: Switchover) -> list[Case]:
    """Sessions inside an explicit transaction (``begin`` ok, not yet ended) when ``s`` started."""
    cases = []
    by_process: dict[str, list[Op]] = defaultdict(list)
    for op in view.ops:
        by_process[op.process].append(op)
    for p, ops in by_process.items():
        begin = None
        for op in ops:
            if op.f == "begin" and op.ok and op.t_end < s.t0:
                begin = op
            elif begin is not None and op.f in ("commit", "rollback") and op.invoke.t < s.t0 and op.done is not None \
                    and op.t_end < s.t0:
                begin = None
        if begin is None:
            continue
        end = next((op for op in ops if op.f in ("commit", "rollback") and op.invoke.index > begin.invoke.index), None)
        ended = end.invoke.t if end is not None else None
        cases.append(Case(p, begin.conn, "transaction open", ended, begin.invoke.index))
    return cases


def requests_in_flight(view: View, s: Switchover, fs: tuple[str, ...], need_progress: bool) -> list[Case]:
    """Operations ``f`` in ``fs`` invoked before ``s`` started and not finished then (with a
    ``stream.progress`` before the start when ``need_progress``: a result partly delivered)."""
    progress = {(e.get("process"), e.get("op_id")) for e in view.events
                if e.type == "stream.progress" and e.t < s.t0}
    cases = []
    for op in view.ops:
        if op.f not in fs or op.invoke.t >= s.t0 or op.t_end < s.t0:
            continue
        if need_progress and (op.process, op.invoke.get("op_id")) not in progress:
            continue
        ended = op.t_end if op.ok else None
        conn = op.conn
        what = "result partly delivered" if need_progress else f"{op.f} in progress"
        cases.append(Case(op.process, conn, what, ended, op.invoke.index))
    return cases


def held_state(view: View, s: Switchover, kinds: tuple[str, ...]) -> list[Case]:
    """Sessions holding state of ``kinds`` (``state.set``; a later ``state.set`` with kind
    ``<kind>_dropped`` and the same key releases it) when ``s`` started."""
    holding: dict[tuple[str, str], Event] = {}
    for e in view.events:
        if e.type != "state.set" or e.t >= s.t0:
            continue
        key = (e.get("process"), e.get("key"))
        if e.get("kind") in kinds:
            holding[key] = e
        elif str(e.get("kind", "")).endswith("_dropped"):
            holding.pop(key, None)
    return [Case(p, e.get("conn"), f"holds {e.get('kind')} {k}", None, e.index) for (p, k), e in holding.items()]


# ----------------------------------------------------------------------------- PER-9 / PER-10
#
# Read-only nodes. Extra events (recorded by the suites, docs/persistent.md):
#
# | type | fields |
# |---|---|
# | ``fault.start`` / ``fault.end`` with ``fault="remove_node"`` | ``node`` (the read-only node removed), ``id`` |
# | ``node.ports`` | ``ports``: node name -> server port (what ``inet_server_port()`` answers on it) |
# | ``session.endpoint`` | ``process``, ``endpoint`` (one of PERSISTENT_ENDPOINTS + DISCONNECTED_ENDPOINTS) |
#
# An operation is *served by* a node when its ``op.ok`` value is that node's port (the read-only
# workload asks ``SELECT inet_server_port()``: the network's view of where the query ran).

PERSISTENT_ENDPOINTS = ("cluster", "custom-active")
DISCONNECTED_ENDPOINTS = ("custom-connection", "direct")


@dataclass
class Removal:
    """One read-only node removal seen in the history."""

    node: str
    start: Event
    end: Event | None

    @property
    def t0(self) -> float:
        return self.start.t

    @property
    def t1(self) -> float:
        return self.end.t if self.end is not None else float("inf")


def removals_of(events: list[Event]) -> list[Removal]:
    """Every ``remove_node`` fault of the history, in order (PER-9, PER-10)."""
    out: dict[Any, Removal] = {}
    for e in sorted(events, key=lambda e: e.index):
        if e.type == "fault.start" and e.get("fault") == "remove_node":
            out[e.get("id")] = Removal(str(e.get("node")), e, None)
        elif e.type == "fault.end" and e.get("fault") == "remove_node" and e.get("id") in out:
            out[e.get("id")].end = e
    return list(out.values())


def node_of_port(events: list[Event]) -> dict[int, str]:
    found: dict[int, str] = {}
    for e in events:
        if e.type == "node.ports":
            for name, port in (e.get("ports") or {}).items():
                found[int(port)] = str(name)
    return found


def served_by(op: Op, ports: dict[int, str]) -> str | None:
    if not op.ok or op.done is None:
        return None
    value = op.done.get("value")
    return ports.get(value) if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class OnNode:
    """A front connection attached to the removed node when the removal started."""

    process: str
    conn: Any
    running: Op | None  # the request in flight at the start, if any
    evidence: int


def on_node(view: View, ports: dict[int, str], r: Removal) -> list[OnNode]:
    """Front connections whose last answer before the removal came from ``r.node``, with the request
    they had in flight then (if any)."""
    by_process: dict[str, list[Op]] = defaultdict(list)
    for op in view.ops:
        by_process[op.process].append(op)
    out = []
    for p, ops in by_process.items():
        before = [op for op in ops if op.ok and op.t_end < r.t0]
        if not before:
            continue
        last = before[-1]
        if served_by(last, ports) != r.node:
            continue
        running = next((op for op in ops if op.invoke.t < r.t0 <= op.t_end and op.conn == last.conn), None)
        out.append(OnNode(p, last.conn, running, last.done.index if last.done is not None else last.invoke.index))
    return out


def ops_after(view: View, process: str, conn: Any, t: float) -> list[Op]:
    return [op for op in view.by_conn.get((process, conn), []) if op.invoke.t >= t or op.t_end >= t]
