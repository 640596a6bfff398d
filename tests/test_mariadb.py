"""The MariaDB engine (docs/mariadb.md) and the reference MySQL persistent proxy against real ``mariadbd``
processes: GTID pair up, switchover / failover / rejoin keeping every row, a test login without admin
rights, the CLI's ``--topology mariadb-pair``; through the proxy: login, COM_PING / INIT_DB /
RESET_CONNECTION, and a planned switchover keeping variables, protocol-level prepared statements
(ids mapped, parameter types re-sent) and closing the sessions PER-5/PER-7 say cannot be kept."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from harness.history.core import History
from harness.persistproxy.mysql import MySQLPersistentProxy, MySQLProxyConfig, wire
from harness.persistproxy.mysql.backend import Backend, _column
from harness.topology.local import LocalPair
from harness.topology.mariadb import MariaDBEngine


@pytest.fixture(scope="module")
def mpair() -> Iterator[LocalPair]:
    with LocalPair(engine=MariaDBEngine(), history=History()) as pair:
        yield pair


def _conn(address: tuple[str, int], pair: LocalPair, **kw: object) -> pymysql.connections.Connection:
    creds = pair.engine.credentials
    return pymysql.connect(host=address[0], port=address[1], user=creds.user, password=creds.password,
                           database=creds.database, autocommit=True, ssl_disabled=True, connect_timeout=5, **kw)


def _q(conn: pymysql.connections.Connection, sql: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def test_pair_roles_data_and_unprivileged_login(mpair: LocalPair) -> None:
    assert mpair.describe()["topology"] == "mariadb-pair" and mpair.describe()["engine"] == "mariadb"
    c = _conn(mpair.principal.client_address, mpair)
    _q(c, "CREATE TABLE IF NOT EXISTS engine_t (k int PRIMARY KEY)")
    _q(c, "INSERT INTO engine_t VALUES (1)")
    c.close()
    standby = _conn(mpair.mirror.client_address, mpair)
    with pytest.raises(pymysql.err.OperationalError) as exc:  # read_only stops the test login (no admin)
        _q(standby, "INSERT INTO engine_t VALUES (2)")
    assert exc.value.args[0] == 1290
    assert _q(standby, "SELECT @@global.read_only") == [(1,)]
    standby.close()
    with pytest.raises(pymysql.err.OperationalError):  # root has no TCP login
        pymysql.connect(host="127.0.0.1", port=mpair.principal.server_address[1], user="root", ssl_disabled=True,
                        connect_timeout=3)
    for i, op in enumerate(("switchover", "failover", "rejoin", "switchover")):
        getattr(mpair, op)()
        c = _conn(mpair.principal.client_address, mpair)
        _q(c, f"INSERT INTO engine_t VALUES ({10 + i})")
        c.close()
    deadline = time.monotonic() + 20
    while True:
        counts = []
        for node in mpair.nodes:
            c = _conn(node.client_address, mpair)
            counts.append(_q(c, "SELECT count(*) FROM engine_t")[0][0])
            c.close()
        if counts == [5, 5] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert counts == [5, 5], counts
    gtid = _q(mpair.principal.admin()._conn, "SELECT @@gtid_strict_mode, @@log_slave_updates")  # noqa: SLF001
    assert gtid == [(1, 1)]


def test_cli_up_mariadb_pair_and_engine_conflict(isolated_home: dict[str, str]) -> None:
    fh = [sys.executable, "-m", "harness.cli"]
    bad = subprocess.run([*fh, "up", "--topology", "mariadb-pair", "--engine", "postgres"], capture_output=True,
                         text=True, env=isolated_home, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "runs on engine 'mariadb'" in bad.stderr
    up = subprocess.run([*fh, "up", "--topology", "mariadb-pair", "--detach", "--json"], capture_output=True,
                        text=True, env=isolated_home, timeout=120)
    assert up.returncode == 0, up.stderr
    desc = json.loads(up.stdout)
    try:
        assert desc["engine"] == "mariadb" and [n["role"] for n in desc["nodes"]] == ["principal", "mirror"]
        password = MariaDBEngine().credentials.password
        assert password not in up.stdout + up.stderr
        sw = subprocess.run([*fh, "fault", "--run", desc["run"], "switchover", "--json"], capture_output=True,
                            text=True, env=isolated_home, timeout=120)
        assert sw.returncode == 0 and json.loads(sw.stdout)["principal"] == "n2", sw.stderr
    finally:
        down = subprocess.run([*fh, "down", "--run", desc["run"]], capture_output=True, text=True,
                              env=isolated_home, timeout=60)
    assert down.returncode == 0


@pytest.fixture
def proxy(mpair: LocalPair) -> Iterator[tuple[MySQLPersistentProxy, History]]:
    creds = mpair.engine.credentials
    history = History()
    px = MySQLPersistentProxy(MySQLProxyConfig(creds.user, creds.password,
                                               resolver=lambda: mpair.principal.client_address,
                                               drain_window=1.0, recovery_window=10.0, on_event=history.record))
    px.start()
    yield px, history
    px.stop()


def _switch(px: MySQLPersistentProxy, pair: LocalPair) -> dict:
    drained = px.drain()
    pair.switchover()
    px.resume(pair.principal.client_address)
    return drained


def _execute(back: Backend, stmt_id: int, value: int | None, send_types: bool) -> int:
    """COM_STMT_EXECUTE of ``SELECT ? + 1`` with one BIGINT parameter; the integer it returns."""
    body = struct.pack("<BIBI", wire.COM_STMT_EXECUTE, stmt_id, 0, 1) + b"\x00"
    body += (b"\x01\x08\x00" if send_types else b"\x00") + struct.pack("<q", value or 0)
    back.send(body)
    _, first = back.read()
    if wire.is_err(first):
        raise AssertionError(wire.parse_err(first))
    _, col = back.read()
    if not back.deprecate_eof:
        back.read()
    _, row = back.read()
    back.read()  # the closing EOF / OK
    if _column(col).type == 8:  # BIGINT: 8 bytes after the header and the NULL bitmap
        return struct.unpack_from("<q", row, 2)[0]
    value, _ = wire.lenenc_bytes(row, 2)  # DECIMAL and friends: a length-encoded string
    assert value is not None
    return int(value.decode())


def test_proxy_keeps_state_and_prepared_statements_across_switchover(mpair: LocalPair, proxy) -> None:
    px, history = proxy
    creds = mpair.engine.credentials
    with pytest.raises(pymysql.err.OperationalError) as denied:
        pymysql.connect(host=px.address[0], port=px.address[1], user=creds.user, password="wrong",
                        ssl_disabled=True, connect_timeout=5)
    assert denied.value.args[0] == 1045
    c = _conn(px.address, mpair)
    c.ping(reconnect=False)
    c.select_db("app")
    _q(c, "SET NAMES utf8")
    _q(c, "SET @n = 41, @s = 'é'")
    _q(c, "SET SESSION wait_timeout = 1234, sql_mode = 'ANSI_QUOTES'")
    raw = Backend(px.address, creds.user, creds.password, wire.PROXY_CAPABILITIES & ~wire.HANDSHAKE_ONLY, 45,
                  "app")
    stmt_id, _, nparams = raw.prepare(b"SELECT ? + 1")
    assert nparams == 1 and _execute(raw, stmt_id, 41, True) == 42
    before = _q(c, "SELECT @@server_id")[0][0]
    drained = _switch(px, mpair)
    assert len(drained["kept"]) == 2 and not drained["closed"]
    assert _q(c, "SELECT @@server_id")[0][0] != before  # really on the other server now
    assert _q(c, "SELECT @n, @s, @@character_set_client, @@wait_timeout, @@sql_mode") == [
        (41, "é", "utf8mb3", 1234, "ANSI_QUOTES")]
    assert _execute(raw, stmt_id, 99, False) == 100  # same client id, types re-sent by the proxy
    c.query("SELECT 1")
    c._execute_command(wire.COM_RESET_CONNECTION, b"")  # noqa: SLF001
    c._read_ok_packet()  # noqa: SLF001
    assert _q(c, "SELECT @n") == [(None,)]
    raw.close()
    c.close()
    assert [e.get("variables") for e in history.events("persist.replayed")] and history.events("persist.kept")


def test_proxy_closes_temp_table_and_open_transaction_sessions(mpair: LocalPair, proxy) -> None:
    px, history = proxy
    temp, txn, plain = (_conn(px.address, mpair) for _ in range(3))
    _q(temp, "CREATE TEMPORARY TABLE tt (k int)")
    _q(txn, "CREATE TABLE IF NOT EXISTS txn_t (k int)")
    _q(txn, "BEGIN")
    _q(txn, "INSERT INTO txn_t VALUES (1)")
    t0 = time.monotonic()
    drained = _switch(px, mpair)
    assert time.monotonic() - t0 >= 1.0  # the open transaction was given the drain window
    rules = sorted(c["rule"] for c in drained["closed"])
    assert rules == ["PER-5", "PER-7"] and len(drained["kept"]) == 1
    assert _q(plain, "SELECT 1") == [(1,)]
    for closed in (temp, txn):
        with pytest.raises((pymysql.err.OperationalError, pymysql.err.InterfaceError)):
            _q(closed, "SELECT 1")
    assert {e.get("rule") for e in history.events("persist.closed")} == {"PER-5", "PER-7"}
    plain.close()


def _keys_when_caught_up(pair: Any, node: str, table: str, expected: list[int], timeout: float = 20) -> list[int]:
    """The keys of ``table`` on ``node`` once they are ``expected`` (replication caught up), or as
    they are when ``timeout`` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        c = _conn(pair.node(node).client_address, pair)
        rows = [r[0] for r in _q(c, f"SELECT k FROM {table} ORDER BY k")]
        c.close()
        if rows == expected or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_a_reclone_starts_at_the_backups_position_not_at_the_sources_first_transaction() -> None:
    """The re-clone's source is the run's first principal, so its binlog still holds the rows written
    before the first switchover, and the copy holds them too. The copy must start replicating at the
    backup's position, as its own log says. mariadb-backup 10.11 writes ``xtrabackup_binlog_info``,
    which the harness did not read: every copy started at ``''``, leaving what to send to the source.
    In one ``make chaos`` run (DUR-1, ``rejoin``) the source sent its first rows again: duplicate key,
    not streaming after 30 s. Here the rows arrive either way; the start position is what differs."""
    history = History()
    with LocalPair(engine=MariaDBEngine(), mode="async", history=history) as pair:
        first = pair.principal.name
        c = _conn(pair.principal.client_address, pair)
        _q(c, "CREATE TABLE early_t (k int PRIMARY KEY)")
        _q(c, "INSERT INTO early_t VALUES (1)")  # in the first principal's binlog for good
        c.close()
        time.sleep(0.5)
        pair.switchover()
        second = pair.principal.name
        with pair.mirror.admin() as adm:
            adm.execute("STOP SLAVE")
        c = _conn(pair.principal.client_address, pair)
        _q(c, "INSERT INTO early_t VALUES (2)")  # on the second principal only: it diverges
        c.close()
        pair.failover()  # the first principal is the principal again, and the re-clone's source
        assert pair.principal.name == first
        pair.rejoin()
        assert [e.get("node") for e in history.events("node.reclone")] == [second]
        log = (pair.path / second / "postgres.log").read_text()
        starts = re.findall(r"replication starts at GTID position '([^']*)'", log)
        assert starts and starts[-1], starts  # the backup's position, not '' (the whole binlog again)
        c = _conn(pair.principal.client_address, pair)
        _q(c, "INSERT INTO early_t VALUES (3)")
        c.close()
        assert _keys_when_caught_up(pair, second, "early_t", [1, 3]) == [1, 3]


