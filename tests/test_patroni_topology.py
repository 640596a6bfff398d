"""The Patroni topologies (harness/topology/patroni.py) with real Patroni 3, etcd 3.4 and
PostgreSQL 15: up from the command line, every link behind the fault proxy, role operations asked
of Patroni, and nothing left running after ``down`` or after the owner is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.topology.patroni import PatroniCluster
from harness.topology.patroni_settings import DEFAULT_TIMING, PatroniTiming
from harness.topology.process import processes_mentioning

FH = [sys.executable, "-m", "harness.cli"]


def _env() -> dict[str, str]:
    return {**os.environ}


def _leftovers(run_dir: str) -> list[int]:
    return processes_mentioning(run_dir)


def test_timing_follows_patronis_documented_minimums_and_sum_rule() -> None:
    assert DEFAULT_TIMING.loop_wait + 2 * DEFAULT_TIMING.retry_timeout <= DEFAULT_TIMING.ttl
    with pytest.raises(ConfigError, match="ttl must be an integer of at least 20"):
        PatroniTiming(ttl=10)
    with pytest.raises(ConfigError, match="loop_wait \\+ 2\\*retry_timeout <= ttl"):
        PatroniTiming(ttl=20, loop_wait=10, retry_timeout=6)


def test_cli_up_fault_down_on_patroni_pair() -> None:
    """``up --topology patroni-pair --detach``; a switchover through Patroni leaves the other node
    leading and accepting writes; ``down`` stops every process of the run."""
    up = subprocess.run([*FH, "up", "--topology", "patroni-pair", "--detach", "--json"], capture_output=True,
                        text=True, env=_env(), timeout=300)
    assert up.returncode == 0, up.stderr[-2000:]
    desc = json.loads(up.stdout)
    run = desc["run"]
    try:
        assert desc["manager"] == "patroni" and desc["timing"] == DEFAULT_TIMING.to_dict()
        leaders = [n["name"] for n in desc["nodes"] if n["role"] == "principal"]
        assert len(leaders) == 1
        for n in desc["nodes"]:  # every link of a node is its own proxy
            assert set(n["proxies"]) == {"client", "repl", "api", "dcs"}
            assert len(set(n["proxies"].values())) == 4
        out = subprocess.run([*FH, "fault", "--run", run, "switchover", "--json"], capture_output=True, text=True,
                             env=_env(), timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        result = json.loads(out.stdout)
        assert result["previous_principal"] == leaders[0] and result["principal"] not in (None, leaders[0])
        history = Path(result["history"]).read_text().splitlines()
        assert any('"op":"switchover"' in line and '"phase":"end"' in line for line in history)
        bad = subprocess.run([*FH, "fault", "--run", run, "kill", "n9"], capture_output=True, text=True,
                             env=_env(), timeout=120)
        assert bad.returncode == 2 and "n9" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        down = subprocess.run([*FH, "down", "--run", run], capture_output=True, text=True, env=_env(), timeout=120)
    assert down.returncode == 0, down.stderr
    time.sleep(0.5)
    assert _leftovers(run) == []


def test_a_sigkilled_owner_leaves_nothing_behind() -> None:
    """The reaper tears down a Patroni run whose owning process was SIGKILLed."""
    code = ("from harness.topology.patroni import PatroniCluster\n"
            "c = PatroniCluster(nodes=2).up()\n"
            "print(c.run_id, flush=True)\n"
            "import time; time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout is not None
    run = proc.stdout.readline().strip()
    assert run, "the owner did not bring the topology up"
    assert _leftovers(run), "nothing of the run is running"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while _leftovers(run) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _leftovers(run) == []


def test_kill_manager_keeps_postgres_and_kill_takes_both() -> None:
    with PatroniCluster(nodes=2) as c:
        leader = c.wait_one_leader(timeout=30)
        other = next(n for n in c.names if n != leader)
        c.kill_manager(other)
        assert c._manager_pid(other) is None and c._postmaster_pid(other) is not None
        c.start(other)
        c.kill(other, wait=False)
        assert c._manager_pid(other) is None and c._postmaster_pid(other) is None
        assert c.wait_one_leader(timeout=10) == leader
