"""Nothing leaks: a run whose controlling process was SIGKILLed is cleaned by its reaper, and
``down --all`` removes every process and listening port of runs left behind. Each test uses its own
FAILOVER_HARNESS_HOME so that ``down --all`` cannot touch other tests' runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

FH = [sys.executable, "-m", "harness.cli"]

OWNER_SCRIPT = """
import json, sys, time
from harness.topology import Pair
pair = Pair(mode="async").up()
print(json.dumps({"run": pair.run_id, "path": str(pair.path),
                  "ports": [n.server_address[1] for n in pair.nodes],
                  "pids": [n.pid for n in pair.nodes]}), flush=True)
time.sleep(600)
"""


def _start_owner(env: dict[str, str]) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-c", OWNER_SCRIPT], env=env, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, "the owner script did not bring a pair up"
    return proc, json.loads(line)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _run_processes(path: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", path], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_reaper_tears_down_the_run_of_a_sigkilled_owner(isolated_home):
    proc, info = _start_owner(isolated_home)
    assert all(_listening(p) for p in info["ports"])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _wait(lambda: not Path(info["path"]).exists(), 15), "the reaper did not remove the run directory"
    assert _wait(lambda: not _run_processes(info["path"]), 5), _run_processes(info["path"])
    assert not any(_listening(p) for p in info["ports"])


def test_down_all_after_sigkilled_run_and_reaper_leaves_nothing(isolated_home):
    proc, info = _start_owner(isolated_home)
    # worst case: the owner AND its reaper are SIGKILLed, so nothing cleaned up by itself
    for line in _run_processes(info["path"]):
        pid = int(line.split()[0])
        if "harness.topology.reaper" in line:
            os.kill(pid, signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(0.3)
    assert Path(info["path"]).exists() and all(_listening(p) for p in info["ports"])
    out = subprocess.run(FH + ["down", "--all"], env=isolated_home, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert info["run"] in out.stdout
    assert not Path(info["path"]).exists()
    assert _wait(lambda: not _run_processes(info["path"]), 5), _run_processes(info["path"])
    assert not any(_listening(p) for p in info["ports"])
    for pid in info["pids"]:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split(") ")[1][0] == "Z"


def test_cli_contract_up_fault_status_down(isolated_home):
    """The acceptance flow: up --detach --json, write via the principal's dsn, switchover, write via
    the new principal, down --run; then no postgres process of that run remains."""
    import psycopg

    env = isolated_home
    up = subprocess.run(FH + ["up", "--topology", "pg-pair", "--detach", "--json", "--no-proxy"], env=env,
                        capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    desc = json.loads(up.stdout)
    assert set(desc) >= {"run", "topology", "nodes"} and desc["topology"] == "pg-pair"
    for node in desc["nodes"]:
        assert set(node) >= {"name", "role", "client_address", "server_address", "dsn"}
    run = desc["run"]
    principal = next(n for n in desc["nodes"] if n["role"] == "principal")
    with psycopg.connect(principal["dsn"], autocommit=True) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")
    fault = subprocess.run(FH + ["fault", "--run", run, "switchover", "--json"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert fault.returncode == 0, fault.stderr
    result = json.loads(fault.stdout)
    assert set(result) == {"fault", "node", "started_at", "ended_at", "seconds", "principal"}
    assert result["fault"] == "switchover" and result["principal"] != principal["name"]
    status = json.loads(subprocess.run(FH + ["status", "--run", run, "--json"], env=env, capture_output=True,
                                       text=True, timeout=60).stdout)
    new_principal = next(n for n in status["nodes"] if n["role"] == "principal")
    assert new_principal["name"] == result["principal"]
    with psycopg.connect(new_principal["dsn"], autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (2)")
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 2
    run_dir = Path(env["FAILOVER_HARNESS_HOME"]) / "runs" / run
    down = subprocess.run(FH + ["down", "--run", run], env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert not run_dir.exists()
    assert not _run_processes(str(run_dir))


def test_cli_bad_inputs_give_one_clear_line(isolated_home):
    bad_topology = subprocess.run(FH + ["up", "--topology", "pg-triangle", "--detach"], env=isolated_home,
                                  capture_output=True, text=True, timeout=60)
    assert bad_topology.returncode == 2
    assert "unknown topology 'pg-triangle'" in bad_topology.stderr and "pg-pair" in bad_topology.stderr
    assert "Traceback" not in bad_topology.stderr
    no_run = subprocess.run(FH + ["fault", "--run", "nope", "switchover"], env=isolated_home,
                            capture_output=True, text=True, timeout=60)
    assert no_run.returncode == 2 and "no run 'nope'" in no_run.stderr and "Traceback" not in no_run.stderr
    no_target = subprocess.run(FH + ["down"], env=isolated_home, capture_output=True, text=True, timeout=60)
    assert no_target.returncode == 2 and "--all" in no_target.stderr


def test_up_in_the_foreground_tears_down_on_ctrl_c(isolated_home):
    """Without --detach, ``up`` prints the run and stays until Ctrl-C (SIGINT), then tears down:
    servers, fault proxy and run directory."""
    proc = subprocess.Popen(FH + ["up", "--topology", "pg-pair", "--json"], env=isolated_home,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    desc = json.loads(proc.stdout.readline())
    run_dir = Path(isolated_home["FAILOVER_HARNESS_HOME"]) / "runs" / desc["run"]
    ports = [int(n["client_address"].rsplit(":", 1)[1]) for n in desc["nodes"]]
    ports += [int(n["server_address"].rsplit(":", 1)[1]) for n in desc["nodes"]]
    assert run_dir.exists() and all(_listening(p) for p in ports)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    assert "torn down" in proc.stderr.read()
    assert not run_dir.exists()
    assert not any(_listening(p) for p in ports)


KEEP_SUITE = '''
import pytest

@pytest.mark.rule("DUR-1")
def test_fails_with_a_pair(pair):
    assert pair.principal.name == "nobody"
'''


def test_keep_on_failure_leaves_the_failed_tests_servers_up(isolated_home, tmp_path):
    """--keep-on-failure: a failed test's servers stay up (its reaper leaves it alone), the run says
    how to reach them, and ``down --all`` removes them afterwards."""
    suite = tmp_path / "test_keep.py"
    suite.write_text(KEEP_SUITE)
    out = subprocess.run(FH + ["run", str(suite), "--keep-on-failure", "--results", str(tmp_path / "r"),
                               f"--pytest-arg=--history-dir={tmp_path / 'h'}", "--pytest-arg=-s"],
                         env=isolated_home, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "--keep-on-failure: run" in out.stderr and "failover-harness down --run" in out.stderr
    runs = list((Path(isolated_home["FAILOVER_HARNESS_HOME"]) / "runs").iterdir())
    assert len(runs) == 1
    time.sleep(1.0)  # the reaper polls every 0.25 s: it must have left the kept run alone
    state = json.loads((runs[0] / "state.json").read_text())
    ports = [n["port"] for n in state["nodes"]]
    assert runs[0].exists() and all(_listening(p) for p in ports)
    down = subprocess.run(FH + ["down", "--all"], env=isolated_home, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and not runs[0].exists()
    assert not any(_listening(p) for p in ports)
