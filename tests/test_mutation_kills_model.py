"""The MIR attempt model (``harness/rules/mirroring/model.py``) on synthetic histories, written against
what the mutation test (``make mutation``, docs/mutation.md) showed the checker tests let through:
how a partner name matches an address, how a proxy connection's outcome is read from the wire, how
the client's own attempts are merged in, and the boundaries of each time window. Each test states
the part of the model's documented behaviour (the module docstring) it pins."""

from __future__ import annotations

from typing import Any

import pytest

from harness.rules.mirroring import (
    check_partner_retry_delays,
    check_retry_time_schedule,
    check_shutdown_aborts_attempts,
)
from harness.rules.mirroring.model import (
    MATCH_SLACK,
    Attempt,
    Open,
    build_opens,
    end_time,
    horizon,
    partner_names,
    same_partner,
)
from tests.support.mirroring_history import ADDR, A, B, H


def _one(h: H, **kw: Any) -> Open:
    (o,) = h.opens(**kw)
    return o


# ------------------------------------------------------------------------------ partner names


@pytest.mark.parametrize(("a", "b", "same"), [
    ("127.0.0.1:9", "localhost:9", True),  # every local address is one host
    ("0.0.0.0:9", "localhost:9", True),
    ("[::1]:9", "localhost:9", True),
    ("[::]:9", "localhost:9", True),
    (":9", "localhost:9", True),
    ("LocalHost:9", "localhost:9", True),
    ("db1:9", "DB1:9", True),  # host names are case-insensitive
    ("pg-a,20001", "pg-a:20001", True),  # SQL Server's host,port
    ("[fe80::1]:9", "[fe80::1],9", True),
    ("db1:9", "db2:9", False),
    ("localhost:9", "db2:9", False),
    ("db2:9", "localhost:9", False),
    ("localhost:9", "localhost:10", False),
    ("a:b:9", "A:B:9", False),  # not host:port: only equal text matches
    ("pg-a", "pg-a", True),
    ("pg-a", "pg-b", False),
])
def test_same_partner(a: str, b: str, same: bool) -> None:
    """MIR-1..13 tie a partner name to an event's proxy / node / address: equal text, or the same
    ``host:port`` (``host,port``, ``[v6]:port``), every local address counting as one host."""
    assert same_partner(a, b) is same


def test_partner_names() -> None:
    assert partner_names(None) == [] and partner_names("pg-a") == ["pg-a"]
    assert partner_names(("pg-a", 20001)) == ["pg-a", "20001"]


def test_roles_by_any_of_several_names_and_other_proxies_ignored() -> None:
    """A connection is to the initial partner if it matches any of its names; connections to a proxy
    that is neither partner (a replication link) are skipped, not the end of the history."""
    h = H()
    op = h.open(0.0)
    h.add("conn.accepted", 0.001, proxy="repl", conn_id=99, client="x", listen="127.0.0.1:29999", node="r")
    h.conn(A, 0.002, 0.003, by="upstream", down=10)
    h.conn(B, 0.004)
    h.end(0.01, op)
    (o,) = build_opens(h.events, ("nothing", A), (B, "also-nothing"))
    assert [(a.role, a.outcome, a.round) for a in o.attempts] == [("initial", "inactive", 1), ("failover", "opened", 1)]


def test_two_proxies_may_use_the_same_conn_id() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.001, 0.002, by="upstream", down=10, conn_id=1)
    h.conn(B, 0.003, 0.004, by="upstream", down=10, conn_id=1)
    h.end(0.01, op, "fail", error="x")
    assert [a.role for a in _one(h).attempts] == ["initial", "failover"]


# ------------------------------------------------------------------------------ opens


def test_open_window_end_types_and_other_operations() -> None:
    """An open ends at its own ``op.ok``/``op.fail``/``op.info`` (``f="open"`` or no ``f``), not at
    another operation's end that reuses its op_id; a connection accepted exactly at the end is in it."""
    h = H()
    op = h.open(1.0)
    h.add("op.ok", 1.2, process="c1", op_id=op, f="query")
    h.conn(A, 2.0)
    h.end(2.0, op, "info")
    o = _one(h)
    assert o.end is not None and (o.end.type, o.end.t) == ("op.info", 2.0)
    assert [a.outcome for a in o.attempts] == ["held"] and not o.ambiguous and o.rel(3.5) == 2.5

    h = H()
    op = h.open(1.0)
    h.add("op.fail", 1.5, process="c1", op_id=op, error="x")  # no f: still this open's end
    assert _one(h).end is not None


