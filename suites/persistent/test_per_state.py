"""PER-2 (session state restored) and PER-3 (recovery window), one file for both engines: each
engine's own list of session state, from the seeds.

PER-2, PostgreSQL stand-in (RULEBOOK): ``SET`` of any GUC - one of each kind (string list, string,
enum, bool, integer with unit, real, time zone, custom ``x.y``) -, the character set
(``SET client_encoding`` plus a non-ASCII round trip: the seed's ``SET NAMES utf8``) and named
prepared statements (SQL ``PREPARE`` and psycopg's protocol-level prepared statements).

PER-2 on the MySQL protocol (seed 002's own list for PolarProxy on MySQL): system variables of several
kinds, the character set (``SET NAMES utf8`` plus a non-ASCII round trip), user variables (integer,
string, NULL, one set with ``:=`` inside a SELECT), the current database, and a SQL ``PREPARE``-d
statement. Protocol-level prepared statements on MySQL (COM_STMT_PREPARE / EXECUTE, ids mapped and
parameter types re-sent) are what sysbench runs through the proxy: ``suites/persistent/test_sysbench.py``.

Each session uses its own values, so a pooler that mixes state between clients is caught too."""

from __future__ import annotations

import time

import pytest

from harness import Check, Faults, History, Pair
from harness.clients.persistent import PersistentClient
from harness.rules.persistent import (
    check_keepalive_on_switchover,
    check_recovery_window,
    check_session_state_restored,
)
from harness.workload.oltp import OltpConfig, OltpWorkload, SessionFactory, TrackedSession

SESSIONS = 3
Setting = tuple[str, str, str, str, object]


def _postgres_settings(i: int) -> list[Setting]:
    """(key, kind, SET statement, read query, expected value) for session ``i`` on PostgreSQL."""
    return [
        ("search_path", "guc:string-list", f"SET search_path TO per2_s{i}, public", "SHOW search_path",
         f"per2_s{i}, public"),
        ("application_name", "guc:string", f"SET application_name TO 'per2-app-{i}'", "SHOW application_name",
         f"per2-app-{i}"),
        ("default_transaction_isolation", "guc:enum",
         "SET default_transaction_isolation TO " + ("'serializable'" if i % 2 else "'repeatable read'"),
         "SHOW default_transaction_isolation", "serializable" if i % 2 else "repeatable read"),
        ("enable_seqscan", "guc:bool", "SET enable_seqscan TO off", "SHOW enable_seqscan", "off"),
        ("statement_timeout", "guc:integer-unit", f"SET statement_timeout TO '{40 + i}s'", "SHOW statement_timeout",
         f"{40 + i}s"),
        ("random_page_cost", "guc:real", f"SET random_page_cost TO {1.5 + i}", "SHOW random_page_cost",
         f"{1.5 + i}"),
        ("TimeZone", "guc:timezone", "SET TIME ZONE 'Asia/Tokyo'" if i % 2 else "SET TIME ZONE 'America/Lima'",
         "SHOW TimeZone", "Asia/Tokyo" if i % 2 else "America/Lima"),
        ("custom", "guc:custom", f"SET per2.flavour TO 'flavour-{i}'", "SHOW per2.flavour", f"flavour-{i}"),
        ("client_encoding", "encoding", "SET client_encoding TO 'LATIN1'", "SHOW client_encoding", "LATIN1"),
        ("sql_prepare", "prepared:sql", f"PREPARE per2_q{i}(int) AS SELECT $1 + {i}", f"EXECUTE per2_q{i}(41)",
         str(41 + i)),
    ]


def _mariadb_settings(i: int) -> list[Setting]:
    """(key, kind, statement, read query, expected value) for session ``i`` on MariaDB (MySQL protocol)."""
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



SETTINGS = {"postgres": _postgres_settings, "mariadb": _mariadb_settings}
ROUNDTRIP = {"postgres": "SELECT 'é, ü, ß'::text", "mariadb": "SELECT 'é, ü, ß'"}


