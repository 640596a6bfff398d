"""The Compose backend on the real engine (``make test`` runs ``make compose-setup`` first): the
compose files validate with Compose v2 and wire every address behind the proxy; a pair of
containers behind the real Toxiproxy does every role operation with the same history events as the
local backend; nothing of a run is left after ``down``, nor after a SIGKILLed run plus ``down --all``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import yaml

from harness.errors import ConfigError
from harness.history.core import History
from harness.topology.backend import get_backend, get_engine, resolve
from harness.topology.compose import COMPOSE_FILES, compose_config, compose_env, compose_file, project_name
from harness.topology.compose_mariadb import ComposeMariaDBGroup, ComposeMariaDBPair
from harness.topology.containers import harness_containers
from harness.topology.dockerd import HOME_LABEL, RUN_LABEL
from harness.topology.postgres import PostgresEngine
from harness.topology.state import LinksState, NodeState, ProxyNames, RunState
from tests.support.checkout import repo_root

NODES = {"pg-pair": ["n1", "n2"], "pg-group3": ["n1", "n2", "n3"], "mariadb-pair": ["n1", "n2"],
         "mariadb-group3": ["n1", "n2", "n3"]}
#: The official image each topology's database containers default to (FH_POSTGRES_IMAGE / FH_MARIADB_IMAGE).
OFFICIAL = {"pg": "postgres:15", "mariadb": "mariadb:10.11"}


def _env(topology: str) -> dict[str, str]:
    env = {"FH_PROJECT": "fh-t-1", "FH_RUN": "t-1", "FH_HOME": "/tmp/fh-home", "FH_RUN_DIR": "/tmp/fh-home/runs/t-1",
           "FH_TOXIPROXY_PORT": "40000"}
    for i, n in enumerate(NODES[topology]):
        for j, kind in enumerate(("PORT", "CLIENT_PORT", "REPL_PORT")):
            env[f"FH_{n.upper()}_{kind}"] = str(40001 + 3 * i + j)
    return env


@pytest.mark.parametrize("topology", sorted(COMPOSE_FILES))
def test_compose_file_is_valid_and_puts_every_address_behind_the_proxy(topology: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("FH_POSTGRES_IMAGE", "FH_MARIADB_IMAGE", "FH_TOXIPROXY_IMAGE"):
        monkeypatch.delenv(var, raising=False)
    env = _env(topology)
    spec = yaml.safe_load(compose_config(topology, env))
    services = spec["services"]
    assert set(services) == {"toxiproxy", *NODES[topology]}
    assert services["toxiproxy"]["image"] == "ghcr.io/shopify/toxiproxy:2.12.0"  # official by default
    assert "-host=127.0.0.1" in services["toxiproxy"]["command"]
    for svc in services.values():
        assert svc["network_mode"] == "host" and "ports" not in svc and "networks" not in svc
        assert svc["labels"] == {RUN_LABEL: "t-1", HOME_LABEL: "/tmp/fh-home"}
    assert "networks" not in spec  # no bridge network of any kind
    proxies = {p["name"]: p for p in json.loads(spec["configs"]["proxies"]["content"])}
    principal_port = env["FH_N1_PORT"]
    engine = topology.split("-")[0]
    for n in NODES[topology]:
        node = services[n]
        assert node["image"] == OFFICIAL[engine] and node["environment"]["FH_DIR"] == f"{env['FH_RUN_DIR']}/{n}"
        assert node["volumes"][-1]["source"] == node["volumes"][-1]["target"] == f"{env['FH_RUN_DIR']}/{n}"
        client, repl = proxies[f"fh-t-1-{n}"], proxies[f"fh-t-1-repl-{n}"]
        assert client == {"name": f"fh-t-1-{n}", "listen": f"127.0.0.1:{env[f'FH_{n.upper()}_CLIENT_PORT']}",
                          "upstream": f"127.0.0.1:{env[f'FH_{n.upper()}_PORT']}"}
        assert repl["listen"] == f"127.0.0.1:{env[f'FH_{n.upper()}_REPL_PORT']}"
        assert repl["upstream"] == f"127.0.0.1:{principal_port}"  # standbys clone and stream through it
        if engine == "pg":  # the entrypoint clones and rewinds through it; MariaDB replicas are told over SQL
            assert node["environment"]["FH_PORT"] == env[f"FH_{n.upper()}_PORT"]
            assert node["environment"]["FH_REPL_PORT"] == env[f"FH_{n.upper()}_REPL_PORT"]
        else:
            assert set(node["environment"]) == {"FH_DIR"} and node["entrypoint"] == ["bash", "/fh-mariadb-node.sh"]
    assert len(proxies) == 2 * len(NODES[topology])


def test_a_missing_port_variable_is_a_one_line_error() -> None:
    env = _env("pg-pair")
    del env["FH_N2_REPL_PORT"]
    with pytest.raises(ConfigError, match="FH_N2_REPL_PORT"):
        compose_config("pg-pair", env)
    with pytest.raises(ConfigError, match="no compose file"):
        compose_file("pg-ring")


def test_the_image_variables_override_the_official_images(monkeypatch: pytest.MonkeyPatch) -> None:
    """FH_MARIADB_IMAGE (the stand-in compose-setup builds offline) replaces the official default."""
    monkeypatch.delenv("FH_TOXIPROXY_IMAGE", raising=False)
    env = {**_env("mariadb-pair"), "FH_MARIADB_IMAGE": "failover-harness/mariadb:10.11"}
    services = yaml.safe_load(compose_config("mariadb-pair", env))["services"]
    assert [services[n]["image"] for n in ("n1", "n2")] == ["failover-harness/mariadb:10.11"] * 2


def test_compose_env_names_each_engines_image_variable() -> None:
    state = RunState(run="t-1", topology="mariadb-pair", engine="mariadb", version="10.11", mode="sync",
                     mirror_readable=False, created=0.0, owner_pid=1, backend="compose", links=LinksState(
                         kind="toxiproxy", proxies={n: ProxyNames(f"fh-t-1-{n}", f"127.0.0.1:{41000 + i}",
                                                                  f"fh-t-1-repl-{n}", f"127.0.0.1:{42000 + i}")
                                                    for i, n in enumerate(("n1", "n2"))}),
                     nodes=[NodeState(name=n, role="principal" if n == "n1" else "mirror", port=43000 + i,
                                      datadir=f"/r/{n}/data") for i, n in enumerate(("n1", "n2"))])
    env = compose_env(state, Path("/r"), {"mariadb": "failover-harness/mariadb:10.11", "toxiproxy": "tp"}, 40000)
    assert env["FH_MARIADB_IMAGE"] == "failover-harness/mariadb:10.11" and env["FH_TOXIPROXY_IMAGE"] == "tp"
    assert "FH_POSTGRES_IMAGE" not in env
    assert (env["FH_N2_PORT"], env["FH_N2_CLIENT_PORT"], env["FH_N2_REPL_PORT"]) == ("43001", "41001", "42001")
    spec = yaml.safe_load(compose_config("mariadb-pair", env))  # and the file takes exactly these
    assert {s["image"] for n, s in spec["services"].items() if n != "toxiproxy"} == {"failover-harness/mariadb:10.11"}


def test_compose_backend_refuses_what_it_cannot_run_in_one_line() -> None:
    assert isinstance(get_backend("compose").build(get_engine("mariadb"), 2), ComposeMariaDBPair)
    assert isinstance(get_backend("compose").build(get_engine("mariadb"), 3), ComposeMariaDBGroup)
    with pytest.raises(ConfigError, match="groups of three") as err:
        get_backend("compose").build(get_engine("postgres"), 4)
    assert "\n" not in str(err.value) and "add-node" in str(err.value)


def test_no_docker_engine_is_a_one_line_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no engine answers (none was started), ``--backend compose`` is refused in one line naming
    the fix, never run as local processes."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ConfigError, match="no Docker engine answers here; run 'failover-harness compose-setup'") as err:
        resolve("compose", "postgres")
    assert "\n" not in str(err.value)


def _drive(topo, history: History) -> list[tuple[str, str | None]]:
    """The same role operations on any backend; returns the non-connection events recorded (without
    ``harness.stall``: how late the machine or the proxy's log was is not part of the topology)."""
    with topo:
        with psycopg.connect(topo.dsn(), autocommit=True, connect_timeout=10) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS k (v int)")
            conn.execute("INSERT INTO k VALUES (1)")
        topo.switchover()
        topo.failover()
        topo.rejoin()
        topo.stop("n1")
        topo.start("n1")
        topo.kill("n1")
        topo.start("n1")
        topo.pause("n2", scope="all")
        topo.resume("n2")
        with psycopg.connect(topo.dsn(), autocommit=True, connect_timeout=10) as conn:
            conn.execute("INSERT INTO k VALUES (2)")
            assert conn.execute("SELECT count(*) FROM k").fetchone()[0] == 2
        assert topo.partner_setting() == "{}:{}".format(*topo.mirror.client_address)
    return [(e.type, e.fields.get("node")) for e in history.events()
            if not e.type.startswith("conn.") and e.type != "harness.stall"]


def test_compose_pair_records_the_same_events_as_local() -> None:
    """Every role operation on containers behind the real Toxiproxy, and the history holds the same
    topology events, in the same order, as the same operations on local processes; the fault proxy's
    log stream gives connection events with node names."""
    engine = get_engine("postgres")
    seen = {}
    for backend in ("local", "compose"):
        history = History()
        seen[backend] = _drive(get_backend(backend).build(engine, 2, history=history), history)
        if backend == "compose":
            conns = [e for e in history.events() if e.type == "conn.accepted"]
            assert conns and {e.fields.get("node") for e in conns} >= {"n1", "n1:replication", "n2:replication"}
    drop_reclone = [e for e in seen["compose"] if e[0] != "node.reclone"]  # rewind may re-clone on either
    assert drop_reclone == [e for e in seen["local"] if e[0] != "node.reclone"]


def _harness_resources(home: str) -> list[str]:
    import docker

    client = docker.from_env()
    try:
        flt = {"label": [RUN_LABEL, f"{HOME_LABEL}={home}"]}
        return ([c.name for c in client.containers.list(all=True, filters=flt)]
                + [v.name for v in client.volumes.list(filters=flt)]
                + [n.name for n in client.networks.list(filters=flt)])
    finally:
        client.close()


def _fh(env: dict[str, str], *args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], env=env, capture_output=True, text=True,
                          timeout=180, cwd=repo_root(), **kw)


