"""ICM-2 (availability), ICM-4 (exclusions), ICM-5 (least loaded): loads that make one server the
lightest; a threshold crossed (BUSY), MaxUsers reached, Restricted set on the lightest server."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness import Check, History
from harness.clients.icm import IcmRouter
from harness.rules.icm import check_least_loaded, check_server_availability, check_server_exclusions
from harness.topology.icm import IcmCluster
from harness.workload.icm import IcmBrowser

#: Requests per scheme after a change: as many as servers, so rotating among them cannot miss one.
REPEAT = 3


@pytest.mark.rule("ICM-5")
def test_icm5_lightest_server_chosen(icm_cluster: IcmCluster, router: IcmRouter, browser: Callable[..., IcmBrowser],
                                     history: History, check: Check) -> None:
    """ICM-5: the loads move; each request goes to the server of the highest availability index."""
    b = browser()
    for loads in ((40, 10, 70), (5, 50, 60), (80, 90, 20)):
        for server, sessions in zip(icm_cluster.servers, loads, strict=True):
            icm_cluster.set_server(server, sessions=sessions)
        for scheme in ("http", "https"):
            b.open(router.url(scheme, "/mail.nsf"), "mail.nsf")
    check(check_least_loaded(history.events(), **history.meta["rule_params"]["ICM-5"]))


@pytest.mark.rule("ICM-2", "ICM-4")
@pytest.mark.parametrize("state", ["BUSY", "MAXUSERS", "RESTRICTED"])
def test_icm4_lightest_server_excluded(icm_cluster: IcmCluster, router: IcmRouter,
                                       browser: Callable[..., IcmBrowser], history: History, check: Check,
                                       state: str) -> None:
    """ICM-2/ICM-4: the lightest server (s2) is BUSY (index 90 under threshold 95), MAXUSERS (10 of 10
    users) or RESTRICTED (Server_Restricted=1): requests go to the next lightest available one."""
    b = browser()
    icm_cluster.set_server("s1", sessions=40)
    icm_cluster.set_server("s3", sessions=60)
    settings = {"BUSY": {"sessions": 10, "availability_threshold": 95},
                "MAXUSERS": {"sessions": 10, "max_users": 10},
                "RESTRICTED": {"sessions": 10, "restricted": 1}}[state]
    b.open(router.url("https", "/mail.nsf"), "mail.nsf")  # s1 before the change (index 60 > 40)
    icm_cluster.set_server("s2", **settings)
    for scheme in ("http", "https"):
        for _ in range(REPEAT):  # a router that ignores the state cannot avoid s2 by luck (round robin)
            b.open(router.url(scheme, "/mail.nsf"), "mail.nsf")
    events = history.events()
    check([check_server_availability(events), check_server_exclusions(events)])


#: (sessions, capacity) per server: capacities off the default 100, so a router whose index ignores
#: capacity (100 - sessions) ranks them differently - before: s1 90, s2 0, s3 80 against the true
#: 72, 60, 80; after the threshold of 50: s1 80 (truly 45, BUSY), s2 0 (truly 60, the lightest).
CAPACITY_BEFORE = {"s1": (10, 37), "s2": (100, 250), "s3": (20, 100)}
CAPACITY_AFTER = {"s1": (20, 37), "s2": (100, 250), "s3": (50, 100)}


@pytest.mark.rule("ICM-2", "ICM-4", "ICM-5")
def test_icm2_capacity_scales_the_index(icm_cluster: IcmCluster, router: IcmRouter,
                                        browser: Callable[..., IcmBrowser], history: History, check: Check) -> None:
    """ICM-2/4/5 with capacities 37 and 250: first s3 is the lightest (index 80; s1 72 with 10 of 37
    sessions, s2 60 with 100 of 250), then with ``Server_Availability_Threshold`` 50 s1 (20 of 37: 45)
    is BUSY and s2 (60) the lightest available one."""
    b = browser()
    for loads, threshold in ((CAPACITY_BEFORE, 0), (CAPACITY_AFTER, 50)):
        for server, (sessions, capacity) in loads.items():
            icm_cluster.set_server(server, sessions=sessions, capacity=capacity, availability_threshold=threshold)
        for scheme in ("http", "https"):
            for _ in range(REPEAT):
                b.open(router.url(scheme, "/mail.nsf"), "mail.nsf")
    events = history.events()
    check([check_server_availability(events), check_server_exclusions(events), check_least_loaded(events,
                                                                                                  **history.meta["rule_params"]["ICM-5"])])
