"""The ``pgpool`` PER client (real pgpool-II 4.3 from Debian, raw mode): registered, serves logins
through the pair's principal, is re-pointed and restarted after a coordinated switchover (its
sessions are lost - pgpool cannot keep them), and leaves no process behind."""

from __future__ import annotations

import psycopg
import pytest

from harness.clients import persistent as adapters
from harness.clients import registry
from harness.faults import Faults
from harness.topology import Pair
from harness.topology.process import pid_alive


def test_pgpool_registered() -> None:
    assert registry.resolve_client("pgpool", "persistent").factory is adapters.pgpool


def test_pgpool_follows_a_switchover_and_stops_cleanly() -> None:
    with Pair(mode="async", links="direct") as pair:
        client = adapters.open_client(adapters.pgpool, pair=pair, drain_window=2.0, recovery_window=5.0)
        pid = client.pid
        try:
            assert client.describe()["version"].startswith("pgpool-II")
            with psycopg.connect(client.dsn(), autocommit=True) as conn:
                before = conn.execute("SELECT inet_server_port()").fetchone()[0]  # type: ignore[index]
                assert before == pair.principal.server_address[1]
                faults = Faults(pair)
                stop = faults.coordinate(client)
                faults.switchover()
                stop()
                with pytest.raises(psycopg.Error):  # the restart ended the session (PER-1: not kept)
                    conn.execute("SELECT 1")
                assert conn.broken or conn.closed
            with psycopg.connect(client.dsn(), autocommit=True) as conn:
                after = conn.execute("SELECT inet_server_port()").fetchone()[0]  # type: ignore[index]
            assert after == pair.principal.server_address[1] != before
            assert client.pid != pid and not pid_alive(pid)
            pid = client.pid
        finally:
            client.stop()
        assert not pid_alive(pid)
