"""The HAM checkers on pg_auto_failover histories (harness/rules/ham; docs/rules.md HAM): the
settings recorded with ``manager: pg_auto_failover``, HAM-3's bound computed from them, HAM-5 on
the monitor's state of each node, HAM-2 left to Patroni - each kept, broken, and unknown when the
history cannot show it; equal timestamps included."""

from __future__ import annotations

from typing import Any

import pytest

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.ham import (
    check_dcs_loss_demotion_window,
    check_failover_within_bound,
    check_health_endpoints_agree_with_servers,
    check_one_writer_at_a_time,
    check_sync_mode_keeps_acknowledged_commits,
)
from harness.rules.ham.model import pgaf_failover_bound, settings
from harness.topology.pgaf_settings import DEFAULT_SETTINGS, PgafSettings

PGAF = {"manager": "pg_auto_failover", **DEFAULT_SETTINGS.to_dict(), "synchronous_mode": True}
BOUND = DEFAULT_SETTINGS.failover_bound_s()  # 13.5 s with the harness's settings


class H:
    """Events with dense indices; probes carry the monitor's state instead of REST answers."""

    def __init__(self, fields: dict[str, Any] | None = PGAF) -> None:
        self.events: list[Event] = []
        if fields is not None:
            self.add(0.0, "ham.settings", **fields)

    def add(self, t: float, type_: str, **fields: Any) -> H:
        self.events.append(Event(len(self.events), t, type_, fields))
        return self

    def probe(self, t: float, node: str, role: str, monitor: str | None = None, dt: float = 0.05) -> H:
        recovery = {"primary": False, "replica": True, "down": None}[role]
        write = {"primary": "ok", "replica": "read-only", "down": None}[role]
        if monitor is None:
            monitor = {"primary": "primary", "replica": "secondary", "down": "primary"}[role]
        return self.add(t, "ham.probe", node=node, t_end=t + dt, recovery=recovery, write=write, timeline=1,
                        streaming=True if role == "replica" else None, monitor_state=monitor,
                        api_primary=None, api_replica=None)


def rounds(h: H, t0: float, t1: float, roles: dict[str, tuple[str, str | None]], step: float = 0.5) -> H:
    t = t0
    while t < t1:
        for i, (node, (role, monitor)) in enumerate(roles.items()):
            h.probe(t + i * 0.1, node, role, monitor)
        t += step
    return h


def test_the_checkers_bound_is_the_topologys_bound_from_the_same_settings() -> None:
    s = settings(H().events)
    assert s is not None and s.manager == "pg_auto_failover" and s.ttl is None
    assert s.failover_bound == pytest.approx(DEFAULT_SETTINGS.failover_bound_s())
    other = PgafSettings(health_check_period_ms=5000, health_check_timeout_ms=5000, health_check_max_retries=2,
                         health_check_retry_delay_ms=2000, node_considered_unhealthy_timeout_ms=20000,
                         primary_demote_timeout_ms=30000, network_partition_timeout_s=20)
    assert pgaf_failover_bound(other.to_dict()) == pytest.approx(other.failover_bound_s()) == 54.0  # 5+5+2*(2+5) > 20
    slow_checks = PgafSettings(health_check_period_ms=3000, health_check_timeout_ms=2000,
                               node_considered_unhealthy_timeout_ms=1000)  # checks (3+2+1*(0.5+2)) outlast it
    assert pgaf_failover_bound(slow_checks.to_dict()) == pytest.approx(7.5 + 8.0)  # 3 + 2 + 1 * (0.5 + 2)


def test_settings_refuse_a_partition_timeout_not_shorter_than_the_demote_timeout() -> None:
    with pytest.raises(ConfigError, match="network_partition_timeout"):
        PgafSettings(network_partition_timeout_s=8, primary_demote_timeout_ms=8000)
    with pytest.raises(ConfigError, match="positive integer"):
        PgafSettings(health_check_period_ms=0)


