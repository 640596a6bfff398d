"""The reference proxy's resume without a probe login (the PER-1 stall; PER-1, PER-3): told where the
new principal is, it re-attaches every kept session at once and lets each session's own login show
that the server is out of recovery (``in_hot_standby``), instead of logging in once more to ask
first. Checked against real pairs, from the servers' own connection logs: no extra login on the new
principal; a resume told a hot standby still in recovery releases nothing there, waits on one probe
loop (not on every session's logins) and releases the sessions once the node is promoted; one never
promoted closes them at the recovery window's end (PER-3)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import psycopg

from harness.clients.persistent.reference import ReferenceClient
from harness.faults import Faults
from harness.history.core import History
from harness.topology import Pair

_AUTHORIZED = "connection authorized: user=app"


def _log_connections(node: Any) -> None:
    """Turn ``log_connections`` on in ``node``'s running server (a mirror that takes no login too)."""
    with (node.datadir / "postgresql.auto.conf").open("a") as f:
        f.write("log_connections = on\n")
    os.kill(node.pid, signal.SIGHUP)
    time.sleep(0.3)  # the postmaster rereads its configuration on SIGHUP


def _app_logins(pair: Any, node: Any) -> int:
    """How many logins of the test user ``node``'s server log shows so far (log_connections)."""
    return (pair.path / node.name / "postgres.log").read_text().count(_AUTHORIZED)


def _sessions(client: ReferenceClient, n: int, prefix: str) -> list[psycopg.Connection[Any]]:
    """``n`` sessions through the proxy, each with its own ``application_name`` (state to keep, PER-2)."""
    conns = [psycopg.connect(client.dsn(), autocommit=True, connect_timeout=5) for _ in range(n)]
    for i, c in enumerate(conns):
        c.execute(f"SET application_name = '{prefix}{i}'")
    return conns


def _kept_on_principal(conns: list[psycopg.Connection[Any]], prefix: str) -> None:
    """Each session kept its ``application_name`` and now runs on a node out of recovery; closes them."""
    for i, c in enumerate(conns):
        assert c.execute("SELECT current_setting('application_name'), pg_is_in_recovery()").fetchone() \
            == (f"{prefix}{i}", False)
        c.close()


def test_cold_resume_logs_in_once_per_session_and_no_more() -> None:
    h = History()
    with Pair(mode="async", history=h) as pair:  # mirror not readable: no pre-attach, a cold resume
        faults = Faults(pair, h)
        with ReferenceClient(pair, h, drain_window=5.0, recovery_window=20.0) as client:
            faults.coordinate(client)
            conns = _sessions(client, 3, "resume")
            new = pair.mirror
            _log_connections(new)
            before = _app_logins(pair, new)
            faults.switchover()
            resumed = h.events("coord.after_done")[-1].get("result")
            assert resumed["resumed"] == 3 and resumed["closed"] == []
            _kept_on_principal(conns, "resume")
            time.sleep(0.2)  # the log lines are written by the backends themselves: all are there
            assert _app_logins(pair, new) - before == 3, "one login per kept session, no probe login"


def test_resume_to_a_standby_waits_on_one_probe_and_releases_after_its_promotion() -> None:
    h = History()
    with Pair(mode="async", mirror_readable=True, history=h) as pair:
        with ReferenceClient(pair, h, drain_window=5.0, recovery_window=30.0, pre_attach=False) as client:
            conns = _sessions(client, 4, "held")
            standby = pair.mirror
            _log_connections(standby)
            client.before_switchover()
            before = _app_logins(pair, standby)
            answers: list[Any] = []
            ran: list[Any] = []

            def held_statement() -> None:  # held by the drain's gate until the resume releases it
                ran.append(conns[0].execute("SELECT pg_is_in_recovery()").fetchone()[0])

            resume = threading.Thread(target=lambda: answers.append(client.after_switchover(standby.client_address)))
            statement = threading.Thread(target=held_statement)
            resume.start()
            statement.start()
            time.sleep(1.5)
            assert resume.is_alive() and ran == [], "nothing is released on a node still in recovery"
            during = _app_logins(pair, standby) - before
            # 4 sessions' first logins, then the one probe loop (every 0.1 s), not 4 logins per retry
            assert 4 <= during <= 4 + 20, f"{during} logins in 1.5 s on the standby"
            pair.failover(standby.name)
            resume.join(30)
            statement.join(30)
            assert answers and answers[0]["resumed"] == 4 and answers[0]["closed"] == []
            assert ran == [False]
            _kept_on_principal(conns, "held")


def test_resume_to_a_standby_never_promoted_closes_the_sessions_at_the_window_end() -> None:
    h = History()
    with Pair(mode="async", mirror_readable=True, history=h) as pair:
        with ReferenceClient(pair, h, drain_window=5.0, recovery_window=1.5, pre_attach=False) as client:
            conns = _sessions(client, 2, "never")
            client.before_switchover()
            t0 = time.monotonic()
            resumed = client.after_switchover(pair.mirror.client_address)
            took = time.monotonic() - t0
            assert resumed["resumed"] == 0
            assert sorted(c["rule"] for c in resumed["closed"]) == ["PER-3", "PER-3"]
            # not before the window's end (the node answers logins, but stays in recovery), nor long after
            assert took >= 1.4, f"closed after {took:.2f} s, before the recovery window of 1.5 s ended"
            assert took <= 6.0, f"closed after {took:.2f} s, long after the recovery window of 1.5 s"
            for c in conns:
                try:
                    c.execute("SELECT 1")
                except psycopg.OperationalError as exc:
                    assert "PER-3" in str(exc)
                else:
                    raise AssertionError("a session was kept on a node that never left recovery")
                c.close()


def test_a_resume_that_finds_no_principal_lists_every_session_it_closed() -> None:
    """Not told where (the resolver's answer is probed first): the principal killed after the drain
    and no failover, so the give-up at the window's end closes both kept sessions and says so."""
    h = History()
    with Pair(mode="async", history=h) as pair:
        with ReferenceClient(pair, h, drain_window=5.0, recovery_window=1.5) as client:
            conns = _sessions(client, 2, "lost")
            client.before_switchover()
            pair.kill(pair.principal.name)
            resumed = client.proxy.resume()
            assert resumed["resumed"] == 0 and resumed["principal"] is None
            assert sorted(c["rule"] for c in resumed["closed"]) == ["PER-3", "PER-3"]
            for c in conns:
                c.close()
