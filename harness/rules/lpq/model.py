"""The LPQ attempt model (RULEBOOK LPQ-1…6): one :class:`HostListOpen` per ``open`` a client made
with a host list, and the connection attempts the *network* saw during it. Pure, no I/O.

An open is the client's ``op.invoke`` (``f="open"``; ``value.hosts`` = the listed hosts as the
client-facing ``host:port`` addresses, in order; ``connect_timeout``, ``target_session_attrs``,
``load_balance_hosts``) and its end (``op.ok`` / ``op.fail`` / ``op.info`` of the same process and
``op_id``; none: *pending*, it never returned). Its attempts are the fault proxies' ``conn.accepted``
and the capture's ``conn.refused`` events whose ``listen`` is a listed host, from the invoke to the
end (a pending open: to the next open's invoke, or the end of the history) - the client's own words
are not needed, so a driver that cannot report its attempts is judged all the same. Suites open one
connection at a time, so an attempt belongs to exactly one open.

The servers' view comes from two suite events: ``lpq.servers`` (before the opens: each listed
host's node, ``in_recovery``, ``read_only``, ``reachable``) and ``lpq.landed`` (after a successful
open, read through the client's own connection: ``pg_is_in_recovery()``, ``inet_server_port()`` →
``node``/``listen``, ``default_transaction_read_only``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.history.core import Event

#: Seconds an attempt may be stamped outside its open (the proxies' and the capture's clocks are the
#: same monotonic clock; this only absorbs the real Toxiproxy's millisecond log stamps).
MATCH_SLACK = 0.005
#: libpq raises a ``connect_timeout`` below 2 s to 2 s (LPQ-3).
MIN_CONNECT_TIMEOUT = 2.0
END_TYPES = ("op.ok", "op.fail", "op.info")
AUTH_MARKERS = ("password authentication failed", "28p01", "authentication failed", "28000")


@dataclass(frozen=True)
class Attempt:
    """One TCP connection attempt of the client at a listed host, as the network saw it."""

    host: str  # listen host:port
    position: int  # index in the host list
    t: float
    kind: str  # "accepted" (the proxy took it) / "refused" (RST, from the capture)
    index: int  # the event
    node: str | None = None
    closed_t: float | None = None  # conn.closed of an accepted attempt (None: still open / never)
    closed_by: str | None = None


@dataclass(frozen=True)
class Landed:
    """Where a successful open's session is, as the server says (``lpq.landed``)."""

    node: str | None
    host: str | None
    in_recovery: bool | None
    read_only: bool | None
    index: int


@dataclass
class HostListOpen:
    """One open with a host list and what the network and the servers saw of it."""

    process: Any
    op_id: Any
    invoke: Event
    end: Event | None
    window_end: float
    hosts: list[str]
    connect_timeout: float | None
    target_session_attrs: str
    load_balance_hosts: str
    attempts: list[Attempt] = field(default_factory=list)
    landed: Landed | None = None
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> lpq.servers entry

    @property
    def outcome(self) -> str:
        """``ok`` / ``fail`` / ``info`` / ``pending``."""
        return "pending" if self.end is None else self.end.type.split(".", 1)[1]

    @property
    def error(self) -> str:
        """The open's error text ('' when it did not fail)."""
        return "" if self.end is None else str(self.end.get("error") or "")

    @property
    def auth_failed(self) -> bool:
        """Whether the open failed with an authentication error (LPQ-5's case)."""
        text = self.error.lower()
        return self.outcome != "ok" and any(m in text for m in AUTH_MARKERS)

    def name(self, host: str) -> str:
        """``n2 (2nd listed, 127.0.0.1:5433)``: a host in words."""
        pos = self.hosts.index(host) if host in self.hosts else -1
        node = (self.servers.get(host) or {}).get("node") or next(
            (a.node for a in self.attempts if a.host == host and a.node), None)
        return f"{node or host} ({ordinal(pos + 1)} listed)"

    def label(self) -> str:
        """``open 3 of app``."""
        return f"open {self.op_id} of {self.process}"

    def first_pass(self) -> list[Attempt]:
        """The attempts up to the first one that goes back to a host listed earlier (or the same)."""
        out: list[Attempt] = []
        for a in self.attempts:
            if out and a.position <= out[-1].position:
                break
            out.append(a)
        return out

    def effective_timeout(self, minimum: float = MIN_CONNECT_TIMEOUT) -> float | None:
        """The per-host timeout libpq would use (``None``: no timeout given, or 0 = wait forever)."""
        if self.connect_timeout is None or self.connect_timeout <= 0:
            return None
        return max(minimum, float(self.connect_timeout))

    def duration(self) -> float:
        """Seconds from the invoke to the end (a pending open: to its window's end)."""
        return (self.end.t if self.end is not None else self.window_end) - self.invoke.t


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th …"""
    return f"{n}{'tsnrhtdd'[(n // 10 % 10 != 1) * (n % 10 < 4) * n % 10::4]}"


def _num(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def host_list_opens(events: Sequence[Event], process: Any = None) -> list[HostListOpen]:
    """Every open with a host list in the history (of ``process`` when given), in invoke order,
    with its attempts, landing and the servers' roles."""
    events = sorted(events, key=lambda e: (e.t, e.index))
    last_t = events[-1].t if events else 0.0
    ends = {(e.get("process"), e.get("op_id")): e for e in events
            if e.type in END_TYPES and e.get("f") == "open"}
    invokes = [e for e in events if e.type == "op.invoke" and e.get("f") == "open"
               and isinstance(e.get("value"), dict) and isinstance(e.get("value").get("hosts"), list)]
    closed = {(e.get("proxy"), e.get("conn_id")): e for e in events if e.type == "conn.closed"}
    landed = {(e.get("process"), e.get("op_id")): e for e in events if e.type == "lpq.landed"}
    servers_events = [e for e in events if e.type == "lpq.servers"]
    opens: list[HostListOpen] = []
    for k, inv in enumerate(invokes):
        value = inv.get("value")
        end = ends.get((inv.get("process"), inv.get("op_id")))
        nxt = invokes[k + 1].t if k + 1 < len(invokes) else math.inf
        window_end = end.t if end is not None else min(nxt, last_t)
        o = HostListOpen(
            process=inv.get("process"), op_id=inv.get("op_id"), invoke=inv, end=end, window_end=window_end,
            hosts=[str(h) for h in value["hosts"]], connect_timeout=_num(value.get("connect_timeout")),
            target_session_attrs=str(value.get("target_session_attrs") or "any"),
            load_balance_hosts=str(value.get("load_balance_hosts") or "disable"))
        srv = [e for e in servers_events if e.t <= inv.t]
        if srv:
            o.servers = {str(h.get("listen")): h for h in srv[-1].get("hosts") or [] if isinstance(h, dict)}
        lo, hi = inv.t - MATCH_SLACK, window_end + MATCH_SLACK
        for e in events:
            if e.type not in ("conn.accepted", "conn.refused") or not lo <= e.t <= hi:
                continue
            listen = str(e.get("listen"))
            if listen not in o.hosts:
                continue
            c = closed.get((e.get("proxy"), e.get("conn_id"))) if e.type == "conn.accepted" else None
            o.attempts.append(Attempt(listen, o.hosts.index(listen), e.t,
                                      "accepted" if e.type == "conn.accepted" else "refused", e.index,
                                      e.get("node"), None if c is None else c.t,
                                      None if c is None else c.get("by")))
        land = landed.get((o.process, o.op_id))
        if land is not None:
            o.landed = Landed(land.get("node"), land.get("listen"), land.get("in_recovery"),
                              land.get("read_only"), land.index)
        if process is None or o.process == process:
            opens.append(o)
    return opens


