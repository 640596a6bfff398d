"""MIR-1 … MIR-13 checkers on synthetic histories, written against what the mutation test
(``make mutation``, docs/mutation.md) showed the older checker tests let through: the public signature
each checker shows, its parameter checks, the boundaries of every tolerance (times here are binary
fractions, so "exactly at the tolerance" is exact), the evidence indices and the messages naming the
rule. Histories are proxy-observed unless a test is about the client's own view."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from harness.errors import ConfigError
from harness.rules import mirroring as mir
from harness.rules.mirroring.scaffold import MirCall, MirParams, mir_check, prepare
from harness.rules.verdict import Verdict
from tests.support.mirroring_history import ADDR, A, B, H

P = {"initial": A, "failover": B}
T = 1 / 32  # a tolerance that binary floats hold exactly
TIMING = {3: True, 4: True, 5: True, 6: True, 7: True, 13: True}  # rules with a tolerance parameter


def _hist(*conns: tuple[str, float, float | None], end: float | None = None, kind: str = "ok") -> H:
    """One open at 0 with proxy connections ``(proxy, accepted, closed by the client)``, ending at
    ``end``."""
    h = H()
    op = h.open(0.0)
    for proxy, t0, t1 in conns:
        h.conn(proxy, t0, t1)
    if end is not None:
        h.end(end, op, kind, error="x")
    return h


def _idx(h: H, type_: str, n: int = 0, **fields: Any) -> int:
    found = [e.index for e in h.events if e.type == type_ and all(e.get(k) == v for k, v in fields.items())]
    return found[n]


# ------------------------------------------------------------------------------ the public face


def test_every_checker_names_its_rule_in_its_verdicts() -> None:
    h = H()
    h.open(0.0)
    for rule_id, check in mir.CHECKERS.items():
        kw: dict[str, Any] = dict(P)
        if rule_id in ("MIR-5", "MIR-6"):
            kw["login_timeout"] = 1.0
        if rule_id == "MIR-8":
            kw["window"] = 1.0
        assert check(h.events, **kw).rule_id == rule_id


def test_signatures_show_the_shared_block() -> None:
    """Each checker shows ``(events, *, initial, failover, [login_timeout], <own>, process,
    [tolerance], <late own>, use_client_view) -> Verdict``, annotated as in the checkers' source."""
    for rule_id, check in mir.CHECKERS.items():
        n = int(rule_id.split("-")[1])
        sig = inspect.signature(check)
        params = list(sig.parameters.values())
        shown = {p.name: (p.default, p.annotation) for p in params[1:]}
        assert (params[0].name, params[0].annotation) == ("events", "list[Event]"), rule_id
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:]), rule_id
        assert [p.name for p in params[1:3]] == ["initial", "failover"] and params[-1].name == "use_client_view"
        assert shown["initial"] == shown["failover"] == (None, "PartnerNames")
        assert shown["process"] == (None, "Any") and shown["use_client_view"] == (True, "bool")
        assert ("tolerance" in shown) is TIMING.get(n, False), rule_id
        if "tolerance" in shown:
            assert shown["tolerance"] == (0.02, "float")
        if n in (3, 4, 5, 6):
            assert [p.name for p in params[1:4]] == ["initial", "failover", "login_timeout"], rule_id
            assert shown["login_timeout"] == (None, "float | None")
        assert sig.return_annotation == "Verdict" and check.__annotations__["return"] == "Verdict"
        assert check.__annotations__["initial"] == "PartnerNames"
    names = list(inspect.signature(mir.check_partner_retry_delays).parameters)
    assert names.index("process") < names.index("tolerance") < names.index("fast_reset") < names.index(
        "use_client_view")
    assert names.index("delays") < names.index("process")


def test_mir_check_guards_its_bodies() -> None:
    """A body's own parameters are keyword-only, and a body that takes ``login_timeout`` itself
    cannot also get it from the shared block."""

    def positional(call: MirCall, x: int = 1) -> Verdict:
        raise AssertionError

    def own_timeout(call: MirCall, *, login_timeout: float | None = None) -> Verdict:
        raise AssertionError

    with pytest.raises(AssertionError):
        mir_check("MIR-99", needs=("opens",))(positional)
    with pytest.raises(AssertionError):
        mir_check("MIR-99", needs=("opens",), login_timeout=True)(own_timeout)
    assert list(inspect.signature(mir_check("MIR-99", needs=("opens",))(own_timeout)).parameters)[3] == "login_timeout"
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        mir.check_initial_partner_first([], **P, bogus=1)


@pytest.mark.parametrize(("check", "what"), [
    (mir.check_no_failover_partner_no_alternation,
     "failover (the mirror the client was not told about)"), (mir.check_partner_alternation, "failover"),
    (mir.check_retry_time_schedule, "failover"), (mir.check_truncated_last_round,
                                                  "failover"), (mir.check_partner_retry_delays, "failover"),
    (mir.check_no_timeout_no_end, "failover"),
    (mir.check_partner_cache_update,
     "failover (the partner given in the connection string)"), (mir.check_stale_failover_partner, "failover"),
    (mir.check_redirect_keeps_initial_name, "failover"),
])
def test_a_missing_failover_partner_is_a_config_error_naming_it(check: Any, what: str) -> None:
    rule = check.__doc__.split()[0]
    with pytest.raises(ConfigError) as err:
        check([], initial=A, login_timeout=1.0) if "login_timeout" in inspect.signature(check).parameters else \
            check([], initial=A)
    assert str(err.value).startswith(f"{rule} needs {what}: the fault proxy name")


def test_parameter_validation() -> None:
    mir.check_retry_time_schedule([], **P, login_timeout=1.0, tolerance=0.05)  # the loosest accepted
    for lt in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="login_timeout must be > 0"):
            mir.check_retry_time_schedule([], **P, login_timeout=lt)
    with pytest.raises(ConfigError, match="tolerance must be a number"):
        mir.check_retry_time_schedule([], **P, login_timeout=1.0, tolerance="x")
    mir.check_partner_retry_delays([], **P, delays=(0, 0.1))  # a zero delay is a delay
    for delays in ((), (0.1, -0.1)):
        with pytest.raises(ConfigError, match="delays must be a non-empty list"):
            mir.check_partner_retry_delays([], **P, delays=delays)
    for window in (None, 0, -1):
        with pytest.raises(ConfigError, match="MIR-8 needs window"):
            mir.check_no_timeout_no_end([], **P, window=window)
    mir.check_no_timeout_no_end([], **P, window=0.5)
    with pytest.raises(ConfigError, match="variant must be 'native' or 'managed'"):
        mir.check_partner_cache_update([], **P, variant="other")


