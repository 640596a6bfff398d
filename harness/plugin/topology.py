"""Topology and fault fixtures.

* ``pair``: a started principal + mirror pair behind the fault proxy, its events recorded in the
  test's ``history``. Configure it with ``@pytest.mark.topology(mode="sync", mirror_readable=False)``.
* ``group``: one principal and N-1 standbys (``@pytest.mark.topology(nodes=3)``).
* ``faults``: the fault vocabulary (:class:`harness.faults.Faults`) for the test's pair or group.

They are built by the backend and engine chosen with ``--backend`` / ``--engine`` (checked once at
start-up, see :func:`check_backend`). ``--keep-on-failure`` leaves a failed test's servers running
(detached from the test run) and prints how to reach them; ``failover-harness down --all`` cleans
them later."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from harness.errors import ConfigError, HarnessError
from harness.plugin.options import OPTIONS_KEY, add_environment, rule_ids_of, test_failed

if TYPE_CHECKING:  # imported when a test asks for a topology: an unrelated pytest run never pays for them
    from harness.faults import Faults
    from harness.history.core import History
    from harness.topology import Group, Pair, Topology

TOPOLOGY_OPTIONS = ("mode", "mirror_readable", "nodes", "links")
NOT_ON_MARKER = "not_on(*backends, reason=...): the test cannot run on these backends, and why (docs/compose.md)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``@pytest.mark.not_on("compose", reason="...")`` is skipped on that backend with
    its reason (reported, never silently green); a mark without a reason is a usage error."""
    backend = config.stash[OPTIONS_KEY].backend
    skip_unmanageable(config, items)
    for item in items:
        for mark in item.iter_markers("not_on"):
            reason = mark.kwargs.get("reason")
            if not reason:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.not_on needs reason='why it cannot run there'")
            if backend in mark.args:
                item.add_marker(pytest.mark.skip(reason=f"not on backend {backend}: {reason}"))