def test_attempt_duration_and_label() -> None:
    a = Attempt(3, "failover", 1.0, 1.5, "timeout", "proxy", (1, 2), frozenset({B}))
    assert a.duration == 0.5 and a.round == 0 and a.label() == "attempt 3 (failover)"
    assert (a.bytes_down, a.matched, a.closed_by, a.order_t) == (0, False, None, None)
    a.round = 2
    assert a.label() == "attempt 3 (failover, round 2)"


def test_horizon_and_end_time() -> None:
    assert horizon([]) == 0.0
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.1)
    h.add("fault.end", 7.0, fault="x", id=1)
    o = _one(h)
    assert end_time(o.attempts[0], o, horizon(h.events)) == 7.0
    h.end(9.0, op)
    o = _one(h)
    assert o.attempts[0].outcome == "opened" and end_time(o.attempts[0], o, 9.0) == 9.0


def test_a_held_attempt_runs_until_the_end_of_the_history() -> None:
    """MIR-5: an attempt never closed is held until the last event; past its retry time that is a
    violation."""
    h = H()
    h.open(0.0)
    h.conn(A, 0.0)
    h.add("fault.end", 5.0, fault="x", id=1)
    v = check_retry_time_schedule(h.events, initial=A, failover=B, login_timeout=10.0)
    assert v.valid is False and "attempt 1 (initial, round 1) held 5.000 s (held)" in v.observed


# ------------------------------------------------------------------------------ outcomes


@pytest.mark.parametrize(("kw", "client", "outcome"), [
    ({"upfail": True, "by": "proxy"}, None, "refused"),
    ({"upfail": True, "by": "client"}, None, "timeout"),  # refused upstream, but the client hung up first
    ({"by": "upstream", "down": 1}, None, "inactive"),
    ({"by": "upstream", "down": 0}, None, "reset"),
    ({"by": "client", "down": 0}, None, "timeout"),
    ({"by": "client", "down": 50}, None, "inactive"),
    ({"by": "client", "down": 50}, "timeout", "timeout"),  # the client's word wins over "inactive"
    ({"by": "upstream", "down": 50}, "error", "error"),
    ({"by": "upstream", "down": 0}, "refused", "refused"),
])
def test_outcome_read_from_the_wire(kw: dict[str, Any], client: str | None, outcome: str) -> None:
    h = H()
    op = h.open(0.0)
    if client is not None:
        h.attempt(1, 0.0, 0.05, client)
    h.conn(A, 0.001, 0.05, **kw)
    h.end(0.1, op, "fail", error="x")
    (a,) = _one(h).attempts
    assert (a.outcome, a.source) == (outcome, "proxy")


def test_opened_is_the_last_attempt_of_a_successful_open() -> None:
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.001, 0.002, by="upstream", down=5)
    h.conn(B, 0.003, 0.01)  # closed at the op.ok instant: it is the connection that opened
    h.end(0.01, op)
    assert [a.outcome for a in _one(h).attempts] == ["inactive", "opened"]
    h = H()
    op = h.open(0.0)
    h.conn(B, 0.003, 0.009)  # closed before the op.ok: not the opened one
    h.end(0.01, op)
    assert [a.outcome for a in _one(h).attempts] == ["timeout"]


def test_proxy_attempt_fields() -> None:
    h = H()
    op = h.open(0.0)
    cid = h.conn(A, 0.001, peer="127.0.0.1:40123")
    h.end(0.5, op, "fail", error="x")
    (a,) = _one(h).attempts
    assert (a.proxy, a.conn_id, a.peer, a.end, a.bytes_down, a.closed_by, a.outcome) == (
        A, cid, "127.0.0.1:40123", None, 0, None, "held")
    assert a.ids == frozenset({A, ADDR[A], "a"}) and a.events == (1,)


# ------------------------------------------------------------------------------ the client's view


