"""OBS-1 in the MIR checkers, and the MIR checkers' edge cases (synthetic histories, no I/O):

* refused connects seen from outside (``conn.refused``) are attempts; where nobody could see them
  (a refuse partition, the capture unavailable, a client that reports nothing) the rules that need
  the whole attempt sequence answer *unknown* with the reason - never a violation;
* MIR-4 judged on give-ups (a failed open that held its last attempt past the retry time and never
  tried the other partner) and on readable standbys (an open that stays on a non-principal);
* MIR-7 to the cap (delays after round 5 are 1 s; a doubling client is caught);
* MIR-9 in a two-node pair (the mirror is the initial partner: the server reached is cached).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from harness.history.core import Event
from harness.rules.mirroring import (
    CHECKERS,
    check_initial_partner_first,
    check_partner_alternation,
    check_partner_cache_update,
    check_partner_retry_delays,
    check_retry_time_schedule,
    check_stale_failover_partner,
    retry_delay,
)
from harness.rules.mirroring.scaffold import NEEDS

A, B = "fh-r-n1", "fh-r-n2"
NODE = {A: "n1", B: "n2"}
LISTEN = {A: "127.0.0.1:20001", B: "127.0.0.1:20002"}
P = {"initial": [A, LISTEN[A]], "failover": [B, LISTEN[B]]}
TARGETS = [{"listen": LISTEN[p], "proxy": p, "node": NODE[p]} for p in (A, B)]


class Hist:
    """Synthetic histories in the shape the topology, the faults, the capture and the clients record."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._conn = itertools.count(1)
        self._port = itertools.count(41000)

    def add(self, type_: str, t: float, **fields: Any) -> Event:
        e = Event(len(self.events), t, type_, fields)
        self.events.append(e)
        return e

    def up(self, t: float = 0.0, principal: str = "n1") -> None:
        self.add("topology.up", t, topology="pg-pair", seconds=1.0, nodes=[
            {"name": n, "role": "principal" if n == principal else "mirror"} for n in ("n1", "n2")])

    def capture(self, t: float, available: bool, reason: str | None = None) -> None:
        self.add("harness.capture", t, available=available, method="af_packet:lo", reason=reason, targets=TARGETS)

    def refuse(self, t0: float, t1: float, proxy: str = A) -> None:
        fid = next(self._conn) + 1000
        self.add("fault.start", t0, fault="partition", id=fid, node=NODE[proxy],
                 params={"how": "refuse", "proxy": proxy, "listen": LISTEN[proxy]})
        self.add("fault.end", t1, fault="partition", id=fid, node=NODE[proxy], seconds=t1 - t0, error=None)

    def refused(self, proxy: str, t: float) -> str:
        port = next(self._port)
        self.add("conn.refused", t, proxy=proxy, node=NODE[proxy], listen=LISTEN[proxy], client=f"127.0.0.1:{port}",
                 client_port=port, seconds=0.00001, source="af_packet:lo")
        return f"127.0.0.1:{port}"

    def conn(self, proxy: str, t0: float, t1: float | None, by: str = "client", down: int = 0) -> str:
        cid, port = next(self._conn), next(self._port)
        self.add("conn.accepted", t0, proxy=proxy, conn_id=cid, client=f"127.0.0.1:{port}", listen=LISTEN[proxy],
                 upstream="127.0.0.1:5432", node=NODE[proxy])
        if t1 is not None:
            self.add("conn.closed", t1, proxy=proxy, conn_id=cid, by=by, reason="", bytes_up=10, bytes_down=down)
        return f"127.0.0.1:{port}"

    def open(self, t: float, op: int = 1, process: str = "c1") -> None:
        self.add("op.invoke", t, process=process, op_id=op, f="open",
                 value={"initial": "127.0.0.1,20001", "failover": "127.0.0.1,20002", "database": "app",
                        "login_timeout": 2.0})

    def end(self, t: float, kind: str = "ok", op: int = 1, process: str = "c1", **fields: Any) -> None:
        extra = {"value": fields.get("value")} if kind == "ok" else {"error": "failed", "reason": fields.get("reason")}
        self.add(f"op.{kind}", t, process=process, op_id=op, f="open", **extra)


def first_refused_second_up(*, capture: bool | None, observed: bool, client_reports: bool = False) -> list[Event]:
    """``Server=n1; Failover Partner=n2``: n1's proxy refuses (partition how=refuse), n2 is the principal
    and opens at once. ``capture``: the capture ran (True), said it could not (False) or left no trace
    (None); ``observed``: the refused connect is in the history as ``conn.refused``."""
    h = Hist()
    h.up(principal="n2")
    if capture is not None:
        h.capture(0.5, capture, None if capture else "packet capture needs root (CAP_NET_RAW); running as uid 1000")
    h.refuse(1.0, 3.0)
    h.open(1.1)
    local = h.refused(A, 1.1002) if observed else None
    if client_reports:
        h.add("attempt.start", 1.1001, process="c1", op_id=1, attempt=1, target="initial", address=LISTEN[A])
        h.add("attempt.end", 1.1004, process="c1", op_id=1, attempt=1, target="initial", address=LISTEN[A],
              outcome="refused", local=local)
    h.conn(B, 1.1010, None)
    h.end(1.1050)
    return h.events


