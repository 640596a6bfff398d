"""HAM-6 over a history of many manager rounds (benchmarks/patroni_durability.py): a former
leader's restart counts only while it was down since it lost the lead, and a rejoin later than
``rejoin_timeout_s`` after the node ran again is a violation, not a pass (equal timestamps at the
bound included)."""

from __future__ import annotations

from harness.rules.ham import check_former_leader_rejoins_new_timeline
from tests.test_ham_rules import H, rounds


def test_a_later_restart_does_not_move_the_moment_the_node_was_back() -> None:
    """n1 loses the lead by switchover at t=5 and streams at once; much later (t=100) it is killed
    and started again. The figure is measured from the change, never negative."""
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    rounds(h, 5, 100, {"n1": "replica", "n2": "primary"}, step=2.0, n1={"timeline": 2}, n2={"timeline": 2})
    h.add(100.0, "ham.kill", node="n1", was_leader=False, what="patroni+postgres")
    h.add(105.0, "ham.start", node="n1")
    rounds(h, 106, 110, {"n1": "replica", "n2": "primary"}, n1={"timeline": 2}, n2={"timeline": 2})
    v = check_former_leader_rejoins_new_timeline(h.events)
    assert v.valid is True, v.summary
    assert "-" not in v.observed.split("later")[0], v.observed


def test_a_rejoin_after_the_bound_while_running_is_violated() -> None:
    """n1 runs unstreaming for 90 s after the change, then a restart makes it stream: HAM-6 broken
    (before, the restart reset the clock and hid it)."""
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    rounds(h, 5, 95, {"n1": "replica", "n2": "primary"}, step=2.0, n1={"timeline": 1, "streaming": False},
           n2={"timeline": 2})
    h.add(96.0, "ham.start", node="n1")
    rounds(h, 97, 100, {"n1": "replica", "n2": "primary"}, n1={"timeline": 2}, n2={"timeline": 2})
    v = check_former_leader_rejoins_new_timeline(h.events)
    assert v.valid is False, v.summary


def test_a_node_down_since_the_change_is_timed_from_its_restart() -> None:
    """n1 is lost with the lead at t=5, down until started at t=80, streams at t=85: kept, 5 s."""
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    rounds(h, 5, 80, {"n1": "down", "n2": "primary"}, step=2.0, n2={"timeline": 2})
    h.add(80.0, "ham.start", node="n1")
    rounds(h, 85, 88, {"n1": "replica", "n2": "primary"}, n1={"timeline": 2}, n2={"timeline": 2})
    v = check_former_leader_rejoins_new_timeline(h.events)
    assert v.valid is True and "5.00 s later" in v.observed, v.summary


def test_rejoin_exactly_at_the_bound_is_kept() -> None:
    """Equal timestamps: streaming observed exactly ``rejoin_timeout_s`` after the change is in time."""
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    rounds(h, 5, 6, {"n2": "primary"}, n2={"timeline": 2})
    t_change = next(e.t for e in h.events if e.type == "ham.probe" and e.get("node") == "n2"
                    and e.get("write") == "ok")
    h.probe(t_change + 30, "n1", "replica", timeline=1, streaming=False)
    h.probe(t_change + 60, "n1", "replica", timeline=2)
    h.probe(t_change + 61, "n2", "primary", timeline=2)
    v = check_former_leader_rejoins_new_timeline(h.events, rejoin_timeout_s=60)
    assert v.valid is True, v.summary