def test_validated_block_defaults_and_immutability() -> None:
    with pytest.raises(ConfigError, match="MIR-0 needs initial"):
        MirParams.validated("MIR-0", initial=None, failover=None, process=None, use_client_view=True)
    p = MirParams.validated("MIR-0", initial=A, failover=None, process=None, use_client_view=False)
    assert (p.initial, p.failover, p.tolerance, p.login_timeout, p.use_client_view) == ((A,), (), 0.02, None, False)
    assert MirParams((A,), ()).use_client_view is True
    ctx = prepare([], p, "MIR-0")
    call = MirCall("MIR-0", [], p)
    for frozen in (p, ctx, call):
        with pytest.raises(dataclasses.FrozenInstanceError):
            frozen.rule_id = "x"  # type: ignore[misc]


def test_prepare_numbers_rounds_and_keeps_the_process() -> None:
    h = H()
    o1 = h.open(0.0, process="c1")
    h.conn(A, 0.001, 0.002, by="upstream", down=5)
    h.conn(B, 0.003, 0.004, by="upstream", down=5)
    h.conn(A, 0.005, None)
    h.end(0.01, o1, process="c1")
    o2 = h.open(1.0, process="c2")
    h.end(1.01, o2, "fail", process="c2", error="x")
    p = MirParams((A,), (B,), process="c1")
    ctx = prepare(h.events, p, "MIR-0")
    assert [o.process for o in ctx.opens] == ["c1"] and len(ctx.all_opens) == 2
    assert [a.round for a in ctx.opens[0].attempts] == [1, 1, 2]
    assert ctx.verdict(True, "e", "o", [3, 1, 1]).evidence == (1, 3)
    assert ctx.verdict(True, "e", "o", []).details == {"opens": 1}


def test_only_the_named_process_is_judged() -> None:
    h = H()
    o1 = h.open(0.0, process="c1")
    h.conn(B, 0.001, None)
    h.end(0.01, o1, process="c1")
    o2 = h.open(1.0, process="c2")
    h.conn(A, 1.001, None)
    h.end(1.01, o2, process="c2")
    assert mir.check_initial_partner_first(h.events, **P).valid is False
    v = mir.check_initial_partner_first(h.events, **P, process="c2")
    assert v.valid is True and v.details["opens"] == 1


def test_client_view_note_and_open_count_in_details() -> None:
    h = H()
    op = h.open(0.0)
    h.attempt(1, 0.0, 0.001, "refused")
    h.conn(B, 0.002, None)
    h.end(0.01, op)
    v = mir.check_initial_partner_first(h.events, **P)
    assert v.details["opens"] == 1 and v.details["client_view_attempts"] == [1, 2]
    assert v.details["note"].startswith("refused connects never reach a fault proxy")


# ------------------------------------------------------------------------------ MIR-2


def _no_database_open(h: H, t: float, process: str = "c1", database: Any = None, **value: Any) -> int:
    op_id = next(h.op_ids)
    v = dict(value)
    if database is not None or not value:
        v["database"] = database
    h.add("op.invoke", t, process=process, op_id=op_id, f="open", value=v)
    return op_id


def test_mir_2_without_partner_names_every_attempt_in_the_window_counts() -> None:
    """Without partner names, any ``conn.accepted`` inside the open's window (ends included) and the
    process's own ``attempt.start`` count; other processes' attempts do not."""
    for accept_at in (1.0, 1.5):
        h = H()
        op = _no_database_open(h, 1.0)
        h.add("conn.accepted", accept_at, proxy="anything", conn_id=1)
        h.end(1.5, op, "fail", error="no database")
        v = mir.check_database_required(h.events)
        assert v.valid is False and "made 1 connection attempt(s)" in v.observed
        assert v.evidence == (0, 1)
    h = H()
    op = _no_database_open(h, 1.0)
    h.add("conn.accepted", 1.6, proxy="anything", conn_id=1)
    h.add("attempt.start", 1.1, process="other", attempt=1)
    h.end(1.5, op, "fail", error="no database")
    v = mir.check_database_required(h.events)
    assert (v.rule_id, v.valid) == ("MIR-2", True)
    h.add("attempt.start", 1.2, process="c1", attempt=1)
    v = mir.check_database_required(h.events)
    assert v.valid is False and v.evidence == (0, _idx(h, "attempt.start", process="c1"))


def test_mir_2_with_only_the_initial_partner_named_other_proxies_do_not_count() -> None:
    h = H()
    op = _no_database_open(h, 1.0)
    h.add("conn.accepted", 1.1, proxy="repl", conn_id=1, listen="127.0.0.1:29999")
    h.end(1.5, op, "fail", error="no database")
    assert mir.check_database_required(h.events, initial=A).valid is True


def test_mir_2_judges_every_open_without_a_database() -> None:
    h = H()
    ok = h.open(0.0)  # has a database: not MIR-2's case
    h.end(0.01, ok)
    op = _no_database_open(h, 1.0)
    h.end(1.01, op, "ok")
    v = mir.check_database_required(h.events, **P)
    assert v.valid is False and v.observed == "open at event 2 without a database ended op.ok"
    h = H()
    op = _no_database_open(h, 0.0, connstring="Server=pg-a;Database=app;Failover Partner=pg-b")
    h.end(0.01, op)
    assert mir.check_database_required(h.events, **P).valid == "unknown"
    h = H()
    op = _no_database_open(h, 0.0, connstring="Server=pg-a;Failover Partner=pg-b")
    h.end(0.01, op, "fail", error="ConnectionStringError: no database")
    v = mir.check_database_required(h.events, **P)
    assert v.valid is True and v.evidence == (0, 1) and "'ConnectionStringError: no database'" in v.observed


