"""What a PostgreSQL server says of itself, for the HA-manager topologies (RULEBOOK HAM): whether it
is in recovery, its timeline, whether it streams, and whether a write the harness sends it commits
and is acknowledged - reached over its Unix socket, so the view does not depend on the links the
faults cut. Shared by the Patroni (:mod:`harness.topology.patroni_probe`) and pg_auto_failover
(:mod:`harness.topology.pgaf_probe`) observations, and :class:`Observer`, which records them as
``ham.probe`` events from a background thread.

``write`` is ``ok`` (committed and acknowledged), ``local-only`` (committed locally, but the wait
for the synchronous standby was cancelled: not acknowledged as durable), ``read-only`` (the server
is in recovery, nothing sent), ``error`` (refused or failed) or None (no connection)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg

#: How long one write may wait (for the synchronous standby, among others) before it is cancelled.
WRITE_TIMEOUT_MS = 1000


@dataclass(frozen=True)
class ServerView:
    """The server's own answers (None: not known, e.g. no connection)."""

    recovery: bool | None
    write: str | None
    timeline: int | None
    streaming: bool | None
    error: str | None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "no connection"


def server_view(socket_dir: Path, port: int, node: str) -> ServerView:
    """Ask the server of ``node`` (HAM-1/5/6 evidence): ``pg_is_in_recovery()``, its timeline, whether
    its walreceiver streams, and - out of recovery - whether an ``INSERT INTO ham_probe`` commits and
    is acknowledged within :data:`WRITE_TIMEOUT_MS`."""
    notices: list[str] = []
    try:
        conn = psycopg.connect(host=str(socket_dir), port=port, user="postgres", dbname="postgres",
                               autocommit=True, connect_timeout=2)
    except psycopg.Error as exc:
        return ServerView(None, None, None, None, _first_line(exc))
    try:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        recovery = bool(conn.execute("SELECT pg_is_in_recovery()").fetchone()[0])
        if recovery:
            row = conn.execute("SELECT received_tli, status FROM pg_stat_wal_receiver").fetchone()
            timeline = int(row[0]) if row and row[0] else None
            return ServerView(True, "read-only", timeline, bool(row and row[1] == "streaming"), None)
        wal = conn.execute("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()[0]
        timeline = int(wal[:8], 16)
        # statement_timeout ends before the commit's wait for the synchronous standby: a cancel
        # request after WRITE_TIMEOUT_MS ends that wait (the commit stays local: a WARNING notice)
        timer = threading.Timer(WRITE_TIMEOUT_MS / 1000, conn.cancel)
        timer.start()
        try:
            conn.execute("INSERT INTO ham_probe (node, t) VALUES (%s, %s)", (node, time.monotonic()))
        except psycopg.Error as exc:
            return ServerView(False, "error", timeline, None, _first_line(exc))
        finally:
            timer.cancel()
        if any("synchronous replication" in n for n in notices):
            return ServerView(False, "local-only", timeline, None, notices[-1][:200])
        return ServerView(False, "ok", timeline, None, None)
    except psycopg.Error as exc:
        return ServerView(None, None, None, None, _first_line(exc))
    finally:
        conn.close()


class Observation(Protocol):
    """What :class:`Observer` records: a start time and the ``ham.probe`` fields."""

    t: float

    def fields(self) -> dict[str, Any]: ...


class Observer:
    """Observes every node in turn, over and over, from a background thread, and records each
    observation as a ``ham.probe`` event (``t`` = its start) into ``history`` - the evidence of the
    HAM rules. ``probes`` returns, each round, one zero-argument probe per node (a node added or
    removed is followed). Use as a context manager."""

    def __init__(self, probes: Callable[[], list[Callable[[], Observation]]], history: Any,
                 pause: float = 0.05) -> None:
        self.probes, self.history, self.pause = probes, history, pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ham-observer", daemon=True)
        self.rounds = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            for probe in self.probes():
                p = probe()
                self.history.record("ham.probe", t=p.t, **p.fields())
            self.rounds += 1
            self._stop.wait(self.pause)

    def __enter__(self) -> Observer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
