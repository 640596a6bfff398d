"""Fixtures of the HAM suites: ``patroni`` - a fresh ``patroni-group3`` (Patroni 3 per node over one
etcd, every link behind the fault proxy; harness/topology/patroni.py) recording into the test's
history, torn down after the test. The Patroni topologies run on the local backend only: on
another backend the fixture refuses in one line (the capability table's reason)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.history.core import History
from harness.plugin.options import HarnessOptions
from harness.topology.patroni import PatroniCluster, check_backend


@pytest.fixture
def patroni(history: History, harness_options: HarnessOptions) -> Iterator[PatroniCluster]:
    """A started ``patroni-group3`` (synchronous_mode on) recording ``ham.*`` events into ``history``."""
    check_backend(harness_options.backend)  # local only: the capability table's one-line reason elsewhere
    cluster = PatroniCluster(nodes=3, history=history)
    history.meta["patroni"] = {"timing": cluster.timing.to_dict(), "topology": cluster.topology}
    with cluster:
        yield cluster
