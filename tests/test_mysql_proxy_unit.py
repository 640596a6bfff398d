"""Unit tests of the MySQL-protocol pieces (docs/mariadb.md): the wire encodings, ``mysql_native_password``,
OK packets with session-state tracking, the session-state parser (PER-2/5/8 blockers), GTID prefix
logic of the MariaDB engine's rewind, sysbench output parsing, DUR-1 outcome classes of MySQL errors,
and the PER-1 sessions-kept checker on histories that keep and break it."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pymysql
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.errors import ConfigError
from harness.history.core import History
from harness.persistproxy.mysql import wire
from harness.persistproxy.mysql.backend import Column, literal
from harness.persistproxy.mysql.state import SessionState, Statement
from harness.rules.sessions_kept import check_every_session_kept
from harness.topology.mariadb import is_contained, last_gtids, parse_gtid_pos, parse_gtid_state, server_id
from harness.workload.mysql import outcome_of, parse_dsn
from harness.workload.sysbench import Sysbench, driver_for, parse_output


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_lenenc_int_round_trip(n: int) -> None:
    data = wire.enc_lenenc_int(n) + b"tail"
    value, pos = wire.lenenc_int(data, 0)
    assert value == n and data[pos:] == b"tail"


@given(st.binary(max_size=70_000))
def test_lenenc_bytes_round_trip(b: bytes) -> None:
    value, pos = wire.lenenc_bytes(wire.enc_lenenc_bytes(b), 0)
    assert value == b and pos == len(wire.enc_lenenc_bytes(b))


def test_native_token_matches_the_definition() -> None:
    scramble = bytes(range(1, 21))
    h1 = hashlib.sha1(b"secret").digest()
    expect = bytes(a ^ b for a, b in zip(h1, hashlib.sha1(scramble + hashlib.sha1(h1).digest()).digest(),
                                         strict=True))
    assert wire.native_token("secret", scramble) == expect
    assert wire.native_token("", scramble) == b""
    assert wire.native_token("other", scramble) != expect


def test_frame_splits_at_16_mb_and_numbers_parts() -> None:
    payload = b"x" * (wire.MAX_PACKET + 5)
    out = wire.frame(3, payload)
    assert out[:4] == b"\xff\xff\xff\x03" and out[4 + wire.MAX_PACKET:8 + wire.MAX_PACKET] == b"\x05\x00\x00\x04"


def test_handshake_round_trip_and_response_parsing() -> None:
    scramble = bytes(range(1, 21))
    hs = wire.parse_handshake(wire.build_handshake("10.11.19-MariaDB", 7, scramble))
    assert (hs.version, hs.connection_id, hs.scramble, hs.plugin) == ("10.11.19-MariaDB", 7, scramble, wire.NATIVE)
    assert hs.capabilities & wire.SESSION_TRACK and not hs.capabilities & wire.SSL
    resp = wire.parse_handshake_response(wire.build_handshake_response(
        wire.PROTOCOL_41 | wire.DEPRECATE_EOF, 45, "app", b"t" * 20, "app"))
    assert (resp.user, resp.auth, resp.database, resp.plugin, resp.charset) == ("app", b"t" * 20, "app",
                                                                                 wire.NATIVE, 45)
    with pytest.raises(wire.WireError):
        wire.parse_handshake(wire.build_err(1040, "08004", "Too many connections"))


def _state_block(*entries: tuple[int, bytes]) -> bytes:
    return b"".join(bytes([k]) + wire.enc_lenenc_bytes(d) for k, d in entries)


def test_ok_packet_session_tracking_is_read() -> None:
    var = wire.enc_lenenc_bytes(b"sql_mode") + wire.enc_lenenc_bytes(b"ANSI_QUOTES")
    block = _state_block((0, var), (1, wire.enc_lenenc_bytes(b"app2")), (2, b"\x011"))
    status = wire.IN_TRANS | wire.SESSION_STATE_CHANGED
    p = b"\x00\x00\x00" + struct.pack("<HH", status, 0) + wire.enc_lenenc_bytes(b"") + wire.enc_lenenc_bytes(block)
    ok = wire.parse_ok(p, wire.SESSION_TRACK)
    assert ok.variables == {"sql_mode": "ANSI_QUOTES"} and ok.schema == "app2" and ok.state_changed
    assert ok.status & wire.IN_TRANS
    assert wire.parse_ok(p, 0).variables == {}  # not negotiated: not read
    assert wire.parse_ok(b"\xfe\x00\x00\x02\x00", 0).status == wire.AUTOCOMMIT  # old EOF


def test_state_parser_learns_variables_database_and_blockers() -> None:
    s = SessionState()
    s.note_query("SET NAMES utf8")
    s.note_query("SET SESSION sql_mode='a,b', @u1 = 'x,y=1', @@session.wait_timeout = 5, LOCAL tx_isolation='X'")
    s.note_query("SET GLOBAL max_connections = 5")
    s.note_query("SELECT @acc := @acc + 1 FROM t")
    s.note_query("SELECT 1, 2 INTO @a, @`b`")
    s.note_query("USE `other`")
    s.note_query("PREPARE q1 FROM 'SELECT ?'")
    assert {"character_set_client", "collation_connection", "sql_mode", "wait_timeout", "tx_isolation"} <= s.sysvars
    assert "max_connections" not in s.sysvars
    assert s.uservars == {"u1", "acc", "a", "b"} and s.database == "other" and "q1" in s.sql_prepared
    order = s.replay_order()
    assert order[-1] == "sql_mode" and order.index("character_set_connection") < order.index("collation_connection")
    assert s.blocking_reason is None
    s.note_query("CREATE TEMPORARY TABLE t (k int)")
    assert s.blocking_reason == ("PER-5", "temporary tables")
    s.note_query("DROP TEMPORARY TABLE t")
    s.statements[1] = Statement(b"SELECT ?", 9, 1, 1, long_data=True)
    assert s.blocking_reason == ("PER-8", "unfinished long data")
    s.statements[1].long_data, s.statements[1].cursor = False, True
    assert s.blocking_reason == ("PER-8", "open cursor")
    s.statements[1].cursor, s.in_transaction = False, True
    assert s.blocking_reason == ("PER-7", "open transaction")
    s.note_query("DEALLOCATE PREPARE q1")
    assert "q1" not in s.sql_prepared
    s.reset()
    assert not s.sysvars and not s.uservars and not s.statements and s.database == "other"


def test_replay_literals_keep_types() -> None:
    assert literal(None, Column("a", 8, 63)) == "NULL"
    assert literal(b"42", Column("a", 8, 63)) == "42"
    assert literal(b"\x00\xff", Column("a", 253, 63)) == "X'00ff'"
    assert literal("é'".encode(), Column("a", 253, 45)) == "_utf8mb4 X'c3a927'"
    assert literal(b"", Column("a", 253, 45)) == "''"


def test_gtid_containment_rules_of_the_rewind() -> None:
    assert parse_gtid_pos("0-1-104,1-2-7") == {0: (1, 104), 1: (2, 7)}
    assert parse_gtid_state("0-1-104,0-2-7,0-1-90") == {(0, 1): 104, (0, 2): 7}
    assert is_contained("0-1-104", "0-1-104") and is_contained("", "0-1-5")
    assert is_contained("0-1-100", "0-1-104,0-2-200")  # the old principal's writes, then the new one's
    assert not is_contained("0-1-105", "0-1-104")  # a commit the source never got
    # the failure seen in a DUR-1 run: a killed principal (server 2) had committed 0-2-1378 that the
    # promoted node never received; the source went on writing higher sequence numbers as server 1
    assert not is_contained("0-2-1378", "0-2-1377,0-1-1400")
    assert not is_contained("1-1-3", "0-1-104")  # a domain the source never saw
    assert server_id("n3") == 3 and server_id("other") > 1000


def test_last_gtids_take_the_highest_sequence_whoever_wrote_it() -> None:
    # a former replica of server 1, then principal as server 2, killed: its binlog state has its own
    # commit 0-2-1951 and its slave position still says 0-1-1800 (what @@gtid_current_pos of a probe
    # started as server 1 would have reported, hiding the unreplicated commit)
    assert last_gtids("0-1-1800,0-2-1951,0-1-1800") == "0-2-1951"
    assert not is_contained(last_gtids("0-1-1800,0-2-1951,0-1-1800"), "0-1-2100,0-2-1950")
    assert is_contained(last_gtids("0-1-1800,0-2-1951"), "0-1-1800,0-2-1951,0-1-1960")
    assert last_gtids("0-1-5,1-3-9,1-1-2") == "0-1-5,1-3-9" and last_gtids("") == ""


@given(st.dictionaries(st.integers(1, 4), st.integers(0, 1000), min_size=1))
def test_last_gtids_is_the_maximum_of_the_domain(seqs: dict[int, int]) -> None:
    text = ",".join(f"0-{srv}-{seq}" for srv, seq in seqs.items())
    srv, seq = max(seqs.items(), key=lambda kv: kv[1])
    assert parse_gtid_pos(last_gtids(text))[0][1] == seq and is_contained(last_gtids(text), text)


@given(st.integers(0, 50), st.integers(0, 50), st.integers(1, 3))
def test_gtid_containment_is_per_server_sequence(a: int, b: int, other: int) -> None:
    assert is_contained(f"0-1-{a}", f"0-1-{b},0-9-{other * 100}") == (a <= b)
    assert not is_contained(f"0-{other + 1}-{a + 1}", f"0-1-{b + 1000}")  # only another server's history


def test_dsn_and_outcome_classes() -> None:
    p = parse_dsn("host=a,b port=1,2 dbname=app user=u password=p target_session_attrs=read-write")
    assert p["host"] == "a,b" and p["target_session_attrs"] == "read-write"
    assert outcome_of(pymysql.err.OperationalError(1290, "read-only")) == "fail"
    assert outcome_of(pymysql.err.OperationalError(2013, "Lost connection")) == "info"
    assert outcome_of(ConnectionResetError()) == "info"


SYSBENCH_OUT = """
[ 1s ] thds: 20 tps: 50.00 qps: 1000.00 (r/w/o: 700.00/200.00/100.00) lat (ms,95%): 450.77 err/s: 0.00 reconn/s: 0.00
[ 2s ] thds: 20 tps: 12.00 qps: 240.00 (r/w/o: 168.00/48.00/24.00) lat (ms,95%): 1200.00 err/s: 0.00 reconn/s: 0.00
SQL statistics:
    transactions:                        436    (20.58 per sec.)
    ignored errors:                      0      (0.00 per sec.)
    reconnects:                          0      (0.00 per sec.)
