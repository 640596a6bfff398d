"""APP-1…5 checkers on synthetic histories: one keeping and one breaking history per rule, with
equal timestamps where the order of recording must decide."""

from __future__ import annotations

from typing import Any

from harness.history.core import Event, History
from harness.rules import registry
from harness.rules.app import (
    check_failed_requests,
    check_no_stale_connection,
    check_pool_size,
    check_recovery,
    check_servers_view,
)
from harness.rules.verdict import UNKNOWN

POOL = {"pool": "demo", "max_size": 2, "overflow": 1, "validates": True, "recovery_s": 2.0,
        "client_proxies": ["pg1-client", "pg2-client"]}


class H:
    """A small builder of app-profile histories."""

    def __init__(self, **pool: Any) -> None:
        self.h = History()
        self.h.record("app.pool", 0.0, **{**POOL, **pool})
        self.ops = 0
        self.conns = 0

    def conn(self, t: float, client: str, node: str = "pg1") -> int:
        self.conns += 1
        self.h.record("conn.accepted", t, proxy=f"{node}-client", conn_id=self.conns, client=client, node=node)
        return self.conns

    def close(self, t: float, conn_id: int, node: str = "pg1") -> None:
        self.h.record("conn.closed", t, proxy=f"{node}-client", conn_id=conn_id, by="upstream", reason="EOF")

    def op(self, t0: float, t1: float, f: str = "write", outcome: str = "ok", conn: str | None = "127.0.0.1:5001",
           process: str = "app-1") -> Event:
        self.ops += 1
        self.h.record("op.invoke", t0, process=process, op_id=self.ops, f=f, value=self.ops)
        return self.h.record(f"op.{outcome}", t1, process=process, op_id=self.ops, f=f, value=self.ops, conn=conn)

    def fault(self, t0: float, t1: float, name: str = "switchover", fid: int = 1) -> None:
        self.h.record("fault.start", t0, fault=name, id=fid, node="pg1")
        self.h.record("fault.end", t1, fault=name, id=fid, node="pg1")

    def events(self) -> list[Event]:
        return self.h.events()


# ------------------------------------------------------------------------------------------ APP-1


def test_app1_keeps_when_the_first_write_follows_the_writable_probe_within_the_bound() -> None:
    b = H()
    b.op(0.5, 0.6)
    b.fault(1.0, 2.0, "failover")
    b.op(1.1, 2.1, outcome="fail")
    b.h.record("app.writable", 2.5)
    b.op(2.6, 3.0)  # 0.5 s after writable
    v = check_recovery(b.events())
    assert v.valid is True, v.observed
    assert v.details["per_fault"][0]["recovery_s"] == 0.5 and v.details["bound_s"] == 2.0


def test_app1_breaks_when_the_first_write_comes_after_the_bound() -> None:
    b = H()
    b.fault(1.0, 2.0, "failover")
    w = b.h.record("app.writable", 2.5)
    ok = b.op(2.6, 5.0)  # 2.5 s > 2.0 + 0.25
    v = check_recovery(b.events())
    assert v.valid is False and set(v.evidence) == {w.index, ok.index}
    assert check_recovery(b.events(), recovery_s=3.0).valid is True  # the user's bound wins


def test_app1_equal_timestamps_write_at_the_writable_instant_counts_as_zero() -> None:
    b = H()
    b.fault(1.0, 1.0, "switchover")
    b.h.record("app.writable", 1.0)
    b.op(1.0, 1.0)
    v = check_recovery(b.events(), recovery_s=0.0, tolerance_s=0.0)
    assert v.valid is True and v.details["per_fault"][0]["recovery_s"] == 0.0


def test_app1_uses_the_topologys_switchover_record_before_the_probe() -> None:
    b = H()
    b.h.record("fault.start", 1.0, fault="switchover", id=1, node="pg1")
    b.h.record("switchover.writable", 1.2, node="pg2")
    b.h.record("fault.end", 4.0, fault="switchover", id=1, node="pg1")
    b.op(1.1, 3.9)  # 2.7 s after the new principal accepted writes
    b.h.record("app.writable", 4.1)
    v = check_recovery(b.events())
    assert v.valid is False and v.details["per_fault"][0]["writable_by"] == "switchover.writable"


