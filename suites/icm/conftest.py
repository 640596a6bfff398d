"""Fixtures of the ICM suites (RULEBOOK ICM-1..7).

* ``icm_session`` (one per test process): the backing topology - one PostgreSQL pair whose principal
  holds every (server, replica) database, behind the fault proxy - and the cluster stand-in over it
  (:class:`harness.topology.icm.IcmCluster`, three servers). Starting them once per process keeps
  the suites within their budget; each test gets the cluster back in its starting state.
* ``icm_cluster``: the cluster, reset and recording into this test's ``history``.
* ``faults``: the fault vocabulary with the cluster's ports (``partition("s1:http")``), servers
  (``kill("s2")``) and replica marks (``mark_state``).
* ``router``: the router under test (``--client NAME``; default the reference ICM) started in front
  of the cluster, stopped at teardown.
* ``browser``: ``browser(process, user)`` makes an :class:`~harness.workload.icm.IcmBrowser`.
* ``@pytest.mark.icm(tie_break=..., probe_window=...)``: the checkers' parameters for this test,
  written to ``meta["rule_params"]`` so a saved history re-checks with the same values."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness import Faults, History
from harness.clients.icm import IcmRouter, open_router
from harness.plugin import add_environment
from harness.rules.icm import DEFAULT_PROBE_WINDOW
from harness.topology import get_backend, get_engine
from harness.topology.icm import IcmCluster
from harness.topology.icm_relay import HistoryRelay
from harness.workload.icm import IcmBrowser

TIE_BREAK = "any"


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``icm`` marker."""
    config.addinivalue_line("markers", "icm(tie_break='any', probe_window=S): ICM checker parameters")


@pytest.fixture(scope="session")
def icm_session(pytestconfig: pytest.Config) -> Iterator[tuple[Any, IcmCluster, HistoryRelay]]:
    """The backing topology, the cluster stand-in and the history relay, once per test process."""
    from harness.plugin.options import OPTIONS_KEY

    opts = pytestconfig.stash[OPTIONS_KEY]
    relay = HistoryRelay()
    topo = get_backend(opts.backend).build(get_engine(opts.engine), 2, mode="async", history=relay)
    topo.up()
    try:
        cluster = IcmCluster(topo, history=relay).up()
        desc = topo.describe()
        add_environment(pytestconfig, icm_cluster=f"{len(cluster.servers)} servers, HTTP+HTTPS each, "
                                                  f"PostgreSQL {desc.get('version')} databases per replica")
        try:
            yield topo, cluster, relay
        finally:
            cluster.down()
    finally:
        topo.down()


@pytest.fixture
def icm_cluster(request: pytest.FixtureRequest, icm_session: tuple[Any, IcmCluster, HistoryRelay],
                history: History) -> Iterator[IcmCluster]:
    """The cluster, back in its starting state, recording into this test's history."""
    topo, cluster, relay = icm_session
    relay.bind(history)
    mark = request.node.get_closest_marker("icm")
    params = dict(mark.kwargs) if mark else {}
    tie_break, window = params.get("tie_break", TIE_BREAK), params.get("probe_window", DEFAULT_PROBE_WINDOW)
    history.meta["rule_params"] = {"ICM-3": {"probe_window": window}, "ICM-5": {"tie_break": tie_break},
                                   "ICM-6": {"tie_break": tie_break}}
    history.meta.setdefault("topology", topo.describe())
    cluster.reset()
    cluster.bind(relay)
    try:
        yield cluster
    finally:
        relay.bind(None)


@pytest.fixture
def faults(icm_session: tuple[Any, IcmCluster, HistoryRelay], icm_cluster: IcmCluster, history: History) -> Faults:
    """The fault vocabulary over the backing topology and the cluster's ports, servers and replicas."""
    return Faults(icm_session[0], history, cluster=icm_cluster)


@pytest.fixture
def router(icm_cluster: IcmCluster, history: History, client_factory: Callable[..., Any]) -> Iterator[IcmRouter]:
    """The router under test in front of the cluster."""
    r = open_router(client_factory, cluster=icm_cluster, history=history)
    history.meta["client_under_test"] = {"client": r.name, "mode": r.mode, "limitations": r.limitations}
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def browser(icm_cluster: IcmCluster, history: History) -> Iterator[Callable[..., IcmBrowser]]:
    """``browser(process="app", user="alice")``: a browser session (closed at teardown)."""
    made: list[IcmBrowser] = []

    def make(process: str = "app", user: str = "alice") -> IcmBrowser:
        b = IcmBrowser(icm_cluster, history, process=process, user=user)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()