def test_refused_first_partner_observed_from_outside_is_kept() -> None:
    events = first_refused_second_up(capture=True, observed=True)
    for check in (check_initial_partner_first, check_partner_alternation):
        v = check(events, **P, **({"login_timeout": 2.0} if check is check_partner_alternation else {}))
        assert v.valid is True, v.summary
    v = check_partner_alternation(events, **P, login_timeout=2.0)
    assert "alternated over 2 attempt(s)" in v.observed and "unobserved" not in v.details


@pytest.mark.parametrize("capture", [False, None], ids=["capture-unavailable", "no-capture-recorded"])
def test_refused_first_partner_unobserved_is_unknown_never_violated(capture: bool | None) -> None:
    events = first_refused_second_up(capture=capture, observed=False)
    why = "root (CAP_NET_RAW)" if capture is False else "the history records no refused-connect capture"
    for check in (check_initial_partner_first, check_partner_alternation):
        v = check(events, **P, **({"login_timeout": 2.0} if check is check_partner_alternation else {}))
        assert v.valid == "unknown", v.summary
        assert "connects to the initial partner were refused" in v.observed and why in v.observed
        assert v.details["unobserved"][0]["open"] == (4 if capture is False else 3)  # the op.invoke
    # the same history judged on the proxies alone used to read as "started with the failover partner"
    assert check_initial_partner_first(events, **P, use_client_view=False).valid == "unknown"


def test_refused_first_partner_reported_by_the_client_is_judged_without_the_capture() -> None:
    events = first_refused_second_up(capture=False, observed=False, client_reports=True)
    assert check_initial_partner_first(events, **P).valid is True
    assert check_partner_alternation(events, **P, login_timeout=2.0).valid is True


def test_client_attempt_and_captured_refusal_are_one_attempt() -> None:
    events = first_refused_second_up(capture=True, observed=True, client_reports=True)
    v = check_partner_alternation(events, **P, login_timeout=2.0)
    assert v.valid is True and "over 2 attempt(s)" in v.observed and "client_view_attempts" not in v.details


def test_capture_that_stopped_before_the_open_does_not_cover_it() -> None:
    h = Hist()
    h.up(principal="n2")
    h.capture(0.5, True)
    h.capture(0.9, False, "the kernel dropped 3 captured packet(s)")
    h.refuse(1.0, 3.0)
    h.open(1.1)
    h.conn(B, 1.101, None)
    h.end(1.105)
    v = check_initial_partner_first(h.events, **P)
    assert v.valid == "unknown" and "dropped 3 captured packet(s)" in v.observed


def test_refusals_of_a_partner_that_is_not_refusing_leave_the_verdict_judged() -> None:
    """A refuse partition of the *failover* partner while the client reached the principal behind
    the initial one at once: nothing could hide before attempt 1, yet the sequence may hide a
    refused failover attempt, so the sequence rules do not guess either way."""
    h = Hist()
    h.up()
    h.refuse(1.0, 3.0, proxy=B)
    h.open(1.1)
    h.conn(A, 1.101, None)
    h.end(1.105)
    assert check_initial_partner_first(h.events, **P).valid == "unknown"
    h2 = Hist()  # the same open with no refuse partition at all: judged
    h2.up()
    h2.open(1.1)
    h2.conn(A, 1.101, None)
    h2.end(1.105)
    assert check_initial_partner_first(h2.events, **P).valid is True


def test_unobserved_open_that_gives_up_early_is_still_a_mir_4_violation() -> None:
    """Both partners refused, nothing observed, the client gives up after 2 ms of a 2 s login timeout:
    whatever attempts nobody saw were refusals, which never excuse an early end."""
    h = Hist()
    h.capture(0.5, False, "packet capture needs root")
    h.refuse(1.0, 3.0, A)
    h.refuse(1.0, 3.0, B)
    h.open(1.1)
    h.end(1.102, "fail", reason="error")
    v = check_partner_alternation(h.events, **P, login_timeout=2.0)
    assert v.valid is False and "gave up after 0.002 s" in v.observed
    assert check_initial_partner_first(h.events, **P).valid == "unknown"


