"""PER-2 on the MySQL protocol (seed 002's own list for PolarProxy on MySQL): system
variables of several kinds, the character set (``SET NAMES utf8`` plus a non-ASCII round trip), user
variables (integer, string, NULL, one set with ``:=`` inside a SELECT), the current database, and a
SQL ``PREPARE``-d statement, each session with its own values (a pooler mixing state between clients
is caught too). Protocol-level prepared statements (COM_STMT_PREPARE / EXECUTE, ids mapped and
parameter types re-sent) are what sysbench runs through the proxy: ``suites/persistent/test_sysbench.py``.

PER-6 on the MySQL protocol: a large unbuffered SELECT still being delivered when the switchover
starts closes the session."""

from __future__ import annotations

import threading
import time

import pytest

from harness import Check, Faults, History, Pair
from harness.clients.persistent import PersistentClient
from harness.errors import HarnessError
from harness.rules.persistent import check_partial_result_not_kept, check_session_state_restored
from harness.workload.oltp import SessionFactory, TrackedSession

SESSIONS = 3


def _settings(i: int) -> list[tuple[str, str, str, str, object]]:
    """(key, kind, statement, read query, expected value) for session ``i``."""
    iso = "SERIALIZABLE" if i % 2 else "READ-COMMITTED"
    mode = "ANSI_QUOTES,ONLY_FULL_GROUP_BY,NO_ZERO_DATE" if i % 2 else "ANSI_QUOTES,NO_ZERO_DATE"  # server order
    return [
        ("sql_mode", "sysvar:set", f"SET SESSION sql_mode = '{mode}'", "SELECT @@session.sql_mode", mode),
        ("wait_timeout", "sysvar:integer", f"SET SESSION wait_timeout = {1000 + i}", "SELECT @@session.wait_timeout",
         1000 + i),
        ("tx_isolation", "sysvar:enum", f"SET SESSION tx_isolation = '{iso}'", "SELECT @@session.tx_isolation", iso),
        ("time_zone", "sysvar:timezone", f"SET time_zone = '+0{i + 1}:00'", "SELECT @@session.time_zone",
         f"+0{i + 1}:00"),
        ("div_precision", "sysvar:@@", f"SET @@div_precision_increment = {6 + i}", "SELECT @@div_precision_increment",
         6 + i),
        ("names", "charset", "SET NAMES utf8", "SELECT @@character_set_client", "utf8mb3"),
        ("user_int", "uservar:int", f"SET @per2_n = {41 + i}", "SELECT @per2_n", 41 + i),
        ("user_str", "uservar:string", f"SET @per2_s = 'flavour-{i}-é'", "SELECT @per2_s", f"flavour-{i}-é"),
        ("user_null", "uservar:null", "SET @per2_null = NULL", "SELECT @per2_null IS NULL", 1),
        ("user_assign", "uservar:select", f"SELECT @per2_a := {100 + i}", "SELECT @per2_a", 100 + i),
        ("database", "database", "USE app", "SELECT DATABASE()", "app"),
        ("sql_prepare", "prepared:sql", f"PREPARE per2_q FROM 'SELECT ? + {i}'", "EXECUTE per2_q USING @per2_n",
         41 + 2 * i),
    ]


def _read_all(s: TrackedSession, i: int, phase: str) -> None:
    for key, _kind, _set, query, _expected in _settings(i):
        s.read_state(key, query, phase)
    s.read_state("encoding_roundtrip", "SELECT 'é, ü, ß'", phase)


@pytest.mark.rule("PER-2")
@pytest.mark.topology(mode="sync")
@pytest.mark.engines("mariadb")
def test_per2_mysql_session_state_survives_switchover(pair: Pair, faults: Faults, history: History, check: Check,
                                                      per_client: PersistentClient,
                                                      session_factory: SessionFactory) -> None:
    """PER-2: every kind of MySQL session state set before a switchover reads back unchanged after it."""
    sessions = [session_factory(f"state-{i}") for i in range(SESSIONS)]
    for i, s in enumerate(sessions):
        for key, kind, statement, _query, expected in _settings(i):
            s.set_state(key, kind, statement, expected)
        s.set_state("encoding_roundtrip", "encoding", "SELECT 1", "é, ü, ß")
    for i, s in enumerate(sessions):
        _read_all(s, i, "before")
    faults.switchover()
    for i, s in enumerate(sessions):
        _read_all(s, i, "after")
    check(check_session_state_restored(history.events()))


@pytest.mark.rule("PER-6")
@pytest.mark.topology(mode="sync")
@pytest.mark.windows(drain=1.0, recovery=3.0)
@pytest.mark.engines("mariadb")
def test_per6_mysql_partial_result_closed(pair: Pair, faults: Faults, history: History, check: Check,
                                          per_client: PersistentClient, session_factory: SessionFactory,
                                          windows: tuple[float, float]) -> None:
    """PER-6: a large unbuffered SELECT read slowly (≈6 s in all) when the switchover fires and not
    finished within the 1 s drain window: the session is closed."""
    s = session_factory("stream-1", op_timeout=30.0)
    started = threading.Event()

    def stream(conn) -> int:
        rows = 0
        cur = conn.cursor(unbuffered=True)
        cur.execute("SELECT seq, repeat('x', 200) FROM seq_1_to_300000")
        for _ in cur:
            rows += 1
            if rows == 2000:
                history.record("stream.progress", process=s.process, op_id=s.current_op_id, conn=s.generation,
                               rows=rows)
                started.set()
            if rows % 1000 == 0:
                time.sleep(0.02)
        return rows

    def run() -> None:
        s.op("stream", stream, value="SELECT ... seq_1_to_300000")
        started.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    if not started.wait(15):
        raise HarnessError("the large SELECT never started delivering rows before the switchover")
    faults.switchover()
    t.join(40)
    s.execute("probe", "SELECT 1")
    check(check_partial_result_not_kept(history.events(), drain_window=windows[0]))
