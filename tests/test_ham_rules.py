"""HAM-1 … HAM-6 checkers (harness/rules/ham) on hand-made histories: each rule kept, broken, and
unknown when the history cannot show it; equal timestamps included."""

from __future__ import annotations

from typing import Any

import pytest

from harness.history.core import Event
from harness.rules import ham, registry
from harness.rules.ham import (
    check_dcs_loss_demotion_window,
    check_failover_within_bound,
    check_former_leader_rejoins_new_timeline,
    check_health_endpoints_agree_with_servers,
    check_one_writer_at_a_time,
    check_sync_mode_keeps_acknowledged_commits,
)

SETTINGS = {"ttl": 20, "loop_wait": 2, "retry_timeout": 3, "synchronous_mode": True}


class H:
    """A tiny history builder: events get dense indices in the order they are added."""

    def __init__(self, settings: dict[str, Any] | None = SETTINGS) -> None:
        self.events: list[Event] = []
        if settings is not None:
            self.add(0.0, "ham.settings", **settings)

    def add(self, t: float, type_: str, **fields: Any) -> H:
        self.events.append(Event(len(self.events), t, type_, fields))
        return self

    def probe(self, t: float, node: str, role: str, *, write: str | None = None, timeline: int = 1,
              api: bool = True, streaming: bool = True, dt: float = 0.05) -> H:
        """``role``: primary / replica / down; the API agrees unless ``api=False`` (then it says the opposite)."""
        recovery = {"primary": False, "replica": True, "down": None}[role]
        if write is None:
            write = {"primary": "ok", "replica": "read-only", "down": None}[role]
        primary = None if role == "down" else (200 if (role == "primary") == api else 503)
        replica = None if role == "down" else (200 if (role == "replica") == api else 503)
        return self.add(t, "ham.probe", node=node, t_end=t + dt, recovery=recovery, write=write, timeline=timeline,
                        api_primary=primary, api_replica=replica,
                        streaming=streaming if role == "replica" else None)


def rounds(h: H, t0: float, t1: float, roles: dict[str, str], step: float = 0.5, **kw: Any) -> H:
    t = t0
    while t < t1:
        for i, (node, role) in enumerate(roles.items()):
            h.probe(t + i * 0.1, node, role, **kw.get(node, {}))
        t += step
    return h


# ------------------------------------------------------------------------------------ HAM-1
def test_ham_1_kept_when_the_leader_changes_without_overlap() -> None:
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    rounds(h, 5, 10, {"n1": "replica", "n2": "primary"}, n2={"timeline": 2})
    v = check_one_writer_at_a_time(h.events)
    assert v.valid is True, v.summary


def test_ham_1_violated_when_two_nodes_accept_writes_in_overlapping_stretches() -> None:
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    rounds(h, 5, 10, {"n1": "primary", "n2": "primary"})
    v = check_one_writer_at_a_time(h.events)
    assert v.valid is False and "n1" in v.observed and "n2" in v.observed
    assert v.evidence


def test_ham_1_equal_timestamps_count_as_at_once() -> None:
    h = H().probe(1.0, "n1", "primary", dt=0.0).probe(1.0, "n2", "primary", dt=0.0)
    assert check_one_writer_at_a_time(h.events).valid is False


def test_ham_1_a_cancelled_synchronous_commit_is_not_an_accepted_write() -> None:
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "primary"}, n1={"write": "local-only"})
    assert check_one_writer_at_a_time(h.events).valid is True


def test_ham_1_unknown_without_any_accepted_write() -> None:
    h = rounds(H(), 0, 2, {"n1": "replica", "n2": "down"})
    assert check_one_writer_at_a_time(h.events).valid == "unknown"


# ------------------------------------------------------------------------------------ HAM-2
def _cut_history(demote_at: float | None, heal_at: float | None, end: float = 40.0) -> H:
    h = H().add(1.0, "ham.dcs.cut", node="n1", was_leader=True)
    if heal_at is not None:
        h.add(heal_at, "ham.dcs.heal", node="n1")
    t = 0.0
    while t < end:
        role = "primary" if demote_at is None or t < demote_at else "replica"
        h.probe(t, "n1", role)
        t += 0.25
    h.events.sort(key=lambda e: e.t)
    h.events = [Event(i, e.t, e.type, e.fields) for i, e in enumerate(h.events)]
    return h


