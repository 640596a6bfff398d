"""``status`` tells the truth: it checks every process it lists - nodes, the fault proxy, the reaper -
and says ``dead`` for one that is gone; ``up --detach`` keeps its port reservations (the fault-proxy API
port included) owned by a live process of the run, and ``down`` releases every one of them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.topology.health import is_run_process

FH = [sys.executable, "-m", "harness.cli"]


def _status(env: dict[str, str], run: str) -> dict:
    out = subprocess.run(FH + ["status", "--run", run, "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _by_name(desc: dict) -> dict[str, dict]:
    return {p["name"]: p for p in desc["processes"]}


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_status_says_dead_for_a_killed_fault_proxy_and_node_and_down_releases_every_port(isolated_home):
    env = isolated_home
    ports_dir = Path(env["FAILOVER_HARNESS_HOME"]) / "ports"
    up = subprocess.run(FH + ["up", "--detach", "--json"], env=env, capture_output=True, text=True, timeout=180)
    assert up.returncode == 0, up.stderr
    desc = json.loads(up.stdout)
    run = desc["run"]
    try:
        api_port = int(desc["fault_proxy"]["url"].rsplit(":", 1)[1])
        server_ports = {int(n["server_address"].rsplit(":", 1)[1]) for n in desc["nodes"]}
        reserved = {int(p.name): int(p.read_text()) for p in ports_dir.iterdir() if p.name.isdigit()}
        # the API port too, where the background proxy server's port is reserved by 'up' (else it binds port 0)
        assert server_ports <= set(reserved) <= server_ports | {api_port}
        status = _status(env, run)
        procs = _by_name(status)
        assert {p["state"] for p in procs.values()} == {"running"}, json.dumps(status["processes"])
        assert set(reserved.values()) == {procs["reaper"]["pid"]}  # a live holder, not the exited 'up'
        assert status["fault_proxy"]["state"] == "running"

        _kill(procs["toxiproxy-server"]["pid"])
        procs = _by_name(after := _status(env, run))
        assert procs["toxiproxy-server"]["state"] == "dead" and procs["fault-proxy API"]["state"] == "dead"
        assert after["fault_proxy"]["state"] == "dead"
        assert [n["state"] for n in after["nodes"]] == ["running", "running"]  # the servers themselves are up
        human = subprocess.run(FH + ["status", "--run", run], env=env, capture_output=True, text=True, timeout=60)
        assert "dead" in human.stdout and "clients cannot reach any node: the fault proxy is dead" in human.stdout

        mirror = next(n for n in after["nodes"] if n["role"] == "mirror")
        _kill(procs[mirror["name"]]["pid"])
        after = _status(env, run)
        node = next(n for n in after["nodes"] if n["name"] == mirror["name"])
        assert node["state"] == "dead" and _by_name(after)[mirror["name"]]["state"] == "dead"
        assert "is gone" in _by_name(after)[mirror["name"]]["detail"]

        _kill(procs["reaper"]["pid"])
        assert _by_name(_status(env, run))["reaper"]["state"] == "dead"
    finally:
        down = subprocess.run(FH + ["down", "--run", run], env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not [p.name for p in ports_dir.iterdir() if p.name.isdigit()]  # no reservation file left behind


def test_a_recycled_pid_is_not_the_runs_process() -> None:
    """A PID that is alive but started before the run was created belongs to someone else."""
    assert is_run_process(os.getpid(), created=time.time() - 3600)
    assert not is_run_process(1, created=time.time() + 3600)  # pid 1 started long before such a run
    assert not is_run_process(None, created=0)
