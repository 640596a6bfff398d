"""MIR-1 … MIR-13 checkers on synthetic histories: each rule kept, violated and unknown.

Histories are built with explicit ``t``; the proxy view (``conn.*``) and the client view
(``attempt.*``) follow docs/events.md. The schedule rules (MIR-4/5/6/7) are also property-tested:
a correct schedule for a generated login timeout is kept; one perturbed attempt, a swapped order or a
dropped delay is violated with the deciding events as evidence.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules import registry
from harness.rules.mirroring import (
    CHECKERS,
    check_database_required,
    check_initial_partner_first,
    check_no_automatic_reconnect,
    check_no_failover_partner_no_alternation,
    check_no_timeout_no_end,
    check_partner_alternation,
    check_partner_cache_update,
    check_partner_retry_delays,
    check_redirect_keeps_initial_name,
    check_retry_time_schedule,
    check_shutdown_aborts_attempts,
    check_stale_failover_partner,
    check_truncated_last_round,
    retry_delay,
    retry_time,
)

A, B, C = "pg-a", "pg-b", "pg-c"
LISTEN = {A: "127.0.0.1:20001", B: "127.0.0.1:20002", C: "127.0.0.1:20003"}
P = {"initial": A, "failover": B}


class Hist:
    """A tiny builder of synthetic histories."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._conn = itertools.count(1)
        self._op = itertools.count(1)

    def add(self, type_: str, t: float, **fields: Any) -> Event:
        e = Event(len(self.events), t, type_, fields)
        self.events.append(e)
        return e

    def invoke(self, t: float, process: str = "c1", f: str = "open", value: Any = None) -> int:
        op_id = next(self._op)
        self.add("op.invoke", t, process=process, op_id=op_id, f=f, value=value)
        return op_id

    def finish(self, t: float, op_id: int, kind: str = "ok", process: str = "c1", f: str = "open",
               value: Any = None, error: str | None = None) -> Event:
        fields: dict[str, Any] = {"process": process, "op_id": op_id, "f": f}
        if kind == "ok":
            fields["value"] = value
        else:
            fields["error"] = error or "failed"
        return self.add(f"op.{kind}", t, **fields)

    def conn(self, proxy: str, t0: float, t1: float | None, by: str = "client", down: int = 0,
             upstream_failed: bool = False) -> int:
        cid = next(self._conn)
        self.add("conn.accepted", t0, proxy=proxy, conn_id=cid, client="127.0.0.1:40000",
                 listen=LISTEN[proxy], upstream="127.0.0.1:5432", node=proxy.split("-")[1])
        if upstream_failed:
            self.add("conn.upstream_failed", t0 + 0.0005, proxy=proxy, conn_id=cid, upstream="x",
                     error="connection refused")
        if t1 is not None:
            self.add("conn.closed", t1, proxy=proxy, conn_id=cid, by=by, reason="", bytes_up=10,
                     bytes_down=down)
        return cid

    def client_attempt(self, n: int, target: str, t0: float, t1: float, outcome: str,
                       process: str = "c1") -> None:
        addr = LISTEN[A] if target == "initial" else LISTEN[B]
        self.add("attempt.start", t0, process=process, attempt=n, target=target, address=addr,
                 retry_time=None)
        self.add("attempt.end", t1, process=process, attempt=n, target=target, address=addr,
                 outcome=outcome, error=None)

    def sorted(self) -> list[Event]:
        return sorted(self.events, key=lambda e: e.t)


# ---------------------------------------------------------------------------------- schedules

def timeout_schedule(lt: float, t0: float = 100.0, perturb: tuple[int, float] | None = None,
                     swap: int | None = None) -> tuple[Hist, list[tuple[str, float, float]]]:
    """A client facing two black holes: the correct MIR-5/6 schedule, optionally with attempt
    ``perturb[0]`` held ``perturb[1]`` s longer, or attempts ``swap`` and ``swap+1`` swapped."""
    h = Hist()
    op = h.invoke(t0)
    t, k, deadline = t0, 0, t0 + lt
    plan = []
    while t < deadline - 1e-9:
        k += 1
        rt = retry_time((k + 1) // 2, lt)
        held = min(rt, deadline - t)
        if perturb and perturb[0] == k:
            held += perturb[1]
        role = "initial" if k % 2 else "failover"
        plan.append((role, t, t + held))
        t += held
    if swap is not None:
        (r1, a1, b1), (r2, a2, b2) = plan[swap], plan[swap + 1]
        plan[swap], plan[swap + 1] = (r2, a1, b1), (r1, a2, b2)
    for role, a, b in plan:
        h.conn(A if role == "initial" else B, a, b, by="client")
    h.finish(max(deadline, plan[-1][2]), op, "fail", error="login timeout expired")
    return h, plan


def fast_schedule(lt: float, durations: list[float], t0: float = 50.0, kind: str = "inactive",
                  drop_delay: int | None = None, delays: tuple[float, ...] = (0.1, 0.2, 0.4, 0.8, 1.0)
                  ) -> tuple[Hist, list[tuple[str, float, float]]]:
    """A client facing two inactive (or refusing) partners: fast attempts, MIR-7 delays after each
    round, failing at the login timeout. ``drop_delay=r`` leaves out the delay after round ``r``."""
    h = Hist()
    op = h.invoke(t0)
    t, k, deadline = t0, 0, t0 + lt
    plan = []
    dur = itertools.cycle(durations)
    while t < deadline:
        k += 1
        d = min(next(dur), deadline - t)
        role = "initial" if k % 2 else "failover"
        plan.append((role, t, t + d))
        if kind == "inactive":
            h.conn(A if role == "initial" else B, t, t + d, by="upstream", down=90)
        else:
            h.client_attempt(k, role, t, t + d, "refused")
        t += d
        if k % 2 == 0 and t < deadline:
            r = k // 2
            if r != drop_delay:
                t = min(t + retry_delay(r, delays), deadline)
    h.finish(deadline, op, "fail", error="login timeout expired")
    return h, plan


# ------------------------------------------------------------------------------------ MIR-1

def test_mir_1_kept_and_violated() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.001, 0.1, by="upstream", down=50)
    h.conn(B, 0.1, None)
    h.finish(0.12, op, "ok")
    v = check_initial_partner_first(h.events, **P)
    assert v.valid is True and 1 in v.evidence

    h = Hist()
    op = h.invoke(0.0)
    h.conn(B, 0.001, None)
    h.finish(0.01, op, "ok")
    v = check_initial_partner_first(h.events, **P)
    assert v.valid is False
    assert "attempt 1 to the failover" in v.observed and v.evidence == (0, 1)


