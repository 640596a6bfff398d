"""Fixtures of the ACR suites (RULEBOOK ACR-1…9, DUR-1 through the client under test).

* ``acr``: the ACR groups (:class:`harness.topology.acr.AcrGroups`) over the test's synchronous
  ``pair``: three members ``m1``-``m3`` and the group-wide address ``group``; with
  ``@pytest.mark.acr(alternate=2)`` also an alternate group ``a1``, ``a2`` (``agroup``);
  ``weights=[...]`` sets the members' weights (the server list order, ACR-1).
* ``acr_faults``: member faults (:class:`harness.faults.acr.AcrFaults`), recorded in the history.
* ``make_app(process="app", **options)``: the client under test (``--client``, default the
  reference client) built with the suite's short ACR settings (:data:`CLIENT_OPTIONS`, overridden by
  ``options``) and wrapped in the application workload (:class:`harness.workload.acr.AcrApp`).
  Every client is shut down at teardown, before the groups and the pair go down."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness import History, Pair
from harness.faults.acr import AcrFaults
from harness.topology.acr import AcrGroups
from harness.workload.acr import CLIENT_ERRORS, AcrApp, prepare

#: Short ACR settings for the suites (the DB2 defaults are a 10 min retry period).
CLIENT_OPTIONS: dict[str, Any] = {"max_acr_retries": 1, "acr_retry_interval": 0.2, "connect_timeout": 2.0}


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``acr`` marker."""
    config.addinivalue_line("markers", "acr(alternate=N, weights=[...]): the ACR groups of the test")


@pytest.fixture
def acr(request: pytest.FixtureRequest, pair: Pair, history: History) -> Iterator[AcrGroups]:
    """The ACR groups over the test's pair (see the module docstring)."""
    mark = request.node.get_closest_marker("acr")
    kwargs = dict(mark.kwargs) if mark else {}
    groups = AcrGroups(pair, history, members=3, alternate=int(kwargs.get("alternate", 0)),
                       weights=kwargs.get("weights"))
    with groups:
        prepare(pair.principal.dsn(direct=True))
        yield groups


@pytest.fixture
def acr_faults(acr: AcrGroups, history: History) -> AcrFaults:
    """Member faults of the test's groups."""
    return AcrFaults(acr, history)


@pytest.fixture
def make_app(client_factory: Callable[..., Any], acr: AcrGroups, history: History) -> Iterator[Callable[..., AcrApp]]:
    """``make_app(process="app", **options)``: the application over a new client under test."""
    made: list[Any] = []

    def make(process: str = "app", **options: Any) -> AcrApp:
        client = client_factory(history=history, process=process, **{**CLIENT_OPTIONS, **options})
        made.append(client)
        history.meta.setdefault("acr_client", {})[process] = {"mode": getattr(client, "mode", "seamless"),
                                                              "options": {**CLIENT_OPTIONS, **options}}
        return AcrApp(client, acr.spec(process), history, process)

    yield make
    for client in reversed(made):
        with contextlib.suppress(*CLIENT_ERRORS):
            client.shutdown()
