"""Fixtures of the app suites: ``app`` - the pool under test (``--client NAME``, default
``sqlalchemy-preping``) built on the pair's host list through the fault proxy, the request workload
driving it, the writable probe after each fault, and :meth:`AppRun.verdicts` judging APP-1…5 and
DUR-1 with the test's ``@pytest.mark.bounds(recovery_s=, failed_requests=)``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.clients.app.protocol import AppTarget
from harness.history.core import History
from harness.plugin.options import bounds_of
from harness.rules.app import (
    check_failed_requests,
    check_no_stale_connection,
    check_pool_size,
    check_recovery,
    check_servers_view,
)
from harness.rules.durability import check_no_acknowledged_write_lost
from harness.rules.verdict import Verdict
from harness.topology import Topology
from harness.workload.app import AppWorkload, probe_writable
from harness.workload.keywriter import ensure_table, final_read


class AppRun:
    """One pool under test on one pair, with its workload."""

    def __init__(self, pair: Topology, history: History, pool: Any, bounds: dict[str, Any]) -> None:
        self.pair, self.history, self.pool, self.bounds = pair, history, pool, bounds
        proxies = pair.describe()["fault_proxy"]["proxies"]
        self.workload = AppWorkload(pool, history, client_proxies=[p["client"] for p in proxies.values()])

    def settle(self, seconds: float) -> None:
        """Let the workload run."""
        time.sleep(seconds)

    def writable(self) -> None:
        """After a fault: the harness's probe marks when the principal accepts writes again; the
        workload resumes then."""
        probe_writable(self.pair.dsn(connect_timeout=2), self.history)
        self.workload.resume()

    def verdicts(self) -> list[Verdict]:
        """Stop the workload, read every key on the principal, judge APP-1…5 and DUR-1."""
        self.workload.stop()
        self.pool.close()
        final_read(self.pair.principal.dsn(direct=True), self.history)
        events = self.history.events()
        recovery = {k: v for k, v in self.bounds.items() if k == "recovery_s"}
        failed = {k: v for k, v in self.bounds.items() if k == "failed_requests"}
        return [check_recovery(events, **recovery), check_failed_requests(events, **failed),
                check_servers_view(events), check_no_stale_connection(events), check_pool_size(events),
                check_no_acknowledged_write_lost(events, mode=self.pair.mode)]


@pytest.fixture
def app(request: pytest.FixtureRequest, pair: Topology, history: History,
        client_factory: Callable[..., Any]) -> Iterator[AppRun]:
    """The pool under test on ``pair`` with its workload running (stopped and closed at teardown)."""
    ensure_table(pair.principal.dsn(direct=True))
    creds = pair.engine.credentials
    target = AppTarget(tuple(n.client_address for n in pair.nodes), creds.database, creds.user, creds.password)
    pool = client_factory(target)
    run = AppRun(pair, history, pool, bounds_of(request.node))
    history.meta.setdefault("drivers", {})["app"] = pool.settings.library
    run.workload.start()
    run.settle(0.5)
    yield run
    run.workload.stop()
    with contextlib.suppress(Exception):
        pool.close()
