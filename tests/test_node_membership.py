"""Node add and node remove (PER-1's maintenance rows, PER-9/PER-10 for the removed read-only node):
the topology operations on a real PostgreSQL group behind the fault proxy, the CLI flow with the
reference proxy attached to the run (``persistent-proxy --run ID --readonly-endpoint custom-active``,
``fault --run ID add-node`` / ``remove-node NODE``: every session kept), the admin API's
``POST /remove-node`` and the one-line refusals of bad input. Real servers, real processes, real
psycopg sessions; nothing mocked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from harness.errors import InvalidOperation
from harness.history.core import History
from harness.topology import Group, Pair
from harness.topology.process import pid_alive

pytestmark = pytest.mark.rule("PER-1", "PER-9", "PER-10")

CLI = [sys.executable, "-m", "harness.cli"]


def _run(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def _json(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = _run(*args, "--json", env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _one_line_error(out: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _port(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT inet_server_port()").fetchone()[0]  # type: ignore[index]


# ----------------------------------------------------------------------------- topology operations


def test_add_and_remove_a_node_of_a_proxied_group() -> None:
    """``add_node`` clones a streaming hot standby n4 from the principal with its own fault proxies
    (clients reach it through them; a switchover makes it follow); ``remove_node`` stops it, deletes
    its proxies, folder and port, and the run forgets it. Events ``node.add`` / ``node.remove``."""
    history = History()
    with Group(nodes=3, mode="sync", mirror_readable=True, history=history) as group:
        with group.principal.admin() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS membership (v int)")
            conn.execute("INSERT INTO membership VALUES (42)")
        result = group.add_node()
        assert result.fault == "add_node" and result.node == "n4" and result.principal == "n1"
        n4 = group.node("n4")
        assert n4.role == "standby" and n4.state == "running"
        assert n4.client_address != n4.server_address  # behind its own fault proxy
        proxies = group.links.client.proxies()  # type: ignore[attr-defined]
        assert {f"fh-{group.run_id}-n4", f"fh-{group.run_id}-repl-n4"} <= set(proxies)
        with psycopg.connect(n4.dsn(), autocommit=True) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True  # type: ignore[index]
            assert _port(conn) == n4.server_address[1]
        group.switchover("n2")  # the new standby follows the new principal too (the switchover waits for it)
        assert group.principal.name == "n2" and group.node("n4").state == "running"
        folder = group.path / "n4"
        port = n4.server_address[1]
        removed = group.remove_node("n4")
        assert removed.node == "n4" and [n.name for n in group.nodes] == ["n1", "n2", "n3"]
        assert not folder.exists() and port not in group._state.ports
        assert f"fh-{group.run_id}-n4" not in group.links.client.proxies()  # type: ignore[attr-defined]
        types = [e.type for e in history.events()]
        assert "node.add" in types and "node.remove" in types
        assert group.add_node().node == "n5"  # names are never reused


def test_removal_refusals_name_the_fix() -> None:
    """The principal, an unknown node, the last standby, the only running standby of a synchronous
    principal: refused (InvalidOperation) before anything stops, each message naming the fix."""
    with Pair(mode="sync", links="direct") as pair:
        with pytest.raises(InvalidOperation, match="principal: switch over first"):
            pair.remove_node("n1")
        with pytest.raises(InvalidOperation, match="last standby.*add-node"):
            pair.remove_node("n2")
        with pytest.raises(InvalidOperation, match=r"unknown node 'n7'.*nodes: n1, n2"):
            pair.remove_node("n7")
        pair.add_node()
        pair.stop("n2")
        with pytest.raises(InvalidOperation, match="only running standby of the synchronous principal.*start n2"):
            pair.remove_node("n3")
        assert pair.node("n3").state == "running"
        pair.remove_node("n2")  # a stopped standby may go; n3 remains the principal's standby
        assert [n.name for n in pair.nodes] == ["n1", "n3"]
        with pair.principal.admin() as conn:  # commits still return (n3 acknowledges them)
            conn.execute("SET statement_timeout = '20s'")
            conn.execute("CREATE TABLE after_removal (v int)")


def _admin_post(admin: Any, path: str, body: dict[str, Any], token: str) -> httpx.Response:
    return httpx.post(f"http://{admin[0]}:{admin[1]}{path}", json=body, headers={"X-Failover-Harness-Token": token},
                      timeout=60)


def test_embedded_proxy_follows_the_topology_across_remove_and_add(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded reference proxy (``custom-active`` endpoint, admin API) over a group of three hot
    standbys on their own ports: ``faults.remove_node("n3")`` moves n3's session to n2; n4 added on
    n3's freed port (``FAILOVER_HARNESS_PORT_RANGE`` pins it) gets the next read-only session - the
    removal was n3's, not its address's (PER-9) - and n5, added on a port no node had when the proxy
    started, may be named by ``POST /resume`` after a switchover to it (the allow-list follows the
    topology); an address that is no node of it is still refused (403)."""
    from harness.clients.persistent import ReferenceClient
    from harness.faults import Faults
    from harness.ports import RANGE_ENV

    with Group(nodes=3, mode="async", mirror_readable=True, links="direct") as group:
        faults = Faults(group)
        client = ReferenceClient(group, drain_window=2.0, recovery_window=20.0, admin=("127.0.0.1", 0),
                                 endpoints=[("custom-active", ("127.0.0.1", 0))])
        client.start()
        stop = faults.coordinate(client)
        conns: list[psycopg.Connection[Any]] = []
        try:
            ro_dsn = client.endpoint_dsn("custom-active")
            writer = psycopg.connect(client.dsn(), autocommit=True)
            readers = [psycopg.connect(ro_dsn, autocommit=True) for _ in range(2)]
            conns += [writer, *readers]
            n3 = group.node("n3").server_address
            assert sorted(_port(r) for r in readers) == sorted([group.node("n2").server_address[1], n3[1]])
            assert faults.remove_node("n3").result.node == "n3"
            assert {_port(r) for r in readers} == {group.node("n2").server_address[1]}  # moved, kept
            with monkeypatch.context() as m:
                m.setenv(RANGE_ENV, f"{n3[1]}-{n3[1]}")
                assert faults.add_node().result.node == "n4"
            assert group.node("n4").server_address == n3  # the scenario's premise: the freed port reused
            late = psycopg.connect(ro_dsn, autocommit=True)
            conns.append(late)
            assert _port(late) == n3[1]  # served by n4 (n3 is gone): least loaded, routable again

            n5 = group.node(faults.add_node().result.node)
            assert n5.name == "n5" and n5.server_address[1] not in (n3[1], group.node("n2").server_address[1])
            admin, token = client.admin_address, client.admin_token
            assert admin is not None and token
            assert _admin_post(admin, "/drain", {}, token).status_code == 200
            group.switchover("n5")  # not through faults: the proxy is resumed by hand below
            stranger = _admin_post(admin, "/resume", {"host": "127.0.0.1", "port": 9}, token)
            assert stranger.status_code == 403, stranger.text
            resumed = _admin_post(admin, "/resume", {"host": "127.0.0.1", "port": n5.server_address[1]}, token)
            assert resumed.status_code == 200, resumed.text
            assert resumed.json()["principal"] == f"127.0.0.1:{n5.server_address[1]}"
            assert _port(writer) == n5.server_address[1]  # the same front connection, on the new principal
        finally:
            for conn in conns:
                conn.close()
            stop()
            client.stop()


