"""The PER profile's client adapters against a real pair: real PgBouncer 1.18 (session and
transaction pooling, PAUSE / re-point + RELOAD / RESUME), the direct psycopg baseline, the reference
proxy wrapper, ``open_client`` and the registry; nothing leaks (pgbouncer stopped, even when the pair
is torn down first)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from harness.clients import persistent as adapters
from harness.clients import registry
from harness.clients.persistent import reference_client as reference
from harness.errors import ConfigError, MissingDependencyError
from harness.faults import Faults
from harness.history.core import History
from harness.topology import Pair
from harness.topology.process import pid_alive
from harness.topology.run import load_state
from harness.workload.oltp import TrackedSession

# pgbouncer is installed by `make setup` (scripts/setup.sh); a missing one fails these tests.


@pytest.fixture
def env() -> Iterator[tuple[Any, Faults, History]]:
    h = History()
    with Pair(mode="sync", history=h) as pair:
        yield pair, Faults(pair, h), h


def _front(s: TrackedSession) -> tuple[int, str | None]:
    return s.generation, s.front


def test_registry_lists_the_four_persistent_clients() -> None:
    assert set(registry.known_clients("persistent")) >= {"reference", "direct", "pgbouncer-session",
                                                          "pgbouncer-transaction"}
    assert registry.resolve_client("pgbouncer-transaction", "persistent").factory is adapters.pgbouncer_transaction


def test_pgbouncer_transaction_keeps_sessions_across_a_coordinated_switchover(env: Any) -> None:
    pair, faults, h = env
    client = adapters.open_client(adapters.pgbouncer_transaction, pair=pair, history=h, drain_window=2)
    try:
        assert client.pid is not None and pid_alive(client.pid)
        assert any(p.pid == client.pid for p in load_state(pair.path).processes)  # reaped with the run
        assert client.describe()["server_login_retry"] == 0.5 and client.version.startswith("PgBouncer 1.")
        faults.coordinate(client)
        with TrackedSession(client.dsn(), h, "s1", reconnect=False) as s:
            assert s.execute("q", "SELECT 1")[0]
            before = _front(s)
            old = pair.principal.name
            faults.switchover()
            assert pair.principal.name != old
            ok, _ = s.execute("q", "SELECT pg_is_in_recovery()")
            assert ok and _front(s) == before
        pause = h.events("pgbouncer.pause")[0]
        assert pause.get("completed_in_window") is True
        resume = h.events("pgbouncer.resume")[0]
        host, port = pair.principal.client_address
        assert resume.get("target") == f"{host}:{port}" and resume.get("errors") == []
        ini = (client.dir / "pgbouncer.ini").read_text()
        assert f"port={pair.principal.client_address[1]}" in ini and "server_login_retry = 0.5" in ini
    finally:
        pid, folder = client.pid, client.dir
        client.stop()
    assert not pid_alive(pid) and not folder.exists()
    assert all(p.pid != pid for p in load_state(pair.path).processes)


def test_pgbouncer_session_pause_never_completes_and_sessions_are_lost(env: Any) -> None:
    pair, faults, h = env
    with adapters.pgbouncer_session(pair=pair, history=h, drain_window=0.8) as client:
        faults.coordinate(client)
        with TrackedSession(client.dsn(), h, "s1", reconnect=False) as s:
            assert s.execute("q", "SELECT 1")[0]
            t0 = time.monotonic()
            faults.switchover()
            assert time.monotonic() - t0 >= 0.8
            ok, error = s.execute("q", "SELECT 1")
        assert not ok and h.events("op.fail")[-1].get("conn_lost") is True
        assert h.events("pgbouncer.pause")[0].get("completed_in_window") is False
        # pgbouncer itself is fine afterwards: a new session reaches the new principal
        with psycopg.connect(client.dsn(), autocommit=True) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False


def test_pgbouncer_is_killed_when_the_run_is_torn_down() -> None:
    pair = Pair(mode="async").up()
    client = adapters.pgbouncer_transaction(pair=pair)
    try:
        client.start()
        pid = client.pid
        pair.down()  # the run's teardown finds it (recorded PID / command line in the run directory)
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(pid)
    finally:
        client.stop()
        pair.down()


def test_missing_pgbouncer_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.clients.persistent import pgbouncer

    monkeypatch.setattr(pgbouncer, "PGBOUNCER_BIN", "/nonexistent/pgbouncer")
    with pytest.raises(MissingDependencyError, match="apt-get install -y pgbouncer"):
        pgbouncer.pgbouncer_version()


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="pool_mode must be"):
        adapters.PgBouncerClient(object(), pool_mode="statement")
    with pytest.raises(ConfigError, match="needs pair="):
        adapters.direct(pair=None)
    with pytest.raises(ConfigError, match="must be > 0"):
        adapters.reference_client(pair=object(), drain_window=0)
    with pytest.raises(ConfigError, match="lacks the PersistentClient methods"):
        adapters.open_client(lambda **kw: object(), pair=object())


def test_direct_loses_its_connection_and_reconnects_to_the_new_principal(env: Any) -> None:
    pair, faults, h = env
    client = adapters.open_client(adapters.direct, pair=pair, history=h)
    assert client.coordinates is False
    with TrackedSession(client.dsn(), h, "d1") as s:
        assert s.execute("q", "SELECT 1")[0]
        faults.switchover()
        ok, _ = s.execute("q", "SELECT 1")
        assert not ok
        ok, in_recovery = s.execute("q", "SELECT pg_is_in_recovery()")
        assert ok and in_recovery is False and s.generation == 2
    client.stop()


def test_open_client_starts_the_registered_reference_client(env: Any) -> None:
    pair, faults, h = env
    client = adapters.open_client(reference, pair=pair, history=h, drain_window=1, recovery_window=2)
    try:
        assert isinstance(client, adapters.ReferenceClient)
        faults.coordinate(client)
        with TrackedSession(client.dsn(), h, "r1", reconnect=False) as s:
            assert s.execute("set", "SET search_path TO r1, public", fetch=False)[0]
            before = _front(s)
            faults.switchover()
            ok, value = s.execute("q", "SHOW search_path")
            assert ok and value == "r1, public" and _front(s) == before
        assert [e.type for e in h.events("persist.drain")] == ["persist.drain_start", "persist.drain_end"]
    finally:
        client.stop()
