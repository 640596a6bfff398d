"""MIR-1, MIR-3, MIR-4, MIR-5, MIR-6: which partner each attempt goes to and how long it may be
held, with black-holed partners (a ``timeout`` toxic: the TCP connect succeeds, nothing answers,
so an attempt lasts exactly as long as the client holds it - its retry time, read at the fault
proxy as ``conn.closed.t - conn.accepted.t``) and resetting partners (a ``reset_peer`` toxic).

Short login timeouts (1 s): the schedule is proportional to LT (MIR-5: ``r × 0.08 × LT``), so the
rounds are those of the 15 s table scaled by 1/15. The exact 15 s table is checked once, in
``test_mir_default_login_timeout.py`` (slow).

Each timing scenario runs under a machine-stall monitor: a try that violates a timing rule
while the shared machine demonstrably stalled (a 5 ms sleep woke > 10 ms late) is recorded and run
again with a fresh client, at most three tries (``harness.workload.mirroring.judge_with_stall_retry``)."""

from __future__ import annotations

from typing import Any

import pytest

from harness import Check, Faults, History, Pair
from harness.rules.mirroring import (
    check_initial_partner_first,
    check_no_failover_partner_no_alternation,
    check_partner_alternation,
    check_retry_time_schedule,
    check_truncated_last_round,
)
from harness.rules.verdict import Verdict
from harness.workload.mirroring import connstring, judge_with_stall_retry, open_during, partner, partners

LT = 1.0
TOL = 0.020  # the harness goal; the checkers refuse anything looser than ±0.050 s
#: How long past the login timeout the test waits for the open before it heals the faults (a client
#: with no working login timeout is then unblocked and judged from what the proxies saw).
GRACE = 1.0


def _open_with_both_faulted(pair: Pair, faults: Faults, history: History, client: Any, how_initial: str,
                            how_failover: str, login_timeout: float) -> None:
    text = connstring(pair, "n1", "n2", login_timeout=login_timeout)
    both = [faults.partition("n1", how=how_initial), faults.partition("n2", how=how_failover)]
    open_during(client, text, history, both, wait=login_timeout + GRACE, label=f"{how_initial}/{how_failover}")


@pytest.mark.rule("MIR-1", "MIR-4", "MIR-5", "MIR-6")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_black_holed_partners_alternate_on_the_retry_time_schedule(pair: Pair, faults: Faults, history: History,
                                                                   check: Check, make_client: Any) -> None:
    """Both partners black-holed, LT = 1 s. MIR-1: attempt 1 to the initial partner. MIR-4:
    initial, failover, initial … until the login timeout. MIR-5: attempts held 80, 80, 160, 160,
    240, 240 ms (r × 0.08 × LT ±20 ms). MIR-6: three rounds use 0.96 s; the fourth round is cut to
    one 40 ms attempt on the initial partner ending at LT ±20 ms; nothing extends past LT."""

    def scenario(k: int) -> list[Verdict]:
        _open_with_both_faulted(pair, faults, history, make_client(f"app-{k}"), "blackhole", "blackhole", LT)
        events = history.events()
        names = {"initial": partner(pair, "n1"), "failover": partner(pair, "n2"), "process": f"app-{k}"}
        return [
            check_initial_partner_first(events, **names),
            check_partner_alternation(events, **names, login_timeout=LT, tolerance=TOL),
            check_retry_time_schedule(events, **names, login_timeout=LT, tolerance=TOL),
            check_truncated_last_round(events, **names, login_timeout=LT, tolerance=TOL),
        ]

    check(judge_with_stall_retry(history, scenario))


