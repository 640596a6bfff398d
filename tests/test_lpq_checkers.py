"""LPQ-1 … LPQ-6 checkers on synthetic histories that keep and that break each rule (no servers):
the network's view (``conn.accepted`` / ``conn.refused`` / ``conn.closed``), the faults, and the
servers' view (``lpq.servers`` / ``lpq.landed``) written as the suites write them."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.history.core import History
from harness.rules import registry
from harness.rules.lpq import (
    check_auth_failure_stops,
    check_hosts_in_order,
    check_next_host_on_failure,
    check_per_host_timeout,
    check_random_host_order,
    check_session_attributes,
    chi_square,
    host_list_opens,
)
from harness.rules.lpq.model import acceptable, ordinal

HOSTS = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
NODES = {h: f"n{i + 1}" for i, h in enumerate(HOSTS)}


class Builder:
    """A synthetic LPQ history (``t`` in seconds, explicit)."""

    def __init__(self) -> None:
        self.h = History()
        self.op = itertools.count(1)
        self.conn = itertools.count(1)
        self.fault_ids = itertools.count(1)

    def servers(self, t: float, roles: dict[str, tuple[bool, bool]], unreachable: tuple[str, ...] = ()) -> None:
        self.h.record("lpq.servers", t=t, hosts=[{"listen": h, "node": NODES[h], "in_recovery": r, "read_only": ro,
                                                  "reachable": h not in unreachable} for h, (r, ro) in roles.items()])

    def fault(self, t0: float, t1: float | None, node: str, fault: str = "partition", **params: object) -> None:
        fid = next(self.fault_ids)
        self.h.record("fault.start", t=t0, fault=fault, id=fid, node=node, params=params)
        if t1 is not None:
            self.h.record("fault.end", t=t1, fault=fault, id=fid, node=node, seconds=t1 - t0, error=None)

    def open(self, t0: float, attempts: list[tuple[float, str, str, float | None]], end: tuple[float, str] | None,
             *, process: str = "app", hosts: list[str] | None = None, error: str = "", timeout: float | None = 2,
             tsa: str = "any", lb: str = "disable", landed: tuple[str, bool, bool] | None = None) -> int:
        """``attempts``: (t, host, "accepted"/"refused", closed_t); ``end``: (t, "ok"/"fail") or None."""
        op = next(self.op)
        hosts = hosts or HOSTS[:2]
        self.h.record("op.invoke", t=t0, process=process, op_id=op, f="open",
                      value={"hosts": hosts, "connect_timeout": timeout, "target_session_attrs": tsa,
                             "load_balance_hosts": lb})
        for t, host, kind, closed in attempts:
            if kind == "refused":
                self.h.record("conn.refused", t=t, proxy=f"{NODES[host]}-client", node=NODES[host], listen=host)
                continue
            cid = next(self.conn)
            self.h.record("conn.accepted", t=t, proxy=f"{NODES[host]}-client", conn_id=cid, node=NODES[host],
                          listen=host, client="127.0.0.1:9", upstream="x")
            if closed is not None:
                self.h.record("conn.closed", t=closed, proxy=f"{NODES[host]}-client", conn_id=cid, by="client")
        if end is not None:
            t, kind = end
            fields = {"error": error} if kind == "fail" else {"value": {}}
            self.h.record(f"op.{kind}", t=t, process=process, op_id=op, f="open", **fields)
            if landed is not None:
                node, rec, ro = landed
                self.h.record("lpq.landed", t=t + 0.001, process=process, op_id=op, node=node,
                              listen=next(h for h, n in NODES.items() if n == node), in_recovery=rec, read_only=ro)
        return op

    def capture(self, t: float, available: bool) -> None:
        self.h.record("harness.capture", t=t, available=available, method="af_packet:lo",
                      reason=None if available else "no CAP_NET_RAW",
                      targets=[{"listen": h, "proxy": f"{NODES[h]}-client", "node": NODES[h]} for h in HOSTS])

    @property
    def events(self) -> list:
        return self.h.events()


A, B, C = HOSTS


def test_lpq1_in_order_is_kept_and_out_of_order_violated() -> None:
    b = Builder()
    b.open(0.0, [(0.01, A, "refused", None), (0.02, B, "accepted", None)], (0.05, "ok"))
    assert check_hosts_in_order(b.events).valid is True
    bad = Builder()
    bad.open(0.0, [(0.01, B, "accepted", 0.02), (0.03, A, "accepted", None)], (0.05, "ok"))
    v = check_hosts_in_order(bad.events)
    assert v.valid is False and "n2 (1st listed)" not in v.observed and "as its 1st host" in v.observed


def test_lpq1_unknown_without_attempts_or_with_unseen_refusals() -> None:
    b = Builder()
    b.open(0.0, [], (0.05, "fail"), error="nothing")
    assert check_hosts_in_order(b.events).valid == "unknown"
    c = Builder()
    c.capture(0.0, False)
    c.fault(0.0, 1.0, "n1", how="refuse", listen=A)
    c.open(0.1, [(0.2, B, "accepted", None)], (0.3, "ok"))
    v = check_hosts_in_order(c.events)
    assert v.valid == "unknown" and "capture" in v.observed


def test_lpq1_random_order_is_not_judged() -> None:
    b = Builder()
    b.open(0.0, [(0.01, B, "accepted", None)], (0.05, "ok"), lb="random")
    assert check_hosts_in_order(b.events).valid == "unknown"


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(3)), st.integers(1, 3))
def test_lpq1_property_only_the_listed_prefix_keeps(order: list[int], n: int) -> None:
    """Any first pass of n attempts keeps LPQ-1 exactly when it is hosts 1..n in order."""
    b = Builder()
    seq = list(order[:n])
    attempts = [(0.01 * (i + 1), HOSTS[p], "accepted", 0.01 * (i + 1) + 0.005) for i, p in enumerate(seq)]
    attempts[-1] = (attempts[-1][0], attempts[-1][1], "accepted", None)
    b.open(0.0, attempts, (0.1, "ok"), hosts=HOSTS)
    assert (check_hosts_in_order(b.events).valid is True) == (seq == list(range(n)))


def test_lpq2_next_host_after_failure() -> None:
    b = Builder()
    b.open(0.0, [(0.01, A, "refused", None), (0.02, B, "accepted", None)], (0.05, "ok"))
    b.open(1.0, [(1.01, A, "refused", None), (1.02, B, "refused", None)], (1.03, "fail"), error="refused")
    assert check_next_host_on_failure(b.events).valid is True
    bad = Builder()  # gave up at its timeout without the second host (the asyncpg finding)
    bad.open(0.0, [(0.01, A, "accepted", 2.0)], (2.0, "fail"), error="TimeoutError")
    v = check_next_host_on_failure(bad.events)
    assert v.valid is False and "without trying 127.0.0.1:7002 (2nd listed)" in v.observed


def test_lpq2_retrying_forever_is_violated() -> None:
    b = Builder()  # every host refuses, the client starts over and over and never fails
    attempts = [(0.01 + 0.1 * k, HOSTS[k % 2], "refused", None) for k in range(20)]
    b.open(0.0, attempts, None)
    b.h.record("client.outcome", t=5.0, process="app", pending=True)
    v = check_next_host_on_failure(b.events)
    assert v.valid is False and "started over" in v.observed


def test_lpq2_pending_after_every_host_failed_is_violated_and_prefer_standby_gets_two_passes() -> None:
    b = Builder()
    b.open(0.0, [(0.01, A, "refused", None), (0.02, B, "refused", None)], None)
    b.h.record("client.outcome", t=3.0, process="app", pending=True)
    assert check_next_host_on_failure(b.events, grace=1.0).valid is False
    ok = Builder()
    ok.open(0.0, [(0.01, B, "refused", None), (0.02, A, "accepted", 0.03), (0.04, B, "refused", None),
                  (0.05, A, "accepted", None)], (0.06, "ok"), hosts=[B, A], tsa="prefer-standby")
    assert check_next_host_on_failure(ok.events).valid is True


def test_lpq2_reset_is_not_judged_unless_asked() -> None:
    b = Builder()
    b.fault(0.0, 1.0, "n1", how="reset")
    b.open(0.1, [(0.11, A, "accepted", 0.12)], (0.13, "fail"), error="server closed the connection")
    assert check_next_host_on_failure(b.events).valid == "unknown"
    assert check_next_host_on_failure(b.events, judge_reset=True).valid is False


def test_lpq2_auth_failures_are_lpq5s() -> None:
    b = Builder()
    b.open(0.0, [(0.01, A, "accepted", 0.02)], (0.03, "fail"), error="FATAL: password authentication failed")
    assert check_next_host_on_failure(b.events).valid == "unknown"


def test_lpq3_per_host_timeout() -> None:
    b = Builder()
    b.fault(0.0, 10.0, "n1", how="blackhole")
    b.open(0.1, [(0.11, A, "accepted", 2.11), (2.12, B, "accepted", None)], (2.2, "ok"), timeout=2)
    assert check_per_host_timeout(b.events).valid is True
    late = Builder()  # held the black hole for 7 s with connect_timeout=2
    late.fault(0.0, 10.0, "n1", how="blackhole")
    late.open(0.1, [(0.11, A, "accepted", 7.11), (7.12, B, "accepted", None)], (7.2, "ok"), timeout=2)
    v = check_per_host_timeout(late.events)
    assert v.valid is False and "7.01 s" in v.observed
    early = Builder()  # gave up after 0.3 s
    early.fault(0.0, 10.0, "n1", how="blackhole")
    early.open(0.1, [(0.11, A, "accepted", 0.41), (0.42, B, "accepted", None)], (0.5, "ok"), timeout=2)
    assert check_per_host_timeout(early.events).valid is False


def test_lpq3_minimum_and_tolerance_are_parameters_and_small_latency_is_not_silent() -> None:
    b = Builder()
    b.fault(0.0, 10.0, "n1", how="blackhole")
    b.open(0.1, [(0.11, A, "accepted", 2.11), (2.12, B, "accepted", None)], (2.2, "ok"), timeout=1)
    assert check_per_host_timeout(b.events).valid is True  # 1 s raised to 2 s, as libpq does
    assert check_per_host_timeout(b.events, minimum=1.0, late=0.5).valid is False
    slow = Builder()
    slow.fault(0.0, 10.0, "n1", fault="latency", ms=100)
    slow.open(0.1, [(0.11, A, "accepted", None)], (0.4, "ok"), timeout=2)
    assert check_per_host_timeout(slow.events).valid == "unknown"


def test_lpq4_standby_first_read_write() -> None:
    roles = {A: (True, False), B: (False, False)}
    b = Builder()
    b.servers(0.0, roles)
    b.open(0.1, [(0.11, A, "accepted", 0.12), (0.13, B, "accepted", None)], (0.2, "ok"), hosts=[A, B],
           tsa="read-write", landed=("n2", False, False))
    assert check_session_attributes(b.events).valid is True
    bad = Builder()  # stays on the standby; the first write fails with 25006
    bad.servers(0.0, roles)
    op = bad.open(0.1, [(0.11, A, "accepted", None)], (0.2, "ok"), hosts=[A, B], tsa="read-write",
                  landed=("n1", True, False))
    bad.h.record("lpq.write", t=0.3, process="app", op_id=op, ok=False, error="25006 cannot execute CREATE TABLE")
    v = check_session_attributes(bad.events)
    assert v.valid is False and "25006" in v.observed


def test_lpq4_prefer_standby_and_failure_with_an_acceptable_host() -> None:
    roles = {A: (False, False), B: (True, False)}
    b = Builder()
    b.servers(0.0, roles)
    b.open(0.1, [(0.11, A, "accepted", None)], (0.2, "ok"), tsa="prefer-standby", landed=("n1", False, False))
    assert check_session_attributes(b.events).valid is False  # a reachable standby was listed
    c = Builder()
    c.servers(0.0, roles, unreachable=(B,))
    c.open(0.1, [(0.11, A, "accepted", None)], (0.2, "ok"), tsa="prefer-standby", landed=("n1", False, False))
    assert check_session_attributes(c.events).valid is True
    d = Builder()
    d.servers(0.0, roles)
    d.open(0.1, [(0.11, A, "accepted", 0.12)], (0.2, "fail"), tsa="standby", error="no standby")
    assert check_session_attributes(d.events).valid is False


def test_lpq4_unknown_without_server_view() -> None:
    b = Builder()
    b.open(0.1, [(0.11, A, "accepted", None)], (0.2, "ok"), tsa="read-write")
    assert check_session_attributes(b.events).valid == "unknown"


def test_acceptable_table() -> None:
    assert acceptable("read-write", False, False) is True
    assert acceptable("read-write", False, True) is False
    assert acceptable("read-only", False, True) is True
    assert acceptable("primary", False, True) is True
    assert acceptable("standby", False, False) is False
    assert acceptable("standby", None, None) is None
    assert acceptable("any", None, None) is True


def test_lpq5_auth_failure_stops() -> None:
    err = "FATAL: password authentication failed for user app"
    b = Builder()
    b.open(0.0, [(0.01, A, "accepted", 0.02)], (0.03, "fail"), error=err)
    assert check_auth_failure_stops(b.events).valid is True
    bad = Builder()
    bad.open(0.0, [(0.01, A, "accepted", 0.02), (0.03, B, "accepted", 0.04)], (0.05, "fail"), error=err)
    v = check_auth_failure_stops(bad.events)
    assert v.valid is False and "after authentication failed" in v.observed
    other = Builder()
    other.open(0.0, [(0.01, A, "accepted", 0.02)], (0.03, "fail"), error="some other error")
    assert check_auth_failure_stops(other.events).valid == "unknown"


def test_lpq6_uniform_kept_fixed_order_violated() -> None:
    rng = random.Random(7)
    b, fixed = Builder(), Builder()
    for k in range(30):
        first = HOSTS[k % 3] if k < 30 else rng.choice(HOSTS)
        b.open(k, [(k + 0.01, first, "accepted", None)], (k + 0.02, "ok"), hosts=HOSTS, lb="random")
        fixed.open(k, [(k + 0.01, A, "accepted", None)], (k + 0.02, "ok"), hosts=HOSTS, lb="random")
    assert check_random_host_order(b.events).valid is True
    v = check_random_host_order(fixed.events)
    assert v.valid is False and "n1=30" in v.observed
    assert check_random_host_order(fixed.events, min_opens=40).valid == "unknown"
    assert chi_square([30, 0, 0]) == 60.0


def test_attempts_belong_to_their_open_only() -> None:
    b = Builder()
    b.open(0.0, [(0.01, A, "accepted", None)], (0.02, "ok"))
    b.open(1.0, [(1.01, B, "accepted", None)], (1.02, "ok"))
    first, second = host_list_opens(b.events)
    assert [a.host for a in first.attempts] == [A] and [a.host for a in second.attempts] == [B]


def test_registered_and_ordinal() -> None:
    assert [r for r in registry.all_rules() if r.startswith("LPQ")] == [f"LPQ-{i}" for i in range(1, 7)]
    assert [ordinal(i) for i in (1, 2, 3, 4, 11, 12, 21)] == ["1st", "2nd", "3rd", "4th", "11th", "12th", "21st"]


def test_lpq4_pending_after_rejecting_an_acceptable_host_is_violated() -> None:
    b = Builder()  # read-only over [standby, primary]: the standby is acceptable, yet closed, again and again
    b.servers(0.0, {A: (True, False), B: (False, False)})
    b.open(0.1, [(0.11, A, "accepted", 0.12), (0.13, B, "accepted", 0.14), (0.15, A, "accepted", 0.16)], None,
           tsa="read-only")
    b.h.record("client.outcome", t=8.0, process="app", pending=True)
    v = check_session_attributes(b.events)
    assert v.valid is False and "which is acceptable" in v.observed
