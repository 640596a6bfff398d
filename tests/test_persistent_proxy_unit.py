"""Pure unit tests of the persistent proxy's building blocks (no server): SQL statement splitting
and classification (PER-2/5/8 tracking), the session-state tracker fed with protocol messages,
SCRAM-SHA-256 (RFC 7677 test vector) and message framing."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.persistproxy import protocol as pq
from harness.persistproxy.scram import ScramClient, ScramServer, ScramVerifier, salted_password
from harness.persistproxy.sqlstate import classify, split_statements
from harness.persistproxy.state import SessionState


def effects(sql: str) -> list[tuple[str, str | None]]:
    return [(e.kind, e.key) for s in split_statements(sql) for e in classify(s)]


def test_split_respects_quotes_comments_and_dollar_quotes() -> None:
    sql = ("SET a.b = 'x;y'; -- c;\n SELECT $f$ ; $f$; /* ; /* nested ; */ */ SELECT \"q;\"; "
           "SELECT E'\\';'; ;")
    stmts = split_statements(sql)
    assert [s.tokens[0].value for s in stmts] == ["set", "select", "select", "select"]
    assert [s.tokens[1].value for s in stmts[1:]] == [" ; ", "q;", "';"]
    assert stmts[0].tokens[-1].value == "x;y"
    assert split_statements("  -- only a comment\n") == []


@given(st.text(max_size=200))
def test_split_never_crashes(text: str) -> None:
    for stmt in split_statements(text):
        classify(stmt)


@pytest.mark.parametrize(("sql", "expected"), [
    ("SET search_path TO a, b", [("set", "search_path")]),
    ("set session TimeZone = 'UTC'", [("set", "timezone")]),
    ("SET TIME ZONE LOCAL", [("set", "timezone")]),
    ("SET NAMES 'LATIN1'", [("set", "client_encoding")]),
    ("SET SCHEMA 'x'", [("set", "search_path")]),
    ("SET my.custom = 1", [("set", "my.custom")]),
    ('SET "My"."Custom" = 1', [("set", "my.custom")]),
    ("SET LOCAL work_mem = '1MB'", []),
    ("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", []),
    ("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
     [("set", "default_transaction_isolation")]),
    ("SET work_mem TO DEFAULT", [("reset", "work_mem")]),
    ("RESET ALL", [("reset_all", None)]),
    ("RESET TIME ZONE", [("reset", "timezone")]),
    ("SET ROLE NONE", [("reset", "role")]),
    ("PREPARE q (int) AS SELECT $1", [("prepare", "q")]),
    ("PREPARE TRANSACTION 'x'", []),
    ("DEALLOCATE PREPARE q", [("deallocate", "q")]),
    ("DEALLOCATE ALL", [("deallocate", None)]),
    ("CREATE TEMP TABLE t (x int)", [("temp_create", "t")]),
    ("create global temporary table if not exists t2 (x int)", [("temp_create", "t2")]),
    ("CREATE TEMP TABLE t3 (x int) ON COMMIT DROP", []),
    ("CREATE TABLE pg_temp.t4 (x int)", [("temp_create", "t4")]),
    ("CREATE TABLE t5 (x int)", []),
    ("SELECT 1 INTO TEMP TABLE t6", [("temp_create", "t6")]),
    ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", [("declare", "c")]),
    ("CLOSE ALL", [("close", None)]),
    ("LISTEN ch", [("listen", "ch")]),
    ("UNLISTEN *", [("unlisten", None)]),
    ("DISCARD TEMPORARY", [("discard", "temp")]),
])
def test_classify(sql: str, expected: list[tuple[str, str | None]]) -> None:
    assert effects(sql) == expected


def _feed(state: SessionState, front: list[bytes], back: list[bytes]) -> None:
    for m in front:
        state.on_front(m[:1], m)
    for m in back:
        state.on_back(m[:1], m)


def _cc(tag: str) -> bytes:
    return pq.msg(b"C", pq.cstr(tag))


def test_tracker_commit_and_rollback() -> None:
    """A SET inside a committed transaction is kept; inside a rolled-back one it is dropped (PER-2)."""
    s = SessionState({})
    _feed(s, [pq.query("BEGIN; SET search_path = x; COMMIT")],
          [_cc("BEGIN"), _cc("SET"), _cc("COMMIT"), pq.ready_for_query(b"I")])
    assert "search_path" in s.committed.gucs and s.is_idle()
    _feed(s, [pq.query("BEGIN")], [_cc("BEGIN"), pq.ready_for_query(b"T")])
    assert s.txn_status == "T" and not s.is_idle() and s.blocker() == ("transaction still open", "PER-7")
    _feed(s, [pq.query("SET work_mem = '8MB'")], [_cc("SET"), pq.ready_for_query(b"T")])
    _feed(s, [pq.query("ROLLBACK")], [_cc("ROLLBACK"), pq.ready_for_query(b"I")])
    assert "work_mem" not in s.committed.gucs and "search_path" in s.committed.gucs
    # an error in an implicit multi-statement transaction rolls the SET back too
    _feed(s, [pq.query("SET lock_timeout = 1; SELECT 1/0")],
          [_cc("SET"), pq.error_response("ERROR", "22012", "division by zero"), pq.ready_for_query(b"I")])
    assert "lock_timeout" not in s.committed.gucs
    # an error recovered by ROLLBACK TO SAVEPOINT does not discard a later committed SET
    _feed(s, [pq.query("BEGIN; SAVEPOINT a; SELECT 1/0")],
          [_cc("BEGIN"), _cc("SAVEPOINT"), pq.error_response("ERROR", "22012", "x"),
           pq.ready_for_query(b"E")])
    _feed(s, [pq.query("ROLLBACK TO a")], [_cc("ROLLBACK"), pq.ready_for_query(b"T")])
    _feed(s, [pq.query("SET work_mem = '9MB'")], [_cc("SET"), pq.ready_for_query(b"T")])
    _feed(s, [pq.query("COMMIT")], [_cc("COMMIT"), pq.ready_for_query(b"I")])
    assert "work_mem" in s.committed.gucs


def test_tracker_extended_protocol() -> None:
    """Named Parse is kept (for replay) once ParseComplete arrives; Close removes it; DataRow
    without CommandComplete is a partial result (PER-6)."""
    s = SessionState({})
    parse = pq.msg(b"P", pq.cstr("s1") + pq.cstr("SELECT 1") + b"\0\0")
    bind = pq.msg(b"B", pq.cstr("") + pq.cstr("s1") + b"\0\0\0\0\0\0")
    execute = pq.msg(b"E", pq.cstr("") + b"\0\0\0\0")
    _feed(s, [parse, bind, execute, pq.SYNC], [pq.msg(b"1"), pq.msg(b"2")])
    assert s.replay_parse() == [parse] and not s.is_idle()
    s.on_back(b"D", pq.msg(b"D", b"\0\1\0\0\0\1" + b"1"))
    assert s.blocker() == ("result only partly delivered", "PER-6")
    _feed(s, [], [_cc("SELECT 1"), pq.ready_for_query(b"I")])
    assert s.is_idle() and s.blocker() is None
    close = pq.msg(b"C", b"S" + pq.cstr("s1"))
    _feed(s, [close, pq.SYNC], [pq.msg(b"3"), pq.ready_for_query(b"I")])
    assert s.replay_parse() == []
    # an error skips the rest of the batch up to Sync
    _feed(s, [parse, bind, execute, pq.SYNC],
          [pq.error_response("ERROR", "42P01", "nope"), pq.ready_for_query(b"I")])
    assert s.is_idle() and s.replay_parse() == []


def test_tracker_blockers() -> None:
    """Temp tables (PER-5), hold cursors and COPY (PER-8) block keeping the session."""
    s = SessionState({})
    _feed(s, [pq.query("CREATE TEMP TABLE t (x int)")], [_cc("CREATE TABLE"), pq.ready_for_query(b"I")])
    assert s.blocker() == ("session holds temporary tables", "PER-5")
    _feed(s, [pq.query("DISCARD TEMP")], [_cc("DISCARD TEMP"), pq.ready_for_query(b"I")])
    assert s.blocker() is None
    _feed(s, [pq.query("DECLARE c CURSOR WITH HOLD FOR SELECT 1")],
          [_cc("DECLARE CURSOR"), pq.ready_for_query(b"I")])
    assert s.blocker() == ("session has an open cursor", "PER-8")
    _feed(s, [pq.query("CLOSE c")], [_cc("CLOSE CURSOR"), pq.ready_for_query(b"I")])
    _feed(s, [pq.query("COPY t FROM STDIN")], [pq.msg(b"G", b"\0\0\0")])
    assert s.blocker() == ("COPY in progress", "PER-8")


def test_scram_rfc7677_vector() -> None:
    """The client proof and server signature of RFC 7677's example."""
    client = ScramClient("pencil")
    client.nonce = "rOprNGfwEbeRWgbNEkqO"
    client.first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final_message(server_first)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert len(salted_password("pencil", base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096)) == 32