# ------------------------------------------------------------------------------ MIR-3


def test_mir_3_messages_number_attempts_without_rounds() -> None:
    h = _hist((A, 0.0, 0.1), (A, 0.1, 0.2), (B, 0.2, None), end=0.3)
    v = mir.check_no_failover_partner_no_alternation(h.events, **P, login_timeout=1.0)
    assert v.valid is False
    assert v.observed == ("attempt 3 (failover, round 3) went to the partner not named in the connection string "
                          "at +0.200 s")
    assert v.evidence == (0, _idx(h, "conn.accepted", 2))
    assert mir.check_no_failover_partner_no_alternation([], **P).expected == "only the initial partner is tried"


def test_mir_3_deadline_is_inclusive_and_only_failed_opens_are_late() -> None:
    h = _hist((A, 0.0, 1.0 + T), end=1.0 + T, kind="fail")
    assert mir.check_no_failover_partner_no_alternation(h.events, **P, login_timeout=1.0, tolerance=T).valid is True
    h = _hist((A, 0.0, 0.5), (A, 0.5, None), end=1.5)  # succeeded late: MIR-3 judges only which partner
    v = mir.check_no_failover_partner_no_alternation(h.events, **P, login_timeout=1.0, tolerance=T)
    assert v.valid is True and v.observed == "1 open(s), 2 attempt(s), all to the initial partner"


# ------------------------------------------------------------------------------ MIR-4


def test_mir_4_names_the_sequence_and_gives_up_at_the_deadline_minus_tolerance() -> None:
    h = _hist((A, 0.0, 0.08), (B, 0.08, 0.16), (B, 0.16, None), end=0.2)
    v = mir.check_partner_alternation(h.events, **P, login_timeout=1.0)
    assert v.observed == "attempt 3 (failover, round 2) went to the failover partner; expected initial (sequence I,F,F)"
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, 1.0 - T)
    h.end(1.0 - T, op, "fail", error="timeout")
    v = mir.check_partner_alternation(h.events, **P, login_timeout=1.0, tolerance=T)
    # held past its retry time and never followed by the failover partner: a give-up (MIR-3)
    assert v.valid is False and v.observed.startswith("attempt 1 (initial, round 1) was still held when its retry time")
    assert "without ever trying the failover partner" in v.observed


# ------------------------------------------------------------------------------ MIR-5


def test_mir_5_an_opened_attempt_that_took_too_long() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, None)
    end = h.end(1.0, op)
    v = mir.check_retry_time_schedule(h.events, **P, login_timeout=2.0)
    assert v.valid is False
    assert v.observed == "attempt 1 (initial, round 1) took 1.000 s (opened); expected at most 0.160 s +0.020"
    assert v.evidence == (0, 1, end.index)
    assert {k: round(x, 6) for k, x in v.details.items() if k in ("retry_time", "allowed", "held")} == {
        "retry_time": 0.16, "allowed": 0.16, "held": 1.0}


def test_mir_5_a_slow_reset_is_held_too_long_and_the_cut_is_named() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, 0.5, by="toxic")
    h.end(0.6, op, "fail", error="x")
    v = mir.check_retry_time_schedule(h.events, **P, login_timeout=2.0)
    assert v.valid is False and v.observed.startswith("attempt 1 (initial, round 1) held 0.500 s (reset); expected at")
    assert "cut by the login timeout" not in v.observed and v.evidence == (0, 1, 2)
    h = H()
    op = h.open(0.0)
    t = 0.0
    for k, end in enumerate([0.2, 0.4, 0.8, 1.2, 1.8, 2.4, 2.5]):  # LT 2.5 s: the 7th is cut to 0.1 s, on time
        h.conn(A if k % 2 == 0 else B, t, end)
        t = end
    h.conn(B, 2.5, 2.6, by="toxic")  # nothing left: held 0.1 s past the login timeout
    h.end(2.6, op, "fail", error="x")
    v = mir.check_retry_time_schedule(h.events, **P, login_timeout=2.5)
    assert v.valid is False and v.observed == (
        "attempt 8 (failover, round 4) held 0.100 s (reset); expected at most 0.000 s +0.020 "
        "(retry time 0.800 s cut by the login timeout)")


def test_mir_5_timeout_and_held_boundaries_are_inclusive() -> None:
    """LT = 12.5 s makes round 1's retry time exactly 1 s: an attempt abandoned at 1 s + tolerance,
    or a reset after exactly that long, keeps MIR-5."""
    for by in ("client", "toxic"):
        h = H()
        op = h.open(0.0)
        h.conn(A, 0.0, 1.0 + T, by=by)
        h.conn(B, 1.0 + T, None)
        h.end(1.5, op)
        v = mir.check_retry_time_schedule(h.events, **P, login_timeout=12.5, tolerance=T)
        assert v.valid is not False, (by, v.observed)


# ------------------------------------------------------------------------------ MIR-6


def _timed_out(lt: float, ends: list[float], fail_at: float | None) -> H:
    h = H()
    op = h.open(0.0)
    t = 0.0
    for k, end in enumerate(ends):
        h.conn(A if k % 2 == 0 else B, t, end)
        t = end
    if fail_at is not None:
        h.end(fail_at, op, "fail", error="timeout")
    return h


def test_mir_6_deadline_boundaries_are_inclusive() -> None:
    h = _timed_out(1.0, [0.08, 0.16, 0.32, 0.48, 1.0 + T], 1.0 + T)
    v = mir.check_truncated_last_round(h.events, **P, login_timeout=1.0, tolerance=T)
    assert v.valid is True
    assert v.evidence == (0, *range(9, 12))
    assert v.observed == "1 failed open(s) stayed within the login timeout; last failed at +1.031 s after 5 attempt(s)"


def test_mir_6_an_attempt_ending_past_the_deadline() -> None:
    h = _timed_out(1.0, [0.08, 1.2], None)
    h.end(1.2, 1, "fail", error="timeout")
    v = mir.check_truncated_last_round(h.events, **P, login_timeout=1.0)
    assert v.valid is False
    assert v.observed == "attempt 2 (failover, round 1) ended at +1.200 s, 0.200 s past the login timeout"
    assert v.evidence == (0, 3, 4)


