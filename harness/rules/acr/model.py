"""The ACR history model (RULEBOOK ACR-1…9): the application's operations, the transports the fault
proxy saw (accepted connections and, from the refused-connect capture, refused ones), the member
faults, the published member lists and the server's statements per session. Pure: no I/O.

One application process per group and test: every connection through an ACR address (the
``acr.topology`` event names them) is that application's (the harness's own connections go to the
server directly)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.history.core import Event

SQLSTATE_REROUTED = "08506"
SQLSTATE_COMM = "08001"

_HOLD = re.compile(r"^\s*DECLARE\s+(\S+)\b.*\bWITH\s+HOLD\b", re.I | re.S)
_DECLARE = re.compile(r"^\s*DECLARE\s+(\S+)", re.I)
_CLOSE = re.compile(r"^\s*CLOSE\s+(\S+)", re.I)
_TEMP = re.compile(r"^\s*(CREATE\s+(GLOBAL\s+|LOCAL\s+)?TEMP(ORARY)?\s+TABLE|DECLARE\s+GLOBAL\s+TEMPORARY)", re.I)
_DROP_ALL = re.compile(r"^\s*DISCARD\s+(ALL|TEMP)", re.I)
_SET = re.compile(r"^\s*SET\s+(?!TRANSACTION\b|SESSION\s+CHARACTERISTICS\b|CONSTRAINTS\b)", re.I)
_WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|MERGE|CREATE|DROP|ALTER|TRUNCATE|COPY)\b", re.I)


@dataclass(frozen=True)
class Address:
    """One ACR address of the topology (member or group-wide address)."""

    name: str
    group: str
    proxy: str
    kind: str
    weight: int


@dataclass
class Op:
    """One application operation: invoke and completion."""

    f: str
    value: Any
    t0: float
    t1: float
    status: str  # ok / fail / info / pending
    invoke: int
    end: int | None
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def sql(self) -> str:
        """The statement of an ``execute`` (else "")."""
        return str(self.value.get("sql", "")) if isinstance(self.value, dict) else ""

    @property
    def n(self) -> int:
        """The statement's position in its transaction (0 = first)."""
        return int(self.value.get("n", 0)) if isinstance(self.value, dict) else 0

    @property
    def txn(self) -> int:
        """The transaction number."""
        return int(self.value.get("txn", 0)) if isinstance(self.value, dict) else 0

    @property
    def is_set(self) -> bool:
        """A SET statement (a special register)."""
        return bool(isinstance(self.value, dict) and self.value.get("set"))

    @property
    def sqlstate(self) -> str | None:
        """The SQLSTATE the application got (None for ok)."""
        return self.fields.get("sqlstate") if self.status == "fail" else None


@dataclass
class Transport:
    """One connection attempt seen from outside: accepted by a proxy or refused (capture)."""

    address: Address
    t: float
    outcome: str  # accepted / refused
    index: int
    conn_id: Any = None
    closed_t: float | None = None
    closed_by: str | None = None
    closed_index: int | None = None


@dataclass
class Session:
    """One server session of the application: its statements in the order the server logged them
    (event index order; several statements of one log millisecond share a time, so time never
    orders them)."""

    session: str
    statements: list[tuple[float, str, int]]  # (t, sql, event index), in event index order

    @property
    def start(self) -> float:
        """When its first statement arrived."""
        return self.statements[0][0]


@dataclass
class Model:
    """Everything the ACR checkers read."""

    addresses: dict[str, Address]  # by proxy name
    ops: list[Op]
    transports: list[Transport]
    faults: list[tuple[str, str, float, float, int]]  # (fault, member, start, end, index)
    published: list[tuple[float, str, list[tuple[str, int]], int]]  # (t, group, [(name, weight)], index)
    sessions: list[Session]
    capture: bool | None  # refused connects observable (None: no status recorded)
    has_topology: bool

    def member(self, name: str) -> Address | None:
        """The address called ``name``."""
        return next((a for a in self.addresses.values() if a.name == name), None)

    def group_members(self, group: str) -> list[Address]:
        """The members (not group addresses) of ``group``."""
        return [a for a in self.addresses.values() if a.group == group and a.kind == "member"]

    def down(self, name: str, t: float, how: str | None = None) -> bool:
        """Whether a member fault (of ``how``, if given) on ``name`` holds at ``t``."""
        return any(m == name and s <= t < e and (how is None or f == f"member.{how}")
                   for f, m, s, e, _ in self.faults)

    def transports_in(self, t0: float, t1: float) -> list[Transport]:
        """Attempts that began in ``[t0, t1]``, in time order."""
        return [tr for tr in self.transports if t0 <= tr.t <= t1]

    def current_transport(self, t: float, since: float) -> Transport | None:
        """The accepted transport that carried the application's calls at ``t``: the latest accepted
        before ``t`` that was still open at ``since`` (the previous call's end)."""
        cands = [tr for tr in self.transports if tr.outcome == "accepted" and tr.t < t
                 and (tr.closed_t is None or tr.closed_t >= since)]
        return cands[-1] if cands else None

    def publication(self, t: float, group: str = "primary") -> list[tuple[str, int]] | None:
        """The member list (name, weight) of ``group`` published last before ``t``."""
        pubs = [p for p in self.published if p[1] == group and p[0] <= t]
        return pubs[-1][2] if pubs else None

    def session_at(self, t: float) -> Session | None:
        """The application's server session whose statements last arrived before ``t``."""
        best: Session | None = None
        best_t = -1.0
        for s in self.sessions:
            before = [st for st in s.statements if st[0] < t]
            if before and before[-1][0] > best_t:
                best, best_t = s, before[-1][0]
        return best

    def sessions_after(self, t: float) -> list[Session]:
        """Sessions whose first statement arrived after ``t``, oldest first."""
        return sorted((s for s in self.sessions if s.start > t), key=lambda s: s.start)


