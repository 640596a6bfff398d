"""LPQ-1, LPQ-2, LPQ-4 and LPQ-6 on a 3-node group (primary n1, hot standbys n2, n3)."""

from __future__ import annotations

import pytest

from harness import Check, Group, History
from harness.rules.lpq import (
    check_hosts_in_order,
    check_next_host_on_failure,
    check_random_host_order,
    check_session_attributes,
)
from harness.workload.lpq import host_list

RANDOM_OPENS = 30


@pytest.mark.rule("LPQ-1", "LPQ-2", "LPQ-4", "LPQ-6")
@pytest.mark.topology(nodes=3, mode="async", mirror_readable=True)
def test_group_session_attrs_and_random_order(group: Group, history: History, check: Check, scenario) -> None:
    """LPQ-4/LPQ-1: ``read-write`` over [n2, n3, n1] skips both standbys in order and lands on the
    primary n1 (which then takes a write); ``standby`` over [n1, n2, n3] lands on n2.
    LPQ-6: 30 opens with ``load_balance_hosts=random`` over [n1, n2, n3]: the first host tried is
    spread over the three (chi-square at alpha 0.001; a fixed order gives 60 against 13.8)."""
    verdicts = []
    scenario.servers(group, ["n1", "n2", "n3"])
    for name, order, tsa in [("group-read-write", ["n2", "n3", "n1"], "read-write"),
                             ("group-standby", ["n1", "n2", "n3"], "standby")]:
        client = scenario.client(name)
        spec = host_list(group, order, target_session_attrs=tsa)
        if not scenario.offered(client, spec, ["LPQ-1", "LPQ-2", "LPQ-4"]):
            continue
        scenario.open(client, spec, group, write=tsa == "read-write", label=name)
        events = history.events()
        verdicts += [check_session_attributes(events, process=name), check_hosts_in_order(events, process=name),
                     check_next_host_on_failure(events, process=name)]
    name = "random-order"
    client = scenario.client(name)
    spec = host_list(group, ["n1", "n2", "n3"], load_balance_hosts="random")
    if scenario.offered(client, spec, ["LPQ-6"]):
        for k in range(RANDOM_OPENS):
            scenario.open(client, spec, group, label=f"{name}-{k + 1}")
        verdicts.append(check_random_host_order(history.events(), process=name))
    check(verdicts)