@pytest.mark.parametrize(("kind", "word"), [("ok", "succeeded"), ("fail", "failed"), ("info", "ended")])
def test_mir_6_an_open_ending_past_the_deadline_without_attempts(kind: str, word: str) -> None:
    h = H()
    op = h.open(0.0)
    h.end(1.5, op, kind, error="x")
    v = mir.check_truncated_last_round(h.events, **P, login_timeout=1.0)
    assert v.valid is False and v.observed == f"open at event 0 {word} at +1.500 s, 0.500 s past the login timeout"
    assert v.evidence == (0, 1)


def test_mir_6_an_attempt_opening_past_the_deadline_cites_the_open_end() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, 0.08)
    h.conn(B, 0.08, None)
    end = h.end(1.5, op)
    v = mir.check_truncated_last_round(h.events, **P, login_timeout=1.0)
    assert v.valid is False and v.evidence == (0, 3, end.index)


def test_mir_6_a_failed_open_without_attempts_or_still_running_is_not_a_violation() -> None:
    h = H()
    op = h.open(0.0)
    h.end(0.5, op, "fail", error="x")
    h.open(2.0)
    assert mir.check_truncated_last_round(h.events, **P, login_timeout=1.0).valid == "unknown"


# ------------------------------------------------------------------------------ MIR-7


def _rounds(*spec: tuple[str, float, float | None, str, int], ok_at: float | None = None) -> H:
    """``spec``: (proxy, accepted, closed, by, bytes_down) per attempt."""
    h = H()
    op = h.open(0.0)
    for proxy, t0, t1, by, down in spec:
        h.conn(proxy, t0, t1, by=by, down=down)
    if ok_at is not None:
        h.end(ok_at, op)
    return h


def test_mir_7_boundaries_are_inclusive() -> None:
    """A gap of exactly the tolerance inside a round, a delay of exactly delay + tolerance, a reset
    lasting exactly ``fast_reset`` and a gap of exactly the tolerance after a timed-out round all
    keep MIR-7."""
    s = 1 / 64
    h = _rounds((A, 0.0, s, "upstream", 9), (B, s + T, 2 * s + T, "upstream", 9),
                (A, 2 * s + T + 0.125 + T, None, "client", 0), ok_at=1.0)
    v = mir.check_partner_retry_delays(h.events, **P, tolerance=T, delays=(0.125, 0.25))
    assert v.valid is True and v.observed == "1 delay(s) after fast rounds on schedule"
    h = _rounds((A, 0.0, 0.0625, "toxic", 0), (B, 0.0625, 0.0625 + s, "upstream", 9),
                (A, 0.0625 + s + 0.125, None, "client", 0), ok_at=1.0)
    assert mir.check_partner_retry_delays(h.events, **P, tolerance=T, delays=(0.125,), fast_reset=0.0625).valid is True
    h = _rounds((A, 0.0, 0.5, "client", 0), (B, 0.5, 1.0, "client", 0), (A, 1.0 + T, None, "client", 0), ok_at=2.0)
    assert mir.check_partner_retry_delays(h.events, **P, tolerance=T).valid is not False


def test_mir_7_messages_and_counts() -> None:
    h = _rounds((A, 0.0, 0.002, "upstream", 9), (B, 0.102, 0.104, "upstream", 9), (A, 0.3, None, "client", 0),
                ok_at=0.4)
    v = mir.check_partner_retry_delays(h.events, **P)
    assert v.observed == ("0.100 s between attempt 1 (initial, round 1) and attempt 2 (failover, round 1); "
                          "expected no delay inside a round (≤ 0.020)")
    assert v.evidence == (1, 2, 3, 4)
    h = _rounds((A, 0.0, 0.002, "upstream", 9), (B, 0.002, 0.004, "upstream", 9), (A, 0.004, None, "client", 0),
                ok_at=0.4)
    v = mir.check_partner_retry_delays(h.events, **P)
    assert v.observed == "delay after round 1 (inactive/inactive) was 0.000 s; expected 0.100 s ±0.020"
    assert v.evidence == (3, 4, 5)
    spec = [(A, 0.0, 0.002, "upstream", 9), (B, 0.002, 0.004, "upstream", 9), (A, 0.104, 0.106, "upstream", 9),
            (B, 0.106, 0.108, "upstream", 9), (A, 0.308, None, "client", 0)]
    v = mir.check_partner_retry_delays(_rounds(*spec, ok_at=0.5).events, **P)  # type: ignore[arg-type]
    assert v.valid is True and v.observed == "2 delay(s) after fast rounds on schedule"


def test_mir_7_a_held_or_concurrent_attempt_does_not_stop_later_rounds() -> None:
    h = _rounds((A, 0.0, 0.002, "upstream", 9), (B, 0.002, None, "client", 0), (A, 0.102, 0.104, "upstream", 9),
                (B, 0.104, 0.106, "upstream", 9), (A, 0.306, None, "client", 0), ok_at=0.4)
    v = mir.check_partner_retry_delays(h.events, **P)
    assert v.valid is True and v.observed == "1 delay(s) after fast rounds on schedule"
    h = _rounds((A, 0.0, None, "client", 0), (B, 0.001, 0.002, "upstream", 9), ok_at=0.5)
    assert mir.check_partner_retry_delays(h.events, **P).valid == "unknown"


def test_mir_7_lists_the_rounds_it_could_not_judge() -> None:
    h = _rounds((A, 0.0, 0.5, "client", 0), (B, 0.5, 0.502, "upstream", 9), (A, 0.6, None, "client", 0), ok_at=1.0)
    v = mir.check_partner_retry_delays(h.events, **P)
    assert v.valid == "unknown" and v.details["not_judged"] == [_idx(h, "conn.accepted", 1)]


# ------------------------------------------------------------------------------ MIR-8