def test_mir_1_unknown_without_attempts_and_matches_listen_addresses() -> None:
    h = Hist()
    h.invoke(0.0)
    assert check_initial_partner_first(h.events, **P).valid == "unknown"
    h2, _ = timeout_schedule(1.0)
    v = check_initial_partner_first(h2.events, initial=LISTEN[A], failover="localhost:20002")
    assert v.valid is True


def test_mir_1_uses_client_view_for_refused_connects() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.client_attempt(1, "initial", 0.0, 0.0005, "refused")
    h.conn(B, 0.001, None)
    h.finish(0.01, op, "ok")
    v = check_initial_partner_first(h.events, **P)
    assert v.valid is True and v.details["client_view_attempts"] == [1, 2]
    assert check_initial_partner_first(h.events, **P, use_client_view=False).valid is False  # proxy view only: B first


# ------------------------------------------------------------------------------------ MIR-2

def test_mir_2_kept_violated_unknown() -> None:
    h = Hist()
    op = h.invoke(0.0, value={"connstring": "Server=pg-a;Failover Partner=pg-b"})
    h.finish(0.001, op, "fail", error="ConnectionStringError: MIR-2: no database name")
    assert check_database_required(h.events, **P).valid is True

    h = Hist()
    op = h.invoke(0.0, value={"database": "", "initial": "a"})
    h.conn(A, 0.001, None)
    h.finish(0.01, op, "fail")
    v = check_database_required(h.events, **P)
    assert v.valid is False and "made 1 connection attempt" in v.observed

    h = Hist()
    op = h.invoke(0.0, value={"database": None})
    h.finish(0.01, op, "ok")
    assert check_database_required(h.events, **P).valid is False

    h = Hist()
    op = h.invoke(0.0, value={"database": "db"})
    h.finish(0.01, op, "ok")
    assert check_database_required(h.events, **P).valid == "unknown"


# ------------------------------------------------------------------------------------ MIR-3

def test_mir_3_only_initial_partner() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 1.0, by="client")
    h.finish(1.0, op, "fail")
    assert check_no_failover_partner_no_alternation(h.events, **P, login_timeout=1.0).valid is True

    h.conn(B, 0.5, 0.6, by="upstream", down=10)
    v = check_no_failover_partner_no_alternation(h.events, **P, login_timeout=1.0)
    assert v.valid is False and "not named in the connection string" in v.observed

    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 1.3, by="client")
    h.finish(1.3, op, "fail")
    v = check_no_failover_partner_no_alternation(h.events, **P, login_timeout=1.0)
    assert v.valid is False and "past the login timeout" in v.observed

    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, None)
    h.finish(0.01, op, "ok")
    assert check_no_failover_partner_no_alternation(h.events, **P, login_timeout=1.0).valid == "unknown"


# ------------------------------------------------------------------------------------ MIR-4/5/6

def test_mir_5_documented_15s_schedule_kept() -> None:
    h, plan = timeout_schedule(15.0)
    held = [round(b - a, 3) for _, a, b in plan]
    assert held == [1.2, 1.2, 2.4, 2.4, 3.6, 3.6, 0.6]
    for check in (check_partner_alternation, check_retry_time_schedule, check_truncated_last_round):
        v = check(h.events, **P, login_timeout=15.0)
        assert v.valid is True, v.summary


def test_mir_5_violation_message_is_precise() -> None:
    h, plan = timeout_schedule(2.0, t0=0.0, perturb=(3, -0.089))
    v = check_retry_time_schedule(h.events, **P, login_timeout=2.0)
    assert v.valid is False
    assert v.observed == "attempt 3 (initial, round 2) held 0.231 s; expected 0.320 s ±0.020"
    assert v.evidence == (0, 5, 6)


def test_mir_5_unknown_when_nothing_timed_out() -> None:
    h, _ = fast_schedule(1.0, [0.002])
    assert check_retry_time_schedule(h.events, **P, login_timeout=1.0).valid == "unknown"


def test_mir_5_opened_too_late_and_psycopg_like_per_host_timeout() -> None:
    h = Hist()  # psycopg multi-host: black hole first, held 2 s (connect_timeout=2), then B opens
    op = h.invoke(0.0)
    h.conn(A, 0.0, 2.0, by="client")
    h.conn(B, 2.0, None)
    h.finish(2.01, op, "ok")
    v = check_retry_time_schedule(h.events, **P, login_timeout=2.0)
    assert v.valid is False
    assert v.observed.startswith("attempt 1 (initial, round 1) held 2.000 s; expected 0.160 s")
    assert check_partner_alternation(h.events, **P, login_timeout=2.0).valid is True


