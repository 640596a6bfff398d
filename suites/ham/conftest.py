"""Fixtures of the HAM suites: ``patroni`` - a fresh ``patroni-group3`` (Patroni 3 per node over one
etcd, every link behind the fault proxy; harness/topology/patroni.py) - and ``pgaf`` - a fresh
``pgaf-group3`` (pg_auto_failover: a monitor and a keeper per node; harness/topology/pgaf.py), each
recording into the test's history and torn down after the test. Both run on the local backend only:
on another backend the fixture refuses in one line (the capability table's reason).

Under ``--topology`` (``failover-harness run --profile ham --topology pgaf-group3``) only the tests of
that topology's manager run; the other manager's are deselected (each test's manager: its fixture,
or its module's name)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.history.core import History
from harness.plugin.options import OPTIONS_KEY, HarnessOptions
from harness.topology.managed import manager_of
from harness.topology.patroni import PatroniCluster, check_backend
from harness.topology.pgaf import PgafCluster
from harness.topology.pgaf import check_backend as check_pgaf_backend


def _manager(item: pytest.Item) -> str:
    """The HA manager a HAM test drives: ``pgaf`` (its ``pgaf`` fixture or a module named for it) or ``patroni``."""
    module = getattr(getattr(item, "module", None), "__name__", "")
    return "pgaf" if "pgaf" in getattr(item, "fixturenames", ()) or "pgaf" in module else "patroni"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--topology`` keep only the HAM tests of that topology's manager (the others deselected)."""
    topology = config.stash[OPTIONS_KEY].topology
    if topology is None:
        return
    here = str(Path(__file__).parent)
    other = [i for i in items if str(i.path).startswith(here) and _manager(i) != manager_of(topology)]
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = [i for i in items if i not in other]


@pytest.fixture
def patroni(history: History, harness_options: HarnessOptions) -> Iterator[PatroniCluster]:
    """A started ``patroni-group3`` (synchronous_mode on) recording ``ham.*`` events into ``history``."""
    check_backend(harness_options.backend)  # local only: the capability table's one-line reason elsewhere
    cluster = PatroniCluster(nodes=3, history=history)
    history.meta["patroni"] = {"timing": cluster.timing.to_dict(), "topology": cluster.topology}
    with cluster:
        yield cluster


@pytest.fixture
def pgaf(history: History, harness_options: HarnessOptions) -> Iterator[PgafCluster]:
    """A started ``pgaf-group3`` (a pg_autoctl monitor and three keepers, the harness's short settings)
    recording ``ham.*`` events into ``history``; local backend only (the capability table's one-line
    reason elsewhere)."""
    check_pgaf_backend(harness_options.backend)
    cluster = PgafCluster(nodes=3, history=history)
    history.meta["pg_auto_failover"] = {"settings": cluster.settings.to_dict(), "topology": cluster.topology}
    with cluster:
        yield cluster