def _alternating(until: float, *, t0: float = 0.0, step: float = 0.25, only: str | None = None, stop: float = 9.0
                 ) -> H:
    h = H()
    h.open(t0)
    t, k = t0, 0
    while t < until:
        proxy = A if k % 2 == 0 else B
        if only is None or proxy == only or t < stop:
            h.conn(proxy, t, t + 0.002, by="upstream", down=9)
        t += step
        k += 1
    return h


def test_mir_8_window_edges() -> None:
    """The history must reach invoke + window (exactly is enough); attempts starting at the window's
    end are inside it; an attempt at exactly half the window is in its second half."""
    h = _alternating(2.01)
    h.add("fault.end", 2.0, fault="observe", id=1)
    v = mir.check_no_timeout_no_end(h.events, **P, window=2.0)
    assert v.valid is True and v.observed == "9 attempts alternating within 2.000 s; last started at +2.000 s"
    accepted = [e.index for e in h.events if e.type == "conn.accepted"]
    assert v.evidence == tuple(sorted(i for a in accepted[-4:] for i in (a, a + 1)))
    h = H()
    h.open(0.0)
    h.conn(A, 0.0, 0.002, by="upstream", down=9)
    h.conn(B, 0.5, 0.502, by="upstream", down=9)
    h.conn(A, 1.0, 1.002, by="upstream", down=9)
    h.conn(B, 1.5, 1.502, by="upstream", down=9)
    h.conn(A, 2.0, 2.002, by="upstream", down=9)
    h.add("fault.end", 2.5, fault="observe", id=1)
    assert mir.check_no_timeout_no_end(h.events, **P, window=3.0).valid == "unknown"  # history too short
    h.add("fault.end", 3.0, fault="observe", id=2)
    v = mir.check_no_timeout_no_end(h.events, **P, window=3.0)
    assert v.valid is True  # B at 1.5 = half of 3.0 counts for the second half


def test_mir_8_the_second_half_needs_both_partners() -> None:
    h = _alternating(3.0, only=A, stop=1.0)
    h.add("fault.end", 3.2, fault="observe", id=1)
    v = mir.check_no_timeout_no_end(h.events, **P, window=3.0)
    assert v.valid is False and v.observed.startswith("attempt 6 (initial, round 3) went to the initial partner")
    h = H()
    h.open(0.0)
    h.conn(A, 0.0, 0.002, by="upstream", down=9)
    h.conn(B, 1.2, 1.202, by="upstream", down=9)  # the failover partner only before 1.5 s
    h.conn(A, 2.0, 2.002, by="upstream", down=9)
    h.add("fault.end", 3.2, fault="observe", id=1)
    v = mir.check_no_timeout_no_end(h.events, **P, window=3.0)
    assert v.valid is False
    assert v.observed == "no attempt to the failover partner in the second half of the window (last at +1.200 s)"
    assert v.evidence == (0, 3, 4)


@pytest.mark.parametrize(("kind", "at", "valid"), [
    ("info", 1.0, "unknown"),  # the application ended it early: not observed long enough
    ("info", 3.0, "unknown"),
    ("ok", 1.0, "unknown"),  # it connected
    ("ok", 3.0, "unknown"),
    ("fail", 3.0, False),  # gave up at the window's end
])
def test_mir_8_how_the_open_ended_inside_the_window(kind: str, at: float, valid: Any) -> None:
    h = _alternating(at)
    h.end(at, 1, kind, error="x")
    h.add("fault.end", 3.5, fault="observe", id=1)
    assert mir.check_no_timeout_no_end(h.events, **P, window=3.0).valid == valid


# ------------------------------------------------------------------------------ MIR-9


def _opened(h: H, t: float, *, via: str = A, value: Any = None, pub_before: str | None = None,
            pub_node: str | None = "a") -> None:
    if pub_before is not None:
        h.add("mirroring.partner", t - 0.5, node=pub_node, partner=pub_before)
    op = h.open(t)
    if via != A:
        h.conn(A, t, t + 0.001, upfail=True, by="proxy")
    h.conn(via, t + 0.002, None)
    h.end(t + 0.01, op, value=value)


def test_mir_9_kept_names_its_source_and_counts_the_judged_attempts() -> None:
    h = H()
    _opened(h, 1.0, pub_before=ADDR[B], pub_node=None)  # published without a node: any server's
    _opened(h, 3.0, via=B)
    v = mir.check_partner_cache_update(h.events, **P)
    assert v.valid is True and v.observed == "1 failover attempt(s) went to the cached partner"
    assert v.details["partner_source"] == "mirroring.partner events"
    assert v.evidence == (_idx(h, "conn.accepted", 2),)
    assert v.expected == ("native: failover attempts go to the mirror the server published at the last "
                          "successful open")
    assert mir.check_partner_cache_update([], **P, variant="managed").expected.endswith("the first successful open")


def test_mir_9_what_each_open_learned() -> None:
    """A publication counts if made by the server the open reached (or by no named node) at or before
    the open's success; an empty one is none; an open that learned nothing leaves the source as it
    was."""
    h = H()
    _opened(h, 1.0)  # learned nothing
    h.add("mirroring.partner", 2.0, node="a", partner="127.0.0.1:7")  # superseded
    op = h.open(3.0)
    h.conn(A, 3.0, None)
    h.add("mirroring.partner", 3.01, node="a", partner=ADDR[B])  # at the very moment of success: counts
    h.add("mirroring.partner", 3.01, node="b", partner="127.0.0.1:1")  # another server's publication
    h.add("mirroring.partner", 3.01, node="a", partner="")  # a cleared partner is not one
    h.end(3.01, op)
    _opened(h, 5.0, via=B)
    v = mir.check_partner_cache_update(h.events, **P)
    assert v.valid is True and v.details["partner_source"] == "mirroring.partner events"


def test_mir_9_odd_slots_go_to_the_initial_partner_even_slots_to_the_cache() -> None:
    h = H()
    _opened(h, 1.0, pub_before=ADDR[B])
    op = h.open(3.0)
    h.conn(A, 3.0, 3.001, upfail=True, by="proxy")
    h.conn(B, 3.002, 3.003, upfail=True, by="proxy")
    h.conn(A, 3.104, 3.105, upfail=True, by="proxy")
    h.conn(B, 3.106, None)
    h.end(3.2, op)
    v = mir.check_partner_cache_update(h.events, **P)
    assert v.valid is True and v.observed == "2 failover attempt(s) went to the cached partner"


