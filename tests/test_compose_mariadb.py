"""MariaDB 10.11 on the Compose backend (``make test`` runs ``failover-harness compose-setup`` first):
a pair of MariaDB containers behind the real Toxiproxy container takes writes through its client
proxy, replicates through its replication proxy (GTID), switches over keeping every row, does every
role operation with the same history events as the local MariaDB pair, refuses node add in one line
(the capability table's row), and leaves no container, volume or network after ``down``."""

from __future__ import annotations

import time
from typing import Any

import pymysql
import pytest

from harness.errors import InvalidOperation
from harness.history.core import History
from harness.topology.backend import get_backend, get_engine
from harness.topology.capabilities import refusal
from harness.topology.compose_mariadb import ComposeMariaDBPair
from harness.topology.dockerd import RUN_LABEL


def _run_resources(run: str) -> list[str]:
    """Containers, volumes and networks labelled with run ``run`` (other tests' runs may be up meanwhile
    in the same harness home: xdist)."""
    import docker

    client = docker.from_env()
    try:
        flt = {"label": f"{RUN_LABEL}={run}"}
        return ([c.name for c in client.containers.list(all=True, filters=flt)]
                + [v.name for v in client.volumes.list(filters=flt)]
                + [n.name for n in client.networks.list(filters=flt)])
    finally:
        client.close()


def _conn(topo: Any, address: tuple[str, int]) -> pymysql.connections.Connection:
    creds = topo.engine.credentials
    return pymysql.connect(host=address[0], port=address[1], user=creds.user, password=creds.password,
                           database=creds.database, autocommit=True, ssl_disabled=True, connect_timeout=10)


