"""PER-9 (read-only node removal) and PER-10 (endpoint support) through the PER client under test,
on a group of three nodes whose standbys accept read-only logins (hot standby).

The client under test is started with two read-only endpoints, ``custom-active`` (sessions balanced by
active requests: moved to another read-only node when theirs is removed) and ``custom-connection``
(balanced by connections: disconnected). Beside them, sessions connect straight to a standby
(``direct``). Every session asks ``SELECT inet_server_port()`` in a loop, so the history says which
node served each query (``node.ports`` maps the ports to the nodes); some run a query longer than the
removal window or shorter than it when the node is removed. Then ``faults.remove_node`` removes one
standby (the client is told first, then the node stops). A client that offers no read-only endpoints
cannot be judged: the verdicts are *unknown*, never a pass."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness import UNKNOWN, Check, Faults, Group, History, Verdict
from harness.clients.persistent import open_client
from harness.errors import ConfigError
from harness.rules.persistent import check_endpoint_support, check_readonly_node_removal
from harness.workload.oltp import TrackedSession

WINDOW = 1.5  # the client's drain window, also its removal window (PER-9's 60 s, shortened)
ENDPOINTS = [("custom-active", ("127.0.0.1", 0)), ("custom-connection", ("127.0.0.1", 0))]


@pytest.fixture
def ro_client(group: Group, faults: Faults, history: History, client_factory: Any) -> Iterator[Any]:
    """The client under test with read-only endpoints, coordinated with ``faults``; None when it
    offers none (then PER-9/10 cannot be judged)."""
    try:
        client = open_client(client_factory, pair=group, history=history, drain_window=WINDOW, recovery_window=5.0,
                             endpoints=ENDPOINTS)
    except (ConfigError, TypeError) as exc:
        history.record("client.no_readonly_endpoints", error=str(exc).splitlines()[0][:200])
        yield None
        return
    stop = faults.coordinate(client) if client.coordinates else None
    history.meta["rule_params"] = {"PER-9": {"window": WINDOW}, "PER-10": {"window": WINDOW}}
    try:
        yield client
    finally:
        if stop is not None:
            stop()
        client.stop()


class _Reader:
    """One session reading ``SELECT inet_server_port()`` (after ``sleep`` s of server time) in a loop
    until stopped; it does not reconnect, so a closed front connection shows as ``conn_lost``."""

    def __init__(self, dsn: str, history: History, process: str, endpoint: str, sleep: float = 0.0) -> None:
        history.record("session.endpoint", process=process, endpoint=endpoint)
        self.session = TrackedSession(dsn, history, process, reconnect=False, op_timeout=15)
        self.sleep = sleep
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            query = (f"SELECT inet_server_port() FROM pg_catalog.pg_sleep({self.sleep})" if self.sleep
                     else "SELECT inet_server_port()")
            ok, _ = self.session.execute("ro_read", query)
            if not ok and not self.session.connected:
                return
            time.sleep(0.02)

    def start(self) -> _Reader:
        self.session.connect()
        self.session.execute("ro_read", "SELECT inet_server_port()")  # where it runs, before any long query
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(20)
        self.session.close()


@pytest.mark.rule("PER-9", "PER-10")
@pytest.mark.engines("postgres")  # the PostgreSQL reference proxy and TrackedSession/OltpWorkload (psycopg)
@pytest.mark.topology(nodes=3, mode="async", mirror_readable=True)
def test_per9_per10_readonly_node_removal(group: Group, faults: Faults, history: History, check: Check,
                                          ro_client: Any) -> None:
    """PER-9/PER-10: remove one read-only node under idle, short-query and long-query sessions through
    both endpoint kinds and direct connections: nothing new lands on it; active-balanced sessions are
    kept (moved), connection-balanced and direct ones disconnected; a query running past the window closes
    its connection."""
    if ro_client is None:
        for rule in ("PER-9", "PER-10"):
            check(Verdict(rule, UNKNOWN, expected="a client with read-only endpoints",
                          observed="the client under test offers no read-only endpoints"))
        return
    history.record("node.ports", ports={n.name: n.server_address[1] for n in group.nodes})
    victim = group.standbys[-1]
    readers: list[_Reader] = []
    try:
        for kind in ("custom-active", "custom-connection"):
            for i in range(4):
                readers.append(_Reader(ro_client.endpoint_dsn(kind), history, f"{kind}-{i + 1}", kind).start())
        for i in range(2):  # a query ending inside the window, one running past it
            readers.append(_Reader(ro_client.endpoint_dsn("custom-active"), history, f"short-{i + 1}",
                                   "custom-active", sleep=0.5).start())
            readers.append(_Reader(ro_client.endpoint_dsn("custom-active"), history, f"long-{i + 1}",
                                   "custom-active", sleep=WINDOW + 2.0).start())
        for i in range(2):
            readers.append(_Reader(victim.dsn(), history, f"direct-{i + 1}", "direct").start())
        time.sleep(0.8)
        faults.remove_node(victim.name)
        late = _Reader(ro_client.endpoint_dsn("custom-active"), history, "after-1", "custom-active").start()
        readers.append(late)
        time.sleep(WINDOW + 3.0)
    finally:
        for r in readers:
            r.close()
    check(check_readonly_node_removal(history.events(), window=WINDOW, tolerance=1.0))
    check(check_endpoint_support(history.events(), window=WINDOW, tolerance=1.0))
