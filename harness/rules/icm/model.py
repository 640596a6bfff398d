"""The ICM request model (RULEBOOK ICM-1..7): one :class:`Request` per browser open, with the cluster's
state as it was when the request was sent, folded from the history (pure; no I/O).

State comes from the cluster stand-in's events (``icm.cluster.up``, ``icm.server.state``,
``icm.replica.mark``, ``icm.server.down`` / ``up``) and from the fault vocabulary's partitions of a
server port (``fault.start`` / ``fault.end`` with ``node="s1:http"``). What the request got comes from
the browser (``icm.client.*``) and from the servers (``icm.served``). The server *chosen* for a
request is the one the router's redirect named, else the last server that saw the request (a proxy
router's choice whose answer the client got, observed at the servers; a 401 challenge answered by one
server and the login by another is judged by the second).

The availability index (ICM-2, the stand-in's interpretation): ``100 - ceil(100 * sessions /
capacity)``, never below 0 - the ``availability`` the stand-in records with each state, derived here
from ``sessions`` and ``capacity`` when an event lacks it. The availability states (ICM-2): BUSY
when ``availability_threshold > 0`` and ``index < availability_threshold``; MAXUSERS when
``max_users > 0`` and ``sessions >= max_users``; RESTRICTED when ``restricted != 0``. The choice
among equals is the explicit ``tie_break``: ``any`` (every server of the highest index is right),
``first`` / ``last`` (in cluster order).

Order is the history's order (event ``index``), never a re-derived time: requests, states and server
events are folded in index order, and "before the decision" means a smaller index than the event
that shows the decision (:attr:`Request.decided_index`); equal timestamps are normal."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.history.core import Event

TIE_BREAKS = ("any", "first", "last")
STATE_NAMES = ("BUSY", "MAXUSERS", "RESTRICTED")


def availability_index(sessions: int, capacity: int) -> int:
    """ICM-2 (interpretation, docs/icm.md): ``100 - ceil(100 * sessions / capacity)``, never below 0
    (a capacity of 0 or less: 0)."""
    if capacity <= 0:
        return 0
    return max(0, 100 - (100 * sessions + capacity - 1) // capacity)


@dataclass(frozen=True)
class ServerState:
    """A server's settings and availability index at one moment."""

    sessions: int = 0
    capacity: int = 100
    availability_threshold: int = 0
    max_users: int = 0
    restricted: int = 0
    index: int = 100

    def states(self) -> tuple[str, ...]:
        """ICM-2: the states the thresholds give (empty: available)."""
        out = []
        if self.availability_threshold > 0 and self.index < self.availability_threshold:
            out.append("BUSY")
        if self.max_users > 0 and self.sessions >= self.max_users:
            out.append("MAXUSERS")
        if self.restricted != 0:
            out.append("RESTRICTED")
        return tuple(out)


@dataclass
class Snapshot:
    """The cluster as a request found it."""

    order: list[str]
    layout: dict[str, tuple[str, ...]]
    servers: dict[str, ServerState]
    marks: dict[tuple[str, str], str]
    down: set[str]
    partitioned: set[tuple[str, str]]  # (server, scheme)
    evidence: list[int]  # the events that set this state

    def candidates(self, database: str) -> list[str]:
        """ICM-1: servers holding an unmarked replica of ``database``, in cluster order."""
        return [s for s in self.order if database in self.layout.get(s, ()) and (s, database) not in self.marks]

    def reachable(self, server: str, scheme: str) -> bool:
        """ICM-3: the server runs and its ``scheme`` port is not cut off."""
        return server not in self.down and (server, scheme) not in self.partitioned