# ------------------------------------------------------------------------------ MIR-10


def _first_open(h: H, served: str | None, t: float = 1.0, kind: str | None = None) -> None:
    op = h.open(t)
    if served == B:
        h.conn(A, t, t + 0.002, by="upstream", down=40)
    if served is not None:
        h.conn(served, t + 0.003, None)
    else:
        h.conn(A, t, t + 0.002, by="upstream", down=40)
        h.conn(B, t + 0.003, t + 0.004, upfail=True, by="proxy")
    h.end(t + 0.01, op, kind or ("ok" if served else "fail"), error="x")


def test_mir_10_a_principal_named_by_node_is_linked_to_its_proxy_and_address() -> None:
    for failover in (B, ADDR[B]):
        h = H()
        _first_open(h, B)
        v = mir.check_stale_failover_partner(h.events, initial=A, failover=failover, principal=["b", "zz"])
        assert v.valid is True
        assert v.observed == "first open succeeded on the principal via attempt 2 (failover, round 1)"
        assert v.expected == "the first connect works, on the principal"


def test_mir_10_principal_linked_through_topology_up() -> None:
    h = H()
    h.add("topology.up", 0.0, nodes=[{"name": "n-b", "role": "mirror", "client_address": ADDR[B]}, "junk"])
    op = h.open(1.0)
    h.attempt(1, 1.0, 1.001, "refused")
    h.attempt(2, 1.002, 1.003, "opened", target="failover")
    h.end(1.01, op)
    v = mir.check_stale_failover_partner(h.events, initial=(A, ADDR[A]), failover=ADDR[B], principal=["n-b", "zz"])
    assert v.valid is True


def test_mir_10_reads_the_principal_before_the_first_open_of_the_process() -> None:
    h = H()
    h.add("node.start", 0.0, node="pg-a", role="principal")
    h.add("role.change", 0.1, node="pg-a", old_role="principal", new_role="mirror")
    h.add("node.start", 0.15, node="pg-a", role="mirror")
    h.add("role.change", 0.2, node="pg-b", old_role="mirror", new_role="principal")
    h.add("op.invoke", 0.5, process="other", op_id=99, f="query")
    _first_open(h, B)
    h.add("role.change", 2.0, node="pg-a", old_role="mirror", new_role="principal")  # after the first open
    v = mir.check_stale_failover_partner(h.events, **P, process="c1")
    assert v.valid is True
    h = H()
    h.add("node.start", 0.0, node="pg-b", role="principal")
    h.add("role.change", 1.0, node="pg-b", old_role="principal", new_role="principal")  # at the invoke: before
    _first_open(h, B)
    assert mir.check_stale_failover_partner(h.events, **P).valid is True


def test_mir_10_role_changes_during_the_first_open_make_it_unknown() -> None:
    for change_at in (1.005, 1.01):  # inside the open, and at its very end
        h = H()
        h.add("node.start", 0.0, node="pg-b", role="principal")
        _first_open(h, B)
        h.add("role.change", change_at, node="pg-a", old_role="mirror", new_role="principal")
        v = mir.check_stale_failover_partner(h.events, **P)
        assert (v.rule_id, v.valid) == ("MIR-10", "unknown") and "roles changed" in v.observed
    h = H()
    h.add("node.start", 0.0, node="pg-b", role="principal")
    op = h.open(1.0)
    h.conn(A, 1.0, None)
    h.add("role.change", 1.5, node="pg-a", old_role="mirror", new_role="principal")  # the open never ends
    v = mir.check_stale_failover_partner(h.events, **P)
    assert v.valid == "unknown" and v.evidence == (_idx(h, "op.invoke"), _idx(h, "role.change"))
    assert op == 1


def test_mir_10_unknown_cases_name_the_rule() -> None:
    v = mir.check_stale_failover_partner([], **P)
    assert (v.rule_id, v.valid, v.observed) == ("MIR-10", "unknown", "no open in the history")
    h = H()
    h.add("node.start", 0.0, node="pg-b", role="mirror")
    _first_open(h, B)
    v = mir.check_stale_failover_partner(h.events, **P)
    assert (v.rule_id, v.valid) == ("MIR-10", "unknown") and v.observed.startswith("no principal given")
    h = H()
    op = h.open(1.0)
    h.end(1.01, op)
    v = mir.check_stale_failover_partner(h.events, **P, principal=B)
    assert v.valid == "unknown" and v.observed == "first open succeeded but no attempt was observed"
    h = H()
    _first_open(h, B, kind="info")
    assert mir.check_stale_failover_partner(h.events, **P,
                                            principal=B).observed == "no decided first open in the history"


def test_mir_10_principal_from_node_start_alone_and_a_later_demotion() -> None:
    h = H()
    h.add("node.start", 0.0, node="pg-b", role="principal")
    _first_open(h, B)
    v = mir.check_stale_failover_partner(h.events, **P)
    assert v.valid is True and v.expected == "the first connect works, on the principal"
    h = H()
    h.add("role.change", 0.1, node="pg-b", old_role="mirror", new_role="principal")
    h.add("role.change", 0.2, node="pg-a", old_role="principal", new_role="mirror")  # a demotion names no one
    _first_open(h, B)
    assert mir.check_stale_failover_partner(h.events, **P).valid is True


def test_mir_10_an_instant_failure_is_the_first_open_end() -> None:
    h = H()
    h.add("node.start", 0.0, node="pg-c", role="principal")
    op = h.open(1.0)
    h.end(1.0, op, "fail", error="refused")  # failed at the instant it began
    h.add("role.change", 2.0, node="pg-a", old_role="mirror", new_role="principal")  # after it
    v = mir.check_stale_failover_partner(h.events, **P)
    assert v.valid is True and v.expected.startswith("the first connect fails")