def test_ham_2_kept_when_the_cut_leader_demotes_between_retry_timeout_and_ttl() -> None:
    v = check_dcs_loss_demotion_window(_cut_history(demote_at=7.0, heal_at=None).events)
    assert v.valid is True, v.summary


def test_ham_2_violated_when_the_leader_demotes_before_retry_timeout() -> None:
    v = check_dcs_loss_demotion_window(_cut_history(demote_at=1.5, heal_at=None).events)
    assert v.valid is False and "before retry_timeout" in v.observed


def test_ham_2_violated_when_the_leader_keeps_accepting_writes_past_ttl() -> None:
    v = check_dcs_loss_demotion_window(_cut_history(demote_at=None, heal_at=None).events)
    assert v.valid is False and "still accepted writes" in v.observed


def test_ham_2_violated_when_a_short_cut_demotes() -> None:
    v = check_dcs_loss_demotion_window(_cut_history(demote_at=3.5, heal_at=2.5).events)
    assert v.valid is False and "< retry_timeout" in v.observed


def test_ham_2_kept_when_a_short_cut_demotes_nothing() -> None:
    v = check_dcs_loss_demotion_window(_cut_history(demote_at=None, heal_at=2.5).events)
    assert v.valid is True, v.summary


def test_ham_2_unknown_when_the_cut_node_was_not_the_leader_or_unobserved() -> None:
    h = H().add(1.0, "ham.dcs.cut", node="n2", was_leader=False)
    assert check_dcs_loss_demotion_window(h.events).valid == "unknown"
    h = H().add(1.0, "ham.dcs.cut", node="n1", was_leader=True).probe(1.5, "n1", "primary")
    assert check_dcs_loss_demotion_window(h.events).valid == "unknown"
    assert check_dcs_loss_demotion_window(H(settings=None).events).valid == "unknown"


def test_ham_2_bounds_follow_the_recorded_settings() -> None:
    h = _cut_history(demote_at=7.0, heal_at=None)
    slow = {**SETTINGS, "retry_timeout": 10, "ttl": 30}
    h.events[0] = Event(0, 0.0, "ham.settings", slow)
    assert check_dcs_loss_demotion_window(h.events).valid is False  # 6 s < retry_timeout 10 s: early


# ------------------------------------------------------------------------------------ HAM-3
def _kill_history(new_leader_at: float | None, end: float) -> H:
    h = rounds(H(), 0, 2, {"n1": "primary", "n2": "replica"})
    h.add(2.0, "ham.kill", node="n1", was_leader=True, what="patroni+postgres")
    t = 2.1
    while t < end:
        h.probe(t, "n1", "down")
        h.probe(t + 0.05, "n2", "primary" if new_leader_at is not None and t >= new_leader_at else "replica",
                timeline=2 if new_leader_at is not None and t >= new_leader_at else 1)
        t += 0.5
    return h


def test_ham_3_kept_when_a_new_leader_accepts_writes_within_ttl_plus_loop_wait() -> None:
    v = check_failover_within_bound(_kill_history(new_leader_at=21.0, end=30).events)
    assert v.valid is True, v.summary
    assert v.details["failovers"][0]["node"] == "n2"


def test_ham_3_violated_when_no_new_leader_within_the_bound() -> None:
    v = check_failover_within_bound(_kill_history(new_leader_at=None, end=40).events)
    assert v.valid is False
    v = check_failover_within_bound(_kill_history(new_leader_at=35.0, end=40).events)
    assert v.valid is False and "not yet accepting writes" in v.observed


def test_ham_3_unknown_when_the_observation_ends_early_or_a_replica_died() -> None:
    assert check_failover_within_bound(_kill_history(new_leader_at=None, end=10).events).valid == "unknown"
    h = H().add(1.0, "ham.kill", node="n2", was_leader=False, what="patroni+postgres")
    assert check_failover_within_bound(h.events).valid == "unknown"


def test_ham_3_unknown_when_no_synchronous_standby_was_named_at_the_loss() -> None:
    h = _kill_history(new_leader_at=None, end=40)
    kill = next(e for e in h.events if e.type == "ham.kill")
    h.events[kill.index] = Event(kill.index, kill.t, kill.type, {**kill.fields, "sync_standby": None})
    assert check_failover_within_bound(h.events).valid == "unknown"
    h.events[kill.index] = Event(kill.index, kill.t, kill.type, {**kill.fields, "sync_standby": "n2"})
    assert check_failover_within_bound(h.events).valid is False


