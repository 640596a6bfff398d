"""The session tracker's one-call paths for the commonest request and answer (harness/persistproxy/
fastpath.py: compiled in ``_track.c``, and in Python on top of state.py ``on_simple_request`` /
``on_simple_answer``; the proxy's throughput) record exactly what the message-by-message tracker records
(PER-2 replay data, PER-4..8 blockers), on any history: a property test over random front and back
chunks, well-formed and not, for both implementations."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.persistproxy import fastpath
from harness.persistproxy import protocol as pq
from harness.persistproxy.frames import NO_RUNS, frames
from harness.persistproxy.state import SessionState

# (simple_request, simple_answer) of each implementation; the compiled one must be built (make setup)
IMPLEMENTATIONS = {"python": (fastpath.simple_request_py, fastpath.simple_answer_py)}
if fastpath.COMPILED:
    from harness.persistproxy import _frames

    IMPLEMENTATIONS["compiled"] = (_frames.simple_request, _frames.simple_answer)

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
# any 3 to 5 well-formed messages: shapes near the one-call patterns that must not take them
_front_messages = [_parse("s1", SQLS[0], False), _bind("", "s1", False), pq.msg(b"D", b"P\0"),
                   pq.msg(b"D", b"Ss1\0"), _execute("", False), pq.SYNC, pq.query("SELECT 1"),
                   pq.msg(b"C", b"Ss1\0"), pq.msg(b"H")]
_front_mix = st.lists(st.sampled_from(_front_messages), min_size=3, max_size=5).map(b"".join)
front_chunk = st.one_of(
    # the patterns with a one-call path (now and then malformed), most often
    _request, _request, _request, _request, _front_mix,
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

_back_messages = [pq.msg(b"1"), pq.msg(b"2"), pq.msg(b"T", b"\0\1c\0" + bytes(18)), pq.msg(b"n"),
                  pq.msg(b"D", b"\0\1\0\0\0\1x"), pq.msg(b"C", pq.cstr("SELECT 1")), pq.ready_for_query(b"I"),
                  pq.msg(b"s"), pq.msg(b"3")]
_back_mix = st.lists(st.sampled_from(_back_messages), min_size=3, max_size=7).map(b"".join)
back_chunk = st.one_of(
    matching, matching, matching, matching, matching, matching, matching, matching, _back_mix,
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


def test_the_compiled_one_call_paths_are_the_ones_in_use() -> None:
    """Figures of the proxy's speed are of the compiled tracking: built by ``make setup`` (gcc)."""
    assert fastpath.COMPILED, "harness.persistproxy._frames has no compiled tracking: run `make setup` (needs gcc)"
    assert fastpath.simple_request is IMPLEMENTATIONS["compiled"][0]
    assert fastpath.simple_answer is IMPLEMENTATIONS["compiled"][1]


def _whole(request: Any, answer: Any, s: SessionState, chunk: bytes, is_front: bool) -> bool:
    """Run one implementation's one-call path over ``chunk``: whether it took the chunk whole."""
    if is_front:
        return bool(request(s, chunk))
    end = answer(s, chunk)
    assert end in (0, len(chunk)), "these chunks hold nothing after the answer"
    return end == len(chunk)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(_rarely, front_chunk, back_chunk), min_size=1, max_size=12))
