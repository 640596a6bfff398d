"""PER-1 across a rolling restart - PolarProxy's "engine minor upgrade" (seed 002: 100 % of the
connections kept for switchover, minor upgrade, spec upgrade and node add/remove).

A minor upgrade of a pair, as an operator does it: restart the mirror (the new binaries), switch over
to it (coordinated with the client when it coordinates), restart the former principal. The 20 OLTP
sessions of the PER-1 suite run through the client under test the whole time; the checker compares
each session's front connection before and after the switchover and counts client-visible errors."""

from __future__ import annotations

import time

import pytest

from harness import Check, Faults, History, Pair
from harness.clients.persistent import PersistentClient
from harness.rules.persistent import check_keepalive_on_switchover
from harness.workload.oltp import OltpConfig, OltpWorkload


@pytest.mark.rule("PER-1")
@pytest.mark.engines("postgres")  # the PostgreSQL reference proxy and TrackedSession/OltpWorkload (psycopg)
@pytest.mark.topology(mode="async")
def test_per1_connections_kept_across_a_rolling_restart(pair: Pair, faults: Faults, history: History, check: Check,
                                                        per_client: PersistentClient) -> None:
    """PER-1 (minor upgrade): restart the mirror, switch over, restart the former principal - 100 %
    of the 20 OLTP sessions kept, 0 errors."""
    workload = OltpWorkload(per_client.dsn(), history, OltpConfig(op_timeout=15))
    workload.load(pair.principal.dsn())
    with workload:
        time.sleep(0.5)
        with faults.stop(pair.mirror.name):  # the mirror restarts (stopped, started at the block's end)
            time.sleep(0.3)
        faults.switchover()
        with faults.stop(pair.mirror.name):  # the former principal restarts as the new mirror
            time.sleep(0.3)
        time.sleep(0.5)
    check(check_keepalive_on_switchover(history.events(), min_keep_rate=1.0, max_errors=0))
