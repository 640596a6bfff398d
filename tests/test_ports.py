"""Ports that cannot be stolen (harness.ports): listen ports come from outside the kernel's ephemeral range,
so thousands of outgoing connections meanwhile take none of them; a port that another program binds
first anyway makes the server start on another port, recorded, instead of a harness error."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import harness.clients.persistent.pgbouncer as pgbouncer_mod
import harness.topology.local as local_mod
from harness.errors import ConfigError
from harness.history.core import History
from harness.ports import allocate_port, ephemeral_range, port_pool, release_port
from harness.topology import Pair


def _outside_ephemeral(port: int) -> bool:
    low, high = ephemeral_range()
    return not low <= port <= high


def test_pool_leaves_out_the_ephemeral_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = tmp_path / "ip_local_port_range"
    monkeypatch.setattr("harness.ports._EPHEMERAL_FILE", proc)
    proc.write_text("32768\t60999\n")
    assert port_pool() == [(20000, 32767), (61000, 65535)]
    proc.write_text("1024 65535\n")  # nothing is left outside: the whole pool (the retry covers it)
    assert port_pool() == [(20000, 65535)]
    proc.write_text("garbage")
    assert ephemeral_range(proc) == (32768, 60999)
    monkeypatch.setenv("FAILOVER_HARNESS_PORT_RANGE", "40000-50000")
    proc.write_text("32768 60999")
    assert port_pool() == [(40000, 50000)]
    monkeypatch.setenv("FAILOVER_HARNESS_PORT_RANGE", "99-nope")
    with pytest.raises(ConfigError, match="LO-HI"):
        port_pool()


def test_allocated_ports_are_outside_the_ephemeral_range_and_reserved() -> None:
    ports = [allocate_port() for _ in range(50)]
    try:
        assert len(set(ports)) == 50
        assert all(_outside_ephemeral(p) for p in ports), (ephemeral_range(), ports)
    finally:
        for p in ports:
            release_port(p)


def test_a_port_left_in_time_wait_by_a_stopped_server_can_be_allocated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that closed its connections first leaves them in TIME_WAIT on its own port for a
    minute; a new listener (SO_REUSEADDR, like every server the harness starts) can bind it at once,
    so the port is allocatable again (a removed node's port for an added one) - a listener is not."""
    port = allocate_port()
    release_port(port)
    server = socket.create_server(("127.0.0.1", port))
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end goes to TIME_WAIT
    client.recv(1)
    client.close()
    monkeypatch.setenv("FAILOVER_HARNESS_PORT_RANGE", f"{port}-{port}")
    with pytest.raises(OSError, match="could not reserve"):
        allocate_port()  # the listener is still there
    server.close()
    again = allocate_port()
    try:
        assert again == port
    finally:
        release_port(again)


