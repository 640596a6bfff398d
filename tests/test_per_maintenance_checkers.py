"""PER-1 over the node add / node remove maintenance faults (``faults=`` of the PER-1 checker): histories
that keep the rule and histories that break it, the cases it cannot judge, and the parameter from a
history's meta and from the command line's ``--param``."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.history.core import Event, History
from harness.rules import persistent as per
from harness.rules import registry
from tests.test_per_checkers import Builder


def _around(fault: str, kept: list[bool], switchover_too: bool = False) -> list[Event]:
    """Sessions judged across one ``fault`` (2.0 s .. 2.5 s); with ``switchover_too`` a switchover
    later (6.0 .. 6.5 s) loses every one of them."""
    b = Builder()
    for i, k in enumerate(kept):
        p = f"ro-{i + 1}"
        b.open(p)
        b.ok(p, 1.0 + i * 0.001)
        if k:
            b.ok(p, 3.0 + i * 0.001)
        else:
            b.lost(p, 2.2, error="OperationalError: terminating connection due to administrator command")
            b.add(2.3, "session.reconnect", process=p, conn=2, previous=1)
            b.ok(p, 3.0, conn=2)
        if switchover_too:
            b.lost(p, 6.2, conn=2 if not k else 1)
    b.add(2.0, "fault.start", fault=fault, id=77, node="n4", params={})
    b.add(2.5, "fault.end", fault=fault, id=77, node="n4", seconds=0.5, error=None)
    if switchover_too:
        b.switchover(6.0, 6.5)
    return b.events()


@pytest.mark.parametrize("fault", ["add_node", "remove_node"])
def test_per1_node_maintenance_kept(fault: str) -> None:
    v = per.check_keepalive_on_switchover(_around(fault, [True] * 8), faults=[fault])
    assert v.valid is True and "8/8" in v.observed and fault.replace("_", " ") in v.observed


@pytest.mark.parametrize("fault", ["add_node", "remove_node"])
def test_per1_node_maintenance_broken_by_one_lost_connection(fault: str) -> None:
    events = _around(fault, [True] * 7 + [False])
    v = per.check_keepalive_on_switchover(events, faults=("add_node", "remove_node"))
    assert v.valid is False and "7/8" in v.observed
    assert any(events[i].type == "op.fail" for i in v.evidence)
    assert "ro-8#1 at " + fault in v.details["lost"][0]


def test_per1_default_judges_switchovers_only() -> None:
    """A history with only a node removal is not judged by the switchover default (unknown); with a
    switchover after it, the default judges the switchover alone and both kinds together count two."""
    events = _around("remove_node", [True] * 4)
    assert per.check_keepalive_on_switchover(events).valid == "unknown"
    both = _around("remove_node", [True] * 4, switchover_too=True)
    alone = per.check_keepalive_on_switchover(both)
    together = per.check_keepalive_on_switchover(both, faults=["switchover", "remove_node"])
    assert alone.valid is False and alone.details["switchovers"] == 1
    assert together.valid is False and together.details["switchovers"] == 2


def test_per1_no_maintenance_fault_is_unknown() -> None:
    v = per.check_keepalive_on_switchover(_around("switchover", [True] * 3), faults=["add_node"])
    assert v.valid == "unknown" and "add node" in v.observed


def test_per1_faults_bad_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="add_node, remove_node"):
        per.check_keepalive_on_switchover(_around("add_node", [True]), faults=["node_add"])
    with pytest.raises(ConfigError):
        per.check_keepalive_on_switchover(_around("add_node", [True]), faults=[])


def test_per1_faults_from_meta_and_param() -> None:
    """The suites write ``rule_params["PER-1"]["faults"]``; ``failover-harness check`` re-checks with it,
    and ``--param faults=...`` (JSON) overrides it."""
    history = History()
    for e in _around("add_node", [True] * 3 + [False]):
        history.record(e.type, t=e.t, **e.fields)
    history.meta["rule_params"] = {"PER-1": {"faults": ["add_node"]}}
    rule = registry.get("PER-1")
    v = rule.check(history, history.meta)
    assert v.valid is False and "3/4" in v.observed
    assert rule.check(history, history.meta, faults=["switchover"]).valid == "unknown"
