"""ICM-7 (no transparent failover): a server killed under connected clients. The client's next
request to it gets an error; it comes back to ICM for another replica, and logs in there unless it
already authenticated to that server in this session."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness import Check, Faults, History
from harness.clients.icm import IcmRouter
from harness.rules.icm import check_no_transparent_failover
from harness.topology.icm import IcmCluster
from harness.workload.icm import IcmBrowser


@pytest.mark.rule("ICM-7")
def test_icm7_server_killed_under_client(icm_cluster: IcmCluster, router: IcmRouter, faults: Faults,
                                         browser: Callable[..., IcmBrowser], history: History, check: Check) -> None:
    """ICM-7: alice logged in to s1 and s2, bob to s2 only; s2 fails under both (with a router that sent
    alice elsewhere, the server alice is on fails). Each one's bookmark gets an error; through ICM again
    both reach s1 - alice without a new login, bob with one."""
    alice, bob = browser("alice", "alice"), browser("bob", "bob")
    url = router.url("https", "/mail.nsf")
    alice.open(url, "mail.nsf")  # all idle: s1 (first of equals) or any of them
    icm_cluster.set_server("s1", sessions=50)
    icm_cluster.set_server("s3", sessions=60)  # s2 the lightest now
    victim = alice.open(url, "mail.nsf").served_by or "s2"  # the server alice is connected to (s2 for ICM)
    bob.open(url, "mail.nsf")
    icm_cluster.set_server("s1", sessions=10)  # s1 the lightest once s2 is gone
    with faults.kill(victim):
        for b in (alice, bob):
            if b.last_url:
                b.open(b.last_url, "mail.nsf", target="bookmark")  # the server it was connected to
            b.open(url, "mail.nsf")  # back to ICM
    check(check_no_transparent_failover(history.events()))
