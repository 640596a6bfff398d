"""PER-4 (drain window) and the sessions that cannot be kept: PER-5 temporary tables, PER-6 partial
result, PER-7 open transaction, PER-8 cursor / COPY. Windows are short (``@pytest.mark.windows``).

Each busy session works in a thread started just before ``faults.switchover()`` (which blocks while
the client drains), on a timer measured from the switchover's start. Afterwards every session runs a
probe (``SELECT 1``) on its connection: a session that was closed fails it (``conn_lost``), a kept one
succeeds - the checkers judge from these recorded operations."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness import Check, Faults, History, Pair
from harness.clients.persistent import PersistentClient
from harness.errors import HarnessError
from harness.rules.persistent import (
    check_cursor_not_kept,
    check_drain_window,
    check_open_transaction_not_kept,
    check_partial_result_not_kept,
    check_temp_tables_not_kept,
)
from harness.workload.oltp import SessionFactory, TrackedSession


def _later(delay: float, action: Callable[[], object]) -> threading.Thread:
    """Run ``action`` ``delay`` seconds from now in a thread."""
    def run() -> None:
        time.sleep(delay)
        action()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _probe(*sessions: TrackedSession) -> None:
    for s in sessions:
        s.execute("probe", "SELECT 1")


def _begin(s: TrackedSession, table: str, key: int) -> None:
    if not (s.execute("begin", "BEGIN", fetch=False)[0]
            and s.execute("write", f"INSERT INTO {table} VALUES ({key})", fetch=False, write=True)[0]):
        raise HarnessError(f"{s.process}: BEGIN; INSERT failed before any fault ({s.last_error})")


def _table(pair: Pair, name: str) -> str:
    import psycopg

    if pair.engine.name != "postgres":
        from harness.workload.mysql_oltp import create_table

        return create_table(pair.principal.dsn(), name)

    with psycopg.connect(pair.principal.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}")
        conn.execute(f"CREATE TABLE {name} (k int)")
    return name


@pytest.mark.rule("PER-4", "PER-7")
@pytest.mark.topology(mode="sync")
@pytest.mark.windows(drain=2.0, recovery=3.0)
def test_per4_transaction_ending_in_drain_window_kept_other_closed(pair: Pair, faults: Faults, history: History,
                                                                   check: Check, per_client: PersistentClient,
                                                                   session_factory: SessionFactory,
                                                                   windows: tuple[float, float]) -> None:
    """PER-4: a transaction that commits 0.5 s into a 2 s drain window is kept; one that commits only
    after 3.5 s is closed (PER-7)."""
    drain, _ = windows
    table = _table(pair, "per4_t")
    quick, slow = session_factory("txn-quick"), session_factory("txn-slow")
    _begin(quick, table, 1)
    _begin(slow, table, 2)
    threads = [_later(0.5, lambda: quick.execute("commit", "COMMIT", fetch=False, write=True)),
               _later(drain + 1.5, lambda: slow.execute("commit", "COMMIT", fetch=False, write=True))]
    faults.switchover()
    for t in threads:
        t.join(30)
    _probe(quick, slow)
    check([check_drain_window(history.events(), drain_window=drain),
           check_open_transaction_not_kept(history.events(), drain_window=drain)])


@pytest.mark.rule("PER-7")
@pytest.mark.topology(mode="sync")
@pytest.mark.windows(drain=1.0, recovery=3.0)
def test_per7_open_transaction_beyond_window_closed(pair: Pair, faults: Faults, history: History, check: Check,
                                                    per_client: PersistentClient, session_factory: SessionFactory,
                                                    windows: tuple[float, float]) -> None:
    """PER-7: ``BEGIN; INSERT ...`` open when the switchover begins and idle in transaction beyond the
    drain window: the session is closed (its COMMIT fails, the connection is gone)."""
    drain, _ = windows
    table = _table(pair, "per7_t")
    sessions = [session_factory(f"txn-open-{i}") for i in range(3)]
    for i, s in enumerate(sessions):
        _begin(s, table, i)
    threads = [_later(drain + 1.0, lambda s=s: s.execute("commit", "COMMIT", fetch=False, write=True))
               for s in sessions]
    faults.switchover()
    for t in threads:
        t.join(30)
    _probe(*sessions)
    check(check_open_transaction_not_kept(history.events(), drain_window=drain))


@pytest.mark.rule("PER-5")
@pytest.mark.topology(mode="sync")
def test_per5_session_with_temp_table_closed(pair: Pair, faults: Faults, history: History, check: Check,
                                             per_client: PersistentClient, session_factory: SessionFactory) -> None:
    """PER-5: a session holding a temporary table at switchover time is closed."""
    sessions = [session_factory(f"temp-{i}") for i in range(2)]
    for i, s in enumerate(sessions):
        s.set_state(f"tmp_{i}", "temp_table", f"CREATE TEMPORARY TABLE per5_tmp_{i} (k int)", "present")
        s.execute("temp:write", f"INSERT INTO per5_tmp_{i} VALUES (1)", fetch=False)
    faults.switchover()
    for i, s in enumerate(sessions):
        s.execute("temp:read", f"SELECT count(*) FROM per5_tmp_{i}")
    _probe(*sessions)
    check(check_temp_tables_not_kept(history.events()))


#: The large result each engine streams for PER-6, and how its driver reads it row by row.
PER6_SELECT = {"postgres": "SELECT g, repeat('x', 200) FROM generate_series(1, 300000) g",
               "mariadb": "SELECT seq, repeat('x', 200) FROM seq_1_to_300000"}


def _stream_rows(conn: Any, engine: str) -> Iterator[Any]:
    """The rows of :data:`PER6_SELECT` as the server delivers them (psycopg's ``stream``, PyMySQL-style
    unbuffered cursor on MariaDB), never buffered whole by the client."""
    if engine == "postgres":
        yield from conn.cursor().stream(PER6_SELECT[engine])
        return
    cur = conn.cursor(unbuffered=True)
    cur.execute(PER6_SELECT[engine])
    yield from cur


@pytest.mark.rule("PER-6")
@pytest.mark.topology(mode="sync")
@pytest.mark.engines("postgres", "mariadb")
@pytest.mark.windows(drain=1.0, recovery=3.0)
def test_per6_partial_result_closed(pair: Pair, faults: Faults, history: History, check: Check,
                                    per_client: PersistentClient, session_factory: SessionFactory,
                                    windows: tuple[float, float]) -> None:
    """PER-6: a large SELECT still being delivered (read slowly, ≈6 s in all) when the switchover fires
    and not finished within the 1 s drain window: the session is closed (both engines)."""
    engine = pair.engine.name
    s = session_factory("stream-1", op_timeout=30.0)
    started = threading.Event()

    def stream(conn: Any) -> int:
        rows = 0
        for _ in _stream_rows(conn, engine):
            rows += 1
            if rows == 2000:
                history.record("stream.progress", process=s.process, op_id=s.current_op_id, conn=s.generation,
                               rows=rows)
                started.set()
            if rows % 1000 == 0:
                time.sleep(0.02)
        return rows

    def run() -> None:
        s.op("stream", stream, value=PER6_SELECT[engine].replace("repeat('x', 200)", "..."))
        started.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    if not started.wait(15):
        raise HarnessError("the large SELECT never started delivering rows before the switchover")
    faults.switchover()
    t.join(40)
    _probe(s)
    check(check_partial_result_not_kept(history.events(), drain_window=windows[0]))


@pytest.mark.rule("PER-8")
@pytest.mark.topology(mode="sync")
@pytest.mark.engines("postgres")
@pytest.mark.windows(drain=1.0, recovery=3.0)
def test_per8_open_cursor_and_copy_closed(pair: Pair, faults: Faults, history: History, check: Check,
                                          per_client: PersistentClient, session_factory: SessionFactory,
                                          windows: tuple[float, float]) -> None:
    """PER-8: a session with an open ``DECLARE ... CURSOR WITH HOLD`` and one inside an unfinished
    ``COPY ... FROM STDIN`` (fed slowly beyond the drain window) are both closed."""
    drain, _ = windows
    table = _table(pair, "per8_copy")
    cursor_s = session_factory("cursor-1")
    copy_s = session_factory("copy-1", op_timeout=30.0)
    cursor_s.set_state("c1", "cursor", "DECLARE per8_c1 CURSOR WITH HOLD FOR SELECT generate_series(1, 10000)",
                       "open")
    cursor_s.execute("fetch", "FETCH 10 FROM per8_c1")
    feeding = threading.Event()

    def copy(conn) -> int:
        n = 0
        with conn.cursor().copy(f"COPY {table} (k) FROM STDIN") as cp:
            end = time.monotonic() + drain + 3.0
            while time.monotonic() < end:
                cp.write_row((n,))
                n += 1
                if n == 10:
                    feeding.set()
                time.sleep(0.01)
        return n

    def run() -> None:
        copy_s.op("copy", copy, value=f"COPY {table} FROM STDIN", write=True)
        feeding.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    if not feeding.wait(10):
        raise HarnessError("COPY did not start before the switchover")
    faults.switchover()
    t.join(40)
    cursor_s.execute("fetch", "FETCH 10 FROM per8_c1")
    _probe(cursor_s, copy_s)
    check(check_cursor_not_kept(history.events(), drain_window=drain))