def _ops(ordered: list[Event], process: str) -> list[Op]:
    pending: dict[Any, Op] = {}
    out: list[Op] = []
    for e in ordered:
        if e.get("process") != process or not e.type.startswith("op."):
            continue
        key = e.get("op_id")
        if e.type == "op.invoke":
            op = Op(str(e.get("f")), e.get("value"), e.t, float("inf"), "pending", e.index, None)
            pending[key] = op
            out.append(op)
        elif key in pending:
            op = pending.pop(key)
            op.t1, op.status, op.end = e.t, e.type.split(".", 1)[1], e.index
            op.fields = dict(e.fields)
    return out


def build(events: Iterable[Event], process: str = "app") -> Model:
    """The model of one history for the application ``process`` (its transports: the ACR-address
    connections between its first call and its last)."""
    ordered = sorted(events, key=lambda e: e.index)
    topo = [e for e in ordered if e.type == "acr.topology"]
    addresses: dict[str, Address] = {}
    for e in topo[-1:]:
        for a in e.get("addresses") or []:
            addresses[a["proxy"]] = Address(a["name"], a["group"], a["proxy"], a.get("kind", "member"),
                                            int(a.get("weight", 0)))
    application = process
    transports: dict[tuple[str, Any], Transport] = {}
    refused: list[Transport] = []
    faults: list[tuple[str, str, float, float, int]] = []
    starts: dict[Any, Event] = {}
    published = []
    statements: dict[str, list[tuple[float, str, int]]] = {}
    capture: bool | None = None
    for e in ordered:
        proxy = e.get("proxy")
        if e.type == "conn.accepted" and proxy in addresses:
            transports[(proxy, e.get("conn_id"))] = Transport(addresses[proxy], e.t, "accepted", e.index,
                                                              e.get("conn_id"))
        elif e.type == "conn.closed" and (proxy, e.get("conn_id")) in transports:
            tr = transports[(proxy, e.get("conn_id"))]
            tr.closed_t, tr.closed_by, tr.closed_index = e.t, e.get("by"), e.index
        elif e.type == "conn.refused" and proxy in addresses:
            refused.append(Transport(addresses[proxy], e.t, "refused", e.index))
        elif e.type == "fault.start" and str(e.get("fault", "")).startswith("member."):
            starts[e.get("id")] = e
        elif e.type == "fault.end" and e.get("id") in starts:
            s = starts.pop(e.get("id"))
            faults.append((str(s.get("fault")), str(s.get("node")), s.t, e.t, s.index))
        elif e.type == "acr.members":
            published.append((e.t, str(e.get("group")), [(m["name"], int(m["weight"])) for m in e.get("members") or []],
                              e.index))
        elif e.type == "server.stmt" and e.get("application") == application:
            statements.setdefault(str(e.get("session")), []).append((e.t, str(e.get("sql", "")), e.index))
        elif e.type == "harness.capture" and e.get("scope") == "acr":
            capture = bool(e.get("available"))
    for s in starts.values():
        faults.append((str(s.get("fault")), str(s.get("node")), s.t, float("inf"), s.index))
    # the server's own order (one log per session: event index = log order), never (time, text)
    sessions = [Session(k, sorted(v, key=lambda st: st[2])) for k, v in statements.items()]
    ops = _ops(ordered, process)
    lo = min((op.t0 for op in ops), default=float("inf"))
    hi = max((op.t1 for op in ops), default=float("-inf"))
    # several applications may use the groups one after another: each one's transports lie within its calls
    all_transports = sorted((tr for tr in [*transports.values(), *refused] if lo <= tr.t <= hi),
                            key=lambda tr: (tr.t, tr.index))
    return Model(addresses, ops, all_transports, faults, published, sessions, capture, bool(topo))