@pytest.mark.rule("MIR-4", "MIR-5", "MIR-6")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_fast_failures_leave_time_for_more_rounds(pair: Pair, faults: Faults, history: History, check: Check,
                                                  make_client: Any) -> None:
    """Initial partner black-holed, failover partner resetting every connection at once (``reset``),
    LT = 1 s. MIR-6: attempts that fail early leave time for further rounds - the initial partner's
    attempts are held 80, 160, 240, 320 ms and the fifth round's (400 ms) is cut to end at LT ±20 ms.
    MIR-4 alternation throughout; MIR-5 every black-holed attempt on schedule.
    **(interpretation, MIR-7)** a round mixing a timeout with a fast failure gets no retry delay,
    so the rounds follow each other at once."""

    def scenario(k: int) -> list[Verdict]:
        _open_with_both_faulted(pair, faults, history, make_client(f"app-{k}"), "blackhole", "reset", LT)
        events = history.events()
        names = {"initial": partner(pair, "n1"), "failover": partner(pair, "n2"), "process": f"app-{k}"}
        return [
            check_partner_alternation(events, **names, login_timeout=LT, tolerance=TOL),
            check_retry_time_schedule(events, **names, login_timeout=LT, tolerance=TOL),
            check_truncated_last_round(events, **names, login_timeout=LT, tolerance=TOL),
        ]

    check(judge_with_stall_retry(history, scenario))


@pytest.mark.rule("MIR-3")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_no_failover_partner_only_the_initial_partner_is_tried(pair: Pair, faults: Faults, history: History,
                                                               check: Check, make_client: Any) -> None:
    """MIR-3: ``Server=<principal>`` with no ``Failover Partner``; the principal is black-holed (LT =
    1 s), then, with a fresh client, resetting. The client must never reach the mirror (n2, which it
    was not told about) and must fail by the login timeout (±20 ms), as for an unmirrored database.
    **(interpretation, RULEBOOK via docs/mirroring.md)** "keeps trying until the network gives up or
    LT expires" = attempts to the initial partner only, bounded by LT."""
    text = connstring(pair, "n1", None, login_timeout=LT)

    def scenario(k: int) -> list[Verdict]:
        verdicts = []
        for how in ("blackhole", "reset"):
            app = make_client(f"app-{how}-{k}")
            open_during(app, text, history, [faults.partition("n1", how=how)], wait=LT + GRACE, label=how)
            verdicts.append(check_no_failover_partner_no_alternation(history.events(), initial=partner(pair, "n1"),
                                                                     failover=partner(pair, "n2"),
                                        login_timeout=LT, tolerance=TOL, process=f"app-{how}-{k}"))
        return verdicts

    check(judge_with_stall_retry(history, scenario))


@pytest.mark.rule("MIR-1", "MIR-4", "MIR-5")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_black_holed_first_partner_with_the_principal_behind_the_failover_partner(
        pair: Pair, faults: Faults, history: History, check: Check, make_client: Any) -> None:
    """``Server=<mirror n2>; Failover Partner=<principal n1>``, n2 black-holed, LT = 2 s. MIR-4: once
    attempt 1's retry time (0.08 × 2 s = 160 ms) expires, the client tries the failover partner and
    opens on the principal n1; a client that keeps waiting on n2 and fails at its timeout without
    ever trying n1 violates MIR-4 (judged on the give-up), as does one that gives up early. MIR-5:
    attempt 1 held 160 ms ±20 ms. MIR-1: n2 first."""
    lt = 2.0
    text = connstring(pair, "n2", "n1", login_timeout=lt)

    def scenario(k: int) -> list[Verdict]:
        open_during(make_client(f"app-{k}"), text, history, [faults.partition("n2", how="blackhole")],
                    wait=lt + GRACE, label="black hole, then the principal").close()
        names = partners(pair, "n2", "n1", f"app-{k}")
        events = history.events()
        return [
            check_initial_partner_first(events, **names),
            check_partner_alternation(events, **names, login_timeout=lt, tolerance=TOL),
            check_retry_time_schedule(events, **names, login_timeout=lt, tolerance=TOL),
        ]

    check(judge_with_stall_retry(history, scenario))
