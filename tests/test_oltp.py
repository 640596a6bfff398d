"""The OLTP workload (PER-1's sysbench stand-in) against a real PostgreSQL pair: table loading, the
recorded operations and front-connection identity, reconnects, client-side timeouts, bad input."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from harness.errors import ConfigError
from harness.history.core import History
from harness.topology import Pair
from harness.workload.oltp import OltpConfig, OltpWorkload, TrackedSession, load_tables


@pytest.fixture(scope="module")
def pair() -> Iterator[Any]:
    with Pair(mode="async") as p:
        yield p


def test_load_tables_is_fast_and_complete(pair: Any) -> None:
    seconds = load_tables(pair.principal.dsn(), tables=3, rows=5000)
    assert seconds < 10
    with psycopg.connect(pair.principal.dsn()) as conn:
        counts = [conn.execute(f"SELECT count(*), max(id) FROM sbtest{i}").fetchone() for i in (1, 2, 3)]
    assert counts == [(5000, 5000)] * 3


def test_config_scaling_and_validation() -> None:
    c = OltpConfig(scale=0.1)
    assert (c.n_tables, c.n_rows, c.n_sessions) == (2, 1000, 2)
    assert (OltpConfig().n_tables, OltpConfig().n_rows, OltpConfig().n_sessions) == (20, 10_000, 20)
    with pytest.raises(ConfigError, match="scale must be > 0"):
        OltpConfig(scale=0)
    with pytest.raises(ConfigError, match="mix must weigh"):
        OltpConfig(mix={"delete_everything": 1.0})
    with pytest.raises(ConfigError, match="tables >= 1"):
        load_tables("host=127.0.0.1 port=1", tables=0)


def test_workload_records_every_operation_with_its_front_connection(pair: Any) -> None:
    h = History()
    w = OltpWorkload(pair.principal.dsn(), h, OltpConfig(tables=2, rows=200, sessions=4, seed=1))
    w.load(pair.principal.dsn())
    with w:
        time.sleep(0.6)
    totals = w.totals()
    assert totals["ok"] > 50 and totals["failed"] == 0 and totals["reconnects"] == 0
    opened = h.events("session.open")
    assert sorted(e.get("process") for e in opened) == [f"oltp-{i}" for i in range(1, 5)]
    fronts = {e.get("process"): e.get("front") for e in opened}
    assert len(set(fronts.values())) == 4 and all(f.startswith("127.0.0.1:") for f in fronts.values())
    invokes = {(e.get("process"), e.get("op_id")): e for e in h.events("op.invoke")}
    oks = h.events("op.ok")
    assert {e.get("f") for e in oks} == {"point_select", "update", "transaction"}
    for e in oks:
        assert (e.get("process"), e.get("op_id")) in invokes
        assert e.get("conn") == 1 and e.get("front") == fronts[e.get("process")]
    assert len(h.events("session.close")) == 4


def test_lost_connection_is_recorded_then_reconnected(pair: Any) -> None:
    h = History()
    with TrackedSession(pair.principal.dsn(), h, "s1") as s:
        assert s.execute("read", "SELECT 1")[0]
        with pair.principal.admin() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (s.conn.info.backend_pid,))
        ok, error = s.execute("read", "SELECT 1")
        assert not ok and ("terminat" in error.lower() or "closed" in error.lower())
        ok_w, _ = s.execute("write", "SELECT 1", write=True)
        assert ok_w
    fail = h.events("op.fail")[0]
    assert fail.get("conn_lost") is True and fail.get("conn") == 1
    reconnect = h.events("session.reconnect")[0]
    assert reconnect.get("previous") == 1 and reconnect.get("conn") == 2 and reconnect.get("error") == fail.get("error")
    assert h.events("op.ok")[-1].get("conn") == 2


def test_write_lost_mid_flight_is_indeterminate(pair: Any) -> None:
    h = History()
    with TrackedSession(pair.principal.dsn(), h, "w1", reconnect=False) as s:
        pid = s.connect().info.backend_pid

        def body(conn: psycopg.Connection) -> None:
            with pair.principal.admin() as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            conn.execute("SELECT pg_sleep(2)")

        ok, _ = s.op("write", body, write=True)
        assert not ok
        ok2, error2 = s.execute("read", "SELECT 1")
        assert not ok2 and error2.startswith("ConnectionLost")
    info = h.events("op.info")
    assert len(info) == 1 and info[0].get("conn_lost") is True
    assert h.events("session.reconnect") == []


def test_op_timeout_gives_up_and_says_so(pair: Any) -> None:
    h = History()
    with TrackedSession(pair.principal.dsn(), h, "slow", op_timeout=0.4) as s:
        t0 = time.monotonic()
        ok, error = s.execute("sleep", "SELECT pg_sleep(5)")
        elapsed = time.monotonic() - t0
    assert not ok and elapsed < 2.5 and error.startswith("client timeout after 0.4 s")
    fail = h.events("op.fail")[0]
    assert fail.get("timed_out") is True and fail.get("conn_lost") is True


def test_state_helpers_record_set_and_read(pair: Any) -> None:
    h = History()
    with TrackedSession(pair.principal.dsn(), h, "st") as s:
        assert s.set_state("search_path", "guc", "SET search_path TO x1, public", "x1, public")
        s.read_state("search_path", "SHOW search_path", "before")
        s.read_state("missing", "SHOW no.such_setting", "before")
    sets, reads = h.events("state.set"), h.events("state.read")
    assert sets[0].get("value") == "x1, public" and sets[0].get("conn") == 1
    assert reads[0].get("value") == "x1, public" and "error" not in reads[0].fields
    assert "no.such_setting" in reads[1].get("error")
