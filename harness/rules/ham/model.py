"""What the HAM checkers read from a history (RULEBOOK HAM, docs/ha-managers.md): the recorded
manager settings (``ham.settings``: Patroni's, or pg_auto_failover's with ``manager:
pg_auto_failover``), each node's observations (``ham.probe``: the server's own view and the
manager's - Patroni's REST API answers or the pg_auto_failover monitor's state of the node - between
``t`` and ``t_end``), and the faults (``ham.kill``, ``ham.dcs.cut`` / ``ham.dcs.heal``,
``ham.monitor.cut`` / ``ham.monitor.heal``, ``ham.start``, ``ham.op``, ``ham.pause`` /
``ham.resume``, ``ham.maintenance``). Pure functions of the events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.history.core import Event
from harness.history.server_observation import ServerObservation

PROBE = "ham.probe"
SETTINGS = "ham.settings"
#: Events that may change a node's role (HAM-5 counts no disagreement across one).
ROLE_EVENTS = ("ham.op", "ham.kill", "ham.start", "ham.dcs.cut", "ham.dcs.heal", "ham.pause", "ham.resume",
               "ham.monitor.cut", "ham.monitor.heal", "ham.maintenance")
PATRONI = "patroni"
PGAF = "pg_auto_failover"
#: pg_auto_failover monitor states in which a node runs as the primary / as a standby (its "Failover
#: State Machine"); the others (draining, demoted, stop_replication, maintenance ...) claim neither.
PGAF_PRIMARY_STATES = ("single", "wait_primary", "primary", "join_primary", "apply_settings")
PGAF_STANDBY_STATES = ("secondary", "catchingup")
#: ``ham.kill`` ``what`` values that are a machine loss (the manager and its server killed).
MACHINE_LOSS = ("patroni+postgres", "pg_autoctl+postgres")


@dataclass(frozen=True)
class Settings:
    """The manager's settings as the run recorded them (seconds). Patroni's ``ttl``, ``loop_wait`` and
    ``retry_timeout`` are None for pg_auto_failover; ``failover_bound`` is HAM-3's documented bound
    computed from the recorded values (:func:`failover_bound`)."""

    ttl: float | None
    loop_wait: float | None
    retry_timeout: float | None
    synchronous_mode: bool
    manager: str = PATRONI
    failover_bound: float = 0.0
    bound_formula: str = ""


@dataclass(frozen=True)
class Observation(ServerObservation):
    """One ``ham.probe`` event (its server fields, :class:`ServerObservation`; then what the manager said)."""

    index: int
    api_primary: int | None
    api_replica: int | None
    streaming: bool | None
    monitor_state: str | None = None

    @property
    def writable(self) -> bool:
        """The server committed and acknowledged the harness's write."""
        return self.write == "ok"

    @property
    def up(self) -> bool:
        """The server answered at all."""
        return self.recovery is not None


def pgaf_failover_bound(fields: dict) -> float:
    """HAM-3's bound for pg_auto_failover from its recorded settings (ms): the monitor finds the lost
    primary unhealthy once its last report is older than ``node_considered_unhealthy_timeout`` and its
    health check failed (a period, then the check and each retry timing out with the retry delay
    between), then waits ``primary_demote_timeout`` before the promoted node may take writes
    (pg_autoctl(5), "Configuration"). The same formula as ``PgafSettings.failover_bound_s`` in
    harness/topology/pgaf_settings.py (tests/test_pgaf_checkers.py checks they agree)."""
    checks = (fields["health_check_period_ms"] + fields["health_check_timeout_ms"]
              + fields["health_check_max_retries"] * (fields["health_check_retry_delay_ms"]
                                                      + fields["health_check_timeout_ms"]))
    return (max(fields["node_considered_unhealthy_timeout_ms"], checks) + fields["primary_demote_timeout_ms"]) / 1000


PGAF_KEYS = ("health_check_period_ms", "health_check_timeout_ms", "health_check_max_retries",
             "health_check_retry_delay_ms", "node_considered_unhealthy_timeout_ms", "primary_demote_timeout_ms")


def settings(events: Sequence[Event]) -> Settings | None:
    """The last ``ham.settings`` of the history (None when the run recorded none, or a
    pg_auto_failover one lacks a setting the bound needs)."""
    found = [e for e in events if e.type == SETTINGS]
    if not found:
        return None
    e = found[-1]
    if e.get("manager") == PGAF:
        if any(not isinstance(e.get(k), (int, float)) for k in PGAF_KEYS):
            return None
        fields = {k: float(e.get(k)) for k in PGAF_KEYS}
        return Settings(None, None, None, bool(e.get("synchronous_mode")), PGAF, pgaf_failover_bound(fields),
                        "max(node_considered_unhealthy_timeout, health checks) + primary_demote_timeout")
    ttl, loop_wait = float(e.get("ttl")), float(e.get("loop_wait"))
    return Settings(ttl, loop_wait, float(e.get("retry_timeout")), bool(e.get("synchronous_mode")), PATRONI,
                    ttl + loop_wait, "ttl + loop_wait")


def observations(events: Sequence[Event], node: str | None = None) -> list[Observation]:
    """Every ``ham.probe`` (of ``node`` only, when given), in time order (ties by index)."""
    out = [Observation(node=str(e.get("node")), t=e.t, t_end=float(e.get("t_end", e.t)), recovery=e.get("recovery"),
                       write=e.get("write"), timeline=e.get("timeline"), index=e.index,
                       api_primary=e.get("api_primary"), api_replica=e.get("api_replica"),
                       streaming=e.get("streaming"), monitor_state=e.get("monitor_state"))
           for e in events if e.type == PROBE and (node is None or e.get("node") == node)]
    return sorted(out, key=lambda o: (o.t, o.index))


def of_type(events: Sequence[Event], type_: str) -> list[Event]:
    """The events of one type, in time order."""
    return sorted((e for e in events if e.type == type_), key=lambda e: (e.t, e.index))


def leader_cuts(events: Sequence[Event], kind: str) -> list[tuple[Event, Event | None]]:
    """Every cut of a leader's ``kind`` link (``ham.<kind>.cut`` with ``was_leader``; HAM-2 ``dcs``,
    HAM-7 ``monitor``), in time order, with its heal: the node's first ``ham.<kind>.heal`` at or
    after the cut (same timestamp included), or None while it lasts."""
    heals = of_type(events, f"ham.{kind}.heal")
    return [(cut, next((h for h in heals if h.get("node") == str(cut.get("node")) and h.t >= cut.t), None))
            for cut in of_type(events, f"ham.{kind}.cut") if cut.get("was_leader")]


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
