"""One observation of one data node of a pg_auto_failover topology, the evidence of the HAM rules:
what the server itself says (:func:`harness.topology.server_probe.server_view`) and what the monitor
says of it - the state the node's keeper last reported (``reportedstate``), the state the monitor
assigned it (``goalstate``) and the monitor's health check result (``health``), read from
``pgautofailover.node`` over the monitor's Unix socket (the harness's own view, not through a proxy).

The ``ham.probe`` event has the fields of a Patroni observation with ``api_primary`` /
``api_replica`` empty and ``monitor_state``, ``monitor_goal``, ``monitor_health`` added."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from harness.history.server_observation import ServerObservation
from harness.topology.pgaf_conf import MONITOR_DB
from harness.topology.server_probe import server_view


@dataclass(frozen=True)
class MonitorView:
    """The monitor's row of one node (None: the monitor did not answer)."""

    reported: str | None
    goal: str | None
    health: int | None
    reported_at: float | None = None  # when the node's keeper last reported (epoch seconds)


@dataclass(frozen=True)
class PgafProbe(ServerObservation):
    """One observation of ``node`` between ``t`` and ``t_end`` (time.monotonic()): the server's, then
    the monitor's row of it."""

    streaming: bool | None
    monitor_state: str | None
    monitor_goal: str | None
    monitor_health: int | None
    error: str | None = None
    api_primary: int | None = None
    api_replica: int | None = None

    def summary(self) -> str:
        """One line for error messages."""
        return f"{self.node} {self.role} write={self.write} monitor={self.monitor_state}/{self.monitor_goal}"


def monitor_states(socket_dir: Path, port: int) -> dict[str, MonitorView]:
    """Every node's row in the monitor (``pgautofailover.node``), by node name; empty when the
    monitor does not answer."""
    try:
        with psycopg.connect(host=str(socket_dir), port=port, user="postgres", dbname=MONITOR_DB,
                             autocommit=True, connect_timeout=2) as conn:
            rows = conn.execute("SELECT nodename, reportedstate::text, goalstate::text, health, "
                                "extract(epoch FROM reporttime)::float8 FROM pgautofailover.node").fetchall()
    except psycopg.Error:
        return {}
    return {str(r[0]): MonitorView(r[1], r[2], r[3], r[4]) for r in rows}


def probe_node(node: str, socket_dir: Path, port: int, monitor_port: int) -> PgafProbe:
    """Observe ``node`` once: the server's view, then the monitor's row of it."""
    t0 = time.monotonic()
    v = server_view(socket_dir, port, node)
    m = monitor_states(socket_dir, monitor_port).get(node, MonitorView(None, None, None))
    return PgafProbe(node, t0, time.monotonic(), v.recovery, v.write, v.timeline, v.streaming,
                     m.reported, m.goal, m.health, v.error)
