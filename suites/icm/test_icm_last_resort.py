"""ICM-6 (last resort): every server BUSY / MAXUSERS / RESTRICTED - a request still goes to the
lightest of them; every server unreachable - an error, never a dead server."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from harness import Check, Faults, History
from harness.clients.icm import IcmRouter
from harness.rules.icm import check_last_resort, check_port_probe
from harness.topology.icm import IcmCluster
from harness.workload.icm import IcmBrowser


@pytest.mark.rule("ICM-6")
def test_icm6_every_server_in_a_state(icm_cluster: IcmCluster, router: IcmRouter,
                                      browser: Callable[..., IcmBrowser], history: History, check: Check) -> None:
    """ICM-6: s1 BUSY (index 70 < 80), s2 MAXUSERS (20 of 20, index 80), s3 RESTRICTED (index 50): the
    request goes to s2, the lightest of them."""
    b = browser()
    icm_cluster.set_server("s1", sessions=30, availability_threshold=80)
    icm_cluster.set_server("s2", sessions=20, max_users=20)
    icm_cluster.set_server("s3", sessions=50, restricted=2)
    for scheme in ("http", "https"):
        b.open(router.url(scheme, "/mail.nsf"), "mail.nsf")
    check(check_last_resort(history.events(), **history.meta["rule_params"]["ICM-6"]))


@pytest.mark.rule("ICM-6", "ICM-3")
def test_icm6_every_server_unreachable(icm_cluster: IcmCluster, router: IcmRouter, faults: Faults,
                                       browser: Callable[..., IcmBrowser], history: History, check: Check) -> None:
    """ICM-6: every HTTPS port cut off (black-holed, refused, server failed): the request gets an error,
    never a redirect to (or an answer from) a dead server; HTTP still works on the two live servers."""
    b = browser()
    with contextlib.ExitStack() as stack:
        stack.enter_context(faults.partition("s1:https", how="blackhole"))
        stack.enter_context(faults.partition("s2:https", how="refuse"))
        stack.enter_context(faults.kill("s3"))
        b.open(router.url("https", "/mail.nsf"), "mail.nsf")
        b.open(router.url("http", "/mail.nsf"), "mail.nsf")
    events = history.events()
    check([check_last_resort(events, **history.meta["rule_params"]["ICM-6"]),
           check_port_probe(events, **history.meta["rule_params"]["ICM-3"])])
