"""The MIR checkers' acceptance cases with a real client that reports nothing of its own - psycopg 3
with a multi-host string (``psycopg-multihost``) - on real pairs behind the fault proxy:

* first host refused, second up: MIR-1/MIR-4 *kept* when the packet capture sees the refused
  connect, *unknown* (with the reason) when the capture is off - never *violated*;
* first host black-holed, the principal second, and a client that never tries host 2 (psycopg given
  only the first host): a MIR-4 violation, judged on the give-up;
* a client that stays on a readable standby (``target_session_attrs=any``): a MIR-4 violation.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness.clients.mirroring import PsycopgMultiHostClient
from harness.faults import Faults
from harness.history import History
from harness.rules.mirroring import check_initial_partner_first, check_partner_alternation
from harness.topology import Pair
from harness.workload.mirroring import BackgroundOpen, connstring, partner, try_open

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
LT = 2.0


def _pair(monkeypatch: pytest.MonkeyPatch, capture: str | None = None, readable: bool = False
          ) -> Iterator[tuple[Pair, History]]:
    if capture is not None:
        monkeypatch.setenv("FAILOVER_HARNESS_CAPTURE", capture)
    history = History()
    with Pair(mode="async", mirror_readable=readable, history=history) as pair:
        yield pair, history


@pytest.fixture
def pair_captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Pair, History]]:
    yield from _pair(monkeypatch)


@pytest.fixture
def pair_uncaptured(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Pair, History]]:
    yield from _pair(monkeypatch, capture="off")


@pytest.fixture
def pair_readable(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Pair, History]]:
    yield from _pair(monkeypatch, readable=True)


def _open_with_n2_refused(pair: Pair, history: History) -> dict[str, list[str] | str]:
    client = PsycopgMultiHostClient(history=history, process="app")
    with Faults(pair, history).partition("n2", how="refuse"):
        result = try_open(client, connstring(pair, "n2", "n1", login_timeout=LT), history, label="n2 refused")
    assert result.ok, result.error  # psycopg moves on to the second host: the scenario's premise
    result.close()
    return {"initial": partner(pair, "n2"), "failover": partner(pair, "n1"), "process": "app"}


def test_silent_client_with_the_first_host_refused_is_kept_when_the_capture_sees_it(pair_captured) -> None:
    pair, history = pair_captured
    names = _open_with_n2_refused(pair, history)
    events = history.events()
    assert not history.events("attempt."), "psycopg-multihost reports no attempts of its own"
    mir1, mir4 = check_initial_partner_first(events, **names), check_partner_alternation(events, **names,
                                                                                         login_timeout=LT)
    if not ROOT:  # no capture: the same scenario as the test below
        assert mir1.valid == mir4.valid == "unknown"
        return
    assert len(history.events("conn.refused")) == 1
    assert mir1.valid is True and mir4.valid is True, (mir1.summary, mir4.summary)
    assert "alternated over 2 attempt(s)" in mir4.observed


def test_silent_client_with_the_first_host_refused_is_unknown_without_the_capture(pair_uncaptured) -> None:
    pair, history = pair_uncaptured
    names = _open_with_n2_refused(pair, history)
    events = history.events()
    assert not history.events("conn.refused")
    for verdict in (check_initial_partner_first(events, **names), check_partner_alternation(events, **names,
                                                                                            login_timeout=LT)):
        assert verdict.valid == "unknown", verdict.summary
        assert "turned off by FAILOVER_HARNESS_CAPTURE=off" in verdict.observed
        assert "the client reported no attempts" in verdict.observed


def test_client_that_never_tries_host_2_behind_a_black_hole_violates_mir_4(pair_captured) -> None:
    """``Server=<mirror n2>`` black-holed, the principal n1 the failover partner the harness names -
    but the client (psycopg given n2 alone) never tries it: it waits ``connect_timeout`` = 2 s on
    n2 and fails."""
    pair, history = pair_captured
    client = PsycopgMultiHostClient(history=history, process="app")
    with Faults(pair, history).partition("n2", how="blackhole"):
        bg = BackgroundOpen(client, connstring(pair, "n2", None, login_timeout=LT), history, label="n2 only")
        result = bg.wait(LT + 2.0)
    bg.finish(10.0)
    assert not result.ok and not result.pending
    v = check_partner_alternation(history.events(), initial=partner(pair, "n2"), failover=partner(pair, "n1"),
                    login_timeout=LT)
    assert v.valid is False, v.summary
    assert "retry time 0.160 s expired" in v.observed and "without ever trying the failover partner" in v.observed


def test_client_that_stays_on_a_readable_standby_violates_mir_4(pair_readable) -> None:
    """``Server=<readable standby n2>; Failover Partner=<principal n1>`` and a client that takes any
    server that accepts the login (``target_session_attrs=any``): it stays on n2."""
    pair, history = pair_readable
    client = PsycopgMultiHostClient(history=history, process="app", target_session_attrs="any")
    result = try_open(client, connstring(pair, "n2", "n1", login_timeout=LT), history, label="lands on n2")
    assert result.ok, result.error
    try:
        assert result.conn.execute("SELECT pg_is_in_recovery()") == [(True,)]  # really the standby
    finally:
        result.close()
    v = check_partner_alternation(history.events(), initial=partner(pair, "n2"), failover=partner(pair, "n1"),
                                  login_timeout=LT)
    assert v.valid is False and "ended on n2" in v.observed and "(n1 was)" in v.observed, v.summary
    # the same client with the user's target_session_attrs=read-write moves on to the principal: kept
    good = PsycopgMultiHostClient(history=history, process="good")
    try_open(good, connstring(pair, "n2", "n1", login_timeout=LT), history, label="read-write").close()
    kept = check_partner_alternation(history.events(), initial=partner(pair, "n2"), failover=partner(pair, "n1"),
                       login_timeout=LT, process="good")
    assert kept.valid is True, kept.summary