def test_a_strictly_free_port_is_preferred_to_one_in_time_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the pool has a strictly free port, a port that only TIME_WAIT leftovers hold is never
    handed out: a program that binds without SO_REUSEADDR would find it taken (the CI failure of
    the strict bind in the load test below). 40 draws from a pool of the two."""
    port = allocate_port()
    release_port(port)
    server = socket.create_server(("127.0.0.1", port))
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()
    client.recv(1)
    client.close()
    server.close()  # only the TIME_WAIT end is left on port
    free = port + 1 if port + 1 <= 32767 else port - 1
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.1", port))  # strict
        pytest.fail(f"port {port} is not in TIME_WAIT: the test's set-up did not hold")
    except OSError:
        pass
    finally:
        probe.close()
    low, high = sorted((port, free))
    monkeypatch.setenv("FAILOVER_HARNESS_PORT_RANGE", f"{low}-{high}")
    got = []
    for _ in range(40):
        p = allocate_port()
        release_port(p)
        got.append(p)
    assert set(got) == {free}, got


class LoadGenerator:
    """Threads opening and closing outgoing loopback connections as fast as they can (each takes a
    local port from the ephemeral range and leaves it in TIME_WAIT), recording every local port."""

    def __init__(self, threads: int = 3) -> None:
        self.server = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.addr = self.server.getsockname()
        self.stop = threading.Event()
        self.local_ports: set[int] = set()
        self.count = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads += [threading.Thread(target=self._connect, daemon=True) for _ in range(threads)]

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            conn.close()

    def _connect(self) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection(self.addr, timeout=2) as c:
                    port = c.getsockname()[1]
            except OSError as exc:
                self.errors.append(repr(exc))
                continue
            with self._lock:
                self.local_ports.add(port)
                self.count += 1

    def __enter__(self) -> LoadGenerator:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(5)
        self.server.close()


@pytest.fixture
def listeners() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    yield socks
    for s in socks:
        s.close()


def test_no_collision_with_thousands_of_outgoing_connections(listeners: list[socket.socket]) -> None:
    """200 nodes' and their proxies' worth of listeners - a node port from allocate_port, bound a
    moment later (as PostgreSQL does), and two proxies binding port 0 (as the embedded Toxiproxy
    does) - plus a real proxied pair, while thousands of outgoing connections run: every bind
    succeeds, no allocated port is ever a connection's local port, and the pair needs no retry."""
    history = History()
    allocated: list[int] = []
    deadline = time.monotonic() + 25
    try:
        with LoadGenerator() as load:
            while load.count < 500 and time.monotonic() < deadline:
                time.sleep(0.01)  # the load runs before the first allocation
            for _ in range(200):
                port = allocate_port()
                allocated.append(port)
                time.sleep(0.002)  # the gap between choosing a port and the server binding it
                node = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listeners.append(node)
                node.bind(("127.0.0.1", port))  # strict: no SO_REUSEADDR
                node.listen(16)
                for _ in range(2):
                    listeners.append(socket.create_server(("127.0.0.1", 0)))
            with Pair(mode="async", history=history) as pair:
                allocated += [n.server_address[1] for n in pair.nodes]
                with psycopg.connect(pair.principal.dsn(), connect_timeout=5) as conn:
                    assert conn.execute("SELECT 1").fetchone() == (1,)
            while load.count < 3000 and time.monotonic() < deadline:
                time.sleep(0.05)
        print(f"{load.count} outgoing connections, {len(load.local_ports)} distinct local ports, "
              f"{len(listeners)} listeners, {len(allocated)} allocated ports")
        assert load.count >= 3000, f"the load generator made only {load.count} connections"
        assert all(_outside_ephemeral(p) for p in allocated)
        assert not load.local_ports & set(allocated), sorted(load.local_ports & set(allocated))
        assert not history.events("node.port_retry")
    finally:
        for p in allocated[:200]:
            release_port(p)


@pytest.fixture
def blocked_port() -> Iterator[tuple[int, socket.socket]]:
    """A port reserved through the real allocator and then taken by a listener of another program."""
    port = allocate_port()
    blocker = socket.create_server(("127.0.0.1", port))
    blocker.setblocking(False)
    yield port, blocker
    blocker.close()
    release_port(port)


def _first_call_returns(port: int, real):  # type: ignore[no-untyped-def]
    calls = {"n": 0}

    def allocate(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        return port if calls["n"] == 1 else real(*args, **kwargs)

    return allocate


def test_a_taken_port_moves_the_server_and_is_recorded(blocked_port: tuple[int, socket.socket],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Another program binds the port handed to the principal before PostgreSQL does (the flake of the
    issue): the node is started on a new port, its fault proxy re-pointed, ``node.port_retry``
    recorded, and the pair works; the same for PgBouncer's port (``client.port_retry``). The program
    holding the port learns no password."""
    port, blocker = blocked_port
    monkeypatch.setattr(local_mod, "allocate_port", _first_call_returns(port, allocate_port))
    history = History()
    with Pair(mode="sync", history=history) as pair:
        moves = history.events("node.port_retry")
        assert [(e.get("node"), e.get("old_port")) for e in moves] == [("n1", port)]
        assert pair.principal.server_address[1] == moves[0].get("new_port") != port
        assert "Address already in use" in moves[0].get("reason") or "bind" in moves[0].get("reason")
        with psycopg.connect(pair.principal.dsn(), connect_timeout=5, autocommit=True) as conn:  # via its proxy
            assert conn.execute("SELECT inet_server_port()").fetchone() == (pair.principal.server_address[1],)
        pair.switchover()  # the mirror streams from the moved principal, and back
        assert pair.principal.name == "n2"

        monkeypatch.setattr(pgbouncer_mod, "allocate_port", _first_call_returns(port, allocate_port))
        client = pgbouncer_mod.PgBouncerClient(pair, history, pool_mode="session")
        with client:
            retry = history.events("client.port_retry")
            assert [e.get("old_port") for e in retry] == [port] and client.port != port
            with psycopg.connect(client.dsn(), connect_timeout=5) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        password = pair.engine.credentials.password
    # A standby starting meanwhile may have tried to stream through its replication proxy (no
    # password: replication logins are trusted on loopback); nothing the squatter got holds a secret.
    received = b""
    while True:
        try:
            conn, _ = blocker.accept()
        except BlockingIOError:
            break
        conn.settimeout(0.5)
        try:
            received += conn.recv(65536)
        except OSError:
            pass
        conn.close()
    assert password.encode() not in received