def test_one_call_paths_record_what_message_by_message_does(impl: str, steps: list[tuple[bool, bytes, bytes]]) -> None:
    request, answer = IMPLEMENTATIONS[impl]
    fast, slow = SessionState({"user": "u"}), SessionState({"user": "u"})
    for answer_first, front, back in steps:
        if isinstance(back, tuple):
            rows, tag, status, no_data = back
            described = b"D\0\0\0\6P" in front
            back = (pq.msg(b"1") if front[:1] == b"P" else b"") + _answer(
                (True, (2 if no_data else 1) if described else 0, rows and not no_data, tag, status, False))
        for chunk, is_front in ((back, False), (front, True)) if answer_first else ((front, True), (back, False)):
            took = _whole(request, answer, fast, chunk, is_front)
            one_by_one = _one_by_one_front if is_front else _one_by_one_back
            got = None if took else _outcome(one_by_one, fast, chunk)
            want = _outcome(one_by_one, slow, chunk)
            assert got == want
            assert _snapshot(fast) == _snapshot(slow)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_the_one_call_paths_are_taken_for_a_prepared_statement_cycle(impl: str) -> None:
    """The property above would hold vacuously if the one-call paths never ran: here they must."""
    track_request, track_answer = IMPLEMENTATIONS[impl]
    s = SessionState({"user": "u"})
    parse = pq.msg(b"P", pq.cstr("s1") + pq.cstr(SQLS[0]) + b"\0\0")
    s.on_front(b"P", parse)
    s.on_front(b"S", pq.SYNC)
    s.on_back(b"1", pq.msg(b"1"))
    s.on_back(b"Z", pq.ready_for_query(b"I"))
    request = _bind("", "s1", False) + pq.msg(b"D", b"P\0") + _execute("", False) + pq.SYNC
    assert track_request(s, request)
    assert [i.kind for i in s.inflight] == ["B", "D", "E", "S"] and s.inflight[2].sql == SQLS[0]
    answer = _answer((True, 1, True, "SELECT 3", b"T", False))
    assert track_answer(s, answer) == len(answer)
    assert not s.inflight and s.txn_status == "T" and not s.rows_started and s.counters["statements"] == 1
    # a tag that may change state is left to the message-by-message path
    s.on_front(b"P", pq.msg(b"P", pq.cstr("") + pq.cstr("SET x.y = 1") + b"\0\0"))
    s.on_front(b"S", pq.SYNC)
    _one_by_one_back(s, pq.msg(b"1") + pq.ready_for_query(b"T"))
    set_request = _bind("", "", False) + _execute("", False) + pq.SYNC
    assert track_request(s, set_request)
    assert s.inflight[1].sql == "SET x.y = 1"
    set_answer = _answer((True, 0, False, "SET", b"T", False))
    assert not track_answer(s, set_answer)
    assert len(s.inflight) == 3, "a refused answer records nothing"


@pytest.mark.parametrize("chunk", [
    _bind("", "s1", True) + _execute("", False) + pq.SYNC,  # the statement name is not terminated
    _bind("", "s1", False) + _execute("", True) + pq.SYNC,
])
@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_a_malformed_request_is_refused_by_the_one_call_path_and_named_by_on_front(impl: str, chunk: bytes) -> None:
    track_request, track_answer = IMPLEMENTATIONS[impl]
    s = SessionState({"user": "u"})
    assert not track_request(s, chunk)
    assert not s.inflight
    with pytest.raises(pq.ProtocolError, match="NUL-terminated"):
        _one_by_one_front(s, chunk)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_a_prepared_rollback_answered_in_one_call_drops_the_transaction_s_settings(impl: str) -> None:
    """PER-2: a SET inside a transaction is replayed only if the transaction commits; a ROLLBACK run as
    a prepared statement (its answer takes the one-call path) must drop it, as on the server."""
    track_request, track_answer = IMPLEMENTATIONS[impl]
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
    assert track_request(s, request)
    answer = _answer((True, 0, False, "ROLLBACK", b"I", False))
    assert track_answer(s, answer) == len(answer)
    assert s.txn_status == "I" and not s.committed.gucs and s.pending_tx is None
    assert s.replay_sql() == ["SET client_encoding TO 'UTF8'"]


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_an_unprepared_statement_cycle_takes_the_one_call_paths_and_keeps_its_parse(impl: str) -> None:
    """psycopg's default (no server-side preparation): Parse of the unnamed statement, Bind,
    Describe, Execute, Sync each time; the answer starts with ParseComplete. The unnamed Parse is
    recorded as the one-by-one path records it, and a named one becomes a prepared statement
    (PER-2: replayed on a new back connection)."""
    track_request, track_answer = IMPLEMENTATIONS[impl]
    s = SessionState({"user": "u"})
    for name in ("", "s9"):
        request = _parse(name, SQLS[0], False) + _bind("", name, False) + pq.msg(b"D", b"P\0") \
            + _execute("", False) + pq.SYNC
        assert track_request(s, request)
        assert [i.kind for i in s.inflight] == ["P", "B", "D", "E", "S"] and s.inflight[3].sql == SQLS[0]
        answer = pq.msg(b"1") + _answer((True, 1, True, "SELECT 3", b"I", False))
        assert track_answer(s, answer) == len(answer)
        assert not s.inflight and s.txn_status == "I"
    assert s.unnamed_parse == _parse("", SQLS[0], False)
    assert s.replay_parse() == [_parse("s9", SQLS[0], False)]


