"""HAM-1 … HAM-6 on a real Patroni 3 ``patroni-group3`` (synchronous_mode on, ttl 20 s, loop_wait 2 s,
retry_timeout 3 s as recorded in ``ham.settings``): a switchover, the loss of the leader's machine,
a DCS cut of the leader shorter than retry_timeout and one longer than ttl, the leader's Patroni
killed while its PostgreSQL runs on (a split-brain attempt), and maintenance mode. The harness
observes every node all along (``ham.probe``: the servers' own view and the REST API's) while a
key writer commits through the fault proxies (DUR-1's workload, HAM-4)."""

from __future__ import annotations

import time

import pytest

from harness import Check, History
from harness.rules.ham import (
    check_dcs_loss_demotion_window,
    check_failover_within_bound,
    check_former_leader_rejoins_new_timeline,
    check_health_endpoints_agree_with_servers,
    check_one_writer_at_a_time,
    check_sync_mode_keeps_acknowledged_commits,
)
from harness.topology.patroni import PatroniCluster
from harness.workload import KeyWriter, final_read
from harness.workload.keywriter import ensure_table


def _settle(cluster: PatroniCluster, seconds: float = 1.0) -> None:
    """Let the observer see the stable state for a moment."""
    time.sleep(seconds)


def _until_streaming(cluster: PatroniCluster, node: str, timeline: int, timeout: float) -> None:
    """Wait (bounded) until ``node`` streams ``timeline`` or later - a walreceiver that connects to
    the new leader on the old timeline streams for a moment before pg_rewind, so streaming alone
    is not the rejoin HAM-6 asks for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = cluster.probe(node)
        if p.streaming and (p.timeline or 0) >= timeline:
            return
        time.sleep(0.5)


@pytest.mark.rule("HAM-1", "HAM-4", "HAM-5", "HAM-6")
def test_switchover_through_patroni(patroni: PatroniCluster, history: History, check: Check) -> None:
    """``POST /switchover``: one writer throughout, the former leader back as a replica of the new
    timeline, the health endpoints truthful, no acknowledged commit lost."""
    ensure_table(patroni.dsn())
    with patroni.observe(), KeyWriter(patroni.dsn, history, process="writer"):
        _settle(patroni)
        patroni.switchover()
        _settle(patroni, 3.0)
    final_read(patroni.dsn(), history)
    check([check_one_writer_at_a_time(history.events()),
           check_sync_mode_keeps_acknowledged_commits(history.events()),
           check_health_endpoints_agree_with_servers(history.events()),
           check_former_leader_rejoins_new_timeline(history.events())])


@pytest.mark.rule("HAM-1", "HAM-3", "HAM-4", "HAM-6")
def test_leader_machine_loss_fails_over_in_time(patroni: PatroniCluster, history: History, check: Check) -> None:
    """The leader's Patroni and PostgreSQL are SIGKILLed: another node accepts writes within
    ttl + loop_wait; started again, the former leader rejoins as a replica (pg_rewind)."""
    ensure_table(patroni.dsn())
    with patroni.observe(), KeyWriter(patroni.dsn, history, process="writer"):
        _settle(patroni)
        leader = patroni.wait_one_leader(timeout=10)
        patroni.kill(leader)
        patroni.start(leader)
        _settle(patroni, 3.0)
    final_read(patroni.dsn(), history)
    check([check_failover_within_bound(history.events()),
           check_one_writer_at_a_time(history.events()),
           check_sync_mode_keeps_acknowledged_commits(history.events()),
           check_former_leader_rejoins_new_timeline(history.events())])


@pytest.mark.rule("HAM-1", "HAM-2")
def test_dcs_cut_shorter_than_retry_timeout_does_not_demote(patroni: PatroniCluster, history: History,
                                                            check: Check) -> None:
    """The leader loses etcd for retry_timeout - 1.5 s: it stays the one writer."""
    with patroni.observe():
        _settle(patroni)
        leader = patroni.wait_one_leader(timeout=10)
        patroni.partition_dcs(leader, hold=patroni.timing.retry_timeout - 1.5, wait=False)
        time.sleep(patroni.timing.loop_wait + patroni.timing.retry_timeout + 2)
    check([check_dcs_loss_demotion_window(history.events()), check_one_writer_at_a_time(history.events())])


@pytest.mark.rule("HAM-1", "HAM-2", "HAM-6")
def test_dcs_cut_longer_than_ttl_demotes_the_leader(patroni: PatroniCluster, history: History, check: Check) -> None:
    """The leader loses etcd for good: it stops accepting writes between retry_timeout and ttl, a
    replica takes over, and once healed the former leader follows the new timeline."""
    with patroni.observe():
        _settle(patroni)
        leader = patroni.wait_one_leader(timeout=10)
        patroni.partition_dcs(leader, wait=False)
        new_leader = patroni.wait_one_leader(timeout=patroni.failover_budget(), exclude=leader)
        timeline = patroni.probe(new_leader).timeline or 0
        time.sleep(max(0.0, patroni.timing.ttl - 10))  # observed past ttl after the cut
        patroni.heal_dcs(leader)
        _until_streaming(patroni, leader, timeline, timeout=90)
        _settle(patroni, 2.0)
    check([check_dcs_loss_demotion_window(history.events()),
           check_one_writer_at_a_time(history.events()),
           check_former_leader_rejoins_new_timeline(history.events())])


@pytest.mark.rule("HAM-1", "HAM-5")
def test_leader_manager_killed_split_brain_attempt(patroni: PatroniCluster, history: History,
                                                   check: Check) -> None:
    """Only the leader's Patroni dies; its PostgreSQL keeps running as a primary while a replica is
    promoted once the leader key expires. In synchronous_mode the orphaned primary acknowledges no
    commit (each waits for a synchronous standby that no longer follows it): never two writers,
    judged while the orphan runs beside the new leader (its manager is not started again here: see
    test_manager_restarted_beside_its_orphaned_primary)."""
    ensure_table(patroni.dsn())
    with patroni.observe(), KeyWriter(patroni.dsn, history, process="writer"):
        _settle(patroni)
        leader = patroni.wait_one_leader(timeout=10)
        patroni.kill_manager(leader)
        patroni.wait_one_leader(timeout=patroni.failover_budget(), exclude=leader)
        _settle(patroni, 5.0)
        patroni.kill(leader, wait=False)  # the orphan goes (machine loss) so that the writer ends
    check([check_one_writer_at_a_time(history.events()), check_health_endpoints_agree_with_servers(history.events())])


@pytest.mark.rule("HAM-1", "HAM-4", "HAM-6")
def test_manager_restarted_beside_its_orphaned_primary(patroni: PatroniCluster, history: History,
                                                       check: Check) -> None:
    """The leader's Patroni dies, a replica takes over, then that Patroni starts again beside its
    still-running primary: it must demote and rewind it without the orphan acknowledging a commit
    meanwhile (HAM-1, HAM-4), and rejoin it on the new timeline (HAM-6). Measured finding with
    Patroni 3.0.2 and watchdog off (docs/ha-managers.md): the restarted Patroni reloads the orphan
    without synchronous_standby_names before demoting it, and a commit sent in that window is
    acknowledged - HAM-1 and HAM-4 violated whenever a write lands there."""
    ensure_table(patroni.dsn())
    with patroni.observe(), KeyWriter(patroni.dsn, history, process="writer"):
        _settle(patroni)
        leader = patroni.wait_one_leader(timeout=10)
        patroni.kill_manager(leader)
        new_leader = patroni.wait_one_leader(timeout=patroni.failover_budget(), exclude=leader)
        timeline = patroni.probe(new_leader).timeline or 0
        _settle(patroni, 2.0)
        patroni.start(leader)
        _until_streaming(patroni, leader, timeline, timeout=90)  # observed back: HAM-6 is judged, not unknown
        _settle(patroni, 2.0)
    final_read(patroni.dsn(), history)
    check([check_one_writer_at_a_time(history.events()),
           check_sync_mode_keeps_acknowledged_commits(history.events()),
           check_former_leader_rejoins_new_timeline(history.events())])


@pytest.mark.rule("HAM-1", "HAM-5")
def test_maintenance_mode_keeps_the_leader(patroni: PatroniCluster, history: History, check: Check) -> None:
    """Maintenance mode on and off: the leader keeps leading and the health endpoints stay truthful."""
    with patroni.observe():
        _settle(patroni)
        patroni.set_pause(True)
        _settle(patroni, 3.0)
        patroni.set_pause(False)
        _settle(patroni, 2.0)
    check([check_one_writer_at_a_time(history.events()), check_health_endpoints_agree_with_servers(history.events())])