def test_both_refusals_captured_and_early_give_up_is_judged_on_them() -> None:
    h = Hist()
    h.capture(0.5, True)
    h.refuse(1.0, 3.0, A)
    h.refuse(1.0, 3.0, B)
    h.open(1.1)
    h.refused(A, 1.1001)
    h.refused(B, 1.1003)
    h.end(1.102, "fail", reason="error")
    v = check_partner_alternation(h.events, **P, login_timeout=2.0)
    assert v.valid is False and "2 attempt(s)" in v.observed
    assert set(v.evidence) == {5, 7, 8}  # the open, its end and the last refused connect


# Parameters that let every checker that needs the whole attempt sequence run on one history.
SEQUENCE_PARAMS: dict[str, dict[str, Any]] = {
    "MIR-1": {}, "MIR-2": {}, "MIR-3": {"login_timeout": 2.0}, "MIR-4": {"login_timeout": 2.0},
    "MIR-5": {"login_timeout": 2.0}, "MIR-6": {"login_timeout": 2.0}, "MIR-7": {},
    "MIR-8": {"window": 0.001}, "MIR-9": {}, "MIR-13": {},
}


def test_every_checker_states_its_needs() -> None:
    for rule, checker in CHECKERS.items():
        needs = getattr(checker, "needs", None)
        assert needs and set(needs) <= set(NEEDS), rule
        assert ("refused" in needs) == (rule in SEQUENCE_PARAMS), rule


@pytest.mark.parametrize("rule", sorted(SEQUENCE_PARAMS))
def test_no_sequence_rule_violates_on_unobserved_refusals(rule: str) -> None:
    """First partner refused and unobserved, the second reached at once: no checker that needs the
    attempt sequence calls that a violation (MIR-8 would, on the proxy view, see a client that
    opened at once - it is unknown too, having nothing to judge)."""
    events = first_refused_second_up(capture=False, observed=False)
    v = CHECKERS[rule](events, **P, **SEQUENCE_PARAMS[rule])
    assert v.valid is not False, v.summary


# ------------------------------------------------------------------------------ MIR-4: give-ups

def first_black_holed(held_until: float, *, tries_host_2: bool) -> list[Event]:
    """``Server=n1`` black-holed, the principal n2 behind the failover partner, LT = 2 s: the client
    holds its attempt on n1 until ``held_until``, then either opens on n2 or fails without trying it
    (with ``held_until`` = the login timeout: the asyncpg / postgres.js behaviour, docs/mirroring.md)."""
    h = Hist()
    h.up(principal="n2")
    h.open(10.0)
    h.conn(A, 10.0005, held_until, by="client")
    if tries_host_2:
        h.conn(B, held_until + 0.0005, None)
        h.end(held_until + 0.01)
    else:
        h.end(held_until + 0.001, "fail", reason="timeout")
    return h.events


def test_mir_4_give_up_without_trying_the_other_partner_is_a_violation() -> None:
    v = check_partner_alternation(first_black_holed(12.0, tries_host_2=False), **P, login_timeout=2.0)
    assert v.valid is False
    assert "retry time 0.160 s expired at +0.161 s (held until +2.000 s)" in v.observed
    assert "without ever trying the failover partner" in v.observed and 1 in v.evidence


def test_mir_4_correct_client_behind_a_black_hole_is_kept() -> None:
    assert check_partner_alternation(first_black_holed(10.1605, tries_host_2=True), **P,
                                     login_timeout=2.0).valid is True


def test_mir_4_late_failover_that_opens_is_left_to_mir_5() -> None:
    """Held past its retry time, then the failover partner opens: MIR-4 alternation holds; MIR-5 catches
    the hold."""
    events = first_black_holed(12.0, tries_host_2=True)
    assert check_partner_alternation(events, **P, login_timeout=2.0).valid is True
    assert check_retry_time_schedule(events, **P, login_timeout=2.0).valid is False


def test_mir_4_last_attempt_cut_at_the_login_timeout_is_not_a_give_up() -> None:
    """A truncated last round (MIR-6) ends at the login timeout: nothing left to try the other partner."""
    h = Hist()
    h.open(0.0)
    t = 0.0
    for k, held in enumerate([0.08, 0.08, 0.16, 0.16, 0.24, 0.24, 0.04], 1):
        h.conn(A if k % 2 else B, t, t + held, by="client")
        t += held
    h.end(1.0, "fail", reason="timeout")
    assert check_partner_alternation(h.events, **P, login_timeout=1.0).valid is True


# ------------------------------------------------------------------- readable standbys (MIR-4/10)

def lands_on(node_proxy: str, principal: str, switch_at: float | None = None) -> list[Event]:
    """``Server=n2; Failover Partner=n1``: the open's one attempt logs in on ``node_proxy`` and stays."""
    h = Hist()
    h.up(principal=principal)
    h.open(5.0)
    h.conn(B if node_proxy == B else A, 5.001, None)
    if switch_at is not None:
        h.add("role.change", switch_at, node="n2", old_role="mirror", new_role="principal")
    h.end(5.01)
    return h.events


