"""PER-1 (keepalive on switchover) and DUR-1 through the PER client under test.

The seed's measurement: sysbench, 20 tables x 10,000 rows, 20 threads; 100 % of the connections kept
across a primary switchover. Here: the OLTP workload (point selects, updates, short transactions;
20 sessions) through the client under test while ``faults.switchover()`` swaps the pair's roles
(coordinated with the client when it coordinates). The checker compares each session's front
connection before and after every switchover and counts client-visible errors."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from harness import Check, Faults, History, Pair
from harness.clients.persistent import PersistentClient
from harness.errors import HarnessError
from harness.rules.durability import check_no_acknowledged_write_lost
from harness.rules.persistent import check_keepalive_on_switchover
from harness.workload import final_read
from harness.workload.keywriter import TABLE, ensure_table
from harness.workload.oltp import OltpConfig, OltpWorkload, session_class


@pytest.mark.rule("PER-1")
@pytest.mark.topology(mode="sync")
def test_per1_all_connections_kept_across_one_switchover(pair: Pair, faults: Faults, history: History, check: Check,
                                                         per_client: PersistentClient) -> None:
    """PER-1: 20 OLTP sessions (20 x 10,000 rows) across one switchover: 100 % kept, 0 errors."""
    workload = OltpWorkload(per_client.dsn(), history, OltpConfig(op_timeout=15), engine=pair.engine.name)
    workload.load(pair.principal.dsn())
    with workload:
        time.sleep(0.8)
        faults.switchover()
        time.sleep(0.8)
    check(check_keepalive_on_switchover(history.events(), min_keep_rate=1.0, max_errors=0))


@pytest.mark.rule("PER-1")
@pytest.mark.topology(mode="sync")
def test_per1_all_connections_kept_across_ten_switchovers(pair: Pair, faults: Faults, history: History, check: Check,
                                                          per_client: PersistentClient) -> None:
    """PER-1: 20 OLTP sessions across 10 consecutive switchovers: 100 % kept every time, 0 errors."""
    workload = OltpWorkload(per_client.dsn(), history, OltpConfig(op_timeout=15), engine=pair.engine.name)
    workload.load(pair.principal.dsn())
    with workload:
        for _ in range(10):
            time.sleep(0.3)
            faults.switchover()
        time.sleep(0.5)
    check(check_keepalive_on_switchover(history.events(), min_keep_rate=1.0, max_errors=0))


class _Writer:
    """A session inserting keys ``start, start+1, ...`` through the client (``op.ok f=write value=key``;
    a write whose connection broke is ``op.info`` and not judged by DUR-1); it reconnects after a loss
    and records every error instead of stopping on it."""

    def __init__(self, dsn: str, history: History, process: str, start: int, engine: str = "postgres") -> None:
        self.session = session_class(engine)(dsn, history, process, op_timeout=10)
        self.keys = itertools.count(start)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name=process, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            key = next(self.keys)
            ok, _ = self.session.op(
                "write", lambda c, k=key: c.execute(f"INSERT INTO {TABLE} (k, process) VALUES (%s, %s)",
                                                    (k, self.session.process)) and k,
                value=key, write=True)
            if not ok:
                self.stop.wait(0.05)
        self.session.close()

    def __enter__(self) -> _Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.mark.rule("DUR-1")
@pytest.mark.topology(mode="sync")
def test_dur1_no_acknowledged_commit_lost_through_the_client(pair: Pair, faults: Faults, history: History, check: Check,
                                                             per_client: PersistentClient) -> None:
    """DUR-1: two writers through the PER client under test across three (coordinated) switchovers of
    a synchronous pair; every acknowledged commit is on the principal afterwards (read directly)."""
    engine = pair.engine.name
    ensure_table(pair.dsn(), engine)
    with _Writer(per_client.dsn(), history, "writer-1", 1, engine), \
            _Writer(per_client.dsn(), history, "writer-2", 1_000_000, engine):
        for _ in range(3):
            time.sleep(0.3)
            faults.switchover()
        time.sleep(0.3)
    final_read(pair.dsn(), history, engine=engine)
    acknowledged = [e for e in history.events("op.ok") if e.get("f") == "write"]
    if len(acknowledged) <= 10:
        raise HarnessError(f"DUR-1 cannot be judged: only {len(acknowledged)} write(s) acknowledged through the client")
    check(check_no_acknowledged_write_lost(history.events(), mode=pair.mode))