def test_mir_4_gives_up_early_like_each_host_once() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 0.004, by="upstream", down=80)
    h.conn(B, 0.005, 0.009, by="upstream", down=80)
    h.finish(0.01, op, "fail", error="no host accepted")
    v = check_partner_alternation(h.events, **P, login_timeout=5.0)
    assert v.valid is False and "gave up after 0.010 s and 2 attempt(s), 4.990 s before" in v.observed
    assert check_partner_alternation(h.events, **P, login_timeout=None).valid is False


def test_mir_4_non_retryable_error_may_end_early() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 0.004, by="upstream", down=80)
    h.add("attempt.start", 0.0, process="c1", attempt=1, target="initial", address=LISTEN[A])
    h.add("attempt.end", 0.004, process="c1", attempt=1, target="initial", address=LISTEN[A],
          outcome="error", error="password authentication failed")
    h.finish(0.005, op, "fail")
    assert check_partner_alternation(h.events, **P, login_timeout=5.0).valid is True


def test_mir_6_past_deadline_and_not_truncated() -> None:
    h, _ = timeout_schedule(15.0, perturb=(7, 0.3))  # last attempt runs 0.3 s past the deadline
    v = check_truncated_last_round(h.events, **P, login_timeout=15.0)
    assert v.valid is False and "past the login timeout" in v.observed

    h = Hist()  # full rounds, then gives up 0.6 s early instead of a truncated last attempt
    op = h.invoke(0.0)
    t = 0.0
    for k, rt in enumerate([1.2, 1.2, 2.4, 2.4, 3.6, 3.6], 1):
        h.conn(A if k % 2 else B, t, t + rt)
        t += rt
    h.finish(t, op, "fail")
    v = check_truncated_last_round(h.events, **P, login_timeout=15.0)
    assert v.valid is False and "truncated to end at the login timeout" in v.observed
    assert check_partner_alternation(h.events, **P, login_timeout=15.0).valid is False


def test_mir_6_unknown_without_failed_open() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, None)
    h.finish(0.01, op, "ok")
    assert check_truncated_last_round(h.events, **P, login_timeout=1.0).valid == "unknown"


@settings(max_examples=60, deadline=None)
@given(lt=st.floats(0.5, 30.0), t0=st.floats(0.0, 1e5))
def test_schedule_kept_property(lt: float, t0: float) -> None:
    h, _ = timeout_schedule(lt, t0=t0)
    for check in (check_partner_alternation, check_retry_time_schedule, check_truncated_last_round):
        assert check(h.events, **P, login_timeout=lt).valid is True


@settings(max_examples=80, deadline=None)
@given(lt=st.floats(1.0, 30.0), data=st.data())
def test_schedule_perturbed_attempt_violates_mir_5(lt: float, data: st.DataObject) -> None:
    _, plan = timeout_schedule(lt)
    k = data.draw(st.integers(1, len(plan)), label="attempt")
    held = plan[k - 1][2] - plan[k - 1][1]
    sign = data.draw(st.sampled_from([1, -1]) if held > 0.1 else st.just(1), label="sign")
    delta = sign * data.draw(st.floats(0.026, 0.09), label="delta")
    h, _ = timeout_schedule(lt, perturb=(k, delta))
    v = check_retry_time_schedule(h.events, **P, login_timeout=lt)
    assert v.valid is False
    assert f"attempt {k} " in v.observed
    accepted = [e.index for e in h.events if e.type == "conn.accepted"]
    assert accepted[k - 1] in v.evidence


@settings(max_examples=40, deadline=None)
@given(lt=st.floats(1.0, 30.0), data=st.data())
def test_schedule_swapped_order_violates_mir_4(lt: float, data: st.DataObject) -> None:
    _, plan = timeout_schedule(lt)
    assume(len(plan) >= 2)
    i = data.draw(st.integers(0, len(plan) - 2))
    h, _ = timeout_schedule(lt, swap=i)
    v = check_partner_alternation(h.events, **P, login_timeout=lt)
    assert v.valid is False and f"attempt {i + 1} " in v.observed


@settings(max_examples=60, deadline=None)
@given(lt=st.floats(1.0, 8.0), durations=st.lists(st.floats(0.0005, 0.01), min_size=1, max_size=4),
       kind=st.sampled_from(["inactive", "refused"]))
def test_fast_schedule_delays_kept(lt: float, durations: list[float], kind: str) -> None:
    h, _ = fast_schedule(lt, durations, kind=kind)
    v = check_partner_retry_delays(h.events, **P)
    assert v.valid is True, v.summary
    assert check_partner_alternation(h.events, **P, login_timeout=lt).valid is True
    assert check_truncated_last_round(h.events, **P, login_timeout=lt).valid is True
    if kind == "refused":
        assert v.details["client_view_attempts"]


@settings(max_examples=60, deadline=None)
@given(lt=st.floats(2.5, 8.0), durations=st.lists(st.floats(0.0005, 0.01), min_size=1, max_size=4),
       data=st.data())
