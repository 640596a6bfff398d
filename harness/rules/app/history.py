"""How the APP checkers read a history (pure functions, no I/O).

Events of the app profile (written by :mod:`harness.workload.app`):

* ``op.invoke`` / ``op.ok`` / ``op.fail`` / ``op.info`` with ``process`` (a worker, ``app-N``),
  ``op_id``, ``f`` (``write`` or ``read``), ``value`` (the key written) and, once the pool handed a
  connection out, ``conn`` - that connection's local address ``host:port``, which the fault proxy
  saw as the ``client`` of its ``conn.accepted``;
* ``app.pool``: the pool's settings (``pool``, ``max_size``, ``overflow``, ``validates``,
  ``recovery_s``, ``client_proxies``: the names of the proxies clients connect through);
* ``app.writable``: the harness's own probe, through the same addresses, wrote after a fault.

The servers' and the network's view comes from the fault proxy (``conn.accepted`` with ``client``
and ``node``, ``conn.closed``), the topology (``role.change``, ``switchover.writable``,
``node.kill``/``node.stop``/``node.start``/``node.remove``) and the faults (``fault.start`` /
``fault.end``)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.history.core import Event

OUTCOMES = ("op.ok", "op.fail", "op.info")
REQUESTS = ("write", "read")


@dataclass(frozen=True)
class Request:
    """One request of the workload: its invocation and completion events."""

    process: str
    op_id: Any
    f: str
    invoke: Event | None
    done: Event

    @property
    def ok(self) -> bool:
        """True when the request succeeded (``op.ok``)."""
        return self.done.type == "op.ok"

    @property
    def t0(self) -> float:
        """When it was invoked (its completion time when no invocation was recorded)."""
        return (self.invoke or self.done).t

    @property
    def conn(self) -> str | None:
        """The local address of the connection it used, if the pool handed one out."""
        value = self.done.get("conn")
        return str(value) if value else None


@dataclass(frozen=True)
class Episode:
    """One fault episode: from a ``fault.start`` while no fault was open until every fault opened
    meanwhile ended; ``until`` is the next episode's start (or the history's end)."""

    start: Event
    end: Event | None
    until: float
    faults: tuple[str, ...]

    @property
    def label(self) -> str:
        """The faults of the episode, e.g. ``switchover`` or ``stop+stop``."""
        return "+".join(self.faults)

    def holds(self, t: float) -> bool:
        """True when ``t`` falls in [start, until)."""
        return self.start.t <= t < self.until


@dataclass(frozen=True)
class ProxyConn:
    """One connection the fault proxy accepted from a client."""

    conn_id: Any
    client: str
    proxy: str
    node: str | None
    accepted: Event
    closed: Event | None = None

    def open_at(self, t: float) -> bool:
        """True when the proxy held it open at ``t``."""
        return self.accepted.t <= t and (self.closed is None or t < self.closed.t)


def ordered(events: Iterable[Event]) -> list[Event]:
    """Events by index (the recording order)."""
    return sorted(events, key=lambda e: e.index)


def requests(events: list[Event]) -> list[Request]:
    """The workload's completed requests (f=write/read), in completion order."""
    invokes: dict[tuple[Any, Any], Event] = {}
    out: list[Request] = []
    for e in events:
        f = e.get("f")
        if f not in REQUESTS:
            continue
        key = (e.get("process"), e.get("op_id"))
        if e.type == "op.invoke":
            invokes[key] = e
        elif e.type in OUTCOMES:
            out.append(Request(str(e.get("process")), e.get("op_id"), f, invokes.pop(key, None), e))
    return out


def episodes(events: list[Event]) -> list[Episode]:
    """The fault episodes of the history (nested or overlapping faults are one episode)."""
    found: list[tuple[Event, Event | None, list[str]]] = []
    open_ids: set[Any] = set()
    for e in events:
        if e.type == "fault.start":
            if not open_ids:
                found.append((e, None, []))
            open_ids.add(e.get("id"))
            found[-1][2].append(str(e.get("fault")))
        elif e.type == "fault.end" and e.get("id") in open_ids:
            open_ids.discard(e.get("id"))
            if not open_ids and found:
                start, _, names = found[-1]
                found[-1] = (start, e, names)
    out: list[Episode] = []
    for i, (start, end, names) in enumerate(found):
        until = found[i + 1][0].t if i + 1 < len(found) else float("inf")
        out.append(Episode(start, end, until, tuple(names)))
    return out


def pool_settings(events: list[Event]) -> dict[str, Any]:
    """The fields of the last ``app.pool`` event (empty when none was recorded)."""
    found = [e for e in events if e.type == "app.pool"]
    return dict(found[-1].fields) if found else {}


@dataclass
class ProxyView:
    """The client connections the fault proxy saw, looked up by the client's local address."""

    conns: list[ProxyConn] = field(default_factory=list)
    _by_client: dict[str, list[ProxyConn]] = field(default_factory=dict)

    def lookup(self, client: str, t: float) -> ProxyConn | None:
        """The connection from ``client`` the proxy accepted last at or before ``t``."""
        found = self._by_client.get(client, [])
        times = [c.accepted.t for c in found]
        i = bisect.bisect_right(times, t)
        return found[i - 1] if i else None


def proxy_view(events: list[Event], client_proxies: Iterable[str] | None = None) -> ProxyView:
    """Every client connection of the fault proxy (only those of ``client_proxies`` when given:
    replication links run through proxies too)."""
    wanted = set(client_proxies) if client_proxies else None
    by_id: dict[tuple[Any, Any], ProxyConn] = {}
    order: list[tuple[Any, Any]] = []
    for e in events:
        if e.type == "conn.accepted" and (wanted is None or e.get("proxy") in wanted):
            key = (e.get("proxy"), e.get("conn_id"))
            by_id[key] = ProxyConn(e.get("conn_id"), str(e.get("client")), str(e.get("proxy")), e.get("node"), e)
            order.append(key)
        elif e.type == "conn.closed":
            key = (e.get("proxy"), e.get("conn_id"))
            if key in by_id and by_id[key].closed is None:
                c = by_id[key]
                by_id[key] = ProxyConn(c.conn_id, c.client, c.proxy, c.node, c.accepted, e)
    view = ProxyView([by_id[k] for k in order])
    for c in view.conns:
        view._by_client.setdefault(c.client, []).append(c)
    for found in view._by_client.values():
        found.sort(key=lambda c: (c.accepted.t, c.accepted.index))
    return view