def test_client_attempts_fill_in_refused_connects() -> None:
    """A client attempt no proxy connection matches is added (``source="client"``) with the client's
    outcome; one without an end is ``held``; without an address its ids name its role."""
    h = H()
    op = h.open(0.0)
    h.attempt(1, 0.0, 0.001, "refused")
    h.attempt(2, 0.002, None, target="failover", address=None)
    h.end(0.5, op, "fail", error="x")
    o = _one(h)
    assert [(a.n, a.role, a.outcome, a.source, a.round) for a in o.attempts] == [
        (1, "initial", "refused", "client", 1), (2, "failover", "held", "client", 1)]
    assert o.attempts[1].ids == frozenset({"failover"}) and o.attempts[0].ids == frozenset({ADDR[A]})
    assert o.client_view == [1, 2, 3] and (o.attempts[0].bytes_down, o.attempts[0].matched) == (0, False)
    assert _one(h, use_client_view=False).attempts == []
    assert [a.round for a in _one(h, rounds=False).attempts] == [1, 2]


def test_a_restarted_or_unfinished_client_attempt_is_still_an_attempt() -> None:
    h = H()
    op = h.open(0.0)
    h.add("attempt.start", 0.0, process="c1", attempt=1, target="initial", address=ADDR[A])
    h.add("attempt.start", 0.01, process="c1", attempt=1, target="failover", address=ADDR[B])
    h.add("attempt.end", 0.02, process="c1", attempt=7, outcome="refused")  # no such start: ignored
    h.end(0.5, op, "fail", error="x")
    assert [(a.role, a.outcome) for a in _one(h).attempts] == [("initial", "held"), ("failover", "held")]


def test_client_attempts_are_keyed_by_process_and_number() -> None:
    h = H()
    o1 = h.open(0.0, process="c1")
    h.attempt(1, 0.0, 0.001, "refused", process="c1")
    h.attempt(2, 0.002, 0.003, "refused", process="c1", target="failover")
    o2 = h.open(1.0, process="c2")
    h.attempt(1, 1.0, 1.001, "refused", process="c2")
    h.end(0.5, o1, "fail", process="c1", error="x")
    h.end(1.5, o2, "fail", process="c2", error="x")
    first, second = h.opens()
    assert [a.role for a in first.attempts] == ["initial", "failover"] and len(second.attempts) == 1


def test_concurrent_opens_of_two_processes_each_get_their_own_client_attempts() -> None:
    h = H()
    o1 = h.open(0.0, process="c1")
    o2 = h.open(0.0, process="c2")
    h.attempt(1, 0.001, 0.002, "refused", process="c1")
    h.attempt(1, 0.001, 0.003, "inactive", process="c2", target="failover")
    h.end(0.5, o1, "fail", process="c1", error="x")
    h.end(0.5, o2, "fail", process="c2", error="x")
    first, second = h.opens()
    assert [(a.role, a.outcome) for a in first.attempts] == [("initial", "refused")]
    assert [(a.role, a.outcome) for a in second.attempts] == [("failover", "inactive")]


def test_client_attempts_outside_any_open_or_to_no_partner_are_skipped_only_themselves() -> None:
    h = H()
    h.attempt(1, 0.0, 0.001, "refused")  # before the open
    op = h.open(0.5)
    h.attempt(2, 0.5, 0.501, "refused", target=None, address="127.0.0.1:1")  # to no partner
    h.attempt(3, 0.502, 0.503, "refused", target="failover")
    h.end(0.6, op, "fail", error="x")
    assert [a.role for a in _one(h).attempts] == ["failover"]


@pytest.mark.parametrize(("target", "address", "role"), [
    ("initial", ADDR[B], "failover"),  # the address wins over the target
    ("failover", None, "failover"),
    ("failover", "127.0.0.1:1", "failover"),  # an unknown address: the target decides
    (None, ADDR[B], "failover"),
    ("bogus", ADDR[A], "initial"),
])
def test_client_attempt_role(target: str | None, address: str | None, role: str) -> None:
    h = H()
    op = h.open(0.0)
    h.attempt(1, 0.0, 0.001, "refused", target=target, address=address)
    h.end(0.5, op, "fail", error="x")
    (o,) = build_opens(h.events, (A, ADDR[A]), (B, ADDR[B]))
    assert [a.role for a in o.attempts] == [role]