def test_app1_counts_from_the_resumption_of_an_idle_application() -> None:
    b = H()
    b.h.record("app.hold", 0.9)
    b.fault(1.0, 2.0, "failover")
    b.h.record("app.writable", 2.5)
    resumed = b.h.record("app.resume", 3.0)
    b.op(3.0, 3.4)
    v = check_recovery(b.events(), recovery_s=0.5, tolerance_s=0.0)
    assert v.valid is True and v.details["per_fault"][0]["recovery_s"] == 0.4
    assert v.details["per_fault"][0]["writable_event"] == resumed.index
    b2 = H()  # resumed before the principal could write: the writable moment stays the reference
    b2.h.record("app.hold", 0.9)
    b2.fault(1.0, 2.0, "failover")
    b2.h.record("app.resume", 2.1)
    w = b2.h.record("app.writable", 2.5)
    b2.op(2.6, 2.7)
    assert check_recovery(b2.events()).details["per_fault"][0]["writable_event"] == w.index


def test_app1_no_write_in_a_long_window_breaks_in_a_short_one_is_unknown() -> None:
    b = H()
    b.fault(1.0, 2.0)
    b.h.record("app.writable", 2.0)
    b.op(2.1, 2.2, outcome="fail")
    short = check_recovery(b.events())
    assert short.valid == UNKNOWN
    b.op(2.3, 6.0, outcome="fail")
    assert check_recovery(b.events()).valid is False


def test_app1_without_writable_record_or_fault_is_unknown() -> None:
    b = H()
    b.op(0.1, 0.2)
    assert check_recovery(b.events()).valid == UNKNOWN
    b.fault(1.0, 2.0)
    b.op(2.1, 2.2)
    assert check_recovery(b.events()).valid == UNKNOWN


# ------------------------------------------------------------------------------------------ APP-2


def test_app2_counts_failures_per_fault_and_keeps_within_the_bound() -> None:
    b = H()
    b.op(0.1, 0.2, outcome="fail")  # before any fault: reported apart
    b.fault(1.0, 1.5)
    b.op(1.1, 1.2, outcome="fail")
    b.op(1.2, 1.3, outcome="info")
    b.op(1.6, 1.7)
    b.fault(3.0, 3.5, "partition", fid=2)
    b.op(3.1, 3.2, outcome="fail")
    v = check_failed_requests(b.events(), failed_requests=2)
    assert v.valid is True
    assert [r["failed"] for r in v.details["per_fault"]] == [2, 1]
    assert v.details["failed_before_faults"] == 1 and v.details["per_fault"][0]["info"] == 1


def test_app2_breaks_beyond_the_bound_and_reports_without_one() -> None:
    b = H()
    b.fault(1.0, 1.5)
    bad = [b.op(1.1, 1.2, outcome="fail"), b.op(1.1, 1.2, outcome="fail", process="app-2")]
    v = check_failed_requests(b.events(), failed_requests=1)
    assert v.valid is False and set(v.evidence) == {e.index for e in bad}
    free = check_failed_requests(b.events())
    assert free.valid is True and "2 of 2" in free.observed


def test_app2_equal_timestamps_a_failure_recorded_at_the_fault_start_instant_but_before_it() -> None:
    b = H()
    b.op(0.9, 1.0, outcome="fail")  # recorded before fault.start, same instant: not the fault's
    b.fault(1.0, 1.0)
    b.op(1.0, 1.0, outcome="fail")  # same instant, after it: the fault's
    v = check_failed_requests(b.events(), failed_requests=1)
    assert v.valid is True and v.details["per_fault"][0]["failed"] == 1


# ------------------------------------------------------------------------------------------ APP-3


def _switched(b: H) -> None:
    b.h.record("role.change", 1.0, node="pg1", old_role="principal", new_role="mirror")
    b.h.record("role.change", 1.0, node="pg2", old_role="mirror", new_role="principal")


def test_app3_keeps_writes_on_the_new_principal() -> None:
    b = H()
    b.conn(0.1, "127.0.0.1:5001", "pg1")
    b.op(0.2, 0.3, conn="127.0.0.1:5001")
    _switched(b)
    b.conn(1.5, "127.0.0.1:5002", "pg2")
    b.op(1.6, 1.7, conn="127.0.0.1:5002")
    v = check_servers_view(b.events())
    assert v.valid is True and v.details["judged"]["write"] == 2


def test_app3_breaks_on_a_write_acknowledged_by_the_demoted_node() -> None:
    b = H()
    b.conn(0.1, "127.0.0.1:5001", "pg1")
    _switched(b)
    ok = b.op(1.0, 1.1, conn="127.0.0.1:5001")  # invoked at the demotion instant, recorded after it
    v = check_servers_view(b.events())
    assert v.valid is False and ok.index in v.evidence and "demoted" in v.observed