Latency (ms):
         95th percentile:                     4437.27
"""


def test_sysbench_output_is_parsed() -> None:
    r = parse_output(SYSBENCH_OUT, 0)
    assert (r.transactions, r.tps, r.p95_ms, r.errors, r.reconnects) == (436, 20.58, 4437.27, 0, 0)
    assert len(r.intervals) == 2 and r.min_interval_tps == 12.0
    bad = parse_output("FATAL: mysql_stmt_execute() returned error 1927\nFATAL: Thread failed\n", 1)
    assert bad.errors == 2 and bad.exit_code == 1


def test_sysbench_pgsql_driver_argv_keeps_the_password_in_its_option_file(tmp_path: Path) -> None:
    """PER-1 on PostgreSQL: the pgsql driver's options; the password only in the 0600 option file."""
    assert driver_for("postgres") == "pgsql" and driver_for("mariadb") == "mysql"
    with pytest.raises(ConfigError):
        driver_for("oracle")
    with pytest.raises(ConfigError):
        Sysbench(("127.0.0.1", 1), "u", "pw", "db", driver="odbc", workdir=tmp_path)
    with Sysbench(("127.0.0.1", 5432), "app", "s3cret-pw", "appdb", driver="pgsql", workdir=tmp_path,
                  options=("--delete_inserts=0",)) as bench:
        argv = bench._argv("run", 20, [])
        cfg = Path(next(a for a in argv if a.startswith("--config-file=")).split("=", 1)[1])
        assert "--db-driver=pgsql" in argv and "--pgsql-port=5432" in argv and "--delete_inserts=0" in argv
        assert not any("s3cret-pw" in a for a in argv)
        assert cfg.read_text() == "pgsql-password=s3cret-pw\n" and cfg.stat().st_mode & 0o777 == 0o600
        assert argv[1] == "oltp_read_write"  # the default test
    with Sysbench(("127.0.0.1", 5432), "app", "pw", "appdb", driver="pgsql", workdir=tmp_path,
                  test="oltp_point_select") as bench:
        assert bench._argv("run", 20, [])[1] == "oltp_point_select"
    with pytest.raises(ConfigError, match="oltp_point_select"):  # the error lists the known tests
        Sysbench(("127.0.0.1", 1), "u", "pw", "db", driver="pgsql", workdir=tmp_path, test="oltp_nope")


