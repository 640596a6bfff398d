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

    def writable(self, idle: float = 0.5) -> None:
        """After a fault: the harness's probe marks when the principal accepts writes again; the
        workload resumes ``idle`` seconds later (an application idle across the fault; APP-1 counts
        from its resumption, APP-4's stale connections are then well past the proxy's close)."""
        probe_writable(self.pair.dsn(connect_timeout=2), self.history)
        time.sleep(idle)
        self.workload.resume()
        self.until_recovered()

    def until_recovered(self, margin: float = 0.75) -> None:
        """Let the workload run until the pool's first acknowledged write after this moment, or
        until APP-1's bound (the test's, else the pool's) plus ``margin`` has passed - so that the
        verdict is decided either way - then one more second of steady traffic."""
        bound = float(self.bounds.get("recovery_s") or self.pool.settings.recovery_s)
        start = self.history.events()[-1].index
        deadline = time.monotonic() + bound + margin
        while time.monotonic() < deadline:
            if any(e.type == "op.ok" and e.get("f") == "write" for e in self.history.events()[start:]):
                break
            time.sleep(0.05)
        time.sleep(1.0)

    def verdicts(self) -> list[Verdict]:
        """Stop the workload, read every key on the principal, judge APP-1…5 and DUR-1."""
        self.workload.stop()
        self.pool.close()
        final_read(self.pair.dsn(), self.history)
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
    ensure_table(pair.dsn())
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
