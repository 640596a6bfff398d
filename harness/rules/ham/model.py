"""What the HAM checkers read from a history (RULEBOOK HAM, docs/ha-managers.md): the recorded
Patroni settings (``ham.settings``), each node's observations (``ham.probe``: the server's own view
and the REST API's answers, between ``t`` and ``t_end``), and the faults (``ham.kill``,
``ham.dcs.cut`` / ``ham.dcs.heal``, ``ham.start``, ``ham.op``, ``ham.pause`` / ``ham.resume``).
Pure functions of the events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.history.core import Event

PROBE = "ham.probe"
SETTINGS = "ham.settings"
#: Events that may change a node's role (HAM-5 counts no disagreement across one).
ROLE_EVENTS = ("ham.op", "ham.kill", "ham.start", "ham.dcs.cut", "ham.dcs.heal", "ham.pause", "ham.resume")


@dataclass(frozen=True)
class Settings:
    """Patroni's timing settings as the run recorded them (seconds)."""

    ttl: float
    loop_wait: float
    retry_timeout: float
    synchronous_mode: bool


@dataclass(frozen=True)
class Observation:
    """One ``ham.probe`` event."""

    index: int
    node: str
    t: float
    t_end: float
    recovery: bool | None
    write: str | None
    timeline: int | None
    api_primary: int | None
    api_replica: int | None
    streaming: bool | None

    @property
    def writable(self) -> bool:
        """The server committed and acknowledged the harness's write."""
        return self.write == "ok"

    @property
    def up(self) -> bool:
        """The server answered at all."""
        return self.recovery is not None


def settings(events: Sequence[Event]) -> Settings | None:
    """The last ``ham.settings`` of the history (None when the run recorded none)."""
    found = [e for e in events if e.type == SETTINGS]
    if not found:
        return None
    e = found[-1]
    return Settings(float(e.get("ttl")), float(e.get("loop_wait")), float(e.get("retry_timeout")),
                    bool(e.get("synchronous_mode")))


def observations(events: Sequence[Event], node: str | None = None) -> list[Observation]:
    """Every ``ham.probe`` (of ``node`` only, when given), in time order (ties by index)."""
    out = [Observation(e.index, str(e.get("node")), e.t, float(e.get("t_end", e.t)), e.get("recovery"),
                       e.get("write"), e.get("timeline"), e.get("api_primary"), e.get("api_replica"),
                       e.get("streaming"))
           for e in events if e.type == PROBE and (node is None or e.get("node") == node)]
    return sorted(out, key=lambda o: (o.t, o.index))


def of_type(events: Sequence[Event], type_: str) -> list[Event]:
    """The events of one type, in time order."""
    return sorted((e for e in events if e.type == type_), key=lambda e: (e.t, e.index))


@dataclass(frozen=True)
class WriteStretch:
    """Consecutive observations of one node that all accepted the harness's write: the node was seen
    accepting writes from ``start`` (the first one's start) to ``end`` (the last one's end)."""

    node: str
    start: float
    end: float
    first: int  # event index
    last: int


def write_stretches(obs: Sequence[Observation]) -> list[WriteStretch]:
    """Per node, the maximal runs of writable observations (any other observation of that node ends one)."""
    out: list[WriteStretch] = []
    by_node: dict[str, list[Observation]] = {}
    for o in obs:
        by_node.setdefault(o.node, []).append(o)
    for node, seq in by_node.items():
        cur: list[Observation] = []
        for o in [*seq, None]:
            if o is not None and o.writable:
                cur.append(o)
                continue
            if cur:
                out.append(WriteStretch(node, cur[0].t, cur[-1].t_end, cur[0].index, cur[-1].index))
                cur = []
    return sorted(out, key=lambda s: (s.start, s.first))
