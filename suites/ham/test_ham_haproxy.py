"""The canonical Patroni deployment (docs/ha-managers.md "HAProxy in front"): HAProxy with
``option httpchk GET /primary`` over a ``patroni-group3``; the writers know one address only
(HAProxy's) and commit through it while Patroni answers a machine loss and a switchover. Judged by
DUR-1 (no acknowledged commit lost), HAM-1 (one writer) and HAM-5 (the ``/primary`` answers HAProxy
routes on tell the truth); HAProxy is a process of the run and gone with it."""

from __future__ import annotations

import time

import pytest

from harness import Check, History
from harness.rules.durability import check_no_acknowledged_write_lost
from harness.rules.ham import check_health_endpoints_agree_with_servers, check_one_writer_at_a_time
from harness.topology.haproxy_front import HAProxyFront
from harness.topology.patroni import PatroniCluster
from harness.topology.process import pid_alive
from harness.workload import KeyWriter, final_read
from harness.workload.keywriter import ensure_table
from harness.workload.manager_rounds import run_rounds


@pytest.mark.rule("DUR-1", "HAM-1", "HAM-5")
def test_writers_through_haproxy_lose_nothing_across_manager_failovers(patroni: PatroniCluster, history: History,
                                                                        check: Check) -> None:
    with HAProxyFront(patroni) as front:
        pid = front.pid
        assert any(p.pid == pid for p in patroni.state().processes), "HAProxy is not a process of the run"
        ensure_table(front.dsn())
        with patroni.observe(), KeyWriter(front.dsn, history, process="writer-1", pause=0.01) as w1:
            run_rounds(patroni, ["kill", "switchover"], history)
            time.sleep(1.0)
        final_read(front.dsn(), history)
    assert pid is not None and not pid_alive(pid), "HAProxy outlived its front"
    assert w1.acknowledged, "nothing was acknowledged through HAProxy"
    events = history.events()
    check([check_no_acknowledged_write_lost(events, mode="sync"), check_one_writer_at_a_time(events),
           check_health_endpoints_agree_with_servers(events)])
