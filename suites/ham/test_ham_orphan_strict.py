"""The orphaned primary again, with Patroni's ``synchronous_mode_strict`` on (docs/ha-managers.md
"Findings"): is the loss of test_manager_restarted_beside_its_orphaned_primary Patroni's behaviour or
the harness's? Patroni 3.0.2, joining a running primary at start-up, writes its postgresql.conf from
its own configuration before its first HA loop; while it knows no synchronous standby yet, that file
has no ``synchronous_standby_names`` unless ``synchronous_mode_strict`` is on (then ``'*'``), and the
orphan acknowledges commits alone until it is demoted. With strict mode the same scenario must keep
HAM-1 and HAM-4: the orphan's commits wait for a synchronous standby that follows the new leader."""

from __future__ import annotations

import dataclasses
import time

import pytest

from harness import Check, History
from harness.plugin.options import HarnessOptions
from harness.rules.ham import (
    check_former_leader_rejoins_new_timeline,
    check_one_writer_at_a_time,
    check_sync_mode_keeps_acknowledged_commits,
)
from harness.topology.patroni import PatroniCluster, check_backend
from harness.topology.patroni_settings import DEFAULT_TIMING
from harness.workload import KeyWriter, final_read
from harness.workload.keywriter import ensure_table


def _until_streaming(cluster: PatroniCluster, node: str, timeline: int, timeout: float) -> None:
    """Wait (bounded; HAM-6 judges a longer wait) until ``node`` streams ``timeline`` or later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = cluster.probe(node)
        if p.streaming and (p.timeline or 0) >= timeline:
            return
        time.sleep(0.5)


@pytest.mark.rule("HAM-1", "HAM-4", "HAM-6")
def test_strict_mode_keeps_the_restarted_managers_orphan_from_acknowledging(
        history: History, harness_options: HarnessOptions, check: Check) -> None:
    """Kill the leader's Patroni only, let a replica take over, start that Patroni again beside its
    still-running primary (synchronous_mode_strict on): never two writers, no acknowledged commit
    lost, and the orphan rejoins the new timeline."""
    check_backend(harness_options.backend)
    timing = dataclasses.replace(DEFAULT_TIMING, synchronous_mode_strict=True)
    history.meta["patroni"] = {"timing": timing.to_dict(), "topology": "patroni-group3"}
    with PatroniCluster(nodes=3, timing=timing, history=history) as patroni:
        ensure_table(patroni.dsn())
        with patroni.observe(), KeyWriter(patroni.dsn, history, process="writer"):
            time.sleep(1.0)
            leader = patroni.wait_one_leader(timeout=10)
            patroni.kill_manager(leader)
            new_leader = patroni.wait_one_leader(timeout=patroni.failover_budget(), exclude=leader)
            timeline = patroni.probe(new_leader).timeline or 0
            time.sleep(2.0)
            patroni.start(leader)
            _until_streaming(patroni, leader, timeline, timeout=90)  # observed back: HAM-6 is judged
            time.sleep(2.0)
        final_read(patroni.dsn(), history)
    events = history.events()
    check([check_one_writer_at_a_time(events), check_sync_mode_keeps_acknowledged_commits(events),
           check_former_leader_rejoins_new_timeline(events)])