def test_fast_schedule_dropped_delay_violates_mir_7(lt: float, durations: list[float],
                                                    data: st.DataObject) -> None:
    _, plan = fast_schedule(lt, durations)
    full_rounds_followed = (len(plan) - 1) // 2
    assume(full_rounds_followed >= 1)
    r = data.draw(st.integers(1, full_rounds_followed), label="round")
    h, _ = fast_schedule(lt, durations, drop_delay=r)
    v = check_partner_retry_delays(h.events, **P)
    assert v.valid is False
    assert f"delay after round {r} " in v.observed and f"expected {retry_delay(r):.3f} s" in v.observed


def test_mir_7_timed_out_round_gets_no_delay_and_wrong_delay_detected() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 0.08)
    h.conn(B, 0.08, 0.16)
    h.conn(A, 0.26, 0.27, by="upstream", down=40)  # 100 ms pause after a timed-out round
    h.finish(0.28, op, "ok")
    v = check_partner_retry_delays(h.events, **P)
    assert v.valid is False and "delay after round 1 (timed out) was 0.100 s; expected none" in v.observed

    h, _ = fast_schedule(3.0, [0.002], delays=(0.1, 0.25, 0.4, 0.8, 1.0))
    v = check_partner_retry_delays(h.events, **P)
    assert v.valid is False and "delay after round 2" in v.observed and "expected 0.200 s" in v.observed

    h, _ = timeout_schedule(1.0)
    assert check_partner_retry_delays(h.events, **P).valid == "unknown"


def test_mir_7_delay_inside_a_round_is_a_violation() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 0.002, by="upstream", down=40)
    h.conn(B, 0.102, 0.104, by="upstream", down=40)
    h.conn(A, 0.204, None)
    h.finish(0.21, op, "ok")
    v = check_partner_retry_delays(h.events, **P)
    assert v.valid is False and "expected no delay inside a round" in v.observed


@pytest.mark.parametrize("tol", [0.051, 0.2, 0, -0.01])
def test_tolerance_looser_than_50ms_or_non_positive_is_config_error(tol: float) -> None:
    h, _ = timeout_schedule(1.0)
    with pytest.raises(ConfigError, match="tolerance"):
        check_retry_time_schedule(h.events, **P, login_timeout=1.0, tolerance=tol)


def test_missing_parameters_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="needs initial"):
        check_initial_partner_first([])
    with pytest.raises(ConfigError, match="login_timeout"):
        check_truncated_last_round([], **P)
    with pytest.raises(ConfigError, match="retry_base"):
        check_retry_time_schedule([], **P)


# ------------------------------------------------------------------------------------ MIR-8

def test_mir_8_still_alternating_after_window() -> None:
    h = Hist()
    h.invoke(0.0)
    t, k = 0.0, 0
    while t < 3.0:
        k += 1
        h.conn(A if k % 2 else B, t, t + 0.002, by="upstream", down=40)
        t += 0.002
        if k % 2 == 0:
            t += retry_delay(k // 2)
    h.add("fault.end", 3.2, fault="observe", id=1, node=None, seconds=3.2, error=None)
    assert check_no_timeout_no_end(h.events, **P, window=3.0).valid is True
    v = check_no_timeout_no_end(h.events, initial=A, failover=C, window=3.0)  # nothing reached C
    assert v.valid is False

    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 0.002, by="upstream", down=40)
    h.finish(0.01, op, "fail")
    h.add("fault.end", 3.2, fault="observe", id=1, node=None, seconds=3.2, error=None)
    v = check_no_timeout_no_end(h.events, **P, window=3.0)
    assert v.valid is False and "gave up after 0.010 s with no login timeout" in v.observed

    h = Hist()
    h.invoke(0.0)
    h.conn(A, 0.0, 0.002, by="upstream", down=40)
    assert check_no_timeout_no_end(h.events, **P, window=3.0).valid == "unknown"  # history too short
    with pytest.raises(ConfigError):
        check_no_timeout_no_end(h.events, **P, window=3.0, login_timeout=15)


# ------------------------------------------------------------------------------------ MIR-9

def _mir_9_history(second_failover: str) -> Hist:
    h = Hist()
    h.add("mirroring.partner", 0.0, node="a", partner=LISTEN[C])
    op = h.invoke(1.0)
    h.conn(A, 1.0, None)
    h.finish(1.01, op, "ok")
    h.add("mirroring.partner", 2.0, node="a", partner=LISTEN[B])
    op = h.invoke(3.0)
    h.conn(A, 3.0, None)
    h.finish(3.01, op, "ok")
    op = h.invoke(5.0)  # A is down now
    h.conn(A, 5.0, 5.001, by="upstream", down=0, upstream_failed=True)
    h.conn(second_failover, 5.002, None)
    h.finish(5.01, op, "ok")
    return h


def test_mir_9_native_and_managed() -> None:
    assert check_partner_cache_update(_mir_9_history(B).events, **P, variant="native").valid is True
    v = check_partner_cache_update(_mir_9_history(C).events, **P, variant="native")
    assert v.valid is False and "expected the cached failover partner 127.0.0.1:20002" in v.observed
    assert check_partner_cache_update(_mir_9_history(C).events, **P, variant="managed").valid is True
    assert check_partner_cache_update(_mir_9_history(B).events, **P, variant="managed").valid is False


