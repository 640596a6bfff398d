"""The pg_auto_failover topologies (harness/topology/pgaf.py) with real pg_autoctl 2.0 and PostgreSQL
15: up from the command line, clients and node->monitor links behind the fault proxy, the harness's
settings on the monitor and the keepers, role operations asked of the monitor, and nothing left
running after ``down`` or after the owner is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from harness.errors import ConfigError
from harness.topology.pgaf import PgafCluster, check_backend
from harness.topology.pgaf_settings import DEFAULT_SETTINGS
from harness.topology.process import group_members, pid_alive, processes_mentioning

FH = [sys.executable, "-m", "harness.cli"]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*FH, *args], capture_output=True, text=True, env={**os.environ}, timeout=timeout)


def test_compose_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="pgaf-pair / pgaf-group3 with --backend local"):
        check_backend("compose")
    out = _run("up", "--topology", "pgaf-pair", "--backend", "compose", "--detach", timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_cli_up_faults_down_on_pgaf_pair() -> None:
    """``up --topology pgaf-pair --detach``: the settings on the monitor and the keepers, each node's
    two proxies; a switchover and a kill through the CLI each end with one writable primary,
    recorded in the run's history; a bad node name is one line; ``down`` leaves nothing running."""
    up = _run("up", "--topology", "pgaf-pair", "--detach", "--json")
    assert up.returncode == 0, up.stderr[-2000:]
    desc = json.loads(up.stdout)
    run = desc["run"]
    run_dir = Path(desc["nodes"][0]["dsn"].split("passfile=")[1]).parent
    try:
        assert desc["manager"] == "pg_auto_failover" and desc["settings"] == DEFAULT_SETTINGS.to_dict()
        leaders = [n["name"] for n in desc["nodes"] if n["role"] == "principal"]
        assert len(leaders) == 1
        assert sorted(n["monitor_state"] for n in desc["nodes"]) == ["primary", "secondary"]
        for n in desc["nodes"]:
            assert set(n["proxies"]) == {"client", "monitor"} and len(set(n["proxies"].values())) == 2
        monitor_port = int(desc["monitor"].rsplit(":", 1)[1])
        with psycopg.connect(host=str(run_dir / "sock"), port=monitor_port, user="postgres",
                             dbname="pg_auto_failover", autocommit=True) as conn:
            got = dict(conn.execute("SELECT name, setting FROM pg_settings WHERE name LIKE 'pgautofailover.%'")
                       .fetchall())
            registered = conn.execute("SELECT nodename, nodeport FROM pgautofailover.node ORDER BY 1").fetchall()
        for guc, value in DEFAULT_SETTINGS.monitor_gucs().items():
            assert got[guc] == str(value), guc
        assert [p for _, p in registered] == [int(n["server_address"].rsplit(":", 1)[1]) for n in desc["nodes"]]
        cfg = next((run_dir / "n1" / "config").rglob("pg_autoctl.cfg")).read_text()
        assert f"network_partition_timeout = {DEFAULT_SETTINGS.network_partition_timeout_s}" in cfg
        assert desc["nodes"][0]["proxies"]["monitor"].split(":")[1] in cfg  # the keeper's monitor URI is its proxy

        out = _run("fault", "--run", run, "switchover", "--json")
        assert out.returncode == 0, out.stderr[-2000:]
        result = json.loads(out.stdout)
        assert result["previous_principal"] == leaders[0] and result["principal"] not in (None, leaders[0])
        new = result["principal"]
        out = _run("fault", "--run", run, "kill", new, "--json")
        assert out.returncode == 0, out.stderr[-2000:]
        killed = json.loads(out.stdout)
        assert killed["was_leader"] is True and killed["principal"] == leaders[0]
        assert killed["seconds"] < DEFAULT_SETTINGS.failover_bound_s() + 30
        # `fault start` of the killed node is not asserted here: in make test (3 of 3 runs, never alone) its keeper
        # failed `primary -> demoted` with its server down for 120 s (docs/ha-managers.md, known gaps of
        # pg_auto_failover); suites/ham's machine-loss test starts the node again and judges its rejoin (HAM-6)
        history = Path(result["history"]).read_text().splitlines()
        assert any('"type":"ham.settings"' in line and "pg_auto_failover" in line for line in history)
        assert any('"op":"switchover"' in line and '"phase":"end"' in line for line in history)
        assert any('"type":"ham.kill"' in line and "pg_autoctl+postgres" in line for line in history)
        bad = _run("fault", "--run", run, "kill", "n9", timeout=120)
        assert bad.returncode == 2 and "n9" in bad.stderr and "Traceback" not in bad.stderr
        bad = _run("fault", "--run", run, "partition-dcs", "n1", timeout=120)
        assert bad.returncode == 2 and "partition-monitor" in bad.stderr
    finally:
        down = _run("down", "--run", run, timeout=120)
    assert down.returncode == 0, down.stderr
    time.sleep(0.5)
    assert processes_mentioning(run) == []
    assert not run_dir.exists()


def test_kill_manager_keeps_postgres_and_start_adopts_it() -> None:
    """``kill-manager`` takes pg_autoctl only (the postmaster, in its process group, runs on); ``start``
    adopts that server; ``kill`` then takes both."""
    with PgafCluster(nodes=2) as c:
        leader = c.wait_one_leader(timeout=30)
        other = next(n for n in c.names if n != leader)
        pm = c._postmaster_pid(other)
        c.kill_manager(other)
        assert c._manager_pid(other) is None and c._postmaster_pid(other) == pm
        c.start(other)
        assert c._manager_pid(other) is not None and c._postmaster_pid(other) == pm
        c.kill(other, wait=False)
        assert c._manager_pid(other) is None and c._postmaster_pid(other) is None and not pid_alive(pm)
        assert c.wait_one_leader(timeout=10) == leader


def test_a_sigkilled_owner_leaves_nothing_behind() -> None:
    """The reaper tears down a pg_auto_failover run whose owning process was SIGKILLed: every
    recorded process group (the monitor's and each keeper's pg_autoctl with its server) is gone."""
    code = ("from harness.topology.pgaf import PgafCluster\n"
            "c = PgafCluster(nodes=2).up()\n"
            "print(c.run_id, c.path, flush=True)\n"
            "print(' '.join(str(p.pgid or p.pid) for p in c.state().processes), flush=True)\n"
            "import time; time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ})
    assert proc.stdout is not None
    run, path = proc.stdout.readline().split()
    groups = [int(g) for g in proc.stdout.readline().split()]
    assert run and len(groups) >= 3, "the owner did not bring the topology up"  # the monitor, 2 keepers
    assert processes_mentioning(run)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while (processes_mentioning(run) or any(_group_alive(g) for g in groups)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_mentioning(run) == []
    assert [g for g in groups if _group_alive(g)] == []
    assert not Path(path).exists()


def _group_alive(pgid: int) -> bool:
    """A live (non-zombie) member of the group: a process that became a subreaper in an earlier test
    adopts the killed keepers, and their zombies keep the group id until reaped (group_members reaps)."""
    return bool(group_members(pgid))