def test_sigkilled_run_and_detached_run_leave_nothing_after_down_all(isolated_home: dict[str, str]) -> None:
    """A foreground ``up`` SIGKILLed (its reaper SIGKILLed too) and a detached run: ``down --all``
    removes their containers, volumes and folders; nothing labelled with this home is left."""
    env = {**isolated_home, "PYTHONPATH": str(repo_root())}
    home = env["FAILOVER_HARNESS_HOME"]
    detached = _fh(env, "up", "--backend", "compose", "--detach", "--json")
    assert detached.returncode == 0, detached.stderr
    run = json.loads(detached.stdout)["run"]
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "up", "--backend", "compose", "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=repo_root(),
                            start_new_session=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        crashed = json.loads(line)["run"]
        for pid in _reapers(home):
            os.kill(pid, signal.SIGKILL)  # the worst case: nothing of the run's own is left to clean
        proc.kill()
        proc.wait(10)
        assert len(harness_containers(home=home)) == 6  # two runs of toxiproxy + n1 + n2
        assert {r.split("-")[-1] for r in harness_containers(home=home)} == {"toxiproxy", "n1", "n2"}
        down = _fh(env, "down", "--all")
        assert down.returncode == 0, down.stderr
        assert _harness_resources(home) == []
        assert not (Path(home) / "runs" / run).exists() and not (Path(home) / "runs" / crashed).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        _fh(env, "down", "--all")
    assert project_name(run) not in " ".join(harness_containers(all_homes=True))


