"""LPQ-4 (session attributes) with LPQ-1/LPQ-2 on the way, and LPQ-5 (authentication failure
stops), on a primary n1 + hot standby n2 behind the fault proxy. The standby is listed first, so
every ``target_session_attrs`` value has to skip or take it; one scenario lists the primary first,
one has the standby refusing connects (``prefer-standby`` must then fall back to the primary)."""

from __future__ import annotations

import pytest

from harness import Check, Faults, History, Pair
from harness.rules.lpq import (
    check_auth_failure_stops,
    check_hosts_in_order,
    check_next_host_on_failure,
    check_session_attributes,
)
from harness.workload.lpq import host_list

#: (scenario, host order, target_session_attrs)
CASES = [
    ("standby-first-any", ["n2", "n1"], "any"),
    ("standby-first-read-write", ["n2", "n1"], "read-write"),
    ("standby-first-primary", ["n2", "n1"], "primary"),
    ("standby-first-standby", ["n2", "n1"], "standby"),
    ("standby-first-read-only", ["n2", "n1"], "read-only"),
    ("standby-first-prefer-standby", ["n2", "n1"], "prefer-standby"),
    ("primary-first-standby", ["n1", "n2"], "standby"),
    ("primary-first-prefer-standby", ["n1", "n2"], "prefer-standby"),
]


@pytest.mark.rule("LPQ-4", "LPQ-1", "LPQ-2", "LPQ-5")
@pytest.mark.topology(mode="sync", mirror_readable=True)
def test_session_attrs_and_authentication(pair: Pair, faults: Faults, history: History, check: Check,
                                          scenario) -> None:
    """LPQ-4: for each ``target_session_attrs`` the session lands on an acceptable server, as the
    server itself says through the client's connection (``pg_is_in_recovery()``,
    ``inet_server_port()``); a ``read-write`` / ``primary`` session then writes once (a standby
    answers 25006). ``prefer-standby`` with the standby refusing connects lands on the primary.
    LPQ-5: with a wrong password and both hosts up, the open fails at n1 and n2 is never tried."""
    verdicts = []
    scenario.servers(pair, ["n1", "n2"])
    for name, order, tsa in CASES:
        client = scenario.client(name)
        spec = host_list(pair, order, target_session_attrs=tsa)
        if not scenario.offered(client, spec, ["LPQ-4", "LPQ-1", "LPQ-2"]):
            continue
        scenario.open(client, spec, pair, write=tsa in ("read-write", "primary"), label=name)
        verdicts += [check_session_attributes(history.events(), process=name), check_hosts_in_order(history.events(),
                                                                                                    process=name),
                     check_next_host_on_failure(history.events(), process=name)]
    name = "standby-refused-prefer-standby"
    client = scenario.client(name)
    spec = host_list(pair, ["n2", "n1"], target_session_attrs="prefer-standby")
    if scenario.offered(client, spec, ["LPQ-4", "LPQ-2"]):
        scenario.servers(pair, ["n1", "n2"], unreachable=["n2"])
        scenario.open(client, spec, pair, faults=[faults.partition("n2", how="refuse")], label=name)
        verdicts += [check_session_attributes(history.events(), process=name),
                     check_next_host_on_failure(history.events(), process=name)]
    name = "wrong-password"
    client = scenario.client(name)
    spec = host_list(pair, ["n1", "n2"], password="not-the-password")
    if scenario.offered(client, spec, ["LPQ-5"]):
        scenario.open(client, spec, pair, label=name)
        verdicts.append(check_auth_failure_stops(history.events(), process=name))
    check(verdicts)