def test_mir_9_initial_never_overwritten_and_unknown() -> None:
    h = Hist()
    h.add("mirroring.partner", 0.0, node="a", partner=LISTEN[C])
    op = h.invoke(1.0)
    h.conn(A, 1.0, None)
    h.finish(1.01, op, "ok")
    op = h.invoke(2.0)
    h.conn(C, 2.0, None)
    h.finish(2.01, op, "ok")
    v = check_partner_cache_update(h.events, **P)
    assert v.valid is False and "initial partner name must never be overwritten" in v.observed
    h = Hist()
    op = h.invoke(1.0)
    h.conn(A, 1.0, None)
    h.finish(1.01, op, "ok")
    assert check_partner_cache_update(h.events, **P).valid == "unknown"


def test_mir_9_falls_back_to_client_reported_partner() -> None:
    h = Hist()
    op = h.invoke(1.0)
    h.conn(A, 1.0, None)
    h.finish(1.01, op, "ok", value={"partner": LISTEN[C]})
    op = h.invoke(2.0)
    h.conn(A, 2.0, 2.001, by="upstream", upstream_failed=True)
    h.conn(C, 2.002, None)
    h.finish(2.01, op, "ok")
    v = check_partner_cache_update(h.events, **P)
    assert v.valid is True and v.details["partner_source"] == "client op.ok value"


# ------------------------------------------------------------------------------------ MIR-10

@pytest.mark.parametrize(("principal", "served", "ok", "valid"), [
    (A, A, True, True), (B, B, True, True), (A, A, True, True), (C, None, False, True),
    (C, A, True, False), (B, None, False, False), (B, A, True, False),
])
def test_mir_10_stale_partner_table(principal: str, served: str | None, ok: bool, valid: bool) -> None:
    h = Hist()
    op = h.invoke(0.0)
    if served == B:
        h.conn(A, 0.0, 0.002, by="upstream", down=40)
    if served:
        h.conn(served, 0.003, None)
    else:
        h.conn(A, 0.0, 0.002, by="upstream", down=40)
        h.conn(B, 0.003, 0.004, by="upstream", upstream_failed=True)
    h.finish(0.01 if ok else 1.0, op, "ok" if ok else "fail")
    assert check_stale_failover_partner(h.events, **P, principal=principal).valid is valid


def test_mir_10_unknown_without_decided_open() -> None:
    h = Hist()
    h.invoke(0.0)
    assert check_stale_failover_partner(h.events, **P, principal=A).valid == "unknown"


# ------------------------------------------------------------------------------------ MIR-11

def _mir_11(auto_reconnect: bool) -> Hist:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 1.0, by="upstream", down=500)  # the established connection, broken at t=1
    h.finish(0.01, op, "ok")
    q = h.invoke(0.5, f="query")
    h.finish(0.51, q, "ok", f="query")
    q = h.invoke(1.5, f="query")
    if auto_reconnect:
        h.conn(B, 1.5, None)
        h.finish(1.52, q, "ok", f="query")
    else:
        h.finish(1.5005, q, "fail", f="query", error="server closed the connection unexpectedly")
        op = h.invoke(2.0)
        h.conn(A, 2.0, 2.001, by="upstream", upstream_failed=True)
        h.conn(B, 2.002, None)
        h.finish(2.01, op, "ok")
    return h


def test_mir_11_kept_violated_unknown() -> None:
    assert check_no_automatic_reconnect(_mir_11(False).events, **P).valid is True
    v = check_no_automatic_reconnect(_mir_11(True).events, **P)
    assert v.valid is False and "automatic reconnect" in v.observed
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 1.0, by="upstream", down=500)
    h.finish(0.01, op, "ok")
    q = h.invoke(1.5, f="query")
    h.finish(1.51, q, "ok", f="query")  # succeeded on a broken connection without any new conn
    v = check_no_automatic_reconnect(h.events, **P)
    assert v.valid is False and "without a new open" in v.observed
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, None)
    h.finish(0.01, op, "ok")
    assert check_no_automatic_reconnect(h.events, **P).valid == "unknown"


# ------------------------------------------------------------------------------------ MIR-12

def test_mir_12_presented_name() -> None:
    def hist(shown: str) -> Hist:
        h = Hist()
        op = h.invoke(0.0, value={"initial": "pg-a,20001", "database": "d"})
        h.conn(A, 0.0, 0.001, by="upstream", upstream_failed=True)
        h.conn(B, 0.002, None)
        h.finish(0.01, op, "ok", value={"presented_server": shown})
        return h

    assert check_redirect_keeps_initial_name(hist("pg-a,20001").events, **P).valid is True
    v = check_redirect_keeps_initial_name(hist("127.0.0.1:20002").events, **P)
    assert v.valid is False and "presents '127.0.0.1:20002'; expected 'pg-a,20001'" in v.observed
    h = Hist()
    op = h.invoke(0.0, value={"initial": "pg-a"})
    h.conn(A, 0.0, None)
    h.finish(0.01, op, "ok", value={"presented_server": "pg-a"})
    assert check_redirect_keeps_initial_name(h.events, **P).valid == "unknown"


# ------------------------------------------------------------------------------------ MIR-13

def _mir_13(next_after: float, by: str = "upstream") -> Hist:
    h = Hist()
    op = h.invoke(0.0)
    h.add("node.stop", 0.35, node="a", mode="fast", seconds=0.05)  # stop began at 0.30
    h.conn(A, 0.0, 0.301, by=by, down=0)
    h.conn(B, 0.301 + next_after, None)
    h.finish(0.4 + next_after, op, "ok")
    return h