def _kept_history(threads: int = 3, switchovers: int = 5, *, kept: int | None = None, late_open: bool = False,
                  closed: bool = False, errors: int = 0) -> History:
    h = History()
    for i in range(threads):
        h.record("persist.session_open", session=i + 1)
    for n in range(switchovers):
        h.record("fault.start", fault="switchover")
        h.record("persist.drain_end", kept=threads if kept is None or n else kept, closed=0)
        if late_open and n == 2:
            h.record("persist.session_open", session=99)
        if closed and n == 3:
            h.record("persist.closed", session=1, reason="open transaction", rule="PER-7")
    h.record("sysbench.result", exit_code=1 if errors else 0, errors=errors, reconnects=0, transactions=10)
    return h


def test_sessions_kept_checker_keeps_and_breaks() -> None:
    assert check_every_session_kept(_kept_history().events(), threads=3).valid is True
    for broken in (_kept_history(kept=2), _kept_history(late_open=True), _kept_history(closed=True),
                   _kept_history(errors=1)):
        v = check_every_session_kept(broken.events(), threads=3)
        assert v.valid is False and v.rule_id == "PER-1", v
    assert check_every_session_kept(_kept_history(switchovers=4).events(), threads=3).valid == "unknown"
    assert check_every_session_kept(_kept_history(threads=2).events(), threads=3).valid is False
