"""Clients attached to a run from the command line (PER-1, PER-4): ``persistent-proxy --run``
and ``pgbouncer --run`` are registered in the run state, listed by ``status --json`` (no password),
drained and resumed by a plain ``fault --run ID switchover`` from another process, and stopped by
``down``. Real PostgreSQL pair, real processes, real psycopg sessions."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from harness.topology import Pair
from harness.topology.process import pid_alive

CLI = [sys.executable, "-m", "harness.cli"]


def _cli(*args: str, timeout: float = 120) -> dict[str, Any]:
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _start(*args: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        pytest.fail(f"{args[0]} did not start: {proc.stderr.read() if proc.stderr else ''}")
    return proc, json.loads(line)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return err


@pytest.fixture(scope="module")
def run() -> Iterator[Pair]:
    with Pair(mode="async", links="direct") as pair:
        yield pair


def _server_port(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT inet_server_port()").fetchone()[0]  # type: ignore[index]


def test_persistent_proxy_run_switchover_from_cli(run: Pair) -> None:
    """The proxy started with --run goes to the nodes' server addresses and says so; status lists it
    without any secret; a plain ``fault --run ID switchover`` keeps the session (same front
    connection, state intact, now on the new principal); SIGTERM removes it from the run state."""
    password = run.engine.credentials.password
    proc, info = _start("persistent-proxy", "--run", run.run_id)
    try:
        assert info["backend"] == "server" and info["run"] == run.run_id
        status_text = subprocess.run([*CLI, "status", "--run", run.run_id, "--json"], capture_output=True,
                                     text=True, timeout=60).stdout
        assert password not in status_text and "token" not in status_text
        [listed] = json.loads(status_text)["persistent_proxies"]
        assert listed["name"] == info["name"] and listed["kind"] == "reference"
        assert listed["listen"] == info["listen"] and listed["admin"] == info["admin"]
        with psycopg.connect(listed["dsn"], autocommit=True) as conn:
            conn.execute("SET application_name = 'kept-by-cli'")
            before = _server_port(conn)
            assert before == run.principal.server_address[1]  # the server address, not a fault proxy
            result = _cli("fault", "--run", run.run_id, "switchover", "--json")
            run.refresh()
            assert result["principal"] == run.principal.name
            after = _server_port(conn)  # the same front connection, no error
            assert after == run.principal.server_address[1] and after != before
            assert conn.execute("SHOW application_name").fetchone()[0] == "kept-by-cli"  # type: ignore[index]
    finally:
        err = _stop(proc)
    assert "the nodes' server addresses" in err
    assert password not in err
    listed_after = _cli("status", "--run", run.run_id, "--json")["persistent_proxies"]
    assert listed_after == []


def test_cli_switchover_pre_attaches_on_a_readable_mirror() -> None:
    """With a hot-standby mirror, ``fault --run ID switchover`` tells the CLI proxy the node about to be
    promoted at its server address (``POST /prepare``), and the kept session is the one pre-attached
    there (counter ``pre_attached``), its state intact on the new principal."""
    with Pair(mode="async", links="direct", mirror_readable=True) as pair:
        proc, info = _start("persistent-proxy", "--run", pair.run_id)
        try:
            with psycopg.connect(info["dsn"], autocommit=True) as conn:
                conn.execute("SET application_name = 'warm-by-cli'")
                _cli("fault", "--run", pair.run_id, "switchover", "--json")
                pair.refresh()
                assert _server_port(conn) == pair.principal.server_address[1]
                assert conn.execute("SHOW application_name").fetchone()[0] == "warm-by-cli"  # type: ignore[index]
            status = json.loads(subprocess.run([*CLI, "status", "--run", pair.run_id, "--json"], capture_output=True,
                                               text=True, timeout=60).stdout)
            admin = status["persistent_proxies"][0]["admin"]
            counters = httpx.get(f"http://{admin}/status", timeout=10).json()["counters"]
            assert counters["kept"] == 1 and counters["pre_attached"] == 1
        finally:
            _stop(proc)


def test_down_stops_attached_clients() -> None:
    """``down`` stops a proxy attached with --run (it is in the run's processes)."""
    with Pair(mode="async", links="direct") as pair:
        proc, info = _start("persistent-proxy", "--run", pair.run_id, "--name", "to-be-downed")
        assert info["name"] == "to-be-downed"
        pid = proc.pid
    # the pair's teardown is ``down`` of the run
    proc.wait(30)
    assert not pid_alive(pid)


def test_pgbouncer_run_switchover_from_cli(run: Pair) -> None:
    """``pgbouncer --run ID --mode transaction``: listed by status, paused / re-pointed / resumed by
    a plain ``fault --run ID switchover``; its sessions go on on the new principal."""
    proc, info = _start("pgbouncer", "--run", run.run_id, "--mode", "transaction")
    try:
        [listed] = [e for e in _cli("status", "--run", run.run_id, "--json")["persistent_proxies"]
                    if e["name"] == info["name"]]
        assert listed["kind"] == "pgbouncer-transaction"
        with psycopg.connect(listed["dsn"], autocommit=True, prepare_threshold=None) as conn:
            before = _server_port(conn)
            _cli("fault", "--run", run.run_id, "switchover", "--json")
            run.refresh()
            deadline = time.monotonic() + 20
            while True:
                try:
                    after = _server_port(conn)
                    break
                except psycopg.OperationalError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            assert after == run.principal.server_address[1] and after != before
    finally:
        _stop(proc)


def test_attach_bad_inputs_are_one_line() -> None:
    """Bad input to the attach commands: one line naming the fix, exit code 2, no traceback."""
    cases = [(["persistent-proxy", "--user", "u"], "--run ID"),
             (["persistent-proxy", "--run", "nope"], "not a run ID"),
             (["pgbouncer", "--run", "1201000000-abcd"], "no run '1201000000-abcd'")]
    for args, words in cases:
        out = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in out.stderr, (args, out.stderr)