def test_mir_13_kept_and_violated() -> None:
    assert check_shutdown_aborts_attempts(_mir_13(0.002).events, **P).valid is True
    v = check_shutdown_aborts_attempts(_mir_13(0.9).events, **P)  # waited out the rest of a 1.2 s retry time
    assert v.valid is False and "attempt 2 came 0.900 s later" in v.observed
    h = Hist()  # client view only: an attempt that ignored the shutdown and timed out
    op = h.invoke(0.0)
    h.add("node.kill", 0.1, node="pg-a")
    h.client_attempt(1, "initial", 0.0, 1.2, "timeout")
    h.finish(1.3, op, "fail")
    v = check_shutdown_aborts_attempts(h.events, **P)
    assert v.valid is False and "waited out its retry time" in v.observed
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, None)
    h.finish(0.01, op, "ok")
    assert check_shutdown_aborts_attempts(h.events, **P).valid == "unknown"


# ------------------------------------------------------------------------------------ registry

def test_all_rules_registered_and_unknown_is_never_a_pass() -> None:
    assert set(CHECKERS) == {f"MIR-{i}" for i in range(1, 14)}
    for rule_id, fn in CHECKERS.items():
        assert registry.get(rule_id).checker is fn
        assert (fn.__doc__ or "").startswith(rule_id + " ")
    h, _ = timeout_schedule(1.0)
    v = registry.check("MIR-5", h.events, meta={"rule_params": {"MIR-5": {**P, "login_timeout": 1.0}}})
    assert v.valid is True
    with pytest.raises(ConfigError, match="unknown parameter"):
        registry.check("MIR-5", h.events, bogus=1)


def test_concurrent_opens_are_undecidable_not_passed() -> None:
    h = Hist()
    o1 = h.invoke(0.0, process="c1")
    o2 = h.invoke(0.0, process="c2")
    h.conn(B, 0.001, None)
    h.finish(0.01, o1, "ok", process="c1")
    h.finish(0.01, o2, "ok", process="c2")
    v = check_initial_partner_first(h.events, **P)
    assert v.valid == "unknown" and v.details["ambiguous_opens"] == [0, 1]


def test_mir_10_principal_read_from_the_history() -> None:
    def hist(principal: str, served: str | None, role_change_during_open: bool = False) -> Hist:
        h = Hist()
        h.add("topology.up", 0.0, topology="pg-pair", nodes=[
            {"name": principal, "role": "principal", "client_address": LISTEN[f"pg-{principal}"]},
            {"name": "x", "role": "mirror", "client_address": "127.0.0.1:1"}])
        op = h.invoke(1.0)
        if served:
            h.conn(served, 1.0, None)
        else:
            h.conn(A, 1.0, 1.002, by="upstream", down=40)
        if role_change_during_open:
            h.add("role.change", 1.001, node="b", old_role="mirror", new_role="principal")
        h.finish(1.01 if served else 2.0, op, "ok" if served else "fail")
        return h

    assert check_stale_failover_partner(hist("b", B).events, **P).valid is True  # B principal: works via B
    assert check_stale_failover_partner(hist("c", None).events, **P).valid is True  # C principal, A mirror: fails
    v = check_stale_failover_partner(hist("c", A).events, **P)
    assert v.valid is False and "which is not the principal" not in v.observed  # should have failed
    v = check_stale_failover_partner(hist("a", A, role_change_during_open=True).events, **P)
    assert v.valid == "unknown" and "roles changed" in v.observed


def test_mir_7_fast_reset_counts_slow_reset_is_not_judged() -> None:
    def hist(reset_held: float, gap: float) -> Hist:
        h = Hist()
        op = h.invoke(0.0)
        h.conn(A, 0.0, reset_held, by="toxic", down=0)
        h.conn(B, reset_held, reset_held + 0.002, by="upstream", down=40)
        t = reset_held + 0.002 + gap
        h.conn(A, t, None)
        h.finish(t + 0.01, op, "ok")
        return h

    assert check_partner_retry_delays(hist(0.002, 0.1).events, **P).valid is True
    v = check_partner_retry_delays(hist(0.002, 0.0).events, **P)
    assert v.valid is False and "(reset/inactive) was 0.000 s; expected 0.100 s" in v.observed
    v = check_partner_retry_delays(hist(2.0, 0.0).events, **P)  # a timeout toxic closing after 2 s: not a fast round
    assert v.valid == "unknown" and v.details["not_judged"]


def test_an_open_the_application_aborted_is_not_the_clients_failure() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 0.002, by="upstream", down=40)
    h.add("op.fail", 0.3, process="c1", op_id=op, f="open", error="open aborted", reason="aborted")
    h.add("fault.end", 3.2, fault="observe", id=1, node=None, seconds=3.2, error=None)
    assert check_partner_alternation(h.events, **P, login_timeout=5.0).valid == "unknown"
    assert check_no_timeout_no_end(h.events, **P, window=3.0).valid == "unknown"
    h.events[-2] = Event(h.events[-2].index, 0.3, "op.fail",
                         {"process": "c1", "op_id": op, "f": "open", "error": "gave up"})
    assert check_partner_alternation(h.events, **P, login_timeout=5.0).valid is False
    assert check_no_timeout_no_end(h.events, **P, window=3.0).valid is False


