"""LPQ-1, LPQ-2, LPQ-3 on a primary n1 + hot standby n2 (``target_session_attrs=any``,
``connect_timeout=2``) with the first listed host made unreachable in each way the fault proxy
has - refused, reset, black-holed, slow to answer (latency 3 s) - then both hosts black-holed, then
both refusing. Judged from the fault proxies' ``conn.*`` events and the capture's ``conn.refused``
(what the network saw), never from the driver's own words."""

from __future__ import annotations

import pytest

from harness import Check, Faults, History, Pair
from harness.rules.lpq import check_hosts_in_order, check_next_host_on_failure, check_per_host_timeout
from harness.workload.lpq import host_list

TIMEOUT = 2


@pytest.mark.rule("LPQ-1", "LPQ-2", "LPQ-3")
@pytest.mark.topology(mode="sync", mirror_readable=True)
def test_first_host_unreachable(pair: Pair, faults: Faults, history: History, check: Check, scenario) -> None:
    """LPQ-2: a refused / black-holed / slow first host -> the second host is tried and the open
    succeeds; both black-holed or both refusing -> the open fails once each host failed
    (interpretation: one pass; a client still trying 1 s after its last attempt ended keeps trying
    forever). A reset of an accepted connection is not one of LPQ-2's cases (see check_next_host_on_failure): that
    scenario is judged by LPQ-1 only, its outcome kept in the history. LPQ-3: a black-holed or slow
    host is given up after ``connect_timeout`` (2 s, -1/+1 s: libpq 15 counts whole seconds), so two
    black holes take about 4 s. LPQ-1: n1 before n2."""
    verdicts = []
    cases = [
        ("first-refused", [("n1", "refuse")], ["LPQ-1", "LPQ-2"]),
        ("first-reset", [("n1", "reset")], ["LPQ-1"]),
        ("first-blackholed", [("n1", "blackhole")], ["LPQ-1", "LPQ-2", "LPQ-3"]),
        ("first-slow", [("n1", "latency")], ["LPQ-1", "LPQ-2", "LPQ-3"]),
        ("both-blackholed", [("n1", "blackhole"), ("n2", "blackhole")], ["LPQ-2", "LPQ-3"]),
        ("every-host-refused", [("n1", "refuse"), ("n2", "refuse")], ["LPQ-2"]),
    ]
    checkers = {"LPQ-1": check_hosts_in_order, "LPQ-2": check_next_host_on_failure, "LPQ-3": check_per_host_timeout}
    scenario.servers(pair, ["n1", "n2"])  # the hosts' names for the evidence
    for name, what, rules in cases:
        client = scenario.client(name)
        spec = host_list(pair, ["n1", "n2"], connect_timeout=TIMEOUT)
        if not scenario.offered(client, spec, rules):
            continue
        made = [faults.latency(node, 3000) if how == "latency" else faults.partition(node, how=how)
                for node, how in what]
        scenario.open(client, spec, pair, faults=made, wait=2 * TIMEOUT + 3, after=4.0, label=name)
        events = history.events()
        verdicts += [checkers[r](events, process=name) for r in rules]
    check(verdicts)