@dataclass
class Request:
    """One browser open (``icm.client.request`` ... ``icm.client.result``)."""

    request_id: str
    process: str
    user: str | None
    scheme: str
    database: str
    target: str  # router | server | bookmark
    t0: float
    index: int
    snapshot: Snapshot
    result: Event | None = None
    redirect: Event | None = None
    redirect_server: str | None = None
    served: list[Event] = field(default_factory=list)
    decision: Event | None = None
    changed_during: bool = False  # the cluster's state changed while it was in flight

    @property
    def status(self) -> int | None:
        """The final HTTP status (None: no answer or not finished)."""
        return None if self.result is None else self.result.get("status")

    @property
    def chosen(self) -> str | None:
        """The server the router sent the request to: the redirect target, else (a proxy router) the
        server whose answer the client got - the last one that saw it."""
        if self.redirect_server is not None:
            return self.redirect_server
        return self.served[-1].get("server") if self.served else None

    @property
    def served_ok(self) -> Event | None:
        """The server's 200 answer, if any."""
        return next((e for e in self.served if e.get("status") == 200), None)

    @property
    def decided_index(self) -> int:
        """Where in the history the router's choice was visible: the redirect, else the last serve (a
        proxy router's choice), else the result, else the request itself. Whatever the router did to
        decide (ICM-3: its pings) comes before this index."""
        for e in (self.redirect, self.served[-1] if self.served else None, self.result):
            if e is not None:
                return e.index
        return self.index

    def evidence(self) -> list[int]:
        """The request's own events."""
        out = [self.index] + ([self.redirect.index] if self.redirect else []) + [e.index for e in self.served]
        return out + ([self.result.index] if self.result else [])


@dataclass(frozen=True)
class Expectation:
    """What ICM-4/5/6 allow for one request: ``kind`` available | last-resort | none, the servers in
    the pool the choice is made from, and the right ones."""

    kind: str
    pool: tuple[str, ...]
    allowed: tuple[str, ...]


def lightest(pool: list[str], servers: dict[str, ServerState], tie_break: str) -> tuple[str, ...]:
    """ICM-5: the servers of the highest availability index in ``pool`` (one, unless ``tie_break`` is ``any``)."""
    if not pool:
        return ()
    best = max(servers[s].index for s in pool)
    equals = [s for s in pool if servers[s].index == best]
    if tie_break == "first":
        return (equals[0],)
    if tie_break == "last":
        return (equals[-1],)
    return tuple(equals)


def expectation(req: Request, tie_break: str = "any") -> Expectation:
    """ICM-1..6 applied to the state ``req`` found (the reference choice, independent of any router)."""
    snap = req.snapshot
    reachable = [s for s in snap.candidates(req.database) if snap.reachable(s, req.scheme)]
    available = [s for s in reachable if not snap.servers[s].states()]
    if available:
        return Expectation("available", tuple(available), lightest(available, snap.servers, tie_break))
    if reachable:
        return Expectation("last-resort", tuple(reachable), lightest(reachable, snap.servers, tie_break))
    return Expectation("none", (), ())