@dataclass(frozen=True)
class SilentWindow:
    """A stretch in which a node's proxy answered nothing in time: a ``partition how=blackhole``, or a
    ``latency`` of at least the open's timeout (LPQ-3)."""

    node: str
    start: float
    end: float
    what: str
    ms: float  # math.inf for a black hole
    index: int


def silent_windows(events: Sequence[Event]) -> list[SilentWindow]:
    """Black holes and latencies of the history, by node."""
    starts: dict[Any, Event] = {}
    ends: dict[Any, float] = {}
    for e in events:
        if e.type == "fault.start" and e.get("fault") in ("partition", "latency"):
            starts[e.get("id", e.index)] = e
        elif e.type == "fault.end" and e.get("fault") in ("partition", "latency"):
            ends.setdefault(e.get("id"), e.t)
    out = []
    for key, e in starts.items():
        params = e.get("params") or {}
        if e.get("fault") == "partition" and params.get("how", "blackhole") != "blackhole":
            continue
        ms = math.inf if e.get("fault") == "partition" else float(params.get("ms") or 0)
        out.append(SilentWindow(str(e.get("node")), e.t, ends.get(key, math.inf),
                                "black hole" if math.isinf(ms) else f"latency {ms:g} ms", ms, e.index))
    return out


def reset_windows(events: Sequence[Event]) -> list[SilentWindow]:
    """The ``partition how=reset`` stretches of the history, by node (LPQ-2's interpretation)."""
    starts: dict[Any, Event] = {}
    ends: dict[Any, float] = {}
    for e in events:
        if e.type == "fault.start" and e.get("fault") == "partition" and (e.get("params") or {}).get("how") == "reset":
            starts[e.get("id", e.index)] = e
        elif e.type == "fault.end" and e.get("fault") == "partition":
            ends.setdefault(e.get("id"), e.t)
    return [SilentWindow(str(e.get("node")), e.t, ends.get(k, math.inf), "reset", 0.0, e.index)
            for k, e in starts.items()]


def acceptable(attrs: str, in_recovery: bool | None, read_only: bool | None) -> bool | None:
    """Whether a server with these properties is acceptable for ``target_session_attrs`` (LPQ-4);
    ``prefer-standby`` accepts every server (the preference is judged separately); None: unknown."""
    if attrs in ("any", "prefer-standby"):
        return True
    if in_recovery is None or (attrs in ("read-write", "read-only") and read_only is None):
        return None
    ro = bool(in_recovery) or bool(read_only)
    return {"read-write": not ro, "read-only": ro, "primary": not in_recovery,
            "standby": bool(in_recovery)}.get(attrs)
