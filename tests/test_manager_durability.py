"""DUR-1 under an HA manager, without a cluster: the asynchronous-mode loss judged against Patroni's
documented bound (harness/rules/durability_bound.py) on hand-made histories - kept, broken, unknown,
and a write acknowledged exactly ``ttl`` before the fault (equal timestamps) - and the round plan of
the manager benchmark (harness/workload/manager_rounds.py)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.durability_bound import check_async_loss_within_documented_bound, fault_instants
from harness.workload.manager_rounds import ROUND_OPS, RoundResult, fault_plan

TTL = 20.0


class H:
    """Events with dense indices in the order added; writes are ``op.ok f=write``."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, t: float, type_: str, **fields: Any) -> H:
        self.events.append(Event(len(self.events), t, type_, fields))
        return self

    def write(self, t: float, key: int) -> H:
        self.add(t - 1.0, "op.invoke", process="w", op_id=key, f="write", value=key)
        return self.add(t, "op.ok", process="w", op_id=key, f="write", value=key)

    def fault(self, t: float, op: str = "kill", end: float | None = None) -> H:
        self.add(t, "ham.op", op=op, node="n1", phase="start", leader="n1")
        return self.add(t if end is None else end, "ham.op", op=op, node="n1", phase="end", leader="n2")

    def read(self, t: float, keys: list[int]) -> H:
        self.add(t, "op.invoke", process="checker", op_id=9999, f="read_all", value=None)
        return self.add(t, "op.ok", process="checker", op_id=9999, f="read_all", value=keys)


def judge(h: H, *, wal: float | None = 100.0, max_lag: int = 0):
    return check_async_loss_within_documented_bound(h.events, ttl_s=TTL, max_lag_bytes=max_lag,
                                                    wal_bytes_per_write=wal)


def test_kept_when_no_write_is_lost() -> None:
    h = H().write(1, 1).write(2, 2).fault(10).write(40, 3).read(50, [1, 2, 3])
    v = judge(h)
    assert v.valid is True and v.details["lost_count"] == 0


def test_kept_when_the_lost_writes_were_acknowledged_in_the_last_ttl_seconds() -> None:
    h = H().write(50, 1).write(95, 2).write(99.9, 3).fault(100).write(130, 4).read(140, [1, 4])
    v = judge(h)
    assert v.valid is True, v.summary
    assert v.details["faults"][0] == {"op": "kill", "event": v.details["faults"][0]["event"], "lost": 2,
                                      "lost_in_ttl_window": 2, "lost_older": 0, "allowance_writes": 0}


def test_a_write_acknowledged_exactly_ttl_before_the_fault_is_inside_the_window() -> None:
    """Equal timestamps: the window is closed at ``fault - ttl``."""
    h = H().write(80.0, 1).fault(100.0).read(120, [])
    assert judge(h).valid is True
    h = H().write(79.999, 1).fault(100.0).read(120, [])
    v = judge(h)
    assert v.valid is False and "beyond the bound" in v.observed and v.details["faults"][0]["lost_older"] == 1


def test_older_losses_are_allowed_up_to_maximum_lag_on_failover_bytes() -> None:
    """1000 bytes of lag at 100 bytes a write excuse 10 older writes, not 11."""
    h = H()
    for k in range(10):
        h.write(10 + k * 0.1, k)
    h.fault(100).read(120, [])
    assert judge(h, max_lag=1000).valid is True
    h = H()
    for k in range(11):
        h.write(10 + k * 0.1, k)
    h.fault(100).read(120, [])
    v = judge(h, max_lag=1000)
    assert v.valid is False and v.details["allowance_writes"] == 10 and len(v.evidence) == 11


def test_a_loss_after_the_last_failover_is_never_excused() -> None:
    h = H().write(1, 1).fault(10).write(15, 2).read(20, [1])
    v = judge(h, max_lag=10**9)
    assert v.valid is False and v.details["unexcused_after_last_fault"] == [2]


def test_each_loss_is_charged_to_the_next_fault_only() -> None:
    """A write lost at the second fault is judged by that fault's window, not the first one's."""
    h = H().write(5, 1).fault(10).write(90, 2).fault(100).read(120, [1])
    v = judge(h)
    assert v.valid is True
    assert [f["lost"] for f in v.details["faults"]] == [0, 1]


