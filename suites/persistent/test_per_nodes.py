"""PER-1 across node add and node remove - the last maintenance rows of PolarProxy's table (seed 002:
100 % of the connections kept for switchover, minor upgrade, spec upgrade and node add/remove) - with
PER-9/PER-10 judging the removal of the read-only node.

A group of three (hot standbys) runs OLTP sessions through the client under test's default (cluster)
endpoint and, when the client offers read-only routing, sessions reading ``SELECT inet_server_port()``
through its ``custom-active`` endpoint (``node.ports`` maps the ports to the nodes). ``faults.add_node``
adds a standby ``n4`` while they run; read-only sessions opened after it land on the new node (the
proxy balances by active sessions and reads the standbys from the topology). ``faults.remove_node``
then removes it: the client is told first (PER-9: route away, let queries finish within the window,
move the sessions there), then the node stops and leaves the group. Every front connection open
before each operation must still be the same one after it, with no client-visible error.

A client without read-only endpoints (PgBouncer, direct) runs the OLTP sessions only: PER-1 is judged
for them, PER-9/PER-10 are *unknown* (nothing read-only to observe), never a pass."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness import UNKNOWN, Check, Faults, Group, History, Verdict
from harness.clients.persistent import open_client
from harness.errors import ConfigError, HarnessError
from harness.rules.persistent import check_endpoint_support, check_keepalive_on_switchover, check_readonly_node_removal
from harness.workload.oltp import OltpConfig, OltpWorkload, TrackedSession

WINDOW = 1.5  # the client's drain window, also its removal window (PER-4's / PER-9's 60 s, shortened)
ENDPOINTS = [("custom-active", ("127.0.0.1", 0))]
OLTP = OltpConfig(tables=4, rows=1000, sessions=10, op_timeout=15)


@pytest.fixture
def node_client(group: Group, faults: Faults, history: History, client_factory: Any) -> Iterator[Any]:
    """The client under test, coordinated with ``faults``, with a ``custom-active`` read-only endpoint
    when it offers one (``client.readonly`` says whether it does)."""
    try:
        client = open_client(client_factory, pair=group, history=history, drain_window=WINDOW, recovery_window=5.0,
                             endpoints=ENDPOINTS)
        client.readonly = True
    except (ConfigError, TypeError) as exc:
        history.record("client.no_readonly_endpoints", error=str(exc).splitlines()[0][:200])
        client = open_client(client_factory, pair=group, history=history, drain_window=WINDOW, recovery_window=5.0)
        client.readonly = False
    stop = faults.coordinate(client) if client.coordinates else None
    history.meta["rule_params"] = {"PER-1": {"faults": ["add_node", "remove_node"]},
                                   "PER-9": {"window": WINDOW}, "PER-10": {"window": WINDOW}}
    try:
        yield client
    finally:
        if stop is not None:
            stop()
        client.stop()


class _Reader:
    """One read-only session asking ``SELECT inet_server_port()`` in a loop until stopped; it does not
    reconnect, so a closed front connection shows as ``conn_lost``."""

    def __init__(self, dsn: str, history: History, process: str, pause: threading.Event) -> None:
        history.record("session.endpoint", process=process, endpoint="custom-active")
        self.session = TrackedSession(dsn, history, process, reconnect=False, op_timeout=15)
        self.stop = threading.Event()
        self.pause = pause  # set around a removal: no query is sent while it is set
        self.idle = threading.Event()  # set while paused with no query in flight
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.ports: list[int] = []

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                if self.pause.is_set():
                    self.idle.set()
                    self.stop.wait(0.005)
                    continue
                self.idle.clear()
                ok, value = self.session.execute("ro_read", "SELECT inet_server_port()")
                if ok and isinstance(value, int):
                    self.ports.append(value)
                if not ok and not self.session.connected:
                    return
                self.stop.wait(0.02)
        finally:
            self.idle.set()  # a reader that ended has nothing in flight either

    def quiet(self) -> bool:
        """Paused with nothing in flight (or ended)."""
        return self.idle.is_set() and self.pause.is_set()

    def start(self) -> _Reader:
        self.session.connect()
        self.session.execute("ro_read", "SELECT inet_server_port()")
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(20)
        self.session.close()


def _ports(group: Group, history: History) -> None:
    history.record("node.ports", ports={n.name: n.server_address[1] for n in group.nodes})


_PAUSE = threading.Event()


def _readers(client: Any, history: History, prefix: str, n: int) -> list[_Reader]:
    if not client.readonly:
        return []
    return [_Reader(client.endpoint_dsn("custom-active"), history, f"{prefix}-{i + 1}", _PAUSE).start()
            for i in range(n)]


def _pause_readers(readers: list[_Reader], timeout: float = 15.0) -> None:
    """Pause the read-only sessions and wait until none has a query in flight (the observable
    precondition of PER-10: sessions idle on the node when its removal starts). A reader still busy
    after ``timeout`` is a harness error (its query hangs), not a verdict."""
    _PAUSE.set()
    deadline = time.monotonic() + timeout
    while not all(r.quiet() for r in readers):
        if time.monotonic() > deadline:
            busy = [r.session.process for r in readers if not r.quiet()]
            raise HarnessError(f"read-only sessions {busy} still had a query in flight {timeout:g} s after "
                               "the pause: the removal's precondition (idle sessions, PER-10) was not reached")
        time.sleep(0.005)


@pytest.mark.rule("PER-1")
@pytest.mark.engines("postgres")  # the PostgreSQL reference proxy and TrackedSession/OltpWorkload (psycopg)
@pytest.mark.topology(nodes=3, mode="sync", mirror_readable=True)
def test_per1_connections_kept_across_node_add(group: Group, faults: Faults, history: History, check: Check,
                                               node_client: Any) -> None:
    """PER-1 (node add): a standby joins a synchronous group of three under OLTP and read-only
    sessions - 100 % of them kept, 0 errors; read-only sessions opened afterwards are served by it."""
    _ports(group, history)
    workload = OltpWorkload(node_client.dsn(), history, OLTP)
    workload.load(group.principal.dsn())
    readers: list[_Reader] = []
    try:
        with workload:
            readers += _readers(node_client, history, "ro-before", 4)
            time.sleep(0.8)
            added = faults.add_node().result.node
            _ports(group, history)
            late = _readers(node_client, history, "ro-after", 2)
            readers += late
            time.sleep(1.0)
    finally:
        for r in readers:
            r.close()
    assert added is not None and group.node(added).state == "running"
    check(check_keepalive_on_switchover(history.events(), min_keep_rate=1.0, max_errors=0, faults=["add_node"]))
    if node_client.readonly:  # the scenario's premise (no rule): the new node takes read-only work
        served = {p for r in late for p in r.ports}
        assert group.node(added).server_address[1] in served, (
            f"read-only sessions opened after the add were served by ports {sorted(served)}, not by {added}: "
            "the client does not route to the new node, so the add was not exercised")


@pytest.mark.rule("PER-1", "PER-9", "PER-10")
@pytest.mark.engines("postgres")
@pytest.mark.topology(nodes=3, mode="async", mirror_readable=True)
def test_per1_per9_connections_kept_across_node_add_and_remove(group: Group, faults: Faults, history: History,
                                                                check: Check, node_client: Any) -> None:
    """PER-1 (node add, then node remove) and PER-9/PER-10: read-only sessions land on the added node,
    which is then removed - they are moved (kept, same front connection), nothing new runs there, the
    OLTP sessions on the principal are untouched: 100 % kept, 0 errors; the node leaves the group."""
    _ports(group, history)
    workload = OltpWorkload(node_client.dsn(), history, OLTP)
    workload.load(group.principal.dsn())
    readers: list[_Reader] = []
    try:
        with workload:
            readers += _readers(node_client, history, "ro-before", 2)
            time.sleep(0.5)
            added = faults.add_node().result.node
            assert added is not None
            _ports(group, history)
            readers += _readers(node_client, history, "ro-new", 4)  # least-loaded: 2 of them on the new node
            time.sleep(0.8)
            # PER-10 judges sessions idle at the removal and used again after it: the readers pause
            # and the removal starts once none has a query in flight (a reader in flight at that
            # instant is PER-9's, not PER-10's); they read again once it is over
            _pause_readers(readers)
            faults.remove_node(added)
            _PAUSE.clear()
            readers += _readers(node_client, history, "ro-late", 1)
            time.sleep(1.0)
    finally:
        _PAUSE.clear()
        for r in readers:
            r.close()
    assert added not in [n.name for n in group.nodes]
    events = history.events()
    verdicts = [check_keepalive_on_switchover(events, min_keep_rate=1.0, max_errors=0,
                                              faults=["add_node", "remove_node"])]
    if node_client.readonly:
        verdicts += [check_readonly_node_removal(events, window=WINDOW, tolerance=1.0),
                     check_endpoint_support(events, window=WINDOW, tolerance=1.0)]
    else:
        verdicts += [Verdict(rule, UNKNOWN, expected="a client with read-only endpoints",
                             observed="the client under test offers no read-only endpoints")
                     for rule in ("PER-9", "PER-10")]
    check(verdicts)
