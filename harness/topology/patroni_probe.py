"""One observation of one node of a Patroni topology, the evidence of the HAM rules: what the
server itself says (``pg_is_in_recovery()``, its timeline, whether a write it is sent commits and
is acknowledged) and what Patroni's REST API answers (``/primary``, ``/replica``). The server is
reached over its Unix socket and the API on its own listen address, so the observation does not
depend on the links the faults cut.

``write`` is ``ok`` (committed and acknowledged), ``local-only`` (committed locally, but the wait
for the synchronous standby was cancelled: not acknowledged as durable), ``read-only`` (the server
is in recovery, nothing sent), ``error`` (refused or failed) or None (no connection)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from harness.topology import patroni_rest as rest

#: How long one write may wait (for the synchronous standby, among others) before it is cancelled.
WRITE_TIMEOUT_MS = 1000


@dataclass(frozen=True)
class Probe:
    """One observation of ``node`` between ``t`` and ``t_end`` (time.monotonic())."""

    node: str
    t: float
    t_end: float
    recovery: bool | None
    write: str | None
    timeline: int | None
    api_primary: int | None
    api_replica: int | None
    streaming: bool | None = None
    error: str | None = None

    def fields(self) -> dict[str, Any]:
        """The ``ham.probe`` event's fields (``t`` is the event's own)."""
        return {k: v for k, v in asdict(self).items() if k != "t"}

    def summary(self) -> str:
        """One line for error messages."""
        role = {True: "replica", False: "primary", None: "down"}[self.recovery]
        return f"{self.node} {role} write={self.write} /primary={self.api_primary} /replica={self.api_replica}"


def _server_view(socket_dir: Path, port: int, node: str) -> tuple[bool | None, str | None, int | None,
                                                                     bool | None, str | None]:
    notices: list[str] = []
    try:
        conn = psycopg.connect(host=str(socket_dir), port=port, user="postgres", dbname="postgres",
                               autocommit=True, connect_timeout=2)
    except psycopg.Error as exc:
        return None, None, None, None, str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "no connection"
    try:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        recovery = bool(conn.execute("SELECT pg_is_in_recovery()").fetchone()[0])
        if recovery:
            row = conn.execute("SELECT received_tli, status FROM pg_stat_wal_receiver").fetchone()
            timeline = int(row[0]) if row and row[0] else None
            return True, "read-only", timeline, bool(row and row[1] == "streaming"), None
        wal = conn.execute("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()[0]
        timeline = int(wal[:8], 16)
        # statement_timeout ends before the commit's wait for the synchronous standby: a cancel
        # request after WRITE_TIMEOUT_MS ends that wait (the commit stays local: a WARNING notice)
        timer = threading.Timer(WRITE_TIMEOUT_MS / 1000, conn.cancel)
        timer.start()
        try:
            conn.execute("INSERT INTO ham_probe (node, t) VALUES (%s, %s)", (node, time.monotonic()))
        except psycopg.Error as exc:
            return False, "error", timeline, None, str(exc).strip().splitlines()[0][:200]
        finally:
            timer.cancel()
        if any("synchronous replication" in n for n in notices):
            return False, "local-only", timeline, None, notices[-1][:200]
        return False, "ok", timeline, None, None
    except psycopg.Error as exc:
        return None, None, None, None, str(exc).strip().splitlines()[0][:200]
    finally:
        conn.close()


def probe_node(node: str, socket_dir: Path, port: int, api_address: str) -> Probe:
    """Observe ``node`` once: the server's view, then the REST API's two health checks."""
    t0 = time.monotonic()
    recovery, write, timeline, streaming, error = _server_view(socket_dir, port, node)
    primary = rest.status(api_address, "/primary")
    replica = rest.status(api_address, "/replica")
    return Probe(node, t0, time.monotonic(), recovery, write, timeline, primary, replica, streaming, error)


class Observer:
    """Observes every node in turn, over and over, from a background thread, and records each
    observation as a ``ham.probe`` event (``t`` = its start) into ``history`` - the evidence of
    HAM-1/2/3/5/6. Use as a context manager; ``nodes`` returns ``(name, socket_dir, port,
    api_address)`` for every node each round (a node added or removed is followed)."""

    def __init__(self, nodes: Callable[[], list[tuple[str, Path, int, str]]], history: Any,
                 pause: float = 0.05) -> None:
        self.nodes, self.history, self.pause = nodes, history, pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ham-observer", daemon=True)
        self.rounds = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, socket_dir, port, api in self.nodes():
                p = probe_node(name, socket_dir, port, api)
                self.history.record("ham.probe", t=p.t, **p.fields())
            self.rounds += 1
            self._stop.wait(self.pause)

    def __enter__(self) -> Observer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