_REQUEST_PARTS = {"P": _parse("s1", SQLS[0], False), "B": _bind("", "s1", False), "D": pq.msg(b"D", b"P\0"),
                  "E": _execute("", False), "S": pq.SYNC}


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_every_request_shape_up_to_five_messages_is_taken_only_when_it_is_the_cycle(impl: str) -> None:
    """Exhaustive over 3-5 messages of Parse, Bind, Describe, Execute and Sync: exactly [P]B[D]ES is
    taken, and then the state is what the message-by-message tracker records."""
    track_request, _ = IMPLEMENTATIONS[impl]
    for size in (3, 4, 5):
        for shape in itertools.product("PBDES", repeat=size):
            chunk = b"".join(_REQUEST_PARTS[k] for k in shape)
            fast, slow = SessionState({"user": "u"}), SessionState({"user": "u"})
            assert not track_request(fast, chunk + pq.SYNC[:3]), "a chunk ending in part of a message"
            took = track_request(fast, chunk)
            assert took == ("".join(shape) in ("BES", "BDES", "PBES", "PBDES")), shape
            if took:
                _one_by_one_front(slow, chunk)
                assert _snapshot(fast) == _snapshot(slow), shape


_ANSWER_PARTS = {"1": pq.msg(b"1"), "2": pq.msg(b"2"), "T": pq.msg(b"T", b"\0\1c\0" + bytes(18)), "n": pq.msg(b"n"),
                 "D": pq.msg(b"D", b"\0\1\0\0\0\1x"), "C": pq.msg(b"C", pq.cstr("SELECT 1")),
                 "Z": pq.ready_for_query(b"T"), "z": pq.msg(b"Z")}  # z: a ReadyForQuery with no status byte


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_every_answer_shape_up_to_five_messages_is_taken_only_when_it_answers_the_cycle(impl: str) -> None:
    """Exhaustive over 1-4 messages of ParseComplete, BindComplete, RowDescription, NoData, DataRow and
    CommandComplete, then a ReadyForQuery (of its usual length or not), with the request it would
    answer in flight: exactly [1]2[T|n][D...]CZ (no DataRow after NoData) is taken, the offset past it
    returned (what follows it is not its to take), and the state is then what the message-by-message
    tracker records."""
    track_request, track_answer = IMPLEMENTATIONS[impl]
    for size in (1, 2, 3, 4):
        for body in itertools.product("12TnDC", repeat=size):
            for ready in "Zz":
                shape = "".join(body) + ready
                parsed, described = shape.startswith("1"), "T" in shape or "n" in shape
                request = (_REQUEST_PARTS["P"] if parsed else b"") + _REQUEST_PARTS["B"] \
                    + (_REQUEST_PARTS["D"] if described else b"") + _REQUEST_PARTS["E"] + _REQUEST_PARTS["S"]
                chunk = b"".join(_ANSWER_PARTS[k] for k in shape)
                fast, slow = SessionState({"user": "u"}), SessionState({"user": "u"})
                for s in (fast, slow):
                    _one_by_one_front(s, request)
                end = track_answer(fast, chunk + _ANSWER_PARTS["D"][:7])  # then part of the next message
                collapsed = shape.replace("DD", "D").replace("DD", "D")
                want = collapsed in {p + a for p in ("", "1") for a in ("2TDCZ", "2TCZ", "2nCZ", "2DCZ", "2CZ")}
                assert end == (len(chunk) if want else 0), shape
                if want:
                    _one_by_one_back(slow, chunk)
                    assert _snapshot(fast) == _snapshot(slow), shape
