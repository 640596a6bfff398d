"""ICM-3 (probe) and ICM-4 (unreachable excluded): a server's HTTP port black-holed while its HTTPS
port works, and the reverse. The cut-off server is the lightest, so a router that does not probe the
request's scheme - or probes the other one - sends requests into the hole."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness import Check, Faults, History
from harness.clients.icm import IcmRouter
from harness.rules.icm import check_port_probe, check_server_exclusions
from harness.topology.icm import IcmCluster
from harness.workload.icm import IcmBrowser


def _loads(cluster: IcmCluster) -> None:
    cluster.set_server("s2", sessions=30)
    cluster.set_server("s3", sessions=60)  # s1 is the lightest


@pytest.mark.rule("ICM-3", "ICM-4")
@pytest.mark.parametrize("cut,works", [("http", "https"), ("https", "http")])
def test_icm3_one_scheme_cut_off(icm_cluster: IcmCluster, router: IcmRouter, faults: Faults,
                                 browser: Callable[..., IcmBrowser], history: History, check: Check,
                                 cut: str, works: str) -> None:
    """ICM-3: s1's ``cut`` port black-holed: ``cut`` requests avoid s1, ``works`` requests still reach it."""
    b = browser()
    _loads(icm_cluster)
    b.open(router.url(works, "/mail.nsf"), "mail.nsf")  # before: s1 on both schemes
    with faults.partition(f"s1:{cut}", how="blackhole"):
        b.open(router.url(cut, "/mail.nsf"), "mail.nsf")
        b.open(router.url(works, "/mail.nsf"), "mail.nsf")
    events = history.events()
    check([check_port_probe(events, **history.meta["rule_params"]["ICM-3"]), check_server_exclusions(events)])


@pytest.mark.rule("ICM-3", "ICM-4")
def test_icm3_refused_port_excluded(icm_cluster: IcmCluster, router: IcmRouter, faults: Faults,
                                    browser: Callable[..., IcmBrowser], history: History, check: Check) -> None:
    """ICM-3: s1's HTTPS port refuses connections: HTTPS requests go elsewhere."""
    b = browser()
    _loads(icm_cluster)
    with faults.partition("s1:https", how="refuse"):
        b.open(router.url("https", "/mail.nsf"), "mail.nsf")
    events = history.events()
    check([check_port_probe(events, **history.meta["rule_params"]["ICM-3"]), check_server_exclusions(events)])
