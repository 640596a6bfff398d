"""ICM-1 (candidates): only servers holding a replica of the database, not marked *Out of Service* or
*Pending Delete*. Layout: mail.nsf on s1, s2, s3; crm.nsf on s1, s2; docs.nsf on s2, s3."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness import Check, Faults, History
from harness.clients.icm import IcmRouter
from harness.rules.icm import check_candidate_servers, check_last_resort, check_least_loaded
from harness.topology.icm import IcmCluster
from harness.workload.icm import IcmBrowser


@pytest.mark.rule("ICM-1")
def test_icm1_only_servers_holding_a_replica(icm_cluster: IcmCluster, router: IcmRouter,
                                             browser: Callable[..., IcmBrowser], history: History,
        check: Check) -> None:
    """ICM-1: with the server that lacks a replica the lightest, crm.nsf and docs.nsf still go only to
    servers holding one."""
    b = browser()
    icm_cluster.set_server("s1", sessions=60)
    icm_cluster.set_server("s2", sessions=40)  # s3 (no crm.nsf) is the lightest
    for scheme in ("http", "https"):
        b.open(router.url(scheme, "/crm.nsf"), "crm.nsf")
    icm_cluster.set_server("s1", sessions=0)  # s1 (no docs.nsf) is the lightest
    icm_cluster.set_server("s3", sessions=50)
    b.open(router.url("https", "/docs.nsf"), "docs.nsf")
    check(check_candidate_servers(history.events()))


@pytest.mark.rule("ICM-1", "ICM-5")
def test_icm1_marked_replicas_excluded(icm_cluster: IcmCluster, router: IcmRouter, faults: Faults,
                                       browser: Callable[..., IcmBrowser], history: History,
        check: Check) -> None:
    """ICM-1: a replica marked Out of Service, another Pending Delete: mail.nsf goes to the third
    server even though the marked ones are lighter."""
    b = browser()
    icm_cluster.set_server("s3", sessions=50)
    with faults.mark_state("s1", "mail.nsf", "out-of-service"), faults.mark_state("s2", "mail.nsf", "pending-delete"):
        for scheme in ("http", "https"):
            for _ in range(3):  # as many as servers: rotating among them cannot miss a marked one
                b.open(router.url(scheme, "/mail.nsf"), "mail.nsf")
    b.open(router.url("https", "/mail.nsf"), "mail.nsf")  # marks cleared: s1 or s2 again (lightest)
    events = history.events()
    check([check_candidate_servers(events), check_least_loaded(events, **history.meta["rule_params"]["ICM-5"])])


@pytest.mark.rule("ICM-1", "ICM-6")
def test_icm1_every_replica_marked_is_an_error(icm_cluster: IcmCluster, router: IcmRouter, faults: Faults,
                                               browser: Callable[..., IcmBrowser], history: History,
        check: Check) -> None:
    """ICM-1: crm.nsf marked on both its servers: no candidate, the request gets an error."""
    b = browser()
    with faults.mark_state("s1", "crm.nsf", "out-of-service"), faults.mark_state("s2", "crm.nsf", "pending-delete"):
        b.open(router.url("https", "/crm.nsf"), "crm.nsf")
    events = history.events()
    check([check_candidate_servers(events), check_last_resort(events)])