def test_matching_by_socket_address_beats_time_order() -> None:
    """The client's ``local`` address picks the proxy connection exactly, even when another
    connection to the same partner was accepted earlier in the attempt."""
    h = H()
    op = h.open(0.0)
    h.conn(A, 0.001, 0.002, by="upstream", down=5, peer="127.0.0.1:40001")
    h.conn(A, 0.003, 0.004, by="upstream", down=5, peer="127.0.0.1:40002")
    h.attempt(1, 0.0, 0.005, "timeout", local="127.0.0.1:40002")
    h.end(0.1, op, "fail", error="x")
    first, second = _one(h).attempts  # the matched one is ordered by the client's start
    assert (first.peer, first.matched, first.client_outcome, first.order_t) == ("127.0.0.1:40002", True, "timeout", 0.0)
    assert (second.peer, second.matched, second.client_outcome) == ("127.0.0.1:40001", False, None)


def test_client_attempts_claim_proxy_connections_in_the_order_they_started() -> None:
    """Two overlapping client attempts to one partner and one proxy connection inside both: the
    attempt that started first is the one the proxy saw; the later one counts as a connect the
    proxy never saw (the client's own record)."""
    h = H()
    op = h.open(0.0)
    h.attempt(1, 0.0, 0.5, "timeout")
    h.attempt(2, 0.1, 0.2, "refused")  # started later, ended first
    h.conn(A, 0.15, 0.5)
    h.end(1.0, op, "fail", error="x")
    o = _one(h)
    assert [(a.source, a.order_t, a.client_outcome) for a in o.attempts] == [
        ("proxy", 0.0, "timeout"), ("client", None, "refused")]
    assert o.client_view == [3, 4]


def test_a_proxy_connection_matches_one_client_attempt_only() -> None:
    h = H()
    op = h.open(0.0)
    h.attempt(1, 0.0, 0.004, "inactive")
    h.conn(A, 0.001, 0.004, by="upstream", down=5)
    h.attempt(2, 0.005, 0.006, "refused")
    h.end(0.1, op, "fail", error="x")
    assert [(a.source, a.outcome) for a in _one(h).attempts] == [("proxy", "inactive"), ("client", "refused")]


def test_time_matching_window_is_the_attempt_plus_the_slack() -> None:
    """Without a socket address, the proxy connection must be accepted within the client attempt
    ±``MATCH_SLACK`` (both ends included); else the client attempt counts on its own."""
    start, end = 1.0, 1.5
    for accept, matched in ((start - MATCH_SLACK, True), (end + MATCH_SLACK, True),
                            (start - 2 * MATCH_SLACK, False), (end + 2 * MATCH_SLACK, False)):
        h = H()
        op = h.open(0.0)
        h.attempt(1, start, end, "inactive")
        h.conn(A, accept, accept + 0.001, by="upstream", down=5)
        h.end(3.0, op, "fail", error="x")
        o = _one(h)
        assert len(o.attempts) == (1 if matched else 2), accept


# ------------------------------------------------------------------------------ constants in use


def test_fast_reset_default_is_50_ms() -> None:
    """MIR-7: a reset within 50 ms is a fast refusal (the round is judged); a 60 ms one is not."""
    for held, judged in ((0.04, True), (0.06, False)):
        h = H()
        op = h.open(0.0)
        h.conn(A, 0.0, held, by="toxic")
        h.conn(B, held, held + 0.002, by="upstream", down=40)
        h.conn(A, held + 0.102, None)
        h.end(held + 0.11, op)
        v = check_partner_retry_delays(h.events, initial=A, failover=B)
        assert (v.valid is True) if judged else (v.valid == "unknown" and v.details["not_judged"])


@pytest.mark.parametrize("fault", ["stop", "kill", "shutdown"])
def test_every_shutdown_fault_counts_for_mir_13(fault: str) -> None:
    h = H()
    op = h.open(0.0)
    h.add("fault.start", 0.3, fault=fault, id=1, node="a")
    h.conn(A, 0.0, 0.301, by="upstream")
    h.conn(B, 0.303, None)
    h.end(0.31, op)
    v = check_shutdown_aborts_attempts(h.events, initial=A, failover=B)
    assert v.valid is True, v.summary