def _reapers(home: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "harness.topology.reaper" in cmd and home in cmd:
                found.append(int(entry.name))
    return found


def test_cli_up_write_switchover_write_down(isolated_home: dict[str, str]) -> None:
    """The README's hand-driven loop on compose: ``up --detach --json``, a write, ``fault
    switchover``, a write, ``status``, ``down``."""
    env = {**isolated_home, "PYTHONPATH": str(repo_root())}
    up = _fh(env, "up", "--backend", "compose", "--topology", "pg-pair", "--detach", "--json")
    assert up.returncode == 0, up.stderr
    desc = json.loads(up.stdout)
    run = desc["run"]
    try:
        assert desc["backend"] == "compose" and desc["fault_proxy"]["version"] == "2.12.0"
        hosts = ",".join(n["client_address"].split(":")[0] for n in desc["nodes"])
        ports = ",".join(n["client_address"].split(":")[1] for n in desc["nodes"])
        creds = PostgresEngine().credentials  # the machine's test login (the shared template cache)
        dsn = (f"host={hosts} port={ports} dbname={creds.database} user={creds.user} password={creds.password} "
               "target_session_attrs=read-write")
        assert creds.password not in up.stdout + up.stderr  # no secret in any output
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE w (v int)")
            conn.execute("INSERT INTO w VALUES (1)")
        sw = _fh(env, "fault", "--run", run, "switchover", "--json")
        assert sw.returncode == 0, sw.stderr
        assert json.loads(sw.stdout)["principal"] == "n2"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO w VALUES (2)")
            assert conn.execute("SELECT count(*) FROM w").fetchone()[0] == 2
        status = json.loads(_fh(env, "status", "--run", run, "--json").stdout)
        assert [(n["name"], n["role"]) for n in status["nodes"]] == [("n1", "mirror"), ("n2", "principal")]
    finally:
        down = _fh(env, "down", "--run", run)
    assert down.returncode == 0, down.stderr
    assert _harness_resources(env["FAILOVER_HARNESS_HOME"]) == []


def test_node_add_and_remove_on_containers(isolated_home: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Node add on compose (PER-1's node add): a new container ``fh-<run>-n4`` (compose/pg-standby.yml,
    labelled with the run) cloned through its own replication proxy, streaming, and reachable at its
    own client proxy; the log-derived connection events name it. Node remove (PER-9): its container
    and proxies gone, the node dropped from the run; after ``down`` nothing of the run is left."""
    from harness.faults import Faults

    monkeypatch.setenv("FAILOVER_HARNESS_HOME", isolated_home["FAILOVER_HARNESS_HOME"])
    history = History()
    group = get_backend("compose").build(get_engine("postgres"), 3, mirror_readable=True, history=history)
    with group:
        run = group.run_id
        faults = Faults(group, history)
        assert faults.add_node().result.node == "n4"
        n4 = group.node("n4")
        assert n4.role == "standby" and n4.state == "running"
        assert f"{project_name(run)}-n4" in harness_containers(run=run)
        with psycopg.connect(group.principal.dsn(), autocommit=True, connect_timeout=10) as conn:
            conn.execute("CREATE TABLE k4 (v int)")
            conn.execute("INSERT INTO k4 VALUES (4)")
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        with psycopg.connect(n4.dsn(), autocommit=True, connect_timeout=10) as conn:  # through its client proxy
            for _ in range(200):
                if conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:
                    break
                conn.execute("SELECT pg_sleep(0.02)")
            assert conn.execute("SELECT v, inet_server_port(), pg_is_in_recovery() FROM k4").fetchone() == (
                4, n4.server_address[1], True)
        events = history.events()
        assert any(e.type == "node.add" and e.get("node") == "n4" for e in events)
        assert {"n4", "n4:replication"} <= {e.get("node") for e in events if e.type == "conn.accepted"}
        proxies = group.links.proxy_names()
        faults.remove_node("n4")
        assert [n.name for n in group.nodes] == ["n1", "n2", "n3"]
        assert f"{project_name(run)}-n4" not in harness_containers(run=run)
        assert not {p for p in group.links.client.proxies() if p.endswith("-n4")}, proxies
        assert any(e.type == "node.remove" and e.get("node") == "n4" for e in history.events())
    assert harness_containers(run=run) == []
