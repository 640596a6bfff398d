"""The PER-1..PER-8 checkers on synthetic histories: each rule with histories that keep it and
histories that break it (plus the cases it cannot judge)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.history.core import Event, History
from harness.rules import persistent as per
from harness.rules import registry


class Builder:
    """Synthetic history of application sessions around switchovers (times in seconds)."""

    def __init__(self) -> None:
        self._rows: list[tuple[float, int, str, dict[str, Any]]] = []
        self._seq = itertools.count()
        self._op_ids = itertools.count(1)
        self._fids = itertools.count(1)

    def add(self, t: float, type_: str, **fields: Any) -> None:
        self._rows.append((t, next(self._seq), type_, fields))

    def open(self, p: str, t: float = 0.0, conn: int = 1) -> None:
        self.add(t, "session.open", process=p, conn=conn, front=f"127.0.0.1:{40000 + conn}")

    def ok(self, p: str, t0: float, t1: float | None = None, conn: int = 1, f: str = "point_select",
           value: Any = None) -> int:
        op_id = next(self._op_ids)
        self.add(t0, "op.invoke", process=p, op_id=op_id, f=f, value=value, conn=conn)
        self.add(t1 if t1 is not None else t0 + 0.001, "op.ok", process=p, op_id=op_id, f=f, value=value, conn=conn)
        return op_id

    def lost(self, p: str, t0: float, t1: float | None = None, conn: int = 1, f: str = "point_select",
             error: str = "OperationalError: server closed the connection unexpectedly",
             timed_out: bool = False, conn_lost: bool = True) -> None:
        op_id = next(self._op_ids)
        self.add(t0, "op.invoke", process=p, op_id=op_id, f=f, conn=conn)
        self.add(t1 if t1 is not None else t0 + 0.001, "op.fail", process=p, op_id=op_id, f=f, error=error,
                 conn_lost=conn_lost, conn=conn, timed_out=timed_out)

    def switchover(self, t0: float, t1: float, new: str = "n2") -> None:
        fid = next(self._fids)
        self.add(t0, "fault.start", fault="switchover", id=fid, node=None, params={})
        self.add((t0 + t1) / 2, "role.change", node=new, old_role="mirror", new_role="principal")
        self.add(t1, "fault.end", fault="switchover", id=fid, node=None, seconds=t1 - t0, error=None)

    def partition(self, t0: float, t1: float, node: str = "n2") -> None:
        fid = 1000 + next(self._fids)
        self.add(t0, "fault.start", fault="partition", id=fid, node=node, params={"how": "refuse"})
        self.add(t1, "fault.end", fault="partition", id=fid, node=node, seconds=t1 - t0, error=None)

    def events(self) -> list[Event]:
        rows = sorted(self._rows, key=lambda r: (r[0], r[1]))
        return [Event(i, t, type_, fields) for i, (t, _, type_, fields) in enumerate(rows)]


def _sessions_around_one_switchover(kept: list[bool]) -> list[Event]:
    b = Builder()
    for i, k in enumerate(kept):
        p = f"oltp-{i + 1}"
        b.open(p)
        b.ok(p, 1.0 + i * 0.001)
        if k:
            b.ok(p, 3.0 + i * 0.001)
        else:
            b.lost(p, 2.1)
            b.add(2.2, "session.reconnect", process=p, conn=2, previous=1)
            b.ok(p, 3.0, conn=2)
    b.switchover(2.0, 2.5)
    return b.events()


# ------------------------------------------------------------------------------------- PER-1

def test_per1_kept_when_every_connection_survives() -> None:
    v = per.check_keepalive_on_switchover(_sessions_around_one_switchover([True] * 20))
    assert v.valid is True and v.details["kept"] == 20 and "20/20" in v.observed


def test_per1_violated_when_one_connection_is_lost() -> None:
    events = _sessions_around_one_switchover([True] * 19 + [False])
    v = per.check_keepalive_on_switchover(events)
    assert v.valid is False
    assert "19/20" in v.observed and "1 client-visible error" in v.observed
    assert any(events[i].type == "op.fail" for i in v.evidence)


def test_per1_tolerance_parameters() -> None:
    events = _sessions_around_one_switchover([True] * 19 + [False])
    assert per.check_keepalive_on_switchover(events, min_keep_rate=0.9, max_errors=1).valid is True
    assert per.check_keepalive_on_switchover(events, min_keep_rate=0.9, max_errors=0).valid is False


def test_per1_error_on_a_kept_connection_still_violates_zero_errors() -> None:
    b = Builder()
    b.open("s1")
    b.ok("s1", 1.0)
    b.switchover(2.0, 2.5)
    b.lost("s1", 2.6, conn_lost=False, error="UndefinedObject: prepared statement does not exist")
    b.ok("s1", 3.0)
    v = per.check_keepalive_on_switchover(b.events())
    assert v.valid is False and v.details["kept"] == 1 and v.details["errors"] == 1


def test_per1_loss_at_the_second_of_several_switchovers() -> None:
    b = Builder()
    b.open("s1")
    b.ok("s1", 1.0)
    b.switchover(2.0, 2.5)
    b.ok("s1", 3.0)
    b.switchover(4.0, 4.5)
    b.lost("s1", 4.2)
    v = per.check_keepalive_on_switchover(b.events())
    assert v.valid is False and "at switchover 2" in v.details["lost"][0]
    assert v.details["kept"] == 1 and v.details["judged"] == 2


def test_per1_unknown_without_switchover_or_sessions() -> None:
    b = Builder()
    b.open("s1")
    b.ok("s1", 1.0)
    assert per.check_keepalive_on_switchover(b.events()).valid == "unknown"
    b.switchover(2.0, 2.5)  # no operation after it
    assert per.check_keepalive_on_switchover(b.events()).valid == "unknown"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=25))
def test_per1_keep_rate_matches_the_sessions(kept: list[bool]) -> None:
    v = per.check_keepalive_on_switchover(_sessions_around_one_switchover(kept))
    assert v.details["kept"] == sum(kept) and v.details["judged"] == len(kept)
    assert v.valid is all(kept)


# ------------------------------------------------------------------------------------- PER-2

def _state_history(after_value: str | None = "per2_s1, public", after_conn: int = 1,
                   error: str | None = None) -> list[Event]:
    b = Builder()
    b.open("st")
    b.add(0.5, "state.set", process="st", conn=1, key="search_path", kind="guc:string-list",
          value="per2_s1, public")
    b.add(0.6, "state.read", process="st", conn=1, key="search_path", value="per2_s1, public", phase="before")
    b.ok("st", 0.7)
    b.switchover(1.0, 1.5)
    fields: dict[str, Any] = {"process": "st", "conn": after_conn, "key": "search_path", "phase": "after"}
    if error is not None:
        fields["error"] = error
    else:
        fields["value"] = after_value
    b.add(2.0, "state.read", **fields)
    return b.events()


def test_per2_kept_when_state_reads_back() -> None:
    v = per.check_session_state_restored(_state_history())
    assert v.valid is True and v.details["settings"] == 1


@pytest.mark.parametrize("kwargs,needle", [
    ({"after_value": "public"}, "set 'per2_s1, public', read 'public'"),
    ({"after_conn": 2}, "connection changed"),
    ({"error": "UndefinedObject: prepared statement does not exist"}, "read failed"),
])
def test_per2_violated(kwargs: dict[str, Any], needle: str) -> None:
    events = _state_history(**kwargs)
    v = per.check_session_state_restored(events)
    assert v.valid is False and needle in v.observed
    assert {events[i].type for i in v.evidence} == {"state.set", "state.read"}


def test_per2_unknown_without_reads_after() -> None:
    events = [e for e in _state_history() if not (e.type == "state.read" and e.get("phase") == "after")]
    assert per.check_session_state_restored(events).valid == "unknown"


# ------------------------------------------------------------------------------------- PER-3

def _outage(closed_at: float | None, timed_out: bool = False, used_after: float | None = None,
            outage_end: float = 6.0) -> list[Event]:
    b = Builder()
    b.open("s1")
    b.ok("s1", 0.5)
    b.partition(0.9, outage_end)
    b.switchover(1.0, 1.3)
    if closed_at is not None:
        b.lost("s1", 1.1, closed_at, timed_out=timed_out)
    if used_after is not None:
        b.ok("s1", 1.1, used_after)
    return b.events()


def test_per3_kept_when_closed_with_error_within_window() -> None:
    v = per.check_recovery_window(_outage(closed_at=2.4), recovery_window=1.5, tolerance=0.5)
    assert v.valid is True and "principal back after 5.00 s" in v.observed


def test_per3_violated_when_closed_late_or_by_the_client_giving_up() -> None:
    late = per.check_recovery_window(_outage(closed_at=4.0), recovery_window=1.5, tolerance=0.5)
    assert late.valid is False and "closed late" in late.observed
    gave_up = per.check_recovery_window(_outage(closed_at=2.0, timed_out=True), recovery_window=1.5, tolerance=0.5)
    assert gave_up.valid is False and "gave up" in gave_up.observed


def test_per3_violated_when_the_session_silently_continues_after_the_window() -> None:
    v = per.check_recovery_window(_outage(closed_at=None, used_after=6.5), recovery_window=1.5, tolerance=0.5)
    assert v.valid is False and "not closed" in v.observed


def test_per3_principal_back_in_window() -> None:
    kept = per.check_recovery_window(_outage(closed_at=None, used_after=2.0, outage_end=1.8), recovery_window=3)
    assert kept.valid is True
    closed = per.check_recovery_window(_outage(closed_at=1.2, outage_end=1.8), recovery_window=3)
    assert closed.valid is False and "although the principal was back" in closed.observed


# ------------------------------------------------------------------------------------- PER-4 / PER-7

def _transactions(quick_kept: bool = True, slow_closed: bool = True) -> list[Event]:
    b = Builder()
    for p in ("quick", "slow"):
        b.open(p)
        b.ok(p, 0.5, f="begin")
        b.ok(p, 0.6, f="write")
    b.switchover(1.0, 3.5)
    if quick_kept:
        b.ok("quick", 1.5, 1.6, f="commit")
        b.ok("quick", 4.0, f="probe")
    else:
        b.lost("quick", 1.5, 1.6, f="commit")
    if slow_closed:
        b.lost("slow", 4.5, f="commit")
    else:
        b.ok("slow", 4.5, f="commit")
        b.ok("slow", 4.6, f="probe")
    return b.events()


def test_per4_and_per7_kept() -> None:
    events = _transactions()
    assert per.check_drain_window(events, drain_window=2.0).valid is True
    v7 = per.check_open_transaction_not_kept(events, drain_window=2.0)
    assert v7.valid is True and v7.details["judged"] == 1


def test_per4_violated_when_a_transaction_ending_in_the_window_is_closed() -> None:
    v = per.check_drain_window(_transactions(quick_kept=False), drain_window=2.0)
    assert v.valid is False and "but was closed" in v.observed


def test_per4_and_per7_violated_when_a_transaction_beyond_the_window_survives() -> None:
    events = _transactions(slow_closed=False)
    v4 = per.check_drain_window(events, drain_window=2.0)
    v7 = per.check_open_transaction_not_kept(events, drain_window=2.0)
    assert v4.valid is False and v7.valid is False and "not closed" in v7.observed


def test_per4_edge_of_window_not_judged() -> None:
    b = Builder()
    b.open("edge")
    b.ok("edge", 0.5, f="begin")
    b.switchover(1.0, 3.5)
    b.ok("edge", 3.05, f="commit")  # 2.05 s after the start of a 2 s window: within the margin
    b.ok("edge", 4.0, f="probe")
    assert per.check_drain_window(b.events(), drain_window=2.0, margin=0.25).valid == "unknown"


# ------------------------------------------------------------------------------------- PER-5

def _temp(closed: bool, dropped: bool = False) -> list[Event]:
    b = Builder()
    b.open("t")
    b.add(0.5, "state.set", process="t", conn=1, key="tmp", kind="temp_table", value="present")
    b.ok("t", 0.6)
    if dropped:
        b.add(0.7, "state.set", process="t", conn=1, key="tmp", kind="temp_table_dropped", value=None)
    b.switchover(1.0, 1.5)
    if closed:
        b.lost("t", 1.2, 1.3, error="AdminShutdown: not kept across switchover: session holds temporary tables")
    else:
        b.lost("t", 1.6, conn_lost=False, error='UndefinedTable: relation "tmp" does not exist')
        b.ok("t", 1.7, f="probe")
    return b.events()


def test_per5_kept_when_temp_session_closed() -> None:
    v = per.check_temp_tables_not_kept(_temp(closed=True))
    assert v.valid is True and "temporary tables" in v.observed


def test_per5_violated_when_temp_session_continues() -> None:
    events = _temp(closed=False)
    v = per.check_temp_tables_not_kept(events)
    assert v.valid is False and "not closed" in v.observed
    assert events[v.evidence[-1]].type == "op.ok"


def test_per5_dropped_temp_table_not_judged() -> None:
    assert per.check_temp_tables_not_kept(_temp(closed=False, dropped=True)).valid == "unknown"


# ------------------------------------------------------------------------------------- PER-6

def _stream(outcome: str, end: float) -> list[Event]:
    b = Builder()
    b.open("r")
    b.ok("r", 0.2)
    b.add(0.5, "op.invoke", process="r", op_id=500, f="stream", conn=1)
    b.add(0.6, "stream.progress", process="r", op_id=500, conn=1, rows=2000)
    b.switchover(1.0, 1.5)
    if outcome == "ok":
        b.add(end, "op.ok", process="r", op_id=500, f="stream", value=300000, conn=1)
    else:
        b.add(end, "op.fail", process="r", op_id=500, f="stream", error="AdminShutdown: result only partly delivered",
              conn_lost=True, conn=1)
    return b.events()


def test_per6_kept_when_partial_result_closed() -> None:
    assert per.check_partial_result_not_kept(_stream("lost", 2.1), drain_window=1.0).valid is True


def test_per6_violated_when_partial_result_finishes_after_the_window() -> None:
    v = per.check_partial_result_not_kept(_stream("ok", 4.0), drain_window=1.0)
    assert v.valid is False and "result partly delivered" in v.observed


def test_per6_result_finished_inside_the_window_is_not_its_case() -> None:
    assert per.check_partial_result_not_kept(_stream("ok", 1.4), drain_window=1.0).valid == "unknown"


# ------------------------------------------------------------------------------------- PER-8

def _cursor_and_copy(cursor_closed: bool, copy_closed: bool) -> list[Event]:
    b = Builder()
    b.open("c")
    b.add(0.5, "state.set", process="c", conn=1, key="c1", kind="cursor", value="open")
    b.ok("c", 0.6, f="fetch")
    b.open("cp")
    b.ok("cp", 0.2)
    b.add(0.7, "op.invoke", process="cp", op_id=900, f="copy", conn=1)
    b.switchover(1.0, 1.5)
    if cursor_closed:
        b.lost("c", 1.6, f="fetch")
    else:
        b.ok("c", 1.6, f="fetch")
    if copy_closed:
        b.add(2.1, "op.info", process="cp", op_id=900, f="copy", error="AdminShutdown: COPY in progress",
              conn_lost=True, conn=1)
    else:
        b.add(4.0, "op.ok", process="cp", op_id=900, f="copy", value=400, conn=1)
    return b.events()


def test_per8_kept_when_cursor_and_copy_sessions_closed() -> None:
    v = per.check_cursor_not_kept(_cursor_and_copy(True, True), drain_window=1.0)
    assert v.valid is True and v.details["judged"] == 2


@pytest.mark.parametrize("cursor_closed,copy_closed,needle", [
    (False, True, "holds cursor"), (True, False, "copy in progress")])
def test_per8_violated(cursor_closed: bool, copy_closed: bool, needle: str) -> None:
    v = per.check_cursor_not_kept(_cursor_and_copy(cursor_closed, copy_closed), drain_window=1.0)
    assert v.valid is False and needle in v.observed


# ------------------------------------------------------------------------------------- registry

def test_every_per_rule_is_registered_and_rechecks_a_saved_history() -> None:
    for rule in [f"PER-{n}" for n in range(1, 9)]:
        assert registry.get(rule).checker.__module__ == "harness.rules.persistent.checks"
        assert per.CHECKERS[rule] is registry.get(rule).checker
    history = History.from_events(_transactions(slow_closed=False),
                                  meta={"rule_params": {"PER-7": {"drain_window": 2.0}}})
    assert registry.check("PER-7", history).valid is False
    assert registry.check("PER-1", History.from_events(_sessions_around_one_switchover([True]))).valid is True