STANDBY_FIRST = {"initial": [B, LISTEN[B]], "failover": [A, LISTEN[A]]}


def test_mir_4_open_that_stays_on_a_readable_standby_is_a_violation() -> None:
    v = check_partner_alternation(lands_on(B, principal="n1"), **STANDBY_FIRST, login_timeout=2.0)
    assert v.valid is False and "ended on n2" in v.observed and "n1 was" in v.observed
    assert check_partner_alternation(lands_on(B, principal="n2"), **STANDBY_FIRST, login_timeout=2.0).valid != False  # noqa: E712
    # roles changed during the attempt: which node was principal is not decided - not judged on it
    switched = lands_on(B, principal="n1", switch_at=5.005)
    assert check_partner_alternation(switched, **STANDBY_FIRST, login_timeout=2.0).valid != False  # noqa: E712


def test_mir_4_without_roles_in_the_history_is_not_judged_on_the_principal() -> None:
    events = [e for e in lands_on(B, principal="n1") if e.type != "topology.up"]
    assert check_partner_alternation(events, **STANDBY_FIRST, login_timeout=2.0).valid != False  # noqa: E712


def test_mir_10_first_connect_that_stays_on_a_readable_standby_is_a_violation() -> None:
    """Principal n1, ``Server=n2 (readable standby); Failover Partner=n1``: the first connect must work on
    the principal; one that stays on the standby breaks MIR-10."""
    v = check_stale_failover_partner(lands_on(B, principal="n1"), **STANDBY_FIRST, principal=[A, LISTEN[A], "n1"])
    assert v.valid is False and "not the principal" in v.observed


# ------------------------------------------------------------------------------- MIR-7 to the cap

def inactive_rounds(lt: float, delays: list[float]) -> list[Event]:
    """Both partners inactive (5 ms answers) for a whole login timeout, ``delays[r-1]`` after round r."""
    h = Hist()
    h.open(0.0)
    t, r = 0.0, 0
    while t < lt:
        r += 1
        for proxy in (A, B):
            h.conn(proxy, t, t + 0.005, by="upstream", down=90)
            t += 0.0055
        t += delays[min(r, len(delays)) - 1]
    h.end(lt, "fail", reason="timeout")
    return h.events


def test_mir_7_delays_after_round_5_stay_at_1_s() -> None:
    v = check_partner_retry_delays(inactive_rounds(5.0, [0.1, 0.2, 0.4, 0.8, 1.0]), **P)
    assert v.valid is True and "7 delay(s)" in v.observed, v.summary  # three of them after round 5
    assert retry_delay(6) == retry_delay(9) == 1.0


def test_mir_7_delays_that_keep_doubling_past_1_s_are_a_violation() -> None:
    v = check_partner_retry_delays(inactive_rounds(5.0, [0.1, 0.2, 0.4, 0.8, 1.6, 3.2]), **P)
    assert v.valid is False and "delay after round 5" in v.observed and "expected 1.000 s" in v.observed


# --------------------------------------------------------------------------- MIR-9 in a pair

def redirect_then_reopen(second_failover: str) -> list[Event]:
    """``Server=n1; Failover Partner=n2`` while n2 is the principal and publishes n1 (the initial
    partner) as its mirror: open 1 goes n1 (inactive) → n2; open 2's failover attempt goes to
    ``second_failover``."""
    h = Hist()
    h.up(principal="n2")
    h.add("mirroring.partner", 0.1, node="n2", partner=LISTEN[A])
    for op, (t, failover) in enumerate([(1.0, B), (2.0, second_failover)], 1):
        h.open(t, op=op)
        h.conn(A, t + 0.001, t + 0.005, by="upstream", down=90)
        if failover == B:
            h.conn(B, t + 0.006, t + 0.5, by="client")
            h.end(t + 0.01, op=op, value={"partner": LISTEN[A]})
        else:
            h.conn(A, t + 0.006, t + 0.01, by="upstream", down=90)
            h.end(t + 0.5, "fail", op=op, reason="timeout")
    return h.events


@pytest.mark.parametrize("variant", ["native", "managed"])
def test_mir_9_pair_caches_the_server_reached_when_its_mirror_is_the_initial_partner(variant: str) -> None:
    kept = check_partner_cache_update(redirect_then_reopen(B), **P, variant=variant)
    assert kept.valid is True and kept.details["server_cached"] >= 1, kept.summary
    literal = check_partner_cache_update(redirect_then_reopen(A), **P,
                                         variant=variant)  # cached the initial partner twice
    assert literal.valid is False and "expected the cached failover partner 127.0.0.1:20002" in literal.observed
