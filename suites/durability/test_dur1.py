"""DUR-1 (cross-cutting): no acknowledged write is lost across planned switchovers and an unplanned
failover of a synchronous pair. The writer finds the principal itself through the fault proxies
(libpq multi-host, target_session_attrs=read-write; on MariaDB the same string read by
:mod:`harness.workload.mysql`), on whichever engine ``--engine`` names; a write whose connection broke mid-commit is
recorded as indeterminate (``op.info``) and not judged."""

from __future__ import annotations

import time

import pytest

from harness import Check, Faults, Group, History, Pair
from harness.rules.durability import check_no_acknowledged_write_lost
from harness.workload import KeyWriter, final_read
from harness.workload.keywriter import ensure_table


@pytest.mark.rule("DUR-1")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_no_acknowledged_commit_lost_across_switchovers_and_failover(pair: Pair, faults: Faults, history: History,
                                                                     check: Check) -> None:
    engine = pair.engine.name
    ensure_table(pair.dsn(), engine)
    with KeyWriter(pair.dsn, history, process="writer-1", engine=engine), \
            KeyWriter(pair.dsn, history, process="writer-2", start=1_000_000, engine=engine):
        for _ in range(3):
            time.sleep(0.3)
            faults.switchover()
        time.sleep(0.3)
        faults.failover()
        time.sleep(0.3)
        faults.rejoin()
        time.sleep(0.3)
    final_read(pair.dsn(), history, engine=engine)
    check(check_no_acknowledged_write_lost(history.events(), mode=pair.mode))


@pytest.mark.rule("DUR-1")
@pytest.mark.topology(mode="sync", mirror_readable=True, nodes=3)
def test_no_acknowledged_commit_lost_when_a_group_fails_over(group: Group, faults: Faults, history: History,
                                                             check: Check) -> None:
    engine = group.engine.name
    ensure_table(group.dsn(), engine)
    with KeyWriter(group.dsn, history, engine=engine):
        time.sleep(0.3)
        faults.failover()
        time.sleep(0.5)
    final_read(group.dsn(), history, engine=engine)
    check(check_no_acknowledged_write_lost(history.events(), mode=group.mode))
