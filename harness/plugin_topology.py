"""pytest plugin part 2 (entry point ``pytest11``): topology and fault fixtures.

* ``pair``: a started principal + mirror pair behind the fault proxy, its events recorded in the
  test's ``history``. Configure it with ``@pytest.mark.topology(mode="sync", mirror_readable=False)``.
* ``group``: one principal and N-1 standbys (``@pytest.mark.topology(nodes=3)``).
* ``faults``: the fault vocabulary (:class:`harness.faults.Faults`) for the test's pair or group.

``--keep-on-failure`` leaves a failed test's servers running (detached from the test run) and prints
how to reach them; ``failover-harness down --all`` cleans them later."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from harness.errors import ConfigError, MissingDependencyError
from harness.faults import Faults
from harness.history.core import History
from harness.topology.local import LocalTopology
from harness.topology.run import save_state

TOPOLOGY_OPTIONS = ("mode", "mirror_readable", "nodes", "links")


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``topology`` marker."""
    config.addinivalue_line(
        "markers", "topology(mode='sync', mirror_readable=False, nodes=N, links='proxy'): how the test's "
                   "pair or group is built")


def _topology_kwargs(request: pytest.FixtureRequest, default_nodes: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"nodes": default_nodes}
    for mark in reversed(list(request.node.iter_markers("topology"))):
        unknown = set(mark.kwargs) - set(TOPOLOGY_OPTIONS)
        if unknown or mark.args:
            raise ConfigError(f"@pytest.mark.topology takes only {', '.join(TOPOLOGY_OPTIONS)} as keywords; "
                              f"got {sorted(unknown) or mark.args}")
        kwargs.update(mark.kwargs)
    return kwargs


def _check_backend(config: pytest.Config) -> None:
    backend = config.getoption("backend")
    engine = config.getoption("engine")
    if backend == "compose":
        from harness.topology.compose import require_docker_engine

        require_docker_engine()
    if engine != "postgres":
        raise MissingDependencyError(f"engine {engine!r} is not supported by the local backend yet; "
                                     f"use --engine postgres")


def _environment(config: pytest.Config, topo: LocalTopology) -> None:
    try:
        from harness.plugin import add_environment
    except ImportError:
        return
    links = topo._state.get("links", {})
    add_environment(config, backend=config.getoption("backend"),
                    engine=f"PostgreSQL {topo._state.get('version', '?')}",
                    fault_proxy=links.get("description") or links.get("kind", "direct"),
                    fault_proxy__kind=links.get("proxy_kind", links.get("kind", "direct")),
                    fault_proxy__version=links.get("version", "-"))


@pytest.fixture
def _topology_factory(request: pytest.FixtureRequest, history: History) -> Iterator[Any]:
    started: list[LocalTopology] = []

    def make(default_nodes: int) -> LocalTopology:
        _check_backend(request.config)
        kwargs = _topology_kwargs(request, default_nodes)
        topo = LocalTopology(history=history, **kwargs)
        topo.up()
        started.append(topo)  # the topology forwards the fault proxy's connection events to history
        history.meta.setdefault("topology", topo.describe())
        _environment(request.config, topo)
        return topo

    yield make
    keep = request.config.getoption("keep_on_failure") and _failed(request)
    for topo in started:
        if keep:
            _keep(topo)
        else:
            topo.down()


def _failed(request: pytest.FixtureRequest) -> bool:
    try:
        from harness.plugin import test_failed
    except ImportError:
        return False
    return test_failed(request)


def _keep(topo: LocalTopology) -> None:
    """Leave a failed test's servers up: mark the run detached (its reaper then leaves it alone)."""
    topo.refresh()
    topo._state["detached"] = True
    save_state(topo.path, topo._state)
    topo.links.teardown()  # an in-process fault proxy cannot outlive pytest: stop it cleanly now
    lines = [f"[failover-harness] --keep-on-failure: run {topo.run_id} left up in {topo.path}"]
    for node in topo.nodes:
        lines.append(f"    {node.name} {node.role:9} {node.dsn(direct=True)}")
    lines.append(f"    (servers only: the fault proxies ended with the test; clean up: failover-harness down --run "
                 f"{topo.run_id})")
    print("\n".join(lines), file=sys.stderr)


@pytest.fixture
def pair(_topology_factory: Any) -> LocalTopology:
    """A started principal + mirror pair behind the fault proxy (``@pytest.mark.topology`` sets
    mode, mirror_readable, links)."""
    return _topology_factory(2)


@pytest.fixture
def group(_topology_factory: Any) -> LocalTopology:
    """A started group: one principal and N-1 standbys (default N = 3)."""
    return _topology_factory(3)


@pytest.fixture
def faults(request: pytest.FixtureRequest, history: History) -> Faults:
    """The fault vocabulary for the test's ``group`` if it uses one, else its ``pair``."""
    name = "group" if "group" in request.fixturenames else "pair"
    return Faults(request.getfixturevalue(name), history)