def test_client_attempt_matched_to_a_lagging_proxy_by_socket_address() -> None:
    """A proxy that timestamps its accept 30 ms late is still the same attempt when the client
    recorded its socket's local address (attempt.end ``local``): no double counting."""
    h = Hist()
    op = h.invoke(0.0)
    h.add("attempt.start", 0.0, process="c1", attempt=1, target="initial", address=LISTEN[A])
    h.add("attempt.end", 0.001, process="c1", attempt=1, target="initial", address=LISTEN[A],
          outcome="inactive", error="not accepting connections", local="127.0.0.1:40000")
    h.conn(A, 0.031, 0.032, by="upstream", down=90)  # Hist.conn records client=127.0.0.1:40000
    h.add("attempt.start", 0.002, process="c1", attempt=2, target="failover", address=LISTEN[B])
    h.add("attempt.end", 0.003, process="c1", attempt=2, target="failover", address=LISTEN[B],
          outcome="refused", error="Connection refused")
    h.finish(0.05, op, "fail", error="gave up")
    v = check_partner_alternation(h.events, **P, login_timeout=None)
    # 2 attempts in the order the client made them, not 3: attempt 1 is the proxy's connection
    assert v.valid is False and "and 2 attempt(s)" in v.observed, v.observed
    assert v.details["client_view_attempts"] == [5, 6]  # only the refused connect


def test_mir_11_in_flight_op_and_newer_connection_are_not_judged() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 1.0, by="upstream", down=500)
    h.finish(0.01, op, "ok")
    q = h.invoke(0.99, f="query")  # in flight when the connection broke
    h.finish(1.01, q, "ok", f="query")
    assert check_no_automatic_reconnect(h.events, **P).valid == "unknown"
    q = h.invoke(1.5, f="query")  # invoked after the break: must fail
    h.finish(1.51, q, "ok", f="query")
    assert check_no_automatic_reconnect(h.events, **P).valid is False


def test_mir_6_open_succeeding_after_the_login_timeout_is_a_violation() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 0.08)
    h.conn(B, 0.08, None)  # the attempt opens only at 1.5 s, LT = 1 s
    h.finish(1.5, op, "ok")
    v = check_truncated_last_round(h.events, **P, login_timeout=1.0)
    assert v.valid is False and "attempt 2 (failover, round 1) opened at +1.500 s" in v.observed


def test_a_long_lived_opened_connection_is_not_a_long_attempt() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, 0.08)
    h.conn(B, 0.08, 60.0)  # opened at 0.1 s, used for a minute, closed by the application
    h.finish(0.1, op, "ok")
    h.add("attempt.start", 0.0, process="other", attempt=1, target="initial")  # unrelated noise
    for check in (check_retry_time_schedule, check_truncated_last_round):
        assert check(h.events, **P, login_timeout=1.0).valid is not False
    assert check_retry_time_schedule(h.events, **P, login_timeout=1.0).valid is True


# ------------------------------------------------------------ time the harness lost (harness.stall)
# Dyadic times (exact in binary floating point) so the boundaries are judged on equal values.
_D = (0.125, 0.25, 0.5, 0.75, 1.0)  # MIR-7 delays (parameter), dyadic
_T = 2.0 ** -5  # tolerance 31.25 ms
_S = 2.0 ** -6  # one recorded stall of 15.625 ms
_A = 2.0 ** -7  # a fast attempt's duration


def _delayed_rounds(extra: float, stall_at: float | None = None, stall: float = _S) -> tuple[Hist, float]:
    """Two inactive partners; the delay after round 1 is ``extra`` s longer than the schedule, the
    one after round 2 on time; round 3's initial attempt opens. ``stall_at``: a ``harness.stall``
    event (due at ``stall_at`` + the end of round 1, ``stall`` s late). Returns the end of round 1."""
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, _A, by="upstream", down=90)
    h.conn(B, _A, 2 * _A, by="upstream", down=90)
    end1 = 2 * _A
    t = end1 + _D[0] + extra
    h.conn(A, t, t + _A, by="upstream", down=90)
    h.conn(B, t + _A, t + 2 * _A, by="upstream", down=90)
    t += 2 * _A + _D[1]
    h.conn(A, t, None)
    h.finish(t + _A, op, "ok")
    if stall_at is not None:
        h.add("harness.stall", end1 + stall_at, seconds=stall)
    return h, end1


def test_mir_7_delay_late_within_the_time_the_harness_lost_is_not_judged() -> None:
    """A delay late by tolerance + a recorded stall overlapping it is not judged (the harness cannot
    tell); the rest of the history still decides (round 2 kept)."""
    h, _ = _delayed_rounds(_T + _S)
    v = check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T)
    assert v.valid is False and "delay after round 1" in v.observed  # no stall recorded: a violation

    h, _ = _delayed_rounds(_T + _S, stall_at=0.05)
    v = check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T)
    assert v.valid is True, v.summary
    assert v.details["delayed_rounds"] == [2] and v.details["not_judged"] == [3]


def test_mir_7_client_later_than_tolerance_plus_lost_time_still_violates() -> None:
    """Late by 1/128 s more than tolerance + the recorded stall: a violation, naming the lost time."""
    h, _ = _delayed_rounds(_T + _S + _A, stall_at=0.05)
    v = check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T)
    assert v.valid is False and "delay after round 1" in v.observed
    assert "expected 0.125 s ±0.031" in v.observed

    h, _ = _delayed_rounds(-(_T + _S + _A), stall_at=0.05)  # early by as much: a violation too
    assert check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T).valid is False


def test_mir_7_lost_time_boundaries_on_equal_timestamps() -> None:
    """Off by exactly tolerance + lost: not judged (≤). A stall whose late span ends exactly at the
    interval's start - tolerance counts; one ending 1/128 s before does not."""
    h, _ = _delayed_rounds(_T + _S, stall_at=-_T - _S)  # span [end1 - T - S, end1 - T]: touches
    v = check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T)
    assert v.valid is True and v.details["not_judged"] == [3], v.summary

    h, _ = _delayed_rounds(_T + _S, stall_at=-_T - _S - _A)  # ends 1/128 s before: not counted
    assert check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T).valid is False

    h, _ = _delayed_rounds(_T, stall_at=None)  # off by exactly the tolerance: kept
    assert check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T).valid is True


