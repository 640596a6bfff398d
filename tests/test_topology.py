"""Local backend, real PostgreSQL servers: role operations, replication direction, durability in
sync mode (DUR-1), the inactive mirror (MIR-7 stand-in), the published partner (MIR-9 stand-in) and
clear errors for invalid requests."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psycopg
import pytest

from harness.errors import ConfigError, InvalidOperation, TopologyError, UnknownNodeError
from harness.history import History
from harness.topology import Group, Pair


def streaming_standbys(node) -> set[str]:
    """Names of the standbys streaming from ``node`` (asked on the principal)."""
    with node.admin() as conn:
        rows = conn.execute("SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'")
        return {r[0] for r in rows.fetchall()}


def in_recovery(node) -> bool:
    with node.admin() as conn:
        return conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]


def write(node, key: int) -> None:
    with psycopg.connect(node.dsn(), autocommit=True, connect_timeout=5) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS kv (k int primary key)")
        conn.execute("INSERT INTO kv VALUES (%s)", (key,))


def keys(node) -> set[int]:
    with psycopg.connect(node.dsn(), autocommit=True, connect_timeout=5) as conn:
        return {r[0] for r in conn.execute("SELECT k FROM kv").fetchall()}


def test_pair_comes_up_streaming_with_roles_and_addresses():
    history = History()
    with Pair(mode="sync", history=history, links="direct") as pair:
        assert [n.role for n in pair.nodes] == ["principal", "mirror"]
        assert all(n.state == "running" for n in pair.nodes)
        assert streaming_standbys(pair.principal) == {pair.mirror.name}
        assert pair.principal.client_address == pair.principal.server_address  # no proxy in this test
        with pair.principal.admin() as conn:
            assert conn.execute("SHOW synchronous_standby_names").fetchone()[0] == "*"
        assert pair.partner_setting() == "{}:{}".format(*pair.mirror.client_address)
        run_dir = pair.path
        assert (run_dir / "state.json").exists()
    assert not run_dir.exists()
    types = [e.type for e in history.events()]
    assert types[0] == "node.start" and "topology.up" in types and types[-1] == "topology.down"


def test_switchover_swaps_roles_and_replication_direction_and_partner():
    with Pair(mode="sync") as pair:
        write(pair.principal, 1)
        result = pair.switchover()
        assert result.fault == "switchover" and result.node == "n1" and result.principal == "n2"
        assert 0 < result.seconds < 10 and result.ended_at >= result.started_at
        assert pair.principal.name == "n2" and pair.node("n1").role == "mirror"
        assert streaming_standbys(pair.principal) == {"n1"}
        assert pair.partner_setting() == "{}:{}".format(*pair.node("n1").client_address)
        write(pair.principal, 2)
        assert keys(pair.principal) == {1, 2}
        pair.switchover()
        assert pair.principal.name == "n1" and streaming_standbys(pair.principal) == {"n2"}
        assert keys(pair.principal) == {1, 2}


def _dsm_segments() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("PostgreSQL.*")}


def test_killed_and_torn_down_servers_leave_no_shared_memory_behind() -> None:
    """Nothing leaked: a killed server (failover's kill -9, a teardown) cannot remove its POSIX
    dynamic shared memory segments, which then stay in /dev/shm (RAM) for good - 2 per server, half
    a megabyte each, 19,000 of them on this machine after a day of runs. The nodes keep them in their
    data directory instead (``dynamic_shared_memory_type = mmap``), which goes with the run."""
    before = _dsm_segments()
    with Pair(mode="async", links="direct") as pair:
        with pair.principal.admin() as conn:  # the mirror accepts no login (hot_standby=off)
            assert conn.execute("SHOW dynamic_shared_memory_type").fetchone()[0] == "mmap"
        pair.failover()
        pair.rejoin()
    assert _dsm_segments() - before == set()


def test_failover_promotes_mirror_and_rejoin_brings_old_principal_back():
    with Pair(mode="sync") as pair:
        write(pair.principal, 1)
        old_pid = pair.principal.pid
        result = pair.failover()
        assert result.principal == "n2" and pair.node("n1").state == "killed"
        assert not any(True for _ in [old_pid] if _pid_exists(old_pid))
        write(pair.principal, 2)  # a sync pair without its mirror runs exposed: commits go on
        with pytest.raises(InvalidOperation, match="mirror is not running"):
            pair.switchover()
        pair.rejoin()
        assert pair.node("n1").state == "running" and pair.node("n1").role == "mirror"
        assert streaming_standbys(pair.principal) == {"n1"}
        with pair.principal.admin() as conn:
            assert conn.execute("SHOW synchronous_standby_names").fetchone()[0] == "*"
        pair.switchover()
        assert pair.principal.name == "n1" and keys(pair.principal) == {1, 2}


def _pid_exists(pid: int) -> bool:
    from harness.topology.process import pid_alive

    return pid_alive(pid)


def test_stop_start_kill_pause_resume_each_node():
    with Pair(mode="async", mirror_readable=True) as pair:
        mirror = pair.mirror.name
        assert pair.stop(mirror, mode="immediate").node == mirror
        assert pair.node(mirror).state == "stopped"
        pair.start(mirror)
        assert in_recovery(pair.node(mirror)) and streaming_standbys(pair.principal) == {mirror}
        pair.kill("n1")
        assert pair.node("n1").state == "killed" and pair.principal.name == "n1"
        pair.start("n1")  # crash recovery, same role
        write(pair.principal, 7)
        pair.pause("n1", scope="postmaster")
        assert pair.node("n1").state == "paused"
        with pytest.raises(psycopg.OperationalError):  # a stopped postmaster accepts no new session
            psycopg.connect(pair.node("n1").dsn(), connect_timeout=2)
        pair.resume("n1")
        assert keys(pair.principal) == {7}
        pair.pause("n1", scope="all")
        pair.resume("n1")
        pair.stop("n1", mode="fast")
        pair.start("n1")
        assert keys(pair.principal) == {7}


def test_inactive_mirror_rejects_logins_at_once_and_readable_mirror_accepts():
    with Pair(mode="async", mirror_readable=False) as pair:
        t0 = time.monotonic()
        with pytest.raises(psycopg.OperationalError) as info:
            psycopg.connect(pair.mirror.dsn(), connect_timeout=5)
        elapsed = time.monotonic() - t0
        assert "not accepting connections" in str(info.value) or "Hot standby mode is disabled" in str(info.value)
        assert elapsed < 0.5, f"inactive mirror took {elapsed:.3f} s to refuse"
    with Pair(mode="async", mirror_readable=True) as pair:
        with psycopg.connect(pair.mirror.dsn(), connect_timeout=5) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True


def test_twenty_switchovers_in_sync_mode_lose_no_acknowledged_commit():
    """DUR-1: with synchronous replication, every commit the writer saw acknowledged survives 20
    planned switchovers. The writer finds the principal itself (libpq multi-host, read-write)."""
    with Pair(mode="sync") as pair:
        write(pair.principal, 0)
        a, b = pair.nodes
        dsn = (f"host={a.client_address[0]},{b.client_address[0]} port={a.client_address[1]},"
               f"{b.client_address[1]} dbname=app user=app password={pair.engine.credentials.password} "
               "target_session_attrs=read-write "
               f"connect_timeout=2")
        acked: list[int] = [0]
        failures: list[str] = []
        stop = threading.Event()

        def writer() -> None:
            key = 1
            conn = None
            while not stop.is_set():
                try:
                    if conn is None:
                        conn = psycopg.connect(dsn, autocommit=True)
                    conn.execute("INSERT INTO kv VALUES (%s)", (key,))
                    acked.append(key)
                except psycopg.Error as exc:
                    failures.append(type(exc).__name__)
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.01)
                key += 1
            if conn is not None:
                conn.close()

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            for _ in range(20):
                time.sleep(0.05)
                pair.switchover()
            time.sleep(0.2)
        finally:
            stop.set()
            thread.join(30)
        present = keys(pair.principal)
        lost = sorted(set(acked) - present)
        assert len(acked) > 40, f"the writer made too little progress ({len(acked)} commits)"
        assert not lost, f"DUR-1: {len(lost)} acknowledged commits lost: {lost[:10]}"


def test_group_switchover_and_failover_keep_every_standby_following():
    with Group(nodes=3, mode="sync", mirror_readable=True) as group:
        assert [n.role for n in group.nodes] == ["principal", "standby", "standby"]
        assert streaming_standbys(group.principal) == {"n2", "n3"}
        write(group.principal, 1)
        group.switchover("n3")
        assert group.principal.name == "n3"
        assert streaming_standbys(group.principal) == {"n1", "n2"}
        group.failover("n2")  # kills n3
        assert group.principal.name == "n2" and group.node("n3").state == "killed"
        assert streaming_standbys(group.principal) == {"n1"}
        group.rejoin("n3")
        assert streaming_standbys(group.principal) == {"n1", "n3"}
        write(group.principal, 2)
        assert keys(group.principal) == {1, 2}


def test_invalid_requests_raise_clear_errors():
    with pytest.raises(ConfigError, match="mode must be"):
        Pair(mode="semi")
    with pytest.raises(ConfigError, match="at least 3 nodes"):
        Group(nodes=2)
    with Pair(mode="async") as pair:
        with pytest.raises(UnknownNodeError, match=r"unknown node 'n9'.*nodes: n1, n2"):
            pair.stop("n9")
        with pytest.raises(InvalidOperation, match="n2 is running, not paused"):
            pair.resume("n2")
        with pytest.raises(ConfigError, match="stop mode"):
            pair.stop("n2", mode="gentle")
        with pytest.raises(ConfigError, match="pause scope"):
            pair.pause("n2", scope="half")
        pair.kill("n2")
        with pytest.raises(InvalidOperation, match="failover needs a running mirror"):
            pair.failover()
        with pytest.raises(InvalidOperation, match="n2 is killed"):
            pair.kill("n2")
        with pytest.raises(InvalidOperation, match="already the principal"):
            pair.start("n2")
            pair.switchover("n1")
    assert issubclass(InvalidOperation, TopologyError)


def test_rejoin_reclones_when_pg_rewind_cannot():
    """If the WAL pg_rewind needs is gone, rejoin() falls back to a fresh base backup (and says so).
    pg_rewind's single-user crash recovery of the killed node PANICs there, so it never removes its
    shared memory: the data directory's own settings keep that in the data directory too (it left
    one segment in /dev/shm per run)."""
    history = History()
    before = _dsm_segments()
    with Pair(mode="sync", history=history, links="direct") as pair:
        write(pair.principal, 1)
        pair.failover()
        write(pair.principal, 2)
        for segment in (pair.node("n1").datadir / "pg_wal").glob("0000*"):
            segment.unlink()  # the old principal's WAL: nothing left for pg_rewind to read
        pair.rejoin()
        reclones = history.events("node.reclone")
        assert [e.get("node") for e in reclones] == ["n1"] and "pg_rewind" in reclones[0].get("reason")
        assert streaming_standbys(pair.principal) == {"n1"}
        pair.switchover()
        assert pair.principal.name == "n1" and keys(pair.principal) == {1, 2}
    assert _dsm_segments() - before == set()


def test_wait_writable_does_not_take_a_hot_standbys_ready_status_for_a_principal():
    """A hot standby's ``postmaster.pid`` says ``ready`` while it is in recovery: waiting for a
    promotion must not stop there (a failover of a readable group then ran WAL functions on a node
    still in recovery), so the wait for an unpromoted hot standby times out with a TopologyError."""
    from pathlib import Path

    from harness.topology.postgres import read_status, wait_writable

    with Group(nodes=3, mode="async", mirror_readable=True) as group:
        s = group._node_state("n2")
        assert read_status(Path(s.datadir)) == "ready"  # PostgreSQL's own report for a hot standby
        t0 = time.monotonic()
        with pytest.raises(TopologyError, match="still in recovery"):
            wait_writable(group.socket_dir("n2"), s.port, s.pid, group.path / "n2" / "postgres.log",
                          timeout=1.0, datadir=Path(s.datadir))
        assert time.monotonic() - t0 >= 1.0
        group.failover("n2")  # and a real promotion is waited for: the new principal takes writes
        write(group.principal, 7)
        assert group.principal.name == "n2" and 7 in keys(group.principal)
        # told that it is one, the same wait logs in as before (the status alone proves nothing)
        s = group._node_state("n3")
        with pytest.raises(TopologyError, match="still in recovery"):
            wait_writable(group.socket_dir("n3"), s.port, s.pid, group.path / "n3" / "postgres.log",
                          timeout=0.5, datadir=Path(s.datadir), hot_standby=True)


def test_wait_writable_trusts_ready_of_a_server_known_not_to_be_a_hot_standby(tmp_path):
    """A promotion of a ``hot_standby=off`` standby that ended before the first poll: the status
    file already says ``ready``. Told the server is no hot standby, the wait returns on the file
    without a login (a flake of the prepared-switchover test); not told, it logs in to check - here
    there is no server to log in to, so it times out."""
    from harness.topology.postgres import wait_writable

    (tmp_path / "postmaster.pid").write_text(f"{os.getpid()}\n{tmp_path}\n0\n1\n/tmp\n*\n0 0\nready\n")
    wait_writable(tmp_path / "no-socket", 1, os.getpid(), tmp_path / "log", timeout=2.0, datadir=tmp_path,
                  hot_standby=False)
    with pytest.raises(TopologyError, match="did not become writable"):
        wait_writable(tmp_path / "no-socket", 1, os.getpid(), tmp_path / "log", timeout=0.3, datadir=tmp_path)