def _q(conn: pymysql.connections.Connection, sql: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def test_mariadb_pair_on_compose_write_switchover_down() -> None:
    """Up (GTID, semi-sync), a write through n1's client proxy, a planned switchover, a write through
    n2's, both rows on both nodes; the replication went through the Toxiproxy container (its log
    stream named the replication proxies); node add refused with the table's reason; down leaves
    nothing labelled with this home."""
    history = History()
    topo = get_backend("compose").build(get_engine("mariadb"), 2, history=history)
    assert isinstance(topo, ComposeMariaDBPair) and topo.topology == "mariadb-pair"
    with topo:
        run = topo.run_id
        assert run is not None and len(_run_resources(run)) == 3  # n1, n2, toxiproxy
        desc = topo.describe()
        assert desc["backend"] == "compose" and desc["engine"] == "mariadb" and desc["project"].startswith("fh-")
        assert topo._state.version.startswith("10.11.")
        n1 = topo.principal.client_address
        assert n1 != topo.principal.server_address  # clients go through the proxy
        c = _conn(topo, n1)
        _q(c, "CREATE TABLE t (k int PRIMARY KEY)")
        _q(c, "INSERT INTO t VALUES (1)")
        assert _q(c, "SELECT @@global.rpl_semi_sync_master_enabled, @@global.gtid_strict_mode") == [(1, 1)]
        c.close()
        assert topo.switchover().principal == "n2"
        assert topo.principal.name == "n2" and topo.mirror.name == "n1"
        c = _conn(topo, topo.principal.client_address)
        _q(c, "INSERT INTO t VALUES (2)")
        c.close()
        topo._wait_streaming("n1", "n2")
        old = _conn(topo, topo.mirror.client_address)
        assert _q(old, "SELECT k FROM t ORDER BY k") == [(1,), (2,)]
        assert _q(old, "SELECT @@global.read_only") == [(1,)]
        old.close()
        with topo.engine.admin_connect(topo.socket_dir("n1"), 0) as admin:  # n1 follows n2's replication proxy
            status = admin.row("SHOW SLAVE STATUS")
        assert status is not None and status["Using_Gtid"] == "Current_Pos"
        assert int(status["Master_Port"]) == int(topo._state.links.proxies["n1"].replication_listen.rsplit(":")[1])
        with pytest.raises(InvalidOperation) as err:
            topo.add_node()
        assert refusal("compose", "mariadb add_node") in str(err.value) and "\n" not in str(err.value)
    nodes = {e.fields.get("node") for e in history.events() if e.type == "conn.accepted"}
    assert {"n1", "n2", "n1:replication", "n2:replication"} <= nodes
    assert _run_resources(run) == []


def _drive(topo: Any, history: History) -> list[tuple[str, str | None]]:
    """The role operations of the MariaDB suites on any backend; returns the topology events recorded."""
    with topo:
        c = _conn(topo, topo.principal.client_address)
        _q(c, "CREATE TABLE k (v int PRIMARY KEY)")
        _q(c, "INSERT INTO k VALUES (1)")
        c.close()
        topo.switchover()
        topo.failover()
        topo.rejoin()
        topo.stop("n1", mode="fast")
        topo.start("n1")
        topo.kill("n1")
        topo.start("n1")
        topo.pause("n2", scope="all")
        topo.resume("n2")
        c = _conn(topo, topo.principal.client_address)
        _q(c, "INSERT INTO k VALUES (2)")
        assert _q(c, "SELECT count(*) FROM k") == [(2,)]
        c.close()
    return [(e.type, e.fields.get("node")) for e in history.events()
            if not e.type.startswith("conn.") and e.type != "harness.stall"]


def test_mariadb_compose_pair_records_the_same_events_as_local() -> None:
    """Switchover, failover (kill), rejoin, stop / start, kill / start, pause / resume on MariaDB
    containers: the same topology events, in the same order, as on local ``mariadbd`` processes."""
    engine = get_engine("mariadb")
    seen = {}
    for backend in ("local", "compose"):
        history = History()
        seen[backend] = _drive(get_backend(backend).build(engine, 2, history=history), history)
    drop_reclone = [e for e in seen["compose"] if e[0] != "node.reclone"]  # rejoin may re-clone on either
    assert drop_reclone == [e for e in seen["local"] if e[0] != "node.reclone"]
    assert {("node.kill", "n1"), ("node.stop", "n1"), ("node.pause", "n2")} <= set(seen["compose"])


def test_a_proxy_port_taken_before_the_toxiproxy_container_binds_it_is_retried_on_fresh_ports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A program outside this harness home binds a client-proxy port the run was given, before the
    Toxiproxy container starts: the container cannot create its proxies, the run is brought up again on
    fresh ports (said in a progress line) instead of waiting for a replica that cannot connect."""
    import socket

    from harness.topology import compose

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    calls = {"n": 0}
    real = compose.allocate_port

    def allocate(*args: Any, **kwargs: Any) -> int:
        calls["n"] += 1
        return taken if calls["n"] == 2 else real(*args, **kwargs)  # the 2nd: n1's client proxy

    monkeypatch.setattr(compose, "allocate_port", allocate)
    said: list[str] = []
    try:
        topo = get_backend("compose").build(get_engine("mariadb"), 2, progress=said.append)
        with topo:
            run = topo.run_id
            assert taken not in {int(topo._state.links.proxies[n].client_listen.rsplit(":")[1]) for n in ("n1", "n2")}
            c = _conn(topo, topo.principal.client_address)
            assert _q(c, "SELECT 1") == [(1,)]
            c.close()
    finally:
        squatter.close()
    retries = [line for line in said if "bringing the run up again on fresh ports" in line]
    assert len(retries) == 1 and "a listen port is taken" in retries[0], said
    first = retries[0].split("(fh-", 1)[1].split("-n1", 1)[0]  # the torn-down run's id
    assert run is not None and _run_resources(run) == [] and _run_resources(first) == []


def test_accepts_through_the_toxiproxy_container_are_stamped_within_the_clients_connect() -> None:
    """The container's log is read late under load (docs/compose.md, "Connection events"); each
    ``conn.accepted`` of a client-facing proxy carries the kernel's time of the client's SYN instead
    (the refused-connect capture sees it), so every accept lies within the ``connect()`` that made it -
    never after the client already had its connection (a false "accepted outside any open")."""
    history = History()
    topo = get_backend("compose").build(get_engine("mariadb"), 2, history=history)
    spans: dict[int, tuple[float, float]] = {}
    with topo:
        capture = [e for e in history.events() if e.type == "harness.capture"]
        assert capture and capture[0].fields["available"], capture  # the stamps need the capture (root)
        for _ in range(20):
            t0 = time.monotonic()
            c = _conn(topo, topo.principal.client_address)
            t1 = time.monotonic()
            spans[c._sock.getsockname()[1]] = (t0, t1)
            c.close()
        accepted = {int(e.fields["client"].rsplit(":", 1)[1]): e.t for e in history.events()
                    if e.type == "conn.accepted" and e.fields.get("node") == topo.principal.name}
    assert set(spans) <= set(accepted)
    late = {port: round(accepted[port] - t1, 4) for port, (t0, t1) in spans.items() if not t0 <= accepted[port] <= t1}
    assert late == {}, f"accepts stamped outside the client's connect (seconds after it returned): {late}"