def test_settings_missing_a_bound_input_is_no_settings() -> None:
    fields = {k: v for k, v in PGAF.items() if k != "primary_demote_timeout_ms"}
    assert settings(H(fields).events) is None
    v = check_failover_within_bound(rounds(H(fields), 0, 3, {"n1": ("primary", None)}).events)
    assert v.status == "unknown"


def _loss(new_writer_at: float, what: str = "pg_autoctl+postgres") -> H:
    h = rounds(H(), 0, 2, {"n1": ("primary", None), "n2": ("replica", None)})
    h.add(2.0, "ham.kill", node="n1", was_leader=True, what=what)
    rounds(h, 2.0, new_writer_at, {"n1": ("down", None), "n2": ("replica", "stop_replication")})
    return rounds(h, new_writer_at, new_writer_at + 2, {"n1": ("down", None), "n2": ("primary", "wait_primary")})


def test_ham_3_kept_when_the_new_primary_writes_within_the_bound() -> None:
    v = check_failover_within_bound(_loss(2.0 + BOUND - 1).events)
    assert v.status == "kept", v
    assert "primary_demote_timeout" in v.expected


def test_ham_3_kept_within_the_keepers_steps_and_violated_after_them() -> None:
    v = check_failover_within_bound(_loss(2.0 + BOUND + 8).events)  # past 5 s, within 5 + 4 keeper steps
    assert v.status == "kept" and "+9 s" in v.expected, v
    v = check_failover_within_bound(_loss(2.0 + BOUND + 10).events)
    assert v.valid is False and "n2" in v.observed, v
    v = check_failover_within_bound(_loss(2.0 + BOUND + 8).events, keeper_steps_s=0.0)
    assert v.valid is False, v


def test_ham_3_ignores_a_manager_only_kill() -> None:
    v = check_failover_within_bound(_loss(2.0 + BOUND + 10, what="pg_autoctl").events)
    assert v.status == "unknown"


def test_ham_1_two_primaries_at_the_same_instant_is_a_violation() -> None:
    h = H()
    h.probe(1.0, "n1", "primary").probe(1.0, "n2", "primary")  # equal timestamps
    v = check_one_writer_at_a_time(h.events)
    assert v.valid is False and "n1" in v.observed and "n2" in v.observed


def test_ham_2_is_patronis_rule_unknown_on_a_pgaf_history() -> None:
    h = rounds(H(), 0, 3, {"n1": ("primary", None), "n2": ("replica", None)})
    h.add(1.0, "ham.monitor.cut", node="n1", was_leader=True)
    v = check_dcs_loss_demotion_window(h.events)
    assert v.status == "unknown" and "pg_auto_failover" in v.observed


def test_ham_4_applies_to_pgaf_synchronous_replication() -> None:
    judged = check_sync_mode_keeps_acknowledged_commits(H().events)
    assert "did not record synchronous_mode" not in judged.observed
    off = check_sync_mode_keeps_acknowledged_commits(H({**PGAF, "synchronous_mode": False}).events)
    assert off.status == "unknown" and "did not record synchronous_mode" in off.observed


def test_ham_5_kept_when_the_monitor_agrees_and_lags_only_briefly() -> None:
    h = rounds(H(), 0, 3, {"n1": ("primary", None), "n2": ("replica", None)})
    # after a promotion the monitor still says "secondary" for 1 s: within the keepers' report lag
    rounds(h, 3, 4, {"n1": ("replica", "draining"), "n2": ("primary", "secondary")})
    rounds(h, 4, 7, {"n1": ("replica", None), "n2": ("primary", None)})
    v = check_health_endpoints_agree_with_servers(h.events)
    assert v.status == "kept", v