# ---------------------------------------------------------------------- derived facts


def registers(model: Model, before: float, committed: bool = False) -> list[str]:
    """The application's SET statements acknowledged before ``before`` in order; ``committed``: only
    those at the last COMMIT point (outside a transaction, or in a transaction that committed)."""
    committed_txns = {op.txn for op in model.ops if op.f == "commit" and op.status == "ok" and op.t1 <= before}
    out = []
    for op in model.ops:
        if op.f == "execute" and op.is_set and op.status == "ok" and op.t1 <= before:
            if not committed or op.n == 0 or op.txn in committed_txns:
                out.append(op.sql.strip())
    return out


def disrupted(model: Model, op: Op, prev_end: float) -> Transport | None:
    """The transport that broke under ``op`` (closed by the proxy / upstream / a toxic between the
    previous call's end and this call's end, or black-holed during the call), or None."""
    tr = model.current_transport(op.t0, prev_end)
    if tr is None:
        return None
    if tr.closed_t is not None and prev_end <= tr.closed_t <= op.t1 and tr.closed_by != "client":
        return tr
    if model.down(tr.address.name, op.t0, "blackhole") or model.down(tr.address.name, op.t0, "kill"):
        return tr
    return None


def disruptions(model: Model) -> list[tuple[Op, Transport]]:
    """Every application call whose transport broke under it, with that transport."""
    out = []
    prev_end = float("-inf")
    for op in model.ops:
        if op.f in ("execute", "commit", "rollback"):
            tr = disrupted(model, op, prev_end)
            if tr is not None:
                out.append((op, tr))
        if op.f != "cancel":
            prev_end = op.t1
    return out


def session_resources(model: Model, t: float) -> list[str]:
    """Held cursors and temporary tables open at ``t`` in the application's server session (the
    server's view of "transport not reusable", ACR-1/ACR-4)."""
    s = model.session_at(t)
    if s is None:
        return []
    cursors: dict[str, str] = {}
    temps: list[str] = []
    for st_t, sql, _ in s.statements:
        if st_t >= t:
            break
        if m := _HOLD.match(sql):
            cursors[m.group(1).lower()] = sql
        elif m := _CLOSE.match(sql):
            cursors.pop(m.group(1).lower(), None)
        elif _TEMP.match(sql):
            temps.append(sql)
        elif _DROP_ALL.match(sql):
            temps.clear()
            cursors.clear()
    return [*cursors.values(), *temps]


def txn_ops(model: Model, op: Op) -> list[Op]:
    """The acknowledged statements of ``op``'s transaction before it."""
    return [o for o in model.ops if o.f == "execute" and o.txn == op.txn and o.t1 <= op.t0 and o.status == "ok"
            and not (o.is_set and o.n == 0)]


def txn_declares(model: Model, op: Op) -> list[str]:
    """Cursors / temporary tables declared in ``op``'s transaction (ACR-5: non-seamless)."""
    return [o.sql for o in txn_ops(model, op) if _DECLARE.match(o.sql) or _TEMP.match(o.sql)]


def txn_wrote(model: Model, op: Op) -> bool:
    """Whether ``op``'s transaction wrote (a COMMIT of it is not judged seamless, ACR-5)."""
    return any(_WRITE.match(o.sql) for o in txn_ops(model, op))


def server_form(sql: str) -> str:
    """A statement as the server logs it: psycopg's ``%s`` placeholders become ``$1``, ``$2`` …"""
    n = 0

    def repl(_: re.Match[str]) -> str:
        nonlocal n
        n += 1
        return f"${n}"

    return re.sub(r"%s", repl, sql).strip()


def sets_in(session: Session, until: float | None = None, *, before: int | None = None) -> list[tuple[str, int]]:
    """The SET statements a session received, with their event indices: those logged before the
    statement of event ``before`` (the server's order: equal log times are normal), or, for a point
    of the application's clock, those logged at or before ``until`` (a log time is truncated to the
    millisecond, never later than the statement's arrival)."""
    out = []
    for t, sql, idx in session.statements:
        if before is not None and idx >= before:
            break
        if until is not None and t > until:
            break
        if _SET.match(sql):
            out.append((sql.strip(), idx))
    return out


def first_of(session: Session, sql: str) -> tuple[float, int] | None:
    """When (and at which event) the session received ``sql`` first (the server's order)."""
    want = server_form(sql)
    for t, got, idx in session.statements:
        if got.strip() == want:
            return t, idx
    return None


def all_primary_down(model: Model, t: float) -> bool:
    """Every member and the group-wide address of the primary group are failed at ``t``."""
    names = [a.name for a in model.addresses.values() if a.group == "primary"]
    return bool(names) and all(model.down(n, t) for n in names)