def test_mir_10_the_first_open_end_is_its_own() -> None:
    h = H()
    h.add("node.start", 0.0, node="pg-b", role="principal")
    h.add("op.invoke", 1.0, process="c1", op_id=1, f="open", value={"database": "d"})
    h.add("op.ok", 1.0, process="c2", op_id=1, f="open")  # another process's op 1
    h.add("op.ok", 1.0, process="c1", op_id=7, f="open")  # another op of this process
    h.add("role.change", 1.002, node="pg-a", old_role="mirror", new_role="principal")
    h.conn(B, 1.003, None)
    h.add("op.ok", 1.01, process="c1", op_id=1, f="open")
    assert mir.check_stale_failover_partner(h.events,
                                            **P).valid == "unknown"  # the role change is inside c1's first open


# ------------------------------------------------------------------------------ MIR-11


def _broken(*, by: str = "upstream", close_at: float = 1.0) -> tuple[H, int]:
    h = H()
    op = h.open(0.0)
    cid = h.conn(A, 0.0, close_at, by=by, down=500)
    h.end(0.01, op)
    return h, cid


def _query(h: H, t0: float, t1: float, kind: str = "ok", f: str = "query", process: str = "c1") -> None:
    op = next(h.op_ids)
    h.add("op.invoke", t0, process=process, op_id=op, f=f)
    h.add(f"op.{kind}", t1, process=process, op_id=op, f=f, error="x")


def test_mir_11_an_operation_invoked_exactly_at_the_break_must_fail() -> None:
    h, _ = _broken()
    _query(h, 1.0, 1.01)
    v = mir.check_no_automatic_reconnect(h.events, **P)
    assert v.valid is False
    assert v.observed == "query op 2 succeeded 0.010 s after the connection broke, without a new open"


def test_mir_11_other_processes_closes_and_new_opens_are_not_the_next_operation() -> None:
    h, _ = _broken()
    _query(h, 1.1, 1.2, process="c2")
    _query(h, 1.3, 1.4, f="close")
    _query(h, 1.5, 1.6, kind="fail")
    v = mir.check_no_automatic_reconnect(h.events, **P)
    assert v.valid is True and v.observed == "1 break(s) surfaced as an error; no automatic reconnect"
    h, _ = _broken()
    op = h.open(1.0)  # a new open exactly at the break: then the next operation is on the new connection
    h.conn(A, 1.0, None)
    h.end(1.01, op)
    _query(h, 1.1, 1.2)
    assert mir.check_no_automatic_reconnect(h.events, **P).valid == "unknown"


def test_mir_11_a_reconnect_at_the_instant_of_the_break_or_inside_an_open_is_not_automatic() -> None:
    h, _ = _broken()
    h.conn(B, 1.0, None)  # accepted at the very instant of the break
    _query(h, 1.1, 1.2, kind="fail")
    assert mir.check_no_automatic_reconnect(h.events, **P).valid is True
    h, _ = _broken()
    op = h.open(1.5)
    h.conn(B, 1.6, None)
    h.end(1.6, op)  # accepted at the open's end: inside it
    assert mir.check_no_automatic_reconnect(h.events, **P).valid is not False


def test_mir_11_a_connection_broken_as_it_opened() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, 0.5, by="upstream", down=500)
    h.end(0.5, op)  # the connection broke at the instant the open succeeded
    _query(h, 0.5, 0.6)
    assert mir.check_no_automatic_reconnect(h.events, **P).valid is False


def test_mir_11_another_open_ending_after_the_break_is_not_the_next_operation() -> None:
    h, _ = _broken()
    op = h.open(0.5)  # a second open of the process, still running at the break
    h.end(1.2, op)
    _query(h, 1.5, 1.6)
    v = mir.check_no_automatic_reconnect(h.events, **P)
    assert v.valid is False and "succeeded 0.600 s after the connection broke" in v.observed


def test_mir_11_only_a_successful_open_whose_connection_the_server_closed_is_judged() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, 1.0, by="upstream", down=500)
    h.end(0.01, op, "fail", error="x")
    _query(h, 1.5, 1.6)
    assert mir.check_no_automatic_reconnect(h.events, **P).valid == "unknown"
    h, _ = _broken(by="client")  # the application closed it
    _query(h, 1.5, 1.6)
    assert mir.check_no_automatic_reconnect(h.events, **P).valid == "unknown"


def test_mir_11_a_newer_connection_of_the_process_makes_later_operations_ambiguous() -> None:
    h, _ = _broken()
    op = h.open(0.5)
    h.conn(B, 0.5, None)
    h.end(1.0, op)  # opened at the very moment of the break
    _query(h, 1.5, 1.6)
    assert mir.check_no_automatic_reconnect(h.events, **P).valid == "unknown"
    h, _ = _broken()
    op = h.open(0.5, process="c2")
    h.conn(B, 0.5, None)
    h.end(0.6, op, process="c2")
    _query(h, 1.5, 1.6)
    assert mir.check_no_automatic_reconnect(h.events, **P).valid is False


# ------------------------------------------------------------------------------ MIR-12


def _redirected(h: H, t: float, shown: str | None) -> None:
    op_id = next(h.op_ids)
    h.add("op.invoke", t, process="c1", op_id=op_id, f="open", value={"initial": "pg-a,20001", "database": "d"})
    h.conn(A, t, t + 0.001, upfail=True, by="proxy")
    h.conn(B, t + 0.002, None)
    h.add("op.ok", t + 0.01, process="c1", op_id=op_id, f="open",
          value={} if shown is None else {"presented_server": shown})


def test_mir_12_judges_every_redirected_open_that_says_what_it_presents() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, None)
    h.end(0.01, op, value={"presented_server": "pg-a"})  # not redirected
    _redirected(h, 1.0, None)  # redirected, silent
    _redirected(h, 2.0, "PG-A,20001")
    v = mir.check_redirect_keeps_initial_name(h.events, **P)
    assert v.valid is True
    last = [e.index for e in h.events if e.t >= 2.0]
    assert v.evidence == (last[0], last[4], last[5])


# ------------------------------------------------------------------------------ MIR-13


