"""The fault vocabulary on a real pair behind the fault proxy: each fault's client-visible effect
and the connection events it leaves in the history."""

from __future__ import annotations

import socket
import time

import psycopg
import pytest

from harness.errors import ConfigError
from harness.faults import Faults
from harness.history import History
from harness.topology import Pair


@pytest.fixture(scope="module")
def proxied_pair():
    history = History()
    with Pair(mode="sync", mirror_readable=True, history=history) as pair:
        yield pair, history


def connect_seconds(dsn: str, timeout: float = 5) -> tuple[float, BaseException | None]:
    t0 = time.monotonic()
    try:
        with psycopg.connect(dsn, connect_timeout=timeout) as conn:
            conn.execute("SELECT 1")
        return time.monotonic() - t0, None
    except psycopg.OperationalError as exc:
        return time.monotonic() - t0, exc


def raw_connect(address: tuple[str, int], payload: bytes = b"\x00\x00\x00\x08\x04\xd2\x16\x2f",
                wait: float = 0.5) -> str:
    """Open a TCP connection, send an SSLRequest, and say what came back."""
    with socket.socket() as s:
        s.settimeout(wait)
        try:
            s.connect(address)
        except ConnectionRefusedError:
            return "refused"
        s.sendall(payload)
        try:
            data = s.recv(1)
        except TimeoutError:
            return "silent"
        except ConnectionResetError:
            return "reset"
        return "answered" if data else "closed"


def test_addresses_are_proxies_and_keep_meaning_their_node_after_switchover(proxied_pair):
    pair, history = proxied_pair
    before = {n.name: n.client_address for n in pair.nodes}
    for node in pair.nodes:
        assert node.client_address != node.server_address
    mark = len(history)
    done = Faults(pair, history).switchover()
    assert done.result.principal == "n2"
    assert {n.name: n.client_address for n in pair.nodes} == before
    events = history.events()[mark:]
    fault = [e for e in events if e.type.startswith("fault.")]
    assert [e.type for e in fault] == ["fault.start", "fault.end"] and fault[1].get("error") is None
    roles = [(e.get("node"), e.get("new_role")) for e in events if e.type == "role.change"]
    assert ("n2", "principal") in roles and ("n1", "mirror") in roles
    # the old principal now streams from n2 through its own replication proxy
    repl = [e for e in events if e.type == "conn.upstream_connected" and e.get("proxy", "").endswith("repl-n1")]
    assert repl and repl[-1].get("upstream") == f"127.0.0.1:{pair.node('n2').server_address[1]}"
    with psycopg.connect(pair.node("n1").dsn()) as conn:  # n1 is now the mirror: hot standby
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
    with psycopg.connect(pair.principal.dsn()) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
    pair.switchover()


def test_connection_events_record_each_attempt(proxied_pair):
    pair, history = proxied_pair
    mark = len(history)
    with psycopg.connect(pair.principal.dsn()) as conn:
        conn.execute("SELECT 1")
    time.sleep(0.1)
    events = [e for e in history.events()[mark:] if e.type.startswith("conn.")]
    types = [e.type for e in events]
    assert types[:2] == ["conn.accepted", "conn.upstream_connected"] and types[-1] == "conn.closed"
    assert events[0].get("node") == pair.principal.name
    closed = events[-1]
    assert closed.get("by") == "client" and closed.get("bytes_up") > 0 and closed.get("bytes_down") > 0


def test_partition_blackhole_refuse_reset_have_their_client_visible_effect(proxied_pair):
    pair, history = proxied_pair
    faults = Faults(pair, history)
    node = pair.mirror
    assert raw_connect(node.client_address) == "answered"
    with faults.partition(node.name, how="blackhole"):
        assert raw_connect(node.client_address) == "silent"
        seconds, error = connect_seconds(node.dsn(), timeout=2)
        assert error is not None and seconds >= 1.9
    with faults.partition(node.name, how="refuse"):
        assert raw_connect(node.client_address) == "refused"
        seconds, error = connect_seconds(node.dsn())
        assert error is not None and seconds < 0.5
    with faults.partition(node.name, how="reset"):
        assert raw_connect(node.client_address) in ("reset", "closed")
    assert raw_connect(node.client_address) == "answered"
    starts = [e for e in history.events("fault.start") if e.get("fault") == "partition"]
    ends = [e for e in history.events("fault.end") if e.get("fault") == "partition"]
    assert [e.get("params")["how"] for e in starts[-3:]] == ["blackhole", "refuse", "reset"]
    assert len(ends) >= 3 and all(e.get("error") is None for e in ends[-3:])