class _Folder:
    """Folds the cluster's state events in history order."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.layout: dict[str, tuple[str, ...]] = {}
        self.ports: dict[str, tuple[str, str]] = {}  # proxy name / "s1:http" -> (server, scheme)
        self.servers: dict[str, ServerState] = {}
        self.marks: dict[tuple[str, str], str] = {}
        self.down: set[str] = set()
        self.faults: dict[Any, tuple[str, str]] = {}
        self.evidence: dict[str, int] = {}
        self.seen_layout = False

    def port_of(self, name: str | None) -> tuple[str, str] | None:
        if not name:
            return None
        if name in self.ports:
            return self.ports[name]
        server, _, scheme = name.partition(":")
        return (server, scheme) if server in self.layout and scheme in ("http", "https") else None

    def apply(self, e: Event) -> bool:
        """Apply one event; True when it changed the cluster's state."""
        if e.type == "icm.cluster.up":
            self.seen_layout = True
            self.order = list(e.get("order") or [s["name"] for s in e.get("servers", [])])
            for s in e.get("servers", []):
                self.layout[s["name"]] = tuple(s.get("databases", ()))
                for scheme, port in (s.get("ports") or {}).items():
                    self.ports[port.get("proxy", "")] = (s["name"], scheme)
            self.evidence["layout"] = e.index
            return True
        if e.type == "icm.server.state":
            names = {k: k for k in ServerState.__dataclass_fields__} | {"index": "availability"}
            fields = {k: int(e.get(src)) for k, src in names.items() if e.get(src) is not None}
            if "index" not in fields:  # ICM-2: the index follows from the load and the capacity
                fields["index"] = availability_index(fields.get("sessions", 0), fields.get("capacity", 100))
            self.servers[e.get("server")] = ServerState(**fields)
            self.evidence[f"state:{e.get('server')}"] = e.index
            return True
        if e.type == "icm.replica.mark":
            key = (e.get("server"), e.get("database"))
            if e.get("mark"):
                self.marks[key] = e.get("mark")
            else:
                self.marks.pop(key, None)
            self.evidence[f"mark:{key[0]}/{key[1]}"] = e.index
            return True
        if e.type in ("icm.server.down", "icm.server.up"):
            (self.down.add if e.type == "icm.server.down" else self.down.discard)(e.get("server"))
            self.evidence[f"down:{e.get('server')}"] = e.index
            return True
        if e.type == "fault.start" and e.get("fault") == "partition":
            port = self.port_of(e.get("node")) or self.port_of((e.get("params") or {}).get("proxy"))
            if port is not None:
                self.faults[e.get("id")] = port
                self.evidence[f"cut:{port[0]}:{port[1]}"] = e.index
                return True
        if e.type == "fault.end" and e.get("id") in self.faults:
            port = self.faults.pop(e.get("id"))
            self.evidence[f"cut:{port[0]}:{port[1]}"] = e.index
            return True
        return False

    def snapshot(self) -> Snapshot:
        servers = {s: self.servers.get(s, ServerState()) for s in self.order}
        return Snapshot(list(self.order), dict(self.layout), servers, dict(self.marks), set(self.down),
                        set(self.faults.values()), sorted(self.evidence.values()))


@dataclass
class Model:
    """Every request of a history, the cluster layout and the raw events the checkers look at."""

    requests: list[Request]
    order: list[str]
    layout: dict[str, tuple[str, ...]]
    ports: dict[str, tuple[str, str]]  # proxy name -> (server, scheme)
    events: list[Event]
    seen_layout: bool
    downs: list[Event]
    router: Event | None = None  # the router's icm.router.start (its mode and declared limitations)

    def declares_probing(self) -> bool | None:
        """ICM-3: whether the router under test declares that it probes - it names no ``ICM-3``
        limitation in ``icm.router.start`` (None: no such event in the history)."""
        if self.router is None:
            return None
        return "ICM-3" not in (self.router.get("limitations") or {})


def build(events: Iterable[Event]) -> Model:
    """Fold a history into its requests (pure)."""
    events = sorted(events, key=lambda e: e.index)
    folder = _Folder()
    requests: dict[str, Request] = {}
    open_ids: set[str] = set()
    downs: list[Event] = []
    router: Event | None = None
    for e in events:
        if e.type == "icm.router.start":
            router = e
            continue
        if folder.apply(e):
            for rid in open_ids:
                requests[rid].changed_during = True
            if e.type == "icm.server.down":
                downs.append(e)
            continue
        rid = e.get("request_id")
        if e.type == "icm.client.request":
            requests[rid] = Request(rid, e.get("process", "?"), e.get("user"), e.get("scheme", "http"),
                                    e.get("database", ""), e.get("target", "router"), e.t, e.index, folder.snapshot())
            open_ids.add(rid)
        elif rid not in requests:
            continue
        elif e.type == "icm.client.redirect":
            requests[rid].redirect = e
            requests[rid].redirect_server = e.get("server")
        elif e.type == "icm.client.result":
            requests[rid].result = e
            open_ids.discard(rid)
        elif e.type == "icm.served":
            requests[rid].served.append(e)
        elif e.type == "icm.router.decision":
            requests[rid].decision = e
    return Model(list(requests.values()), folder.order, folder.layout, folder.ports, events, folder.seen_layout,
                 downs, router)