def _read_all(s: TrackedSession, engine: str, i: int, phase: str) -> None:
    for key, _kind, _set, query, _expected in SETTINGS[engine](i):
        s.read_state(key, query, phase)
    s.read_state("encoding_roundtrip", ROUNDTRIP[engine], phase)
    if engine == "postgres":
        s.read_state("protocol_prepare", "SELECT %s::int * 2", phase, params=(21 + i,), prepare=True)


@pytest.mark.rule("PER-2")
@pytest.mark.topology(mode="sync")
@pytest.mark.engines("postgres", "mariadb")
def test_per2_session_state_survives_switchover(pair: Pair, faults: Faults, history: History, check: Check,
                                                per_client: PersistentClient, session_factory: SessionFactory) -> None:
    """PER-2: every kind of the engine's session state set before a switchover reads back unchanged after it
    (on PostgreSQL also a protocol-level prepared statement)."""
    engine = pair.engine.name
    sessions = [session_factory(f"state-{i}") for i in range(SESSIONS)]
    for i, s in enumerate(sessions):
        for key, kind, statement, _query, expected in SETTINGS[engine](i):
            s.set_state(key, kind, statement, expected)
        s.set_state("encoding_roundtrip", "encoding", "SELECT 1", "é, ü, ß")
        if engine == "postgres":
            ok, _ = s.execute("prepare:protocol", "SELECT %s::int * 2", (21 + i,), prepare=True)
            if ok:
                history.record("state.set", process=s.process, conn=s.generation, key="protocol_prepare",
                               kind="prepared:protocol", value=str((21 + i) * 2))
    for i, s in enumerate(sessions):
        _read_all(s, engine, i, "before")
    faults.switchover()
    for i, s in enumerate(sessions):
        _read_all(s, engine, i, "after")
    check(check_session_state_restored(history.events()))


@pytest.mark.rule("PER-3")
@pytest.mark.topology(mode="sync")
@pytest.mark.windows(drain=1.0, recovery=1.5)
def test_per3_no_principal_within_window_closes_with_error(pair: Pair, faults: Faults, history: History, check: Check,
                                                           per_client: PersistentClient,
                                                           windows: tuple[float, float]) -> None:
    """PER-3: the new principal stays unreachable (its client-facing address refuses) for well over
    the recovery window: every session must be closed with an error within the window, not hang."""
    _drain, recovery = windows
    workload = OltpWorkload(per_client.dsn(), history,
                            OltpConfig(tables=2, rows=1000, sessions=5, op_timeout=recovery + 6,
                                       reconnect_delay=0.2), engine=pair.engine.name)
    workload.load(pair.principal.dsn())
    outage = recovery + 3.0
    with workload:
        time.sleep(0.5)
        with faults.partition(pair.mirror.name, how="refuse", after=0, duration=outage) as cut:
            cut.started.wait(5)
            faults.switchover()
        time.sleep(0.5)
    check(check_recovery_window(history.events(), recovery_window=recovery, tolerance=1.0))


@pytest.mark.rule("PER-3", "PER-1")
@pytest.mark.topology(mode="sync")
@pytest.mark.windows(drain=1.0, recovery=3.0)
def test_per3_principal_back_within_window_sessions_continue(pair: Pair, faults: Faults, history: History, check: Check,
                                                             per_client: PersistentClient,
                                                             windows: tuple[float, float]) -> None:
    """PER-3: the new principal is unreachable for a while but comes back within the recovery window:
    every session continues on its connection (PER-1: kept)."""
    _drain, recovery = windows
    workload = OltpWorkload(per_client.dsn(), history,
                            OltpConfig(tables=2, rows=1000, sessions=5, op_timeout=recovery + 6),
                            engine=pair.engine.name)
    workload.load(pair.principal.dsn())
    with workload:
        time.sleep(0.5)
        with faults.partition(pair.mirror.name, how="refuse", after=0, duration=1.0) as cut:
            cut.started.wait(5)
            faults.switchover()
        time.sleep(0.8)
    check([check_recovery_window(history.events(), recovery_window=recovery, tolerance=1.0),
           check_keepalive_on_switchover(history.events(), min_keep_rate=1.0, max_errors=0)])

