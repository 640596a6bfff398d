"""The HAM model's shared pieces (harness/rules/ham/model.py, harness/history/server_observation.py):
a leader's link cuts paired with their heals (HAM-2 ``dcs``, HAM-7 ``monitor``), equal timestamps
included, and a ``ham.probe`` event read back into the fields the probes wrote."""

from __future__ import annotations

from pathlib import Path

from harness.history.core import Event
from harness.rules.ham.model import leader_cuts, observations


def _events(*rows: tuple[float, str, dict]) -> list[Event]:
    return [Event(i, t, type_, fields) for i, (t, type_, fields) in enumerate(rows)]


def test_a_cut_pairs_with_its_own_nodes_first_heal_at_or_after_it_even_at_the_same_instant() -> None:
    events = _events((1.0, "ham.dcs.heal", {"node": "n1"}),  # before the cut: not its heal
                     (2.0, "ham.dcs.cut", {"node": "n1", "was_leader": True}),
                     (2.0, "ham.dcs.heal", {"node": "n2"}),  # another node's heal
                     (2.0, "ham.dcs.heal", {"node": "n1"}),  # same instant as the cut: its heal
                     (5.0, "ham.dcs.heal", {"node": "n1"}))
    [(cut, heal)] = leader_cuts(events, "dcs")
    assert cut.index == 1
    assert heal is not None and heal.index == 3


def test_a_replica_cut_is_not_a_leader_cut_and_an_unhealed_cut_has_no_heal() -> None:
    events = _events((1.0, "ham.monitor.cut", {"node": "n2", "was_leader": False}),
                     (2.0, "ham.monitor.cut", {"node": "n1", "was_leader": True}),
                     (3.0, "ham.dcs.heal", {"node": "n1"}))  # another link's heal
    assert [(c.index, h) for c, h in leader_cuts(events, "monitor")] == [(1, None)]
    assert leader_cuts(events, "dcs") == []


def test_a_probe_event_reads_back_as_the_server_said_in_time_order_ties_by_index() -> None:
    fields = {"node": "n1", "t_end": 1.5, "recovery": False, "write": "ok", "timeline": 2, "streaming": None}
    events = _events((1.0, "ham.probe", {**fields, "node": "n2", "recovery": True, "write": "read-only"}),
                     (1.0, "ham.probe", fields), (0.5, "ham.probe", {**fields, "recovery": None, "write": None}))
    obs = observations(events)
    assert [(o.t, o.index, o.node, o.role) for o in obs] == [(0.5, 2, "n1", "down"), (1.0, 0, "n2", "replica"),
                                                             (1.0, 1, "n1", "primary")]
    assert obs[2].writable and obs[2].timeline == 2 and obs[2].t_end == 1.5
    assert not obs[0].up and not obs[1].writable


def test_a_managers_log_tail_is_one_line_of_its_last_lines(tmp_path: Path) -> None:
    """A harness error names the last lines of the manager's log (``down`` removes the run folder)."""
    from harness.topology.manager_cluster import log_tail

    log = tmp_path / "pg_autoctl.log"
    log.write_text("".join(f"line {i}\n" for i in range(20)))
    assert log_tail(log, lines=3) == "line 17 | line 18 | line 19"
    assert log_tail(log, lines=3, chars=7) == "line 19"
    assert log_tail(tmp_path / "missing.log") == "no log"