# ------------------------------------------------------------------------------------- the CLI


@pytest.fixture(scope="module")
def run() -> Iterator[str]:
    """A detached group of three hot standbys (as a user starts it), torn down with ``down``."""
    desc = _json("up", "--topology", "pg-group3", "--mode", "async", "--mirror-readable", "--detach")
    try:
        yield desc["run"]
    finally:
        out = _run("down", "--run", desc["run"])
        assert out.returncode == 0, out.stderr


def _start_proxy(run_id: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen([*CLI, "persistent-proxy", "--run", run_id, "--readonly-endpoint", "custom-active",
                             "--drain-window", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        pytest.fail(f"persistent-proxy did not start: {proc.stderr.read() if proc.stderr else ''}")
    return proc, json.loads(line)


def test_cli_add_node_and_remove_node_keep_every_session(run: str) -> None:
    """up → persistent-proxy --run (with a custom-active read-only endpoint) → sessions → ``fault
    add-node`` (a new read-only session lands on n4) → ``fault remove-node n4`` (the proxy is asked
    first and moves the sessions on n4; the same front connections go on, state intact, none on n4)
    → ``status`` no longer lists n4; every session kept."""
    proc, info = _start_proxy(run)
    try:
        dsn = info["dsn"]
        ro_dsn = dsn.replace(f"port={info['listen'].rpartition(':')[2]}",
                             f"port={info['endpoints']['custom-active'].rpartition(':')[2]}")
        writer = psycopg.connect(dsn, autocommit=True)
        readers = [psycopg.connect(ro_dsn, autocommit=True) for _ in range(2)]
        for i, conn in enumerate([writer, *readers]):
            conn.execute(f"SET application_name = 'kept-{i}'")
        before = {id(c): _port(c) for c in [writer, *readers]}
        added = _json("fault", "--run", run, "add-node")
        assert added["fault"] == "add_node" and added["node"] == "n4"
        nodes = {n["name"]: n for n in _json("status", "--run", run)["nodes"]}
        n4_port = int(nodes["n4"]["server_address"].rpartition(":")[2])
        late = psycopg.connect(ro_dsn, autocommit=True)  # least-loaded read-only node: the new one
        late.execute("SET application_name = 'kept-late'")
        assert _port(late) == n4_port
        readers.append(late)

        removed = _json("fault", "--run", run, "remove-node", "n4")
        assert removed["node"] == "n4"
        [coordinated] = removed["coordinated"]
        assert coordinated["name"] == info["name"] and coordinated["moved"] == 1 and coordinated["closed"] == 0
        status = _json("status", "--run", run)
        assert "n4" not in [n["name"] for n in status["nodes"]]
        assert [p["name"] for p in status["persistent_proxies"]] == [info["name"]]
        for i, conn in enumerate([writer, *readers]):  # the same front connections, no error, state kept
            assert _port(conn) != n4_port
            name = conn.execute("SHOW application_name").fetchone()[0]  # type: ignore[index]
            assert name == ("kept-late" if conn is late else f"kept-{i}")
        assert _port(writer) == before[id(writer)]
        fresh = psycopg.connect(ro_dsn, autocommit=True)  # nothing new lands on the removed node
        assert _port(fresh) != n4_port
        for conn in [writer, *readers, fresh]:
            conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "persistent-proxy stopped" in err and "Traceback" not in err


def _server_ports(run_id: str) -> dict[str, int]:
    return {n["name"]: int(n["server_address"].rpartition(":")[2]) for n in _json("status", "--run", run_id)["nodes"]}


def test_cli_proxy_follows_the_run_across_remove_and_add(run: str) -> None:
    """``persistent-proxy --run`` reads the run state for routing and for its admin allow-list: after
    ``fault remove-node`` of a standby, a node added on its freed server port
    (``FAILOVER_HARNESS_PORT_RANGE`` pins it) gets the next read-only session (the removal was that
    node's, PER-9), and a node added on a new port may be named by ``POST /resume`` once it is the
    principal (switched over without the proxy, resumed by hand); an address of no node is refused."""
    from harness.faults import Faults
    from harness.ports import RANGE_ENV
    from harness.topology.backend import attach

    proc, info = _start_proxy(run)
    conns: list[psycopg.Connection[Any]] = []
    try:
        ro_dsn = info["dsn"].replace(f"port={info['listen'].rpartition(':')[2]}",
                                     f"port={info['endpoints']['custom-active'].rpartition(':')[2]}")
        writer = psycopg.connect(info["dsn"], autocommit=True)
        conns.append(writer)
        nodes = _json("status", "--run", run)["nodes"]
        standbys = [n["name"] for n in nodes if n["role"] != "principal" and n["state"] == "running"]
        assert len(standbys) >= 2
        victim = standbys[-1]
        freed = _server_ports(run)[victim]
        removed = _json("fault", "--run", run, "remove-node", victim)
        assert removed["node"] == victim
        added = _json("fault", "--run", run, "add-node", env={RANGE_ENV: f"{freed}-{freed}"})["node"]
        assert _server_ports(run)[added] == freed  # the scenario's premise: the freed port reused
        readers = [psycopg.connect(ro_dsn, autocommit=True) for _ in range(len(standbys))]
        conns += readers
        assert freed in {_port(r) for r in readers}  # one standby each: the new node is routed to

        newest = _json("fault", "--run", run, "add-node")["node"]
        port = _server_ports(run)[newest]
        token = Path(info["token_file"]).read_text().strip()
        admin = info["admin"].rpartition(":")
        where = (admin[0], int(admin[2]))
        assert _admin_post(where, "/drain", {}, token).status_code == 200
        Faults(attach(run)).switchover(newest)  # no coordinator registered: the proxy stays drained
        stranger = _admin_post(where, "/resume", {"host": "127.0.0.1", "port": 9}, token)
        assert stranger.status_code == 403, stranger.text
        resumed = _admin_post(where, "/resume", {"host": "127.0.0.1", "port": port}, token)
        assert resumed.status_code == 200 and resumed.json()["principal"] == f"127.0.0.1:{port}", resumed.text
        assert _port(writer) == port  # the same front connection, on the new principal
    finally:
        for conn in conns:
            conn.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "persistent-proxy stopped" in err and "Traceback" not in err


def test_cli_remove_node_bad_inputs_are_one_line(run: str) -> None:
    """Unknown node, the principal, no node, a node name for add-node, removing the last standby: one
    line (exit 2) naming what is wrong and the command that fixes it; nothing is removed."""
    principal = next(n["name"] for n in _json("status", "--run", run)["nodes"] if n["role"] == "principal")
    _one_line_error(_run("fault", "--run", run, "remove-node", "n9"), "unknown node 'n9'", "status --run")
    for verb in (["partition", "n9"], ["latency", "n9", "50"], ["stop", "n9"], ["switchover", "n9"]):
        _one_line_error(_run("fault", "--run", run, *verb), "unknown node 'n9'", "status --run")  # as remove-node
    _one_line_error(_run("fault", "--run", run, "remove-node", principal), f"{principal} is the principal",
                    f"fault --run {run} switchover")
    _one_line_error(_run("fault", "--run", run, "remove-node"), "needs a node name", "remove-node n3")
    _one_line_error(_run("fault", "--run", run, "add-node", "n2"), "takes no node name")
    standbys = [n["name"] for n in _json("status", "--run", run)["nodes"] if n["role"] != "principal"]
    assert len(standbys) >= 2
    for name in standbys[1:]:
        assert _run("fault", "--run", run, "remove-node", name).returncode == 0
    _one_line_error(_run("fault", "--run", run, "remove-node", standbys[0]), "last standby",
                    f"fault --run {run} add-node")
    assert [n["state"] for n in _json("status", "--run", run)["nodes"]] == ["running", "running"]


def test_compose_run_without_the_fault_proxy_refuses_node_add_in_one_line(isolated_home: dict[str, str],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A compose run adds nodes (tests/test_compose.py), but a new container clones and streams through
    its replication proxy: a run started without the fault proxy (``--no-proxy``) refuses ``fault
    add-node`` as bad input - one line, exit 2, naming what to do - not a harness error; ``Faults``
    refuses alike (ConfigError) and nothing is recorded; removing its principal is refused as on
    local. The run is the state ``up --backend compose`` writes (``_new_state``): no Docker engine
    answers here, and none is needed, since nothing may start."""
    from harness.errors import ConfigError
    from harness.faults import Faults
    from harness.paths import runs_dir
    from harness.topology.backend import attach
    from harness.topology.compose import ComposeGroup
    from harness.topology.run import new_run_id, save_state

    monkeypatch.setenv("FAILOVER_HARNESS_HOME", isolated_home["FAILOVER_HARNESS_HOME"])
    compose = ComposeGroup(nodes=3, links="direct")
    compose.run_id = new_run_id()
    compose.path = runs_dir() / compose.run_id
    compose.path.mkdir()
    save_state(compose.path, compose._new_state({"postgres": "postgres:15", "toxiproxy": "toxiproxy:2.12.0"}))
    env = {"FAILOVER_HARNESS_HOME": isolated_home["FAILOVER_HARNESS_HOME"]}
    _one_line_error(_run("fault", "--run", compose.run_id, "add-node", env=env),
                    f"add-node on compose run {compose.run_id}", "no fault proxy", "start the run with the proxy")
    _one_line_error(_run("fault", "--run", compose.run_id, "remove-node", "n1", env=env), "n1 is the principal")
    topo = attach(compose.run_id, history=(history := History()))
    with pytest.raises(ConfigError, match="add_node: add-node on compose run .* no fault proxy"):
        Faults(topo, history).add_node()
    with pytest.raises(ConfigError, match="remove_node: n1 is the principal"):
        Faults(topo, history).remove_node("n1")
    assert history.events() == []
    assert [n.name for n in attach(compose.run_id).nodes] == ["n1", "n2", "n3"]


def test_admin_remove_node_needs_token_and_an_address(run: str) -> None:
    """``POST /remove-node``: 401 without the token, 400 without a usable address or with a bad window,
    200 with ``moved`` / ``closed`` for a node's address (nothing attached there: both empty)."""
    proc, info = _start_proxy(run)
    try:
        url = f"http://{info['admin']}/remove-node"
        token = Path(info["token_file"]).read_text().strip()
        headers = {"X-Failover-Harness-Token": token}
        assert httpx.post(url, json={"host": "127.0.0.1", "port": 1}).status_code == 401
        for body in [{}, {"host": "127.0.0.1"}, {"host": 5, "port": 5432}, {"host": "127.0.0.1", "port": 0},
                     {"host": "127.0.0.1", "port": 5432, "window": -1}, {"host": "127.0.0.1", "port": 5432,
                                                                        "window": "soon"}]:
            reply = httpx.post(url, json=body, headers=headers)
            assert reply.status_code == 400 and "error" in reply.json(), (body, reply.text)
        reply = httpx.post(url, json={"host": "127.0.0.1", "port": 9, "window": 0}, headers=headers)
        assert reply.status_code == 200 and reply.json()["moved"] == [] and reply.json()["closed"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert not pid_alive(proc.pid)


def test_the_cli_proxy_client_follows_nodes_added_after_it_started() -> None:
    """``reference-Nw`` (the CLI proxy in a subprocess) fronts the run, not a fixed list of addresses:
    a switchover to a node added after it started resumes its sessions there (the allow-list and the
    principal follow the run state; with ``--backend`` per node the resume was refused, 403)."""
    from harness.clients.persistent.reference_process import reference_workers
    from harness.faults import Faults

    with Group(nodes=3, mode="async", links="direct") as group:
        faults = Faults(group)
        client = reference_workers(pair=group, drain_window=2.0, recovery_window=20.0, workers=1)
        client.start()
        stop = faults.coordinate(client)
        try:
            with psycopg.connect(client.dsn(), autocommit=True) as conn:
                conn.execute("CREATE TABLE t (v int)")
                conn.execute("INSERT INTO t VALUES (1)")
                new = group.node(faults.add_node().result.node)
                faults.switchover(new.name)
                assert group.principal.name == new.name
                assert conn.execute("SELECT inet_server_port()").fetchone()[0] == new.server_address[1]
                conn.execute("INSERT INTO t VALUES (2)")  # the same session, writable on the new principal
                assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 2
            assert client.status()["counters"]["kept"] == 1
        finally:
            stop()
            client.stop()
