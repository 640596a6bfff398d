"""The reference persistent proxy with ``--workers N`` (a process per core, docs/persistent-proxy.md): a supervisor and
N worker processes on one listen address. Real PostgreSQL pair, real CLI processes, real psycopg
sessions: cancels reach the session whichever worker receives them, a ``fault --run ID switchover``
keeps the sessions of every worker (PER-1), the admin API is the same (token, 403), a dead worker is
reported, and no worker outlives its supervisor (SIGTERM or SIGKILL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from harness.persistproxy.workers import combine
from harness.topology import Pair
from harness.topology.process import pid_alive

CLI = [sys.executable, "-m", "harness.cli"]


def _cli(*args: str, timeout: float = 120) -> dict[str, Any]:
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen([*CLI, "persistent-proxy", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        pytest.fail(f"persistent-proxy did not start: {proc.stderr.read() if proc.stderr else ''}")
    return proc, json.loads(line)


def _status(info: dict[str, Any]) -> dict[str, Any]:
    return httpx.get(f"http://{info['admin']}/status", timeout=30).json()


def _gone(pids: list[int], timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with Pair(mode="async", links="direct") as p:
        yield p


@pytest.fixture(scope="module")
def proxy(pair: Pair) -> Iterator[dict[str, Any]]:
    proc, info = _start("--run", pair.run_id, "--workers", "2", "--name", "two-workers")
    try:
        yield info
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def _owned_by_both(dsn: str, at_least: int = 2) -> list[psycopg.Connection]:
    """Connections until each worker owns ``at_least`` (the owner is the BackendKeyData pid % 2)."""
    conns: list[psycopg.Connection] = []
    for _ in range(40):
        conns.append(psycopg.connect(dsn, autocommit=True))
        owners = [c.info.backend_pid % 2 for c in conns]
        if owners.count(0) >= at_least and owners.count(1) >= at_least:
            return conns
    owners = [c.info.backend_pid % 2 for c in conns]
    for c in conns:
        c.close()
    pytest.fail(f"40 connections did not reach both workers (owners {owners})")


def test_listed_once_with_workers_and_sessions_tagged(pair: Pair, proxy: dict[str, Any]) -> None:
    """``status --run ID --json`` lists the supervisor once with ``workers: 2``; the admin status lists
    the sessions of both workers, each with its worker (= its cancel key's pid % 2), counters summed."""
    [listed] = [e for e in _cli("status", "--run", pair.run_id, "--json")["persistent_proxies"]
                if e["name"] == "two-workers"]
    assert listed["workers"] == 2 and listed["listen"] == proxy["listen"] and proxy["workers"] == 2
    conns = _owned_by_both(proxy["dsn"])
    try:
        status = _status(proxy)
        assert status["workers"] == 2 and status["listen"] == proxy["listen"]
        assert sorted(w["worker"] for w in status["worker_processes"]) == [0, 1]
        assert all(pid_alive(w["pid"]) for w in status["worker_processes"])
        workers = {s["session"]: s["worker"] for s in status["sessions"]}
        assert len(workers) == len(status["sessions"])  # session IDs are unique across workers
        assert sorted(set(workers.values())) == [0, 1]
        per_worker = {w["worker"]: w["sessions"] for w in status["worker_processes"]}
        assert sum(per_worker.values()) == len(status["sessions"]) >= len(conns)
        assert status["counters"]["sessions_opened"] >= len(conns)
    finally:
        for c in conns:
            c.close()


def _cancel_one(conn: psycopg.Connection) -> float:
    """Run pg_sleep(30) on ``conn``, cancel it from a new connection; seconds until it ended."""
    errors: list[BaseException] = []

    def sleep() -> None:
        try:
            conn.execute("SELECT pg_sleep(30)")
        except BaseException as exc:  # noqa: BLE001 - inspected below
            errors.append(exc)

    t = threading.Thread(target=sleep)
    t0 = time.monotonic()
    t.start()
    time.sleep(0.3)
    conn.cancel()  # psycopg opens a new connection to the proxy and sends the key it was given
    t.join(20)
    assert not t.is_alive(), "pg_sleep(30) was not cancelled within 20 s"
    assert errors and isinstance(errors[0], psycopg.errors.QueryCanceled), errors
    return time.monotonic() - t0


def test_cancel_reaches_the_owning_worker(proxy: dict[str, Any]) -> None:
    """A CancelRequest works whichever worker accepts it: sessions owned by both workers, cancelled
    until both a forwarded cancel (received by the other worker) and a local one were seen."""
    conns = _owned_by_both(proxy["dsn"], at_least=1)
    before = _status(proxy)["counters"]
    try:
        tries = 0
        while True:
            for c in conns:
                assert _cancel_one(c) < 10
                tries += 1
            counters = _status(proxy)["counters"]
            forwarded = counters["cancels_forwarded"] - before["cancels_forwarded"]
            handled = counters["cancels"] - before["cancels"]
            assert handled == tries  # every cancel reached its session's owner
            if forwarded >= 1 and handled - forwarded >= 1:
                break
            assert tries < 40, f"{tries} cancels: {forwarded} forwarded, {handled - forwarded} local"
        for c in conns:  # the sessions go on after the cancel
            assert c.execute("SELECT 1").fetchone() == (1,)
    finally:
        for c in conns:
            c.close()


def test_switchover_keeps_sessions_of_every_worker(pair: Pair, proxy: dict[str, Any]) -> None:
    """PER-1 with 2 workers: a plain ``fault --run ID switchover`` drains and resumes both workers
    through the supervisor's admin API; every session (on either worker) keeps its front connection
    and its state and is now on the new principal."""
    conns = _owned_by_both(proxy["dsn"])
    try:
        for i, c in enumerate(conns):
            c.execute(f"SET application_name = 'kept-{i}'")
        kept_before = _status(proxy)["counters"]["kept"]
        old = pair.principal.server_address[1]
        assert {c.execute("SELECT inet_server_port()").fetchone()[0] for c in conns} == {old}  # type: ignore[index]
        _cli("fault", "--run", pair.run_id, "switchover", "--json")
        pair.refresh()
        new = pair.principal.server_address[1]
        assert new != old
        for i, c in enumerate(conns):
            assert c.execute("SELECT inet_server_port()").fetchone()[0] == new  # type: ignore[index]
            assert c.execute("SHOW application_name").fetchone()[0] == f"kept-{i}"  # type: ignore[index]
        status = _status(proxy)
        assert status["counters"]["kept"] - kept_before >= len(conns)
        assert status["counters"]["closed"] == 0 and not status["draining"]
    finally:
        for c in conns:
            c.close()


def test_supervisor_admin_is_the_same_api(pair: Pair, proxy: dict[str, Any]) -> None:
    """The supervisor's admin API guards like a single proxy's (401 without the token) and passes
    the workers' refusals on (403 for a principal the proxy may not resume on)."""
    url = f"http://{proxy['admin']}"
    assert httpx.post(url + "/drain", json={}, timeout=30).status_code == 401
    token = open(proxy["token_file"]).read().strip()
    headers = {"X-Failover-Harness-Token": token}
    reply = httpx.post(url + "/resume", json={"host": "127.0.0.1", "port": 1}, headers=headers, timeout=30)
    assert reply.status_code == 403 and "not a principal this proxy may resume on" in reply.json()["error"]
    reply = httpx.post(url + "/resume", json={}, headers=headers, timeout=30)  # not draining: nothing to do
    assert reply.status_code == 200 and reply.json()["resumed"] == 0


def _standalone(pair: Pair, *extra: str) -> tuple[subprocess.Popen[str], dict[str, Any], list[int]]:
    creds = pair.engine.credentials
    env = {**os.environ, "PGPASSWORD": creds.password}
    host, port = pair.principal.server_address
    proc, info = _start("--backend", f"{host}:{port}", "--user", creds.user, "--admin", "127.0.0.1:0",
                        "--workers", "2", *extra, env=env)
    pids = [w["pid"] for w in _status(info)["worker_processes"]]
    assert len(pids) == 2 and all(pid_alive(p) for p in pids)
    return proc, info, pids


def test_sigterm_stops_every_worker(pair: Pair) -> None:
    """SIGTERM of the supervisor stops both workers and exits 0 (one shared socket here)."""
    proc, _, pids = _standalone(pair, "--listen-mode", "shared")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert _gone(pids)
    assert pair.engine.credentials.password not in err


def test_ctrl_c_to_the_process_group_is_a_stop(pair: Pair) -> None:
    """Ctrl-C in a terminal sends SIGINT to the supervisor and its workers at once: that is a stop
    (exit 0), not a dead worker, and nothing is left."""
    creds = pair.engine.credentials
    host, port = pair.principal.server_address
    proc = subprocess.Popen([*CLI, "persistent-proxy", "--backend", f"{host}:{port}", "--user", creds.user,
                             "--admin", "127.0.0.1:0", "--workers", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PGPASSWORD": creds.password},
                            start_new_session=True)
    assert proc.stdout is not None
    info = json.loads(proc.stdout.readline())
    pids = [w["pid"] for w in _status(info)["worker_processes"]]
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "died" not in err, err
    assert _gone(pids)


def test_sigkill_of_the_supervisor_leaves_no_worker(pair: Pair) -> None:
    """SIGKILL of the supervisor: its workers die with it (PR_SET_PDEATHSIG / the pipe they watch)."""
    proc, info, pids = _standalone(pair)
    creds = pair.engine.credentials
    port = info["listen"].rpartition(":")[2]
    with psycopg.connect(f"host=127.0.0.1 port={port} dbname={creds.database} user={creds.user} "
                         f"password={creds.password}", autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        proc.kill()
        proc.communicate(timeout=30)
        assert _gone(pids), [p for p in pids if pid_alive(p)]


def test_a_dead_worker_is_reported(pair: Pair) -> None:
    """A worker killed from outside: the supervisor names it, stops the other one and exits 1."""
    proc, _, pids = _standalone(pair)
    os.kill(pids[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"worker 1 (pid {pids[1]}) killed by signal SIGKILL" in err
    assert _gone(pids)


def test_down_stops_the_supervisor_and_every_worker() -> None:
    """``down`` of the run stops a ``--workers 2`` proxy attached with --run: the supervisor stops
    (a stop, not a dead worker), ``status`` showed its workers, and neither worker is left."""
    with Pair(mode="async", links="direct") as p:
        proc, info = _start("--run", p.run_id, "--workers", "2", "--name", "downed-workers")
        pids = [w["pid"] for w in _status(info)["worker_processes"]]
        assert len(pids) == 2 and all(pid_alive(pid) for pid in pids)
        human = subprocess.run([*CLI, "status", "--run", p.run_id], capture_output=True, text=True, timeout=60)
        assert "downed-workers" in human.stdout and "(2 workers)" in human.stdout
    _, err = proc.communicate(timeout=60)
    # down sends SIGTERM, stops the nodes, then SIGKILLs what is still there: the supervisor may be
    # killed while it exits; either way it stopped as asked (no worker reported dead) and left nothing
    assert proc.returncode in (0, -signal.SIGKILL), err
    assert "died" not in err
    assert _gone([proc.pid, *pids])


_ENDPOINT_PROGRAM = """
import json, os, sys
from harness.persistproxy import ProxyConfig
from harness.persistproxy.workers import Supervisor
principal, standby = json.loads(sys.argv[1]), json.loads(sys.argv[2])
config = ProxyConfig(user=sys.argv[3], password=os.environ["PGPASSWORD"], candidates=[tuple(principal)],
                     endpoints=[("custom-active", ("127.0.0.1", 0))], readonly_resolver=lambda: [tuple(standby)])
sup = Supervisor(config, 2)
sup.start()
print(json.dumps({"listen": sup.address, "endpoints": sup.endpoint_addresses}), flush=True)
try:
    sys.stdin.read()  # until the test closes it
finally:
    sup.stop_sync()
"""


def test_per10_endpoint_is_served_by_every_worker() -> None:
    """PER-10 with the Supervisor API: the read-only endpoint's socket is bound once and served by
    both workers; sessions through it go to the standby, sessions through ``listen`` to the principal."""
    with Pair(mode="async", links="direct", mirror_readable=True) as pair:
        _per10_through_workers(pair)


def _per10_through_workers(pair: Pair) -> None:
    creds = pair.engine.credentials
    [standby] = pair.standbys
    proc = subprocess.Popen([sys.executable, "-c", _ENDPOINT_PROGRAM, json.dumps(pair.principal.server_address),
                             json.dumps(standby.server_address), creds.user], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PGPASSWORD": creds.password})
    assert proc.stdout is not None and proc.stdin is not None
    try:
        info = json.loads(proc.stdout.readline())
        [(kind, (host, port))] = info["endpoints"]
        assert kind == "custom-active"
        dsn = f"host={host} port={port} dbname={creds.database} user={creds.user} password={creds.password}"
        conns = _owned_by_both(dsn, at_least=1)
        try:
            ports = {c.execute("SELECT inet_server_port()").fetchone()[0] for c in conns}  # type: ignore[index]
            assert ports == {standby.server_address[1]}
        finally:
            for c in conns:
                c.close()
        lhost, lport = info["listen"]
        with psycopg.connect(f"host={lhost} port={lport} dbname={creds.database} user={creds.user} "
                             f"password={creds.password}", autocommit=True) as conn:
            assert conn.execute("SELECT inet_server_port()").fetchone()[0] == pair.principal.server_address[1]  # type: ignore[index]
    finally:
        proc.stdin.close()  # the program stops its supervisor
        proc.wait(60)
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0, err


def test_cli_remove_node_moves_the_sessions_of_every_worker() -> None:
    """PER-9/PER-10 from the command line with 2 workers: ``--readonly-endpoint custom-active``
    sessions owned by both workers, some of each on the standby that ``fault --run ID remove-node``
    removes; the supervisor fans ``POST /remove-node`` out, so every one of them is moved (same front
    connection, state kept) and the coordinated answer counts the moves of both workers."""
    up = subprocess.run([*CLI, "up", "--topology", "pg-group3", "--mode", "async", "--mirror-readable",
                         "--detach", "--json"], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    run_id = json.loads(up.stdout)["run"]
    try:
        proc, info = _start("--run", run_id, "--workers", "2", "--readonly-endpoint", "custom-active",
                            "--drain-window", "5")
        try:
            ro_dsn = info["dsn"].replace(f"port={info['listen'].rpartition(':')[2]}",
                                         f"port={info['endpoints']['custom-active'].rpartition(':')[2]}")
            readers = _owned_by_both(ro_dsn)
            for i, c in enumerate(readers):
                c.execute(f"SET application_name = 'ro-{i}'")
            nodes = {int(n["server_address"].rpartition(":")[2]): n["name"]
                     for n in _cli("status", "--run", run_id, "--json")["nodes"] if n["role"] != "principal"}
            on = {}
            for s in _status(info)["sessions"]:
                if s["back"]:
                    on.setdefault(int(s["back"].rpartition(":")[2]), set()).add(s["worker"])
            victim = next(port for port, workers in on.items() if workers == {0, 1})  # both workers on it
            moving = sum(1 for c in readers if c.execute("SELECT inet_server_port()").fetchone()[0] == victim)  # type: ignore[index]
            removed = _cli("fault", "--run", run_id, "remove-node", nodes[victim], "--json")
            [coordinated] = removed["coordinated"]
            assert coordinated["moved"] == moving and coordinated["closed"] == 0, coordinated
            for i, c in enumerate(readers):
                assert c.execute("SELECT inet_server_port()").fetchone()[0] != victim  # type: ignore[index]
                assert c.execute("SHOW application_name").fetchone()[0] == f"ro-{i}"  # type: ignore[index]
            for c in readers:
                c.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "Traceback" not in err, err
    finally:
        subprocess.run([*CLI, "down", "--run", run_id], capture_output=True, text=True, timeout=120)


def test_bad_workers_value_is_one_line() -> None:
    """``--workers`` other than a number from 1 to 64 or ``auto``: one line, exit 2."""
    for value, words in (("0", "from 1 to 64"), ("many", "'auto'")):
        out = subprocess.run([*CLI, "persistent-proxy", "--backend", "127.0.0.1:1", "--user", "u",
                              "--workers", value], capture_output=True, text=True, timeout=60)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and words in lines[0], out.stderr


def test_combine_sums_joins_and_keeps_shape() -> None:
    """The supervisor's combination of worker answers: ints summed, floats the largest, lists
    joined, booleans or-ed, nested objects combined, the first non-null value otherwise."""
    a = {"kept": [1, 3], "closed": [], "seconds": 0.5, "counters": {"kept": 2, "closed_by_reason": {"PER-5 x": 1}},
         "principal": None, "draining": False}
    b = {"kept": [2], "closed": [{"session": 4}], "seconds": 1.5, "counters": {"kept": 1, "closed_by_reason": {}},
         "principal": "127.0.0.1:5", "draining": True}
    assert combine([a, b]) == {"kept": [1, 3, 2], "closed": [{"session": 4}], "seconds": 1.5,
                               "counters": {"kept": 3, "closed_by_reason": {"PER-5 x": 1}},
                               "principal": "127.0.0.1:5", "draining": True}