def test_ham_5_violated_when_the_monitor_calls_a_recovering_server_primary_for_long() -> None:
    h = rounds(H(), 0, 2, {"n1": ("primary", None), "n2": ("replica", None)})
    rounds(h, 2, 8, {"n1": ("primary", None), "n2": ("replica", "wait_primary")})  # 6 s > report lag
    v = check_health_endpoints_agree_with_servers(h.events)
    assert v.valid is False and "n2" in v.observed and "wait_primary" in v.observed, v


def test_ham_5_a_long_disagreement_across_a_fault_is_not_judged() -> None:
    h = rounds(H(), 0, 2, {"n1": ("primary", None), "n2": ("replica", None)})
    rounds(h, 2, 8, {"n1": ("primary", None), "n2": ("replica", "wait_primary")})
    h.add(5.0, "ham.op", op="switchover", phase="start")
    v = check_health_endpoints_agree_with_servers(h.events)
    assert v.status == "kept", v


def test_ham_5_states_that_claim_no_role_never_disagree() -> None:
    h = rounds(H(), 0, 8, {"n1": ("primary", "draining"), "n2": ("replica", "maintenance")})
    v = check_health_endpoints_agree_with_servers(h.events)
    assert v.status == "kept", v


def test_ham_5_unknown_without_the_managers_view() -> None:
    h = H()
    h.add(1.0, "ham.probe", node="n1", t_end=1.1, recovery=False, write="ok", timeline=1, streaming=None,
          monitor_state=None, api_primary=None, api_replica=None)
    assert check_health_endpoints_agree_with_servers(h.events).status == "unknown"


# ------------------------------------------------------------------------------------ HAM-7
def _monitor_cut(n1_during: str, n2_during: str = "replica", heal_at: float | None = 8.0) -> H:
    h = rounds(H(), 0, 2, {"n1": ("primary", None), "n2": ("replica", None)})
    h.add(2.0, "ham.monitor.cut", node="n1", was_leader=True)
    rounds(h, 2.0, 8.0, {"n1": (n1_during, None), "n2": (n2_during, None)})
    if heal_at is not None:
        h.add(heal_at, "ham.monitor.heal", node="n1")
    return rounds(h, 8.0, 10.0, {"n1": ("primary", None), "n2": ("replica", None)})


def test_ham_7_kept_when_the_primary_stays_primary_while_cut() -> None:
    from harness.rules.ham import check_monitor_loss_alone_keeps_the_primary

    v = check_monitor_loss_alone_keeps_the_primary(_monitor_cut("primary").events)
    assert v.status == "kept" and "n1 stayed primary" in v.observed, v


def test_ham_7_violated_when_the_cut_primary_goes_into_recovery_or_down() -> None:
    from harness.rules.ham import check_monitor_loss_alone_keeps_the_primary

    for role, word in (("replica", "in recovery"), ("down", "down")):
        v = check_monitor_loss_alone_keeps_the_primary(_monitor_cut(role).events)
        assert v.valid is False and word in v.observed, (role, v)


def test_ham_7_a_demotion_at_the_cuts_own_instant_counts() -> None:
    from harness.rules.ham import check_monitor_loss_alone_keeps_the_primary

    h = rounds(H(), 0, 2, {"n1": ("primary", None), "n2": ("replica", None)})
    h.add(2.0, "ham.monitor.cut", node="n1", was_leader=True)
    h.probe(2.0, "n1", "replica").probe(2.0, "n2", "replica")  # equal timestamps with the cut
    h.add(3.0, "ham.monitor.heal", node="n1")
    assert check_monitor_loss_alone_keeps_the_primary(h.events).valid is False


def test_ham_7_not_judged_without_a_streaming_standby() -> None:
    from harness.rules.ham import check_monitor_loss_alone_keeps_the_primary

    v = check_monitor_loss_alone_keeps_the_primary(_monitor_cut("replica", n2_during="down").events)
    assert v.status == "unknown" and "no standby" in v.observed, v
    assert check_monitor_loss_alone_keeps_the_primary(H().events).status == "unknown"