def test_latency_adds_delay_per_round_trip(proxied_pair):
    pair, history = proxied_pair
    faults = Faults(pair, history)
    with psycopg.connect(pair.principal.dsn(), autocommit=True) as conn:
        t0 = time.monotonic()
        conn.execute("SELECT 1")
        base = time.monotonic() - t0
        with faults.latency(pair.principal.name, 100):
            t0 = time.monotonic()
            conn.execute("SELECT 1")
            delayed = time.monotonic() - t0
        assert 0.09 <= delayed - base <= 0.2, (base, delayed)


def test_scheduled_fault_with_after_and_duration(proxied_pair):
    pair, history = proxied_pair
    faults = Faults(pair, history)
    address = pair.mirror.client_address
    with faults.partition(pair.mirror.name, how="refuse", after=0.2, duration=0.4):
        assert raw_connect(address) == "answered"
        time.sleep(0.35)
        assert raw_connect(address) == "refused"
        time.sleep(0.5)
    assert raw_connect(address) == "answered"
    end = [e for e in history.events("fault.end") if e.get("fault") == "partition"][-1]
    assert 0.35 <= end.get("seconds") <= 0.6


def test_cut_replication_blocks_sync_commits_until_healed(proxied_pair):
    """Cutting the mirror's replication link makes a synchronous commit wait (DUR-1's guarantee);
    the commit completes once the link is back."""
    import threading

    pair, history = proxied_pair
    faults = Faults(pair, history)
    with psycopg.connect(pair.principal.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS cut (x int)")
    done = threading.Event()

    def insert() -> None:
        with psycopg.connect(pair.principal.dsn(), autocommit=True) as conn:
            conn.execute("INSERT INTO cut VALUES (1)")
        done.set()

    with faults.cut_replication():
        worker = threading.Thread(target=insert)
        worker.start()
        assert not done.wait(0.7), "a synchronous commit completed with its standby cut off"
    assert done.wait(15), "the commit did not complete after the replication link came back"
    worker.join()


def test_server_faults_and_heal_all(proxied_pair):
    pair, history = proxied_pair
    faults = Faults(pair, history)
    mirror = pair.mirror.name
    with faults.stop(mirror, mode="immediate"):
        assert pair.node(mirror).state == "stopped"
        assert raw_connect(pair.node(mirror).client_address) in ("closed", "reset")
    assert pair.node(mirror).state == "running"
    with faults.pause(mirror):
        assert raw_connect(pair.node(mirror).client_address) == "silent"
    faults.apply_persistent("partition", mirror, how="refuse")
    faults.apply_persistent("latency", pair.principal.name, ms=50)
    faults.heal_all()
    assert raw_connect(pair.node(mirror).client_address) == "answered"
    assert all(not pair.links.client.get_proxy(n).toxics for n in pair.links.proxy_names())


def test_bad_fault_requests_are_config_errors(proxied_pair):
    pair, _ = proxied_pair
    faults = Faults(pair)
    with pytest.raises(ConfigError, match="how= must be"):
        faults.partition("n1", how="sideways")
    with pytest.raises(ConfigError, match="stream must be"):
        faults.latency("n1", 10, stream="sideways")
    with pytest.raises(ConfigError, match=">= 0"):
        faults.latency("n1", -5)
    with pytest.raises(ConfigError, match="need the fault proxy"):
        with Faults(Pair(links="direct")).partition("n1"):
            pass