def skip_unmanageable(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--topology patroni-*`` a test whose rule family the manager topology cannot serve is
    skipped with the managed capability table's reason (harness/topology/managed.py; reported,
    never silently green)."""
    topology = config.stash[OPTIONS_KEY].topology
    if topology is None:
        return
    from harness.topology.managed import PGAF_CLIENT_SUITES, family_refusal, manager_of

    for item in items:
        if not set(getattr(item, "fixturenames", ())) & {"pair", "group", "faults", "_topology_factory"}:
            continue
        why = PGAF_CLIENT_SUITES if manager_of(topology) == "pgaf" else family_refusal(rule_ids_of(item))
        if why:
            item.add_marker(pytest.mark.skip(reason=f"not under --topology {topology}: {why}"))


def check_managed_topology(config: pytest.Config) -> None:
    """A ``--topology`` that is not a manager topology, or a manager topology on a backend that cannot
    run it, is refused in one line before any test."""
    opts = config.stash[OPTIONS_KEY]
    if opts.topology is None:
        return
    from harness.topology import patroni, pgaf
    from harness.topology.managed import RUN_TOPOLOGIES, is_run_topology, manager_of

    if not is_run_topology(opts.topology):
        raise pytest.UsageError(f"failover-harness: unknown --topology {opts.topology!r}; use one of "
                                f"{', '.join(RUN_TOPOLOGIES)} (without it the backend builds its own pairs)")
    manager = pgaf if manager_of(opts.topology) == "pgaf" else patroni
    if opts.engine != "postgres":
        raise pytest.UsageError(f"failover-harness: --topology {opts.topology} runs PostgreSQL only, not "
                                f"--engine {opts.engine}")
    try:
        manager.check_backend(opts.backend)
        manager.check_installed()
    except HarnessError as exc:
        raise pytest.UsageError(f"failover-harness: {exc}") from None


def check_backend(config: pytest.Config) -> None:
    """Refuse, in one line and before any test, a ``--backend`` / ``--engine`` that cannot run here
    (never a silent fallback to another backend), and a ``--topology`` that cannot."""
    from harness.topology import get_backend, get_engine

    check_managed_topology(config)
    opts = config.stash[OPTIONS_KEY]
    try:
        get_backend(opts.backend).check(get_engine(opts.engine))
    except HarnessError as exc:
        raise pytest.UsageError(f"failover-harness: {exc}") from None


def _topology_kwargs(request: pytest.FixtureRequest, default_nodes: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"nodes": default_nodes}
    for mark in reversed(list(request.node.iter_markers("topology"))):
        unknown = set(mark.kwargs) - set(TOPOLOGY_OPTIONS)
        if unknown or mark.args:
            raise ConfigError(f"@pytest.mark.topology takes only {', '.join(TOPOLOGY_OPTIONS)} as keywords; "
                              f"got {sorted(unknown) or mark.args}")
        kwargs.update(mark.kwargs)
    return kwargs


def _environment(config: pytest.Config, topo: Topology) -> None:
    desc = topo.describe()
    proxy = desc.get("fault_proxy", {})
    add_environment(config, backend=config.stash[OPTIONS_KEY].backend,
                    engine=f"{topo.engine.label} {desc.get('version', '?')}",
                    fault_proxy=proxy.get("description") or proxy.get("kind", "direct"),
                    fault_proxy__kind=proxy.get("proxy_kind") or proxy.get("kind", "direct"),
                    fault_proxy__version=proxy.get("version") or "-")
    if desc.get("manager"):  # a manager topology: who swaps the roles (docs/ha-managers.md)
        add_environment(config, manager=desc["manager"], manager__topology=desc.get("topology"),
                        manager__versions=", ".join(f"{k} {v}" for k, v in (desc.get("versions") or {}).items()))


def _capture_environment(config: pytest.Config, history: History) -> None:
    """Say in the report environment whether refused connects were observed (``harness.capture``,
    OBS-1): ``refused_connect_capture=af_packet:lo`` or ``unavailable: <reason>``."""
    status = history.events("harness.capture")
    if status:
        last = status[-1]
        add_environment(config, refused_connect_capture=last.get("method") if last.get("available")
                        else f"unavailable: {last.get('reason')}")


@pytest.fixture
def _topology_factory(request: pytest.FixtureRequest, history: History) -> Iterator[Callable[[int], Topology]]:
    from harness.topology import get_backend, get_engine

    opts = request.config.stash[OPTIONS_KEY]
    started: list[Topology] = []

    def make(default_nodes: int) -> Topology:
        kwargs = _topology_kwargs(request, default_nodes)
        if opts.topology is not None:  # the manager swaps the roles (harness/topology/patroni_topology.py)
            from harness.topology.patroni_topology import build

            topo: Topology = build(kwargs.pop("nodes"), history=history, **kwargs)
        else:
            backend, engine = get_backend(opts.backend), get_engine(opts.engine)
            topo = backend.build(engine, kwargs.pop("nodes"), history=history, **kwargs)
        topo.up()
        started.append(topo)  # the topology forwards the fault proxy's connection events to history
        history.meta.setdefault("topology", topo.describe())
        _environment(request.config, topo)
        _capture_environment(request.config, history)
        return topo

    yield make
    keep = opts.keep_on_failure and test_failed(request)
    for topo in started:
        if keep:
            _keep(topo)
        else:
            topo.down()


def _keep(topo: Topology) -> None:
    """Leave a failed test's servers up (the run is marked detached; its reaper leaves it alone)."""
    topo.keep()
    lines = [f"[failover-harness] --keep-on-failure: run {topo.run_id} left up in {topo.path}"]
    for node in topo.nodes:
        lines.append(f"    {node.name} {node.role:9} {node.public_dsn(direct=True)}")
    lines.append(f"    (servers only: the fault proxies ended with the test; clean up: failover-harness down --run "
                 f"{topo.run_id})")
    print("\n".join(lines), file=sys.stderr)


@pytest.fixture
def pair(_topology_factory: Callable[[int], Topology]) -> Pair:
    """A started principal + mirror pair behind the fault proxy (``@pytest.mark.topology`` sets
    mode, mirror_readable, links)."""
    from harness.topology import Pair

    topo = _topology_factory(2)
    assert isinstance(topo, Pair)
    return topo


@pytest.fixture
def group(_topology_factory: Callable[[int], Topology]) -> Group:
    """A started group: one principal and N-1 standbys (default N = 3)."""
    from harness.topology import Group

    topo = _topology_factory(3)
    assert isinstance(topo, Group)
    return topo


@pytest.fixture
def faults(request: pytest.FixtureRequest, history: History) -> Faults:
    """The fault vocabulary for the test's ``group`` if it uses one, else its ``pair``."""
    from harness.faults import Faults

    name = "group" if "group" in request.fixturenames else "pair"
    return Faults(request.getfixturevalue(name), history)