def test_mir_7_only_unjudgeable_delays_is_unknown_never_kept() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, _A, by="upstream", down=90)
    h.conn(B, _A, 2 * _A, by="upstream", down=90)
    t = 2 * _A + _D[0] + _T + _S
    h.conn(A, t, None)
    h.finish(t + _A, op, "ok")
    h.add("harness.stall", 0.05, seconds=_S)
    v = check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T)
    assert v.valid == "unknown" and v.details["not_judged"], v.summary


def test_mir_7_gap_inside_a_round_within_lost_time_is_not_judged() -> None:
    h = Hist()
    op = h.invoke(0.0)
    h.conn(A, 0.0, _A, by="upstream", down=90)
    end1 = _A + _T + _S + _A  # the failover attempt came tolerance + 1/64 s after the initial one
    h.conn(B, _A + _T + _S, end1, by="upstream", down=90)
    h.conn(A, end1 + _D[0], None)
    h.finish(end1 + _D[0] + _A, op, "ok")
    v = check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T)
    assert v.valid is False and "expected no delay inside a round" in v.observed
    h.add("harness.stall", 0.01, seconds=_S)
    v = check_partner_retry_delays(h.events, **P, delays=_D, tolerance=_T)
    assert v.valid is True and v.details["not_judged"] == [3] and v.details["delayed_rounds"] == [1], v.summary


def test_mir_5_held_off_within_the_time_the_harness_lost_is_not_judged() -> None:
    """MIR-5 on a black-holed attempt held 30 ms too long (tolerance 20 ms): a violation; with a
    15 ms stall recorded during it, not judged (unknown: it was the only timed-out attempt); with a
    5 ms stall, still a violation that names the lost time."""
    def one(held: float, stall: float | None) -> Hist:
        h = Hist()
        op = h.invoke(0.0)
        h.conn(A, 0.0, held, by="client")
        h.conn(B, held, None)
        h.finish(held + 0.01, op, "ok")
        if stall is not None:
            h.add("harness.stall", 0.04, seconds=stall)
        return h

    rt = retry_time(1, 1.0)
    assert check_retry_time_schedule(one(rt, None).events, **P, login_timeout=1.0).valid is True
    assert check_retry_time_schedule(one(rt + 0.030, None).events, **P, login_timeout=1.0).valid is False
    v = check_retry_time_schedule(one(rt + 0.030, 0.015).events, **P, login_timeout=1.0)
    assert v.valid == "unknown" and v.details["not_judged"] == [1], v.summary
    v = check_retry_time_schedule(one(rt + 0.030, 0.005).events, **P, login_timeout=1.0)
    assert v.valid is False and "0.005 s the harness lost meanwhile" in v.observed
    v = check_retry_time_schedule(one(rt - 0.030, 0.005).events, **P, login_timeout=1.0)  # abandoned too early
    assert v.valid is False


def test_mir_6_past_the_login_timeout_within_the_time_the_harness_lost_is_not_judged() -> None:
    """A failed open ending 30 ms past LT (tolerance 20 ms): a violation; with a 15 ms stall
    recorded at the login timeout, not judged (unknown); 45 ms past with the same stall: a violation."""
    def late(by: float, stall: bool) -> Hist:
        h, _ = timeout_schedule(1.0, t0=0.0)
        h.events = [e for e in h.events if e.type != "op.fail"]
        h.finish(1.0 + by, 1, "fail", error="login timeout expired")
        if stall:
            h.add("harness.stall", 0.995, seconds=0.015)
        return h

    assert check_truncated_last_round(late(0.030, False).events, **P, login_timeout=1.0).valid is False
    v = check_truncated_last_round(late(0.030, True).events, **P, login_timeout=1.0)
    assert v.valid == "unknown" and v.details["not_judged"] == [0], v.summary
    assert check_truncated_last_round(late(0.045, True).events, **P, login_timeout=1.0).valid is False


def test_mir_7_reset_fast_only_on_the_proxys_clock_is_not_judged() -> None:
    """A 1/64 s reset is fast on the proxy's clock; when the harness lost 1/16 s meanwhile, the client
    may have seen it as slower than ``fast_reset`` (50 ms) and skipped the delay: not judged (unknown).
    Without that stall, or with one too short to cross 50 ms, the missing delay is a violation."""
    def hist(stall: float | None) -> Hist:
        h = Hist()
        op = h.invoke(0.0)
        h.conn(A, 0.0, _S, by="toxic", down=0)
        h.conn(B, _S, _S + _A, by="upstream", down=40)
        t = _S + _A  # no delay after round 1
        h.conn(A, t, None)
        h.finish(t + _A, op, "ok")
        if stall is not None:
            h.add("harness.stall", _S, seconds=stall)
        return h

    assert check_partner_retry_delays(hist(None).events, **P, delays=_D, tolerance=_T).valid is False
    assert check_partner_retry_delays(hist(2.0 ** -7).events, **P, delays=_D, tolerance=_T).valid is False
    v = check_partner_retry_delays(hist(2.0 ** -4).events, **P, delays=_D, tolerance=_T)
    assert v.valid == "unknown" and v.details["not_judged"], v