def test_ham_3_a_killed_manager_alone_is_not_a_machine_loss() -> None:
    h = H().add(1.0, "ham.kill", node="n1", was_leader=True, what="patroni")
    assert check_failover_within_bound(h.events).valid == "unknown"


# ------------------------------------------------------------------------------------ HAM-4
def _writes(h: H, keys: list[int], present: list[int]) -> H:
    for k in keys:
        h.add(1.0 + k * 0.01, "op.invoke", f="write", value=k, process=0)
        h.add(1.005 + k * 0.01, "op.ok", f="write", value=k, process=0)
    h.add(9.0, "op.invoke", f="read_all", process=0)
    return h.add(9.1, "op.ok", f="read_all", value=present, process=0)


def test_ham_4_reuses_dur_1_in_synchronous_mode() -> None:
    assert check_sync_mode_keeps_acknowledged_commits(_writes(H(), [1, 2, 3], [1, 2, 3]).events).valid is True
    v = check_sync_mode_keeps_acknowledged_commits(_writes(H(), [1, 2, 3], [1, 3]).events)
    assert v.valid is False and v.rule_id == "HAM-4"


def test_ham_4_unknown_without_synchronous_mode() -> None:
    h = _writes(H(settings={**SETTINGS, "synchronous_mode": False}), [1], [])
    assert check_sync_mode_keeps_acknowledged_commits(h.events).valid == "unknown"


# ------------------------------------------------------------------------------------ HAM-5
def test_ham_5_kept_when_the_api_agrees() -> None:
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    assert check_health_endpoints_agree_with_servers(h.events).valid is True


def test_ham_5_violated_by_a_stable_disagreement() -> None:
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"}, n2={"api": False})
    v = check_health_endpoints_agree_with_servers(h.events)
    assert v.valid is False and "n2" in v.observed and len(v.evidence) == 3


def test_ham_5_a_disagreement_at_a_role_change_does_not_count() -> None:
    h = rounds(H(), 0, 2, {"n1": "primary"})
    h.probe(2.0, "n1", "replica", api=False)  # the server demoted, the API not yet: one observation
    h.add(2.02, "ham.op", op="switchover", phase="start")
    rounds(h, 2.5, 4, {"n1": "replica"})
    assert check_health_endpoints_agree_with_servers(h.events).valid is True


def test_ham_5_unknown_without_api_answers() -> None:
    h = rounds(H(), 0, 2, {"n1": "down"})
    assert check_health_endpoints_agree_with_servers(h.events).valid == "unknown"


# ------------------------------------------------------------------------------------ HAM-6
def test_ham_6_kept_when_the_former_leader_streams_the_new_timeline() -> None:
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    rounds(h, 5, 10, {"n1": "replica", "n2": "primary"}, n1={"timeline": 2}, n2={"timeline": 2})
    v = check_former_leader_rejoins_new_timeline(h.events)
    assert v.valid is True, v.summary


def test_ham_6_violated_when_the_former_leader_stays_on_its_old_timeline() -> None:
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    rounds(h, 5, 80, {"n1": "replica", "n2": "primary"}, step=2.0, n1={"timeline": 1, "streaming": False},
           n2={"timeline": 2})
    v = check_former_leader_rejoins_new_timeline(h.events)
    assert v.valid is False and "timeline 2" in v.observed


def test_ham_6_unknown_while_the_former_leader_is_down() -> None:
    h = rounds(H(), 0, 5, {"n1": "primary", "n2": "replica"})
    rounds(h, 5, 80, {"n1": "down", "n2": "primary"}, step=2.0, n2={"timeline": 2})
    assert check_former_leader_rejoins_new_timeline(h.events).valid == "unknown"
    assert check_former_leader_rejoins_new_timeline(H().events).valid == "unknown"


@pytest.mark.parametrize("rule_id", [f"HAM-{i}" for i in range(1, 7)])
def test_every_ham_rule_is_registered(rule_id: str) -> None:
    assert registry.is_registered(rule_id)
    assert registry.get(rule_id).checker is ham.CHECKERS[rule_id]
    assert registry.get(rule_id).checker.__name__ == {
        "HAM-1": "check_one_writer_at_a_time", "HAM-2": "check_dcs_loss_demotion_window",
        "HAM-3": "check_failover_within_bound", "HAM-4": "check_sync_mode_keeps_acknowledged_commits",
        "HAM-5": "check_health_endpoints_agree_with_servers", "HAM-6": "check_former_leader_rejoins_new_timeline",
    }[rule_id]