def test_scram_server_accepts_right_and_refuses_wrong_password() -> None:
    verifier = ScramVerifier("secret", iterations=64)
    for password, ok in (("secret", True), ("wrong", False)):
        client, server = ScramClient(password), ScramServer(verifier)
        final = client.final_message(server.server_first(client.first_message()))
        if ok:
            client.verify_server_final(server.server_final(final))
        else:
            with pytest.raises(Exception, match="password authentication failed"):
                server.server_final(final)


def test_framing_rejects_bad_length() -> None:
    buf = bytearray(pq.query("SELECT 1") + b"Q\x00\x00\x00\x01")
    with pytest.raises(pq.ProtocolError):
        pq.split_messages(buf)
    buf = bytearray(pq.query("SELECT 1") + b"Q\x00\x00")
    assert [k for k, _ in pq.split_messages(buf)] == [b"Q"] and buf == bytearray(b"Q\x00\x00")


def _parse(name: str, sql: str) -> bytes:
    return pq.msg(b"P", pq.cstr(name) + pq.cstr(sql) + b"\0\0")


def test_injected_parse_answers_are_the_proxys_and_the_clients_stay_the_clients() -> None:
    """Lazy re-prepare (PER-2): the ParseComplete of a Parse the proxy sent is its own (recorded, not
    relayed); the client's BindComplete and ReadyForQuery after it are the client's; an error of a
    quiet Parse is the proxy's up to its own Sync, whose ReadyForQuery is the proxy's too; an error of a
    Parse sent inside the client's request answers the client."""
    s = SessionState({"user": "app"})
    raw = _parse("s1", "SELECT 1")
    s.on_injected_parse(raw, quiet=False)
    s.on_front(b"B", pq.msg(b"B", pq.cstr("") + pq.cstr("s1") + b"\0\0\0\0\0\0"))
    s.on_front(b"S", pq.SYNC)
    assert s.injected and s.on_injected_answer(49)  # ParseComplete: the proxy's
    assert s.prepared_parse["s1"] == raw
    assert not s.on_injected_answer(50)  # BindComplete: the client's
    s.on_bind_complete()
    assert not s.on_injected_answer(90)
    s.on_ready(73)
    assert not s.injected and not s.inflight
    # quiet: two Parses each with its own Sync, the first fails
    for name in ("bad", "good"):
        s.on_injected_parse(_parse(name, "SELECT x"), quiet=True)
        s.on_injected_sync()
    assert s.on_injected_answer(69)  # the error of 'bad' is swallowed up to its Sync
    assert s.on_injected_answer(90)  # that Sync's ReadyForQuery
    assert s.on_injected_answer(49) and "good" in s.prepared_parse and "bad" not in s.prepared_parse
    assert s.on_injected_answer(90) and not s.injected and not s.inflight
    # not quiet: the error answers the client's Bind (the server skips the client's messages)
    s.on_injected_parse(_parse("gone", "SELECT * FROM gone"), quiet=False)
    s.on_front(b"B", pq.msg(b"B", pq.cstr("") + pq.cstr("gone") + b"\0\0\0\0\0\0"))
    s.on_front(b"S", pq.SYNC)
    assert not s.on_injected_answer(69)
    s.on_back(b"E", pq.msg(b"E", b"SERROR\0C42P01\0Mrelation \"gone\" does not exist\0\0"))
    s.on_ready(73)
    assert not s.inflight and not s.injected and "gone" not in s.prepared_parse
