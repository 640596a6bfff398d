"""HAM rules on a real pg_auto_failover 2.0 ``pgaf-group3`` (a pg_autoctl monitor and three keepers,
synchronous replication, the harness's short settings as recorded in ``ham.settings``): a
switchover and a manual failover asked of the monitor, the loss of the primary's machine, the
primary cut from the monitor, the primary's keeper killed while its PostgreSQL runs on, and
maintenance of a secondary and of the primary. The harness observes every node all along
(``ham.probe``: the servers' own view and the monitor's state of each node) while a key writer
commits through the fault proxies (DUR-1's workload, HAM-4)."""

from __future__ import annotations

import time

import pytest

from harness import Check, History
from harness.rules.ham import (
    check_failover_within_bound,
    check_former_leader_rejoins_new_timeline,
    check_health_endpoints_agree_with_servers,
    check_one_writer_at_a_time,
    check_sync_mode_keeps_acknowledged_commits,
)
from harness.topology.pgaf import PgafCluster
from harness.workload import KeyWriter, final_read
from harness.workload.keywriter import ensure_table


def _settle(seconds: float = 1.0) -> None:
    """Let the observer see the stable state for a moment."""
    time.sleep(seconds)


@pytest.mark.rule("HAM-1", "HAM-4", "HAM-5", "HAM-6")
def test_switchover_through_the_monitor(pgaf: PgafCluster, history: History, check: Check) -> None:
    """``pg_autoctl perform switchover``: one writer throughout, the former primary back as a
    streaming secondary of the new timeline, the monitor's view truthful, no acknowledged commit lost."""
    ensure_table(pgaf.dsn())
    with pgaf.observe(), KeyWriter(pgaf.dsn, history, process="writer"):
        _settle()
        pgaf.switchover()
        _settle(3.0)
    final_read(pgaf.dsn(), history)
    events = history.events()
    check([check_one_writer_at_a_time(events), check_sync_mode_keeps_acknowledged_commits(events),
           check_health_endpoints_agree_with_servers(events), check_former_leader_rejoins_new_timeline(events)])


@pytest.mark.rule("HAM-1", "HAM-4", "HAM-6")
def test_manual_failover_to_a_named_node(pgaf: PgafCluster, history: History, check: Check) -> None:
    """``pg_autoctl perform promotion --name NODE`` (a failover to a chosen secondary): one writer,
    no acknowledged commit lost, the former primary rejoins."""
    ensure_table(pgaf.dsn())
    with pgaf.observe(), KeyWriter(pgaf.dsn, history, process="writer"):
        _settle()
        leader = pgaf.wait_one_leader(timeout=10)
        target = next(n for n in pgaf.names if n != leader)
        pgaf.failover(target)
        _settle(3.0)
    final_read(pgaf.dsn(), history)
    events = history.events()
    check([check_one_writer_at_a_time(events), check_sync_mode_keeps_acknowledged_commits(events),
           check_former_leader_rejoins_new_timeline(events)])


@pytest.mark.rule("HAM-1", "HAM-3", "HAM-4", "HAM-6")
def test_primary_machine_loss_fails_over_in_time(pgaf: PgafCluster, history: History, check: Check) -> None:
    """The primary's pg_autoctl and PostgreSQL are SIGKILLed: another node accepts writes within the
    monitor's detection + primary_demote_timeout; started again, the former primary rejoins."""
    ensure_table(pgaf.dsn())
    with pgaf.observe(), KeyWriter(pgaf.dsn, history, process="writer"):
        _settle()
        leader = pgaf.wait_one_leader(timeout=10)
        pgaf.kill(leader)
        pgaf.start(leader)
        _settle(3.0)
    final_read(pgaf.dsn(), history)
    events = history.events()
    check([check_failover_within_bound(events), check_one_writer_at_a_time(events),
           check_sync_mode_keeps_acknowledged_commits(events), check_former_leader_rejoins_new_timeline(events)])


@pytest.mark.rule("HAM-1", "HAM-5", "HAM-7")
def test_primary_cut_from_the_monitor_keeps_serving(pgaf: PgafCluster, history: History, check: Check) -> None:
    """The primary's keeper loses the monitor for twice network_partition_timeout while its standbys
    stream (the monitor's health checks, a direct link, still reach it): it stays the one writer."""
    from harness.rules.ham import check_monitor_loss_alone_keeps_the_primary

    ensure_table(pgaf.dsn())
    with pgaf.observe(), KeyWriter(pgaf.dsn, history, process="writer"):
        _settle()
        leader = pgaf.wait_one_leader(timeout=10)
        pgaf.partition_monitor(leader, hold=2 * pgaf.settings.network_partition_timeout_s + 2)
        _settle(3.0)
    final_read(pgaf.dsn(), history)
    events = history.events()
    check([check_one_writer_at_a_time(events), check_health_endpoints_agree_with_servers(events),
           check_monitor_loss_alone_keeps_the_primary(events)])


@pytest.mark.rule("HAM-1", "HAM-4", "HAM-5")
def test_primary_keeper_killed_and_restarted(pgaf: PgafCluster, history: History, check: Check) -> None:
    """Only the primary's pg_autoctl dies (SIGKILL); its PostgreSQL runs on and the monitor's health
    checks still reach it. Started again, the keeper adopts the running server: never two writers,
    no acknowledged commit lost, the monitor's view truthful."""
    ensure_table(pgaf.dsn())
    with pgaf.observe(), KeyWriter(pgaf.dsn, history, process="writer"):
        _settle()
        leader = pgaf.wait_one_leader(timeout=10)
        pgaf.kill_manager(leader)
        _settle(pgaf.settings.failover_bound_s() + 2)  # long enough for a failover, were one to come
        pgaf.start(leader)
        pgaf.wait_one_leader(timeout=pgaf.failover_budget())
        _settle(3.0)
    final_read(pgaf.dsn(), history)
    events = history.events()
    check([check_one_writer_at_a_time(events), check_sync_mode_keeps_acknowledged_commits(events),
           check_health_endpoints_agree_with_servers(events)])


@pytest.mark.rule("HAM-1", "HAM-4", "HAM-5", "HAM-6")
def test_maintenance_of_a_secondary_then_of_the_primary(pgaf: PgafCluster, history: History,
                                                       check: Check) -> None:
    """``pg_autoctl enable / disable maintenance`` on a secondary, then on the primary (with
    ``--allow-failover``: the monitor hands the primary role over first): one writer, no acknowledged
    commit lost, the monitor's view truthful, the former primary back as a secondary."""
    ensure_table(pgaf.dsn())
    with pgaf.observe(), KeyWriter(pgaf.dsn, history, process="writer"):
        _settle()
        leader = pgaf.wait_one_leader(timeout=10)
        secondary = next(n for n in pgaf.names if n != leader)
        pgaf.set_maintenance(secondary, True)
        _settle(2.0)
        pgaf.set_maintenance(secondary, False)
        pgaf.set_maintenance(leader, True)
        _settle(2.0)
        pgaf.set_maintenance(leader, False)
        _settle(3.0)
    final_read(pgaf.dsn(), history)
    events = history.events()
    check([check_one_writer_at_a_time(events), check_sync_mode_keeps_acknowledged_commits(events),
           check_health_endpoints_agree_with_servers(events), check_former_leader_rejoins_new_timeline(events)])
