"""APP-1…5 and DUR-1: an application pool under a switchover, a failover, a partition of the
principal (black hole and reset) and a restart of both nodes. Across a role change or a restart the
application is idle (its pool keeps its connections, as between bursts of traffic) and busy again as
soon as the principal accepts writes: a validating pool keeps every rule; a pool that does not
validate hands out the connections the servers closed meanwhile (APP-4). Through a partition the
application keeps sending requests (they fail or hang until the partition heals)."""

from __future__ import annotations

import pytest

from harness import Check, Faults

RULES = ("APP-1", "APP-2", "APP-3", "APP-4", "APP-5", "DUR-1")


@pytest.mark.rule(*RULES)
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_pool_across_a_switchover(app, faults: Faults, check: Check) -> None:
    app.workload.hold()
    faults.switchover()
    app.writable()
    check(app.verdicts())


@pytest.mark.rule(*RULES)
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_pool_across_a_failover(app, faults: Faults, check: Check) -> None:
    app.workload.hold()
    faults.failover()
    app.writable()
    check(app.verdicts())


@pytest.mark.rule(*RULES)
@pytest.mark.topology(mode="sync", mirror_readable=False)
@pytest.mark.parametrize("how", ["blackhole", "reset"])
def test_pool_across_a_partition_of_the_principal(app, faults: Faults, check: Check, how: str) -> None:
    with faults.partition(app.pair.principal.name, how=how):  # the application keeps running through it
        app.settle(1.5)
    app.writable()
    check(app.verdicts())


@pytest.mark.rule(*RULES)
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_pool_across_a_restart_of_both_nodes(app, faults: Faults, check: Check) -> None:
    principal, standby = app.pair.principal.name, app.pair.standbys[0].name
    app.workload.hold()
    with faults.stop(standby), faults.stop(principal):
        app.settle(0.5)
    app.writable()
    check(app.verdicts())