@pytest.mark.parametrize("switch_first", [False, True], ids=["first-principal", "after-a-switchover"])
def test_diverged_former_principal_is_recloned_on_rejoin(switch_first: bool) -> None:
    """A commit only the killed principal has (its mirror's replication was stopped, async pair) makes
    it diverge: rejoin re-clones it (``node.reclone``) with mariadb-backup, and it follows again. After a
    switchover the killed principal is a former replica (server 2, with a slave position of server 1's
    history): its own unreplicated commit must still be seen (the DUR-1 run's ``rejoin`` failure)."""
    history = History()
    with LocalPair(engine=MariaDBEngine(), mode="async", history=history) as pair:
        if switch_first:
            pair.switchover()
        old = pair.principal.name
        c = _conn(pair.principal.client_address, pair)
        _q(c, "CREATE TABLE div_t (k int PRIMARY KEY)")
        _q(c, "INSERT INTO div_t VALUES (1)")
        time.sleep(0.5)
        with pair.mirror.admin() as adm:
            adm.execute("STOP SLAVE")
        _q(c, "INSERT INTO div_t VALUES (2)")  # on the principal only
        c.close()
        pair.failover()
        c = _conn(pair.principal.client_address, pair)
        _q(c, "INSERT INTO div_t VALUES (3)")
        c.close()
        pair.rejoin()
        assert [e.get("node") for e in history.events("node.reclone")] == [old]
        c = _conn(pair.principal.client_address, pair)
        _q(c, "INSERT INTO div_t VALUES (4)")
        c.close()
        # the diverged commit 2 is gone, the new principal's history is there
        assert _keys_when_caught_up(pair, old, "div_t", [1, 3, 4]) == [1, 3, 4]
