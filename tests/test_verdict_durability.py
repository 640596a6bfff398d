"""DUR-1 (no acknowledged write lost) on synthetic histories that keep and that break it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import ConfigError, RuleViolation
from harness.history import History
from harness.rules import assert_verdict
from harness.rules.durability import check_no_acknowledged_write_lost as dur1
from harness.rules.registry import get
from harness.rules.verdict import VerdictUnknown


def run(writes: list, present: list | None, failed: tuple = (), late: tuple = ()) -> History:
    """A history: acknowledged writes of ``writes``, failed writes of ``failed``, a final read that
    returns ``present`` (None = no read), and writes acknowledged after the read was invoked."""
    h = History()
    op = 0
    for key in writes:
        op += 1
        h.record("op.invoke", process="w", op_id=op, f="write", value=key)
        h.record("op.ok", process="w", op_id=op, f="write", value=key)
    for key in failed:
        op += 1
        h.record("op.invoke", process="w", op_id=op, f="write", value=key)
        h.record("op.fail", process="w", op_id=op, f="write", error="connection lost")
    h.record("fault.start", fault="kill", id="f1", node="pg1", params={})
    h.record("fault.end", fault="kill", id="f1", node="pg1", seconds=0.2, error=None)
    if present is not None:
        h.record("op.invoke", process="r", op_id=1000, f="read_all", value=None)
        for key in late:
            h.record("op.ok", process="w", op_id=2000 + len(str(key)), f="write", value=key)
        h.record("op.ok", process="r", op_id=1000, f="read_all", value=present)
    return h


def test_kept_when_every_acknowledged_write_is_present() -> None:
    h = run([1, 2, 3], [1, 2, 3, 4])
    v = dur1(h.events())
    assert v.valid is True and v.rule_id == "DUR-1"
    assert "all 3 acknowledged" in v.observed
    assert v.evidence == (h.events("op.ok")[-1].index,)


def test_violated_names_lost_keys_and_their_events() -> None:
    h = run(["a", "b", "c"], ["a"])
    v = dur1(h.events())
    assert v.valid is False
    assert v.details["lost"] == ["b", "c"] and v.details["lost_count"] == 2
    oks = [e.index for e in h.events("op.ok") if e.get("f") == "write"]
    final = h.events("op.ok")[-1].index
    assert v.evidence == (oks[1], oks[2], final)
    with pytest.raises(RuleViolation) as exc:
        assert_verdict(v)
    assert str(exc.value).startswith("DUR-1: ")
    assert "'b', 'c'" in str(exc.value)


def test_failed_writes_are_not_required() -> None:
    assert dur1(run([1], [1], failed=(2, 3)).events()).valid is True


def test_writes_acknowledged_after_the_read_started_are_not_judged() -> None:
    v = dur1(run([1], [1], late=("late",)).events())
    assert v.valid is True
    assert v.details["not_judged"] == ["late"]


def test_unknown_without_final_read_is_never_a_pass() -> None:
    v = dur1(run([1, 2], None).events())
    assert v.valid == "unknown"
    assert "no final read" in v.observed
    with pytest.raises(VerdictUnknown) as exc:
        assert_verdict(v)
    assert not isinstance(exc.value, AssertionError)


def test_unknown_when_final_read_value_is_not_a_list() -> None:
    h = run([1], None)
    h.record("op.ok", process="r", op_id=9, f="read_all", value="oops")
    assert dur1(h.events()).valid == "unknown"


def test_async_mode_still_reports_the_loss_as_a_finding() -> None:
    v = dur1(run([1, 2], [2]).events(), mode="async")
    assert v.valid is False
    assert "async" in v.expected and "finding" in v.expected
    assert "1 of 2" in v.observed


def test_bad_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="mode must be one of sync, async"):
        dur1([], mode="semi")


def test_params_come_from_the_recorded_topology_and_rule_params() -> None:
    entry = get("DUR-1")
    h = run([1], [])
    h.meta["replication"] = "async"  # a key no writer sets: ignored
    assert "async" not in entry.check(h).expected
    h.meta["topology"] = {"mode": "async", "nodes": []}  # what the pair/group fixtures record
    assert "async" in entry.check(h).expected
    h.meta["rule_params"] = {"DUR-1": {"mode": "sync"}}
    assert "async" not in entry.check(h).expected
    assert "async" in entry.check(h, mode="async").expected  # explicit beats meta


def test_structured_keys_compare_by_value() -> None:
    assert dur1(run([[1, "a"], {"k": 1}], [{"k": 1}, [1, "a"]]).events()).valid is True


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 30), unique=True, max_size=15), st.lists(st.integers(0, 30), max_size=20))
def test_lost_set_is_exactly_acknowledged_minus_present(writes: list[int], present: list[int]) -> None:
    v = dur1(run(writes, present).events())
    lost = [w for w in writes if w not in set(present)]
    assert v.valid is (not lost)
    assert v.details["lost"] == lost