def test_app3_breaks_on_a_read_served_by_a_killed_node_and_keeps_after_its_restart() -> None:
    b = H()
    b.conn(0.1, "127.0.0.1:5001", "pg2")
    b.h.record("node.kill", 1.0, node="pg2")
    bad = b.op(1.2, 1.3, f="read", conn="127.0.0.1:5001")
    b.h.record("node.start", 2.0, node="pg2")
    b.op(2.0, 2.1, f="read", conn="127.0.0.1:5001")
    v = check_servers_view(b.events())
    assert v.valid is False and bad.index in v.evidence and len(v.details["violations"]) == 1


def test_app3_unmatched_requests_are_unknown() -> None:
    b = H()
    b.op(0.1, 0.2, conn=None)
    b.op(0.1, 0.2, conn="127.0.0.1:9")
    assert check_servers_view(b.events()).valid == UNKNOWN


# ------------------------------------------------------------------------------------------ APP-4


def test_app4_breaks_on_a_request_failing_on_a_connection_the_proxy_had_closed() -> None:
    b = H(validates=False)
    cid = b.conn(0.1, "127.0.0.1:5001")
    b.op(0.2, 0.3, conn="127.0.0.1:5001")
    b.close(1.0, cid)
    bad = b.op(1.5, 1.6, outcome="fail", conn="127.0.0.1:5001")
    v = check_no_stale_connection(b.events())
    assert v.valid is False and bad.index in v.evidence and v.details["validates"] is False


def test_app4_keeps_a_fresh_connection_and_a_close_within_the_grace() -> None:
    b = H()
    cid = b.conn(0.1, "127.0.0.1:5001")
    b.close(1.0, cid)
    b.op(1.05, 1.2, outcome="fail", conn="127.0.0.1:5001")  # closed 0.05 s before: within the grace
    b.conn(1.3, "127.0.0.1:5001")  # the same local port again, a new connection
    b.op(1.4, 1.5, outcome="fail", conn="127.0.0.1:5001")
    v = check_no_stale_connection(b.events())
    assert v.valid is True, v.observed


def test_app4_equal_timestamps_close_and_invoke_at_one_instant_with_zero_grace_is_stale() -> None:
    b = H()
    cid = b.conn(0.1, "127.0.0.1:5001")
    b.close(1.0, cid)
    b.op(1.0, 1.1, outcome="fail", conn="127.0.0.1:5001")
    assert check_no_stale_connection(b.events(), grace_s=0.0).valid is False
    assert check_no_stale_connection(b.events()).valid is True


def test_app4_without_proxy_connections_is_unknown() -> None:
    b = H()
    b.op(0.1, 0.2, outcome="fail")
    assert check_no_stale_connection(b.events()).valid == UNKNOWN


# ------------------------------------------------------------------------------------------ APP-5


def test_app5_keeps_within_max_size_plus_overflow_and_ignores_short_and_probe_connections() -> None:
    b = H()  # bound 3
    ids = [b.conn(0.1, f"127.0.0.1:50{i}") for i in range(3)]
    short = b.conn(0.2, "127.0.0.1:5999")
    b.close(0.21, short)  # 10 ms: a rejected host of a list
    b.conn(0.3, "127.0.0.1:6000")
    b.h.record("app.probe", 0.35, conn="127.0.0.1:6000")
    for cid in ids:
        b.close(2.0, cid)
    v = check_pool_size(b.events())
    assert v.valid is True and v.details["peak"] == 3 and v.details["excluded_harness"] == 1


def test_app5_breaks_on_a_connection_storm() -> None:
    b = H()
    ids = [b.conn(1.0, f"127.0.0.1:50{i}") for i in range(5)]
    v = check_pool_size(b.events() + [b.h.record("op.ok", 2.0, f="noop")])
    assert v.valid is False and v.details["peak"] == 5 and len(v.evidence) == 5
    assert len(ids) == 5


def test_app5_equal_timestamps_a_close_and_an_open_at_one_instant_do_not_overlap() -> None:
    b = H(max_size=1, overflow=0)
    first = b.conn(0.0, "127.0.0.1:5001")
    b.conn(1.0, "127.0.0.1:5002")
    b.close(1.0, first)  # recorded after, same instant
    b.h.record("op.ok", 2.0, f="noop")
    v = check_pool_size(b.events())
    assert v.valid is True and v.details["peak"] == 1


def test_app5_without_a_known_size_is_unknown() -> None:
    h = History()
    h.record("conn.accepted", 0.0, proxy="p", conn_id=1, client="a", node="pg1")
    assert check_pool_size(h.events()).valid == UNKNOWN


def test_app_rules_are_registered() -> None:
    assert {"APP-1", "APP-2", "APP-3", "APP-4", "APP-5"} <= set(registry.all_rules())
