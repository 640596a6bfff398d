"""The session tracker's one-call paths for the commonest request and answer (harness/persistproxy/
state.py ``on_simple_request`` / ``on_simple_answer``, issue 15 throughput) record exactly what the
message-by-message tracker records (PER-2 replay data, PER-4..8 blockers), on any history: a
property test over random front and back chunks, well-formed and not."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.persistproxy import protocol as pq
from harness.persistproxy.frames import DATA_ROW, NO_RUNS, frames
from harness.persistproxy.state import SessionState

NAMES = ["", "s1", "s2"]
SQLS = ["SELECT c FROM t WHERE id = $1", "UPDATE t SET k = k + 1 WHERE id = $1", "SET work_mem = '8MB'",
        "SELECT 1 INTO keep"]
TAGS = ["SELECT 1", "UPDATE 1", "SET", "BEGIN", "COMMIT", "ROLLBACK", "SELECT 0", "CREATE TABLE"]


def _bind(portal: str, stmt: str, broken: bool) -> bytes:
    body = pq.cstr(portal) + (stmt.encode() if broken else pq.cstr(stmt)) + b"\0\0\0\0\0\0"
    return pq.msg(b"B", body if not broken else pq.cstr(portal) + stmt.encode())


def _execute(portal: str, broken: bool) -> bytes:
    return pq.msg(b"E", (portal.encode() if broken else pq.cstr(portal)) + (b"" if broken else b"\0\0\0\0"))


_rarely = st.sampled_from([False] * 6 + [True])
def _parse(name: str, sql: str, broken: bool) -> bytes:
    return pq.msg(b"P", pq.cstr(name) + (sql.encode() if broken else pq.cstr(sql) + b"\0\0"))


# [Parse,] Bind, [Describe,] Execute, Sync: unprepared (psycopg's default) or prepared
_parse_first = st.one_of(st.just(b""), st.tuples(st.sampled_from(NAMES), st.sampled_from(SQLS), _rarely).map(
    lambda a: _parse(*a)))
_request = st.tuples(_parse_first, st.sampled_from(NAMES), st.sampled_from(NAMES), st.booleans(), _rarely,
                     _rarely).map(lambda a: a[0] + _bind(a[1], a[2], a[4]) + (pq.msg(b"D", b"P\0") if a[3] else b"")
                                  + _execute(a[1], a[5]) + pq.SYNC)
front_chunk = st.one_of(
    # the patterns with a one-call path (now and then malformed), most often
    _request, _request, _request, _request,
    # what falls back: Parse (defines what a later Bind names), simple Query, Close, a lone Sync
    st.tuples(st.sampled_from(NAMES), st.sampled_from(SQLS)).map(
        lambda a: pq.msg(b"P", pq.cstr(a[0]) + pq.cstr(a[1]) + b"\0\0") + pq.SYNC),
    st.sampled_from(["BEGIN", "COMMIT", "ROLLBACK", "SET x.y = 1"]).map(pq.query),
    st.sampled_from(NAMES).map(lambda n: pq.msg(b"C", b"S" + pq.cstr(n)) + pq.SYNC),
    st.just(pq.SYNC),
)


def _answer(parts: tuple[bool, int, bool, str, bytes, bool]) -> bytes:
    bind, description, rows, tag, status, short_ready = parts
    out = pq.msg(b"2") if bind else b""
    out += [b"", pq.msg(b"T", b"\0\1c\0" + bytes(18)), pq.msg(b"n")][description]
    out += pq.msg(b"D", b"\0\1\0\0\0\1x") * (3 if rows else 0)
    out += pq.msg(b"C", pq.cstr(tag))
    return out + (pq.msg(b"Z") if short_ready else pq.msg(b"Z", status))


# the answer the last request asked for (its Describe answered or not), resolved in the test
matching = st.tuples(st.booleans(), st.sampled_from(TAGS), st.sampled_from([b"I", b"T", b"E"]), st.booleans())

back_chunk = st.one_of(
    matching, matching, matching, matching, matching, matching, matching, matching,
    st.tuples(st.booleans(), st.integers(0, 2), st.booleans(), st.sampled_from(TAGS),
              st.sampled_from([b"I", b"T", b"E"]), st.just(False)).map(_answer),
    st.tuples(st.booleans(), st.integers(0, 2), st.booleans(), st.sampled_from(TAGS),
              st.sampled_from([b"I", b"T"]), st.just(True)).map(_answer),
    st.just(pq.msg(b"1") + pq.ready_for_query(b"I")),  # ParseComplete
    st.just(pq.msg(b"3") + pq.ready_for_query(b"T")),  # CloseComplete
    st.just(pq.msg(b"C", pq.cstr("COMMIT")) + pq.ready_for_query(b"I")),
    st.just(pq.msg(b"E", b"SERROR\0C42P01\0Mno\0\0") + pq.ready_for_query(b"I")),
)


def _snapshot(s: SessionState) -> dict[str, Any]:
    return {
        "inflight": [(i.kind, i.name, i.sql, i.index, id(i) if i.kind in "BDS" else None) for i in s.inflight],
        "portal_exec": {k: v.sql for k, v in s.portal_exec.items()},
        "statement_exec": {k: v.sql for k, v in s.statement_exec.items()},
        "prepared_parse": dict(s.prepared_parse), "unsynced": s.unsynced, "rows_started": s.rows_started,
        "copy": s.copy_in_progress, "last_tag": s.last_tag, "txn": s.txn_status, "cycle_error": s.cycle_error,
        "committed": vars(s.committed), "pending": vars(s.pending_tx) if s.pending_tx else None,
        "counters": dict(s.counters), "blocker": s.blocker(),
    }


def _one_by_one_front(s: SessionState, chunk: bytes) -> None:
    kinds, ends = frames(chunk, NO_RUNS)
    pos = 0
    for end in ends:
        s.on_front(chunk[pos:pos + 1], chunk[pos:end])
        pos = end


def _one_by_one_back(s: SessionState, chunk: bytes) -> None:
    pos = 0
    for end in frames(chunk, NO_RUNS)[1]:
        s.on_back(chunk[pos:pos + 1], chunk[pos:end])
        pos = end


def _outcome(fn: Any, *args: Any) -> str | None:
    try:
        fn(*args)
    except pq.ProtocolError as exc:
        return str(exc)
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_rarely, front_chunk, back_chunk), min_size=1, max_size=12))
def test_one_call_paths_record_what_message_by_message_does(steps: list[tuple[bool, bytes, bytes]]) -> None:
    fast, slow = SessionState({"user": "u"}), SessionState({"user": "u"})
    for answer_first, front, back in steps:
        if isinstance(back, tuple):
            rows, tag, status, no_data = back
            described = b"D\0\0\0\6P" in front
            back = (pq.msg(b"1") if front[:1] == b"P" else b"") + _answer(
                (True, (2 if no_data else 1) if described else 0, rows and not no_data, tag, status, False))
        for chunk, is_front in ((back, False), (front, True)) if answer_first else ((front, True), (back, False)):
            if is_front:
                kinds, ends = frames(chunk, NO_RUNS)
                took = fast.on_simple_request(chunk, kinds, ends)
                got = None if took else _outcome(_one_by_one_front, fast, chunk)
                want = _outcome(_one_by_one_front, slow, chunk)
            else:
                kinds, ends = frames(chunk, DATA_ROW)
                took = fast.on_simple_answer(chunk, kinds, ends)
                got = None if took else _outcome(_one_by_one_back, fast, chunk)
                want = _outcome(_one_by_one_back, slow, chunk)
            assert got == want
            assert _snapshot(fast) == _snapshot(slow)


def test_the_one_call_paths_are_taken_for_a_prepared_statement_cycle() -> None:
    """The property above would hold vacuously if the one-call paths never ran: here they must."""
    s = SessionState({"user": "u"})
    parse = pq.msg(b"P", pq.cstr("s1") + pq.cstr(SQLS[0]) + b"\0\0")
    s.on_front(b"P", parse)
    s.on_front(b"S", pq.SYNC)
    s.on_back(b"1", pq.msg(b"1"))
    s.on_back(b"Z", pq.ready_for_query(b"I"))
    request = _bind("", "s1", False) + pq.msg(b"D", b"P\0") + _execute("", False) + pq.SYNC
    assert s.on_simple_request(request, *frames(request, NO_RUNS))
    assert [i.kind for i in s.inflight] == ["B", "D", "E", "S"] and s.inflight[2].sql == SQLS[0]
    answer = _answer((True, 1, True, "SELECT 3", b"T", False))
    assert s.on_simple_answer(answer, *frames(answer, DATA_ROW))
    assert not s.inflight and s.txn_status == "T" and not s.rows_started and s.counters["statements"] == 1
    # a tag that may change state is left to the message-by-message path
    s.on_front(b"P", pq.msg(b"P", pq.cstr("") + pq.cstr("SET x.y = 1") + b"\0\0"))
    s.on_front(b"S", pq.SYNC)
    _one_by_one_back(s, pq.msg(b"1") + pq.ready_for_query(b"T"))
    set_request = _bind("", "", False) + _execute("", False) + pq.SYNC
    assert s.on_simple_request(set_request, *frames(set_request, NO_RUNS))
    assert s.inflight[1].sql == "SET x.y = 1"
    set_answer = _answer((True, 0, False, "SET", b"T", False))
    assert not s.on_simple_answer(set_answer, *frames(set_answer, DATA_ROW))
    assert len(s.inflight) == 3, "a refused answer records nothing"


@pytest.mark.parametrize("chunk", [
    _bind("", "s1", True) + _execute("", False) + pq.SYNC,  # the statement name is not terminated
    _bind("", "s1", False) + _execute("", True) + pq.SYNC,
])
def test_a_malformed_request_is_refused_by_the_one_call_path_and_named_by_on_front(chunk: bytes) -> None:
    s = SessionState({"user": "u"})
    assert not s.on_simple_request(chunk, *frames(chunk, NO_RUNS))
    assert not s.inflight
    with pytest.raises(pq.ProtocolError, match="NUL-terminated"):
        _one_by_one_front(s, chunk)


def test_a_prepared_rollback_answered_in_one_call_drops_the_transaction_s_settings() -> None:
    """PER-2: a SET inside a transaction is replayed only if the transaction commits; a ROLLBACK run as
    a prepared statement (its answer takes the one-call path) must drop it, as on the server."""
    s = SessionState({"user": "u"})
    s.on_front(b"Q", pq.query("BEGIN"))
    _one_by_one_back(s, pq.msg(b"C", pq.cstr("BEGIN")) + pq.ready_for_query(b"T"))
    s.on_front(b"Q", pq.query("SET work_mem = '8MB'"))
    _one_by_one_back(s, pq.msg(b"C", pq.cstr("SET")) + pq.ready_for_query(b"T"))
    assert s.tx.gucs and not s.committed.gucs
    s.on_front(b"P", pq.msg(b"P", pq.cstr("rb") + pq.cstr("ROLLBACK") + b"\0\0"))
    s.on_front(b"S", pq.SYNC)
    _one_by_one_back(s, pq.msg(b"1") + pq.ready_for_query(b"T"))
    request = _bind("", "rb", False) + _execute("", False) + pq.SYNC
    assert s.on_simple_request(request, *frames(request, NO_RUNS))
    answer = _answer((True, 0, False, "ROLLBACK", b"I", False))
    assert s.on_simple_answer(answer, *frames(answer, DATA_ROW))
    assert s.txn_status == "I" and not s.committed.gucs and s.pending_tx is None
    assert s.replay_sql() == ["SET client_encoding TO 'UTF8'"]


def test_an_unprepared_statement_cycle_takes_the_one_call_paths_and_keeps_its_parse() -> None:
    """psycopg's default (no server-side preparation): Parse of the unnamed statement, Bind,
    Describe, Execute, Sync each time; the answer starts with ParseComplete. The unnamed Parse is
    recorded as the one-by-one path records it, and a named one becomes a prepared statement
    (PER-2: replayed on a new back connection)."""
    s = SessionState({"user": "u"})
    for name in ("", "s9"):
        request = _parse(name, SQLS[0], False) + _bind("", name, False) + pq.msg(b"D", b"P\0") \
            + _execute("", False) + pq.SYNC
        assert s.on_simple_request(request, *frames(request, NO_RUNS))
        assert [i.kind for i in s.inflight] == ["P", "B", "D", "E", "S"] and s.inflight[3].sql == SQLS[0]
        answer = pq.msg(b"1") + _answer((True, 1, True, "SELECT 3", b"I", False))
        assert s.on_simple_answer(answer, *frames(answer, DATA_ROW))
        assert not s.inflight and s.txn_status == "I"
    assert s.unnamed_parse == _parse("", SQLS[0], False)
    assert s.replay_parse() == [_parse("s9", SQLS[0], False)]
