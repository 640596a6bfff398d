"""Fixtures of the HAM suites: ``patroni`` - a fresh ``patroni-group3`` (Patroni 3 per node over one
etcd, every link behind the fault proxy; harness/topology/patroni.py) - and ``pgaf`` - a fresh
``pgaf-group3`` (pg_auto_failover: a monitor and a keeper per node; harness/topology/pgaf.py), each
recording into the test's history and torn down after the test. Both run on the local backend only:
on another backend the fixture refuses in one line (the capability table's reason)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.history.core import History
from harness.plugin.options import HarnessOptions
from harness.topology.patroni import PatroniCluster, check_backend
from harness.topology.pgaf import PgafCluster
from harness.topology.pgaf import check_backend as check_pgaf_backend


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
