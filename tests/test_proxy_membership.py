"""The reference proxy's view of a changing topology (RULEBOOK PER-9) against two real
PostgreSQL 15 servers and real psycopg sessions through its ``custom-active`` endpoint and admin API:

* a removed read-only node is tied to its name: never picked again, even listed again at its
  address under that name (or under none), while another node listed later at the same address -
  a node added on the freed port - is routed to;
* ``allowed_principals`` as a callable: the admin ``POST /resume`` follows it (an address added to
  the topology may be named, nothing else), and refuses all but the candidates when it fails.

Stand-in **(interpretation)**, as in ``test_persistent_proxy.py``: servers A and B play the read-only
nodes (which node "is" at an address is what the resolver says); ``inet_server_port()`` proves which
server answered. The real topology's node add / remove is in ``test_node_membership.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from harness.history.core import History
from harness.persistproxy import ProxyConfig, ThreadedPersistentProxy
from tests.support.pgserver import LocalServer, two_servers

pytestmark = pytest.mark.rule("PER-9")


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[LocalServer, LocalServer]]:
    with two_servers("ma", "mb") as pair:
        yield pair


def _port(conn: psycopg.Connection[Any]) -> int:
    return conn.execute("SELECT inet_server_port()").fetchone()[0]  # type: ignore[index]


def test_a_removal_is_tied_to_the_node_not_to_its_address(servers: tuple[LocalServer, LocalServer]) -> None:
    """Remove the node at A (named ``x`` by the resolver): its session moves to B and nothing new lands
    on A while the resolver lists ``x`` there (before the topology drops it, and again after - the same
    node back), nor while it lists A without a name; once it lists ``z`` at A (a node added on the
    freed port) a new session lands there again (``persist.readmitted``). A removal whose node has no
    name keeps its address out for good (the resolver cannot tell another node there)."""
    a, b = servers
    listed: list[tuple[Any, ...]] = [(*a.server_address, "x"), (*b.server_address, "y")]
    history = History()
    config = ProxyConfig(user="app", password="app", candidates=[a.server_address], on_event=history.record,
                         endpoints=[("custom-active", ("127.0.0.1", 0))], readonly_resolver=lambda: list(listed))
    conns: list[psycopg.Connection[Any]] = []
    with ThreadedPersistentProxy(config) as proxy:
        [(_, (host, port))] = proxy.proxy.endpoint_addresses

        def connect() -> psycopg.Connection[Any]:
            conn = psycopg.connect(host=host, port=port, user="app", password="app", dbname="app",
                                   autocommit=True, connect_timeout=10)
            conns.append(conn)
            return conn

        try:
            first = connect()
            assert _port(first) == a.port  # least loaded, first listed
            first.execute("SET application_name = 'moved'")
            result = proxy.remove_node(a.server_address)  # its name is looked up: x
            assert result["moved"] == [1] and result["closed"] == []
            assert _port(first) == b.port
            assert first.execute("SHOW application_name").fetchone()[0] == "moved"  # type: ignore[index]
            assert _port(connect()) == b.port  # x still listed at A: never picked again
            listed[:] = [(*b.server_address, "y")]  # the topology dropped x
            assert _port(connect()) == b.port
            for again in ([*a.server_address, "x"], [*a.server_address]):  # x back, or A without a name
                listed[:] = [tuple(again), (*b.server_address, "y")]
                assert _port(connect()) == b.port, again
            assert not history.events("persist.readmitted")
            listed[:] = [(*a.server_address, "z"), (*b.server_address, "y")]  # node z added on A's port
            fresh = connect()
            assert _port(fresh) == a.port
            [readmitted] = history.events("persist.readmitted")
            assert (readmitted.get("node"), readmitted.get("removed")) == ("z", "x")
            start = history.events("persist.remove_start")[0]
            assert start.get("node") == "x"

            listed[:] = [a.server_address, b.server_address]  # a resolver that names no node
            proxy.remove_node(b.server_address)
            listed[:] = [a.server_address, (*b.server_address, "w")]
            assert {_port(connect()) for _ in range(3)} == {a.port}  # B stays out: nothing tells w from y
            for conn in conns:  # nothing left to move: with both addresses out no node would take it
                conn.close()
            conns.clear()
            proxy.remove_node(a.server_address, node="z")  # named by the caller
            listed[:] = [(*a.server_address, "v"), (*b.server_address, "w")]
            assert _port(connect()) == a.port  # v is another node than z: routed to
        finally:
            for conn in conns:
                conn.close()


def test_resume_allow_list_follows_a_callable_and_fails_closed(servers: tuple[LocalServer, LocalServer]) -> None:
    """``allowed_principals`` given as a callable is asked at every ``POST /resume``: B is refused (403)
    until it is listed, then resumed on (a node added to the topology becomes a principal target); a
    callable that raises leaves only the candidates allowed; the kept session ends up on B."""
    a, b = servers
    allowed: list[tuple[str, int]] = []
    broken = threading.Event()

    def nodes() -> list[tuple[str, int]]:
        if broken.is_set():
            raise OSError("run state unreadable")
        return list(allowed)

    config = ProxyConfig(user="app", password="app", candidates=[a.server_address], allowed_principals=nodes,
                         drain_window=1.0, recovery_window=10.0)
    with ThreadedPersistentProxy(config, admin=("127.0.0.1", 0)) as proxy:
        assert proxy.admin_address is not None and proxy.admin_token
        url = "http://{}:{}".format(*proxy.admin_address)
        headers = {"X-Failover-Harness-Token": proxy.admin_token}
        host, port = proxy.address  # type: ignore[misc]
        with psycopg.connect(host=host, port=port, user="app", password="app", dbname="app", autocommit=True,
                             connect_timeout=10) as conn:
            assert _port(conn) == a.port
            assert httpx.post(f"{url}/drain", json={}, headers=headers).status_code == 200
            to_b = {"host": b.server_address[0], "port": b.port}
            refused = httpx.post(f"{url}/resume", json=to_b, headers=headers)
            assert refused.status_code == 403 and f"allowed: 127.0.0.1:{a.port}" in refused.json()["error"]
            allowed.append(b.server_address)
            broken.set()
            assert httpx.post(f"{url}/resume", json=to_b, headers=headers).status_code == 403  # fails closed
            assert proxy.proxy.allowed_principals() == [a.server_address]
            broken.clear()
            assert proxy.proxy.allows_principal(("127.0.0.1", b.port))
            resumed = httpx.post(f"{url}/resume", json=to_b, headers=headers, timeout=30)
            assert resumed.status_code == 200 and resumed.json()["principal"] == f"127.0.0.1:{b.port}"
            assert _port(conn) == b.port  # the same front connection, kept