def test_mir_13_a_stop_without_seconds_starts_at_its_event() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.5, 1.001, by="upstream")
    h.add("node.stop", 1.0, node="a")
    h.conn(B, 1.002, None)
    h.end(1.01, op)
    v = mir.check_shutdown_aborts_attempts(h.events, **P)
    assert v.valid is True and v.observed == "attempt(s) pending at the shutdown were abandoned at once"


def test_mir_13_pending_edges() -> None:
    """Pending: started at or before the shutdown, ended at or after shutdown − tolerance."""
    for start, end in ((1.0, 1.0 + T), (0.5, 1.0 - T)):
        h = H()
        op = h.open(0.0)
        h.add("node.kill", 1.0, node="a")
        h.conn(A, start, end, by="upstream")
        h.conn(B, end + 0.001, None)
        h.end(end + 0.01, op)
        assert mir.check_shutdown_aborts_attempts(h.events, **P, tolerance=T).valid is True, (start, end)


def test_mir_13_a_client_view_attempt_pending_on_a_named_partner() -> None:
    h = H()
    op = h.open(0.0)
    h.add("node.kill", 0.1, node="pg-a")
    h.attempt(1, 0.0, 1.2, "timeout", address=None)
    h.end(1.3, op, "fail", error="x")
    v = mir.check_shutdown_aborts_attempts(h.events, initial=(A, "zz"), failover=B)
    assert v.valid is False and "waited out its retry time" in v.observed
    h = H()
    op = h.open(0.0)
    h.add("node.kill", 0.1, node="pg-a")
    h.attempt(1, 0.0, 0.1005, "timeout", address=None)  # gave up at the shutdown itself
    h.attempt(2, 0.101, 0.102, "refused", target="failover", address=None)
    h.end(0.2, op, "fail", error="x")
    assert mir.check_shutdown_aborts_attempts(h.events, **P).valid is True


def test_mir_13_a_slow_server_close_is_judged_by_the_next_step_not_as_a_wait() -> None:
    h = H()
    op = h.open(0.0)
    h.add("node.stop", 0.5, node="a", seconds=0.2)  # the stop began at 0.3
    h.conn(A, 0.0, 0.45, by="upstream")
    h.conn(B, 0.451, None)
    h.end(0.46, op)
    assert mir.check_shutdown_aborts_attempts(h.events, **P).valid is True


def test_mir_13_the_delay_after_a_round_is_allowed() -> None:
    def hist(stopped: str, second_round_at: float) -> H:
        h = H()
        op = h.open(0.0)
        h.conn(A, 0.0, 0.002, by="upstream", down=9)
        h.conn(B, 0.002, 0.3, by="upstream")
        h.add("node.kill", 0.3 if stopped == "b" else 0.0015, node=stopped)
        h.conn(A, second_round_at, None)
        h.end(second_round_at + 0.01, op)
        return h

    assert mir.check_shutdown_aborts_attempts(hist("b", 0.4).events,
                                              **P).valid is True  # attempt 2 closed round 1: 100 ms delay
    v = mir.check_shutdown_aborts_attempts(hist("a", 0.4).events, **P)
    assert v.valid is True  # attempt 1 (A) pending at A's kill; attempt 2 followed at once
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, 0.3, by="upstream")
    h.add("node.kill", 0.3, node="a")
    h.conn(B, 0.4, None)  # attempt 1 closed no round: no delay allowed
    h.end(0.41, op)
    v = mir.check_shutdown_aborts_attempts(h.events, **P)
    assert v.valid is False and v.observed.endswith("but attempt 2 came 0.100 s later; expected ≤ 0.000 s +0.020")


def test_mir_13_what_it_cannot_judge() -> None:
    h = H()
    op = h.open(0.0)
    h.add("fault.start", 0.05, fault="stop", id=1, node="zz")  # an unrelated node first
    h.conn(A, 0.0, None)  # still held when A stops
    h.add("node.kill", 0.1, node="a")
    h.end(5.0, op, "fail", error="x")
    v = mir.check_shutdown_aborts_attempts(h.events, **P)
    assert (v.rule_id, v.valid) == ("MIR-13", "unknown") and v.details["not_judged"] == [_idx(h, "conn.accepted")]
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, None)
    h.end(0.01, op)  # opened, and still open when A stops later
    h.add("node.kill", 1.0, node="a")
    v = mir.check_shutdown_aborts_attempts(h.events, **P)
    assert v.valid == "unknown" and v.details["not_judged"] == []
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, 0.5, by="client", down=0)  # the client hung up, the server never closed it
    h.add("node.kill", 0.2, node="a")
    h.end(0.6, op, "fail", error="x")
    v = mir.check_shutdown_aborts_attempts(h.events, **P)
    assert v.valid == "unknown" and v.details["not_judged"] == [1]
    h = H()
    h.open(0.0)
    h.add("node.kill", 0.2, node="a")
    h.conn(A, 0.0, 0.2, by="upstream")  # closed by the shutdown, and nothing after it yet
    assert mir.check_shutdown_aborts_attempts(h.events, **P).valid == "unknown"


def test_mir_13_an_attempt_after_the_shutdown_was_not_pending() -> None:
    h = H()
    op = h.open(0.0)
    h.add("node.kill", 0.1, node="pg-a")
    h.attempt(1, 0.5, 2.0, "timeout", address=None)
    h.end(2.1, op, "fail", error="x")
    assert mir.check_shutdown_aborts_attempts(h.events, **P).valid == "unknown"


def test_mir_13_giving_up_at_shutdown_plus_tolerance_is_not_waiting() -> None:
    h = H()
    op = h.open(0.0)
    h.add("node.kill", 0.25, node="pg-a")
    h.attempt(1, 0.0, 0.25 + T, "timeout", address=None)
    h.attempt(2, 0.25 + T, 0.3, "refused", target="failover", address=None)
    h.end(0.3, op, "fail", error="x")
    assert mir.check_shutdown_aborts_attempts(h.events, **P, tolerance=T).valid is True


def test_mir_13_next_step_boundary() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.0, 0.25, by="upstream")
    h.add("node.kill", 0.25, node="a")
    h.conn(B, 0.25 + T, None)
    h.end(0.3, op)
    assert mir.check_shutdown_aborts_attempts(h.events, **P, tolerance=T).valid is True
