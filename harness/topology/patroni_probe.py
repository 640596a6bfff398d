"""One observation of one node of a Patroni topology, the evidence of the HAM rules: what the
server itself says (``pg_is_in_recovery()``, its timeline, whether a write it is sent commits and
is acknowledged) and what Patroni's REST API answers (``/primary``, ``/replica``). The server is
reached over its Unix socket (:mod:`harness.topology.server_probe`) and the API on its own listen
address, so the observation does not depend on the links the faults cut.

``write`` is ``ok`` (committed and acknowledged), ``local-only`` (committed locally, but the wait
for the synchronous standby was cancelled: not acknowledged as durable), ``read-only`` (the server
is in recovery, nothing sent), ``error`` (refused or failed) or None (no connection)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from harness.history.server_observation import ServerObservation
from harness.topology import patroni_rest as rest
from harness.topology.server_probe import WRITE_TIMEOUT_MS, Observer, server_view

__all__ = ["WRITE_TIMEOUT_MS", "Observer", "Probe", "observer", "probe_node"]


@dataclass(frozen=True)
class Probe(ServerObservation):
    """One observation of ``node`` between ``t`` and ``t_end`` (time.monotonic()): the server's, then
    Patroni's REST API's health checks."""

    api_primary: int | None
    api_replica: int | None
    streaming: bool | None = None
    error: str | None = None

    def summary(self) -> str:
        """One line for error messages."""
        return f"{self.node} {self.role} write={self.write} /primary={self.api_primary} /replica={self.api_replica}"


def probe_node(node: str, socket_dir: Path, port: int, api_address: str) -> Probe:
    """Observe ``node`` once: the server's view, then the REST API's two health checks."""
    t0 = time.monotonic()
    v = server_view(socket_dir, port, node)
    primary = rest.status(api_address, "/primary")
    replica = rest.status(api_address, "/replica")
    return Probe(node, t0, time.monotonic(), v.recovery, v.write, v.timeline, primary, replica, v.streaming, v.error)


def observer(nodes: Callable[[], list[tuple[str, Path, int, str]]], history: Any, pause: float = 0.05) -> Observer:
    """An :class:`~harness.topology.server_probe.Observer` of Patroni nodes (HAM-1/2/3/5/6 evidence):
    ``nodes`` returns ``(name, socket_dir, port, api_address)`` for every node each round."""
    return Observer(lambda: [partial(probe_node, *n) for n in nodes()], history, pause)
