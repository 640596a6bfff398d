"""The exposed window (docs/topology.md, "The exposed window"; DUR-1): after a failover of a sync pair
the new principal acknowledges writes with no second copy until the old principal rejoins. A real
pair records it as ``exposure.start`` / ``exposure.end`` and DUR-1 counts the writes acknowledged
inside it."""

from __future__ import annotations

import time

import pytest

from harness.history.core import History
from harness.rules.durability import check_no_acknowledged_write_lost, exposure_windows
from harness.topology import Pair


def _write(pair: Pair, key: int) -> None:
    with pair.principal.admin() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS exposed_t (k int primary key)")
        conn.execute("INSERT INTO exposed_t VALUES (%s)", (key,))


def test_a_sync_failover_records_the_exposed_window_until_rejoin() -> None:
    history = History()
    with Pair(mode="sync", links="direct", history=history) as pair:
        _write(pair, 0)
        pair.failover()
        t_failover = time.monotonic()
        _write(pair, 1)  # acknowledged by the new principal alone: no mirror runs
        assert [e.get("node") for e in history.events("exposure.")] == ["n2"]
        assert pair.node("n2").role == "principal"
        pair.rejoin()
        ends = history.events("exposure.end")
        assert len(ends) == 1 and ends[0].get("node") == "n2" and ends[0].get("mirror") == "n1"
        start = history.events("exposure.start")[0]
        assert start.get("lost") == "n1" and start.get("mode") == "sync"
        assert 0 < ends[0].get("seconds") <= time.monotonic() - t_failover + 1
        assert start.t <= t_failover <= ends[0].t
        pair.switchover()  # a second role change is no new exposure
    assert len(history.events("exposure.start")) == 1


def test_an_async_failover_records_no_exposed_window() -> None:
    history = History()
    with Pair(mode="async", links="direct", history=history) as pair:
        pair.failover()
        pair.rejoin()
    assert history.events("exposure.") == []


def _ok(h: History, f: str, value: object) -> None:
    h.record("op.ok", f=f, value=value, process=0)


def test_dur1_counts_the_writes_acknowledged_inside_the_window() -> None:
    h = History()
    _ok(h, "write", 1)
    h.record("exposure.start", node="n2", lost="n1", mode="sync")
    _ok(h, "write", 2)
    _ok(h, "write", 3)
    h.record("exposure.end", node="n2", mirror="n1", seconds=0.42)
    _ok(h, "write", 4)
    _ok(h, "read_all", [1, 2, 3, 4])
    verdict = check_no_acknowledged_write_lost(h.events(), mode="sync")
    assert verdict.valid is True
    assert verdict.details["exposed_writes"] == 2
    assert verdict.details["exposed_windows"] == [{"node": "n2", "start": 1, "end": 4, "seconds": 0.42}]
    assert "2 of them acknowledged while the principal ran exposed" in verdict.observed
    assert "n2 0.420 s" in verdict.observed


def test_an_open_window_runs_to_the_end_of_the_history() -> None:
    h = History()
    h.record("exposure.start", node="n2", lost="n1", mode="sync")
    _ok(h, "write", 1)
    _ok(h, "read_all", [1])
    assert exposure_windows(h.events()) == [{"node": "n2", "start": 0, "end": None, "seconds": None}]
    verdict = check_no_acknowledged_write_lost(h.events())
    assert verdict.details["exposed_writes"] == 1 and "until the end" in verdict.observed


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_without_a_window_dur1_says_nothing_of_exposure(mode: str) -> None:
    h = History()
    _ok(h, "write", 1)
    _ok(h, "read_all", [1])
    verdict = check_no_acknowledged_write_lost(h.events(), mode=mode)
    assert verdict.details["exposed_writes"] == 0 and "exposed" not in verdict.observed