def test_a_write_acknowledged_while_the_fault_operation_ran_is_that_faults() -> None:
    """Seen in the 20-round async benchmark: the old leader acknowledged a write after the ``kill``
    operation started and before SIGKILL landed; it is charged to that kill (inside its window), not
    to the next fault 27 s later (where it would look older than ttl)."""
    h = H()
    h.add(100.0, "ham.op", op="kill", node="n1", phase="start", leader="n1")
    h.write(100.5, 1)
    h.add(101.0, "ham.kill", node="n1", was_leader=True, what="patroni+postgres")
    h.add(120.0, "ham.op", op="kill", node="n1", phase="end", leader="n2")
    h.fault(130.0, "switchover", end=135.0).read(140, [])
    v = judge(h)
    assert v.valid is True, v.summary
    assert [f["lost"] for f in v.details["faults"]] == [1, 0]


def test_unknown_without_a_final_read_or_without_the_wal_rate() -> None:
    h = H().write(1, 1).fault(10)
    assert judge(h).valid == "unknown"
    h = H().write(1, 1).fault(10).read(20, [])
    assert judge(h, wal=None).valid == "unknown"
    assert judge(h, wal=0).valid == "unknown"


def test_fault_instants_are_the_manager_operations_only() -> None:
    h = H().fault(1, "kill").fault(2, "start").fault(3, "switchover")
    assert [e.get("op") for e in fault_instants(h.events)] == ["kill", "switchover"]


def test_fault_plan_mixes_machine_loss_switchover_and_failover() -> None:
    plan = fault_plan(20)
    assert len(plan) == 20 and plan[:4] == list(ROUND_OPS)
    assert (plan.count("kill"), plan.count("switchover"), plan.count("failover")) == (10, 5, 5)
    assert fault_plan(3, ["switchover"]) == ["switchover"] * 3


@pytest.mark.parametrize(("rounds", "ops"), [(0, ROUND_OPS), (-1, ROUND_OPS), (2.5, ROUND_OPS), (2, ["reboot"]),
                                             (2, [])])
def test_fault_plan_refuses_bad_input_in_one_line(rounds: Any, ops: Any) -> None:
    with pytest.raises(ConfigError) as info:
        fault_plan(rounds, ops)
    assert "\n" not in str(info.value)


def test_round_result_json_shape() -> None:
    r = RoundResult(1, "kill", "n1", "n2", 20.5, 31.0)
    assert r.to_dict() == {"number": 1, "op": "kill", "before": "n1", "after": "n2", "failover_s": 20.5,
                           "whole_s": 31.0}


@pytest.mark.parametrize("op", ["kill", "failover", "switchover", "kill-manager", "partition-dcs"])
def test_every_manager_fault_is_a_fault_instant(op: str) -> None:
    h = H().fault(1, op)
    assert [e.get("op") for e in fault_instants(h.events)] == [op]
    h = H().write(50, 1).fault(60, op).read(70, [])
    v = judge(h)
    assert v.valid is True and v.details["faults"][0]["op"] == op, v.summary


def test_a_fault_ends_with_its_own_end_not_another_operations() -> None:
    """A ``start`` operation's end between the kill's start and end does not end the kill early: a
    write acknowledged after it, before the kill ended, is still the kill's."""
    h = H()
    h.add(100.0, "ham.op", op="kill", node="n1", phase="start", leader="n1")
    h.add(101.0, "ham.op", op="start", node="n3", phase="end", leader="n1")
    h.write(102.0, 1)
    h.add(120.0, "ham.op", op="kill", node="n1", phase="end", leader="n2")
    h.read(130, [])
    v = judge(h)
    assert v.valid is True and v.details["faults"][0]["lost"] == 1, v.summary


def test_wal_rate_must_be_positive_not_above_one_byte() -> None:
    h = H().write(1, 1).fault(10).read(20, [])
    assert judge(h, wal=0.5).valid is True
    assert judge(h, wal=-5).valid == "unknown"


def test_figures_in_the_details() -> None:
    h = H()
    for k in range(60):
        h.write(5 + k * 0.01, k)
    h.fault(10).read(20, [])
    v = check_async_loss_within_documented_bound(h.events, ttl_s=TTL, max_lag_bytes=1000, wal_bytes_per_write=287.35)
    assert v.rule_id == "DUR-1" and v.valid is True
    assert (v.details["acknowledged"], v.details["ttl_s"], v.details["max_lag_bytes"]) == (60, TTL, 1000)
    assert v.details["wal_bytes_per_write"] == 287.4 and v.details["allowance_writes"] == 3
    assert len(v.evidence) == 50  # at most 50 events named
    h = H()
    for k in range(60):
        h.write(5 + k * 0.01, k)
    h.fault(100).read(120, [])
    v = judge(h)
    assert v.valid is False and len(v.evidence) == 50
