"""A prepared switchover logs in nowhere while its clients wait (the PER-1 stall): the admin
sessions ``prepare_switchover`` opens - to the principal for its CHECKPOINT and, with a hot-standby
mirror, to the node about to be promoted - carry the switchover's streaming pre-check (DUR-1) and
the new principal's out-of-recovery wait, and none of them is left open afterwards."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import harness.topology.postgres as pg
from harness.topology import Pair

_HARNESS_SESSIONS = ("FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename = %s "
                     "AND pid <> pg_backend_pid()")  # the superuser's sessions other than the asking one


@contextlib.contextmanager
def _counting_logins(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every harness admin login while inside (the port it went to), whether made by the engine
    module's functions or through ``PostgresEngine.admin_connect``."""
    logins: list[int] = []
    real = pg.admin_connect

    def counting(socket_dir: Any, port: int, *args: Any, **kwargs: Any) -> Any:
        logins.append(port)
        return real(socket_dir, port, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(pg, "admin_connect", counting)
        m.setattr(pg.PostgresEngine, "admin_connect", staticmethod(counting))
        yield logins


def _superuser_dsn(pair: Pair, node: Any) -> str:
    return f"host={pair.socket_dir(node.name)} port={node.server_address[1]} user={pg.SUPERUSER} dbname=postgres"


def _sessions_left(pair: Pair, node: Any, settle: float = 3.0) -> int:
    """The superuser's other sessions on ``node`` once they had ``settle`` s to end: a backend exits
    after its client closed, not with it, so a session just closed may still be listed for a moment
    (a flake under CI load); one left open stays listed and is counted."""
    deadline = time.monotonic() + settle
    with psycopg.connect(_superuser_dsn(pair, node), autocommit=True) as conn:
        while True:
            count = conn.execute("SELECT count(*) " + _HARNESS_SESSIONS, (pg.SUPERUSER,)).fetchone()[0]
            if count == 0 or time.monotonic() >= deadline:
                return count
            time.sleep(0.05)


def _create_table(node: Any) -> None:
    with psycopg.connect(node.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (v int)")
        conn.execute("INSERT INTO t VALUES (1)")


@pytest.mark.parametrize("readable", [True, False], ids=["hot-standby-mirror", "inactive-mirror"])
def test_a_prepared_switchover_needs_no_login_until_the_new_principal_is_writable(
        readable: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    with Pair(mode="sync", mirror_readable=readable, links="direct") as pair:
        old, new = pair.principal, pair.mirror
        _create_table(old)
        with _counting_logins(monkeypatch) as logins:
            pair.prepare_switchover()
            prepared = len(logins)
            at_writable: list[int] = []
            pair.switchover(on_writable=lambda: at_writable.append(len(logins)))
        assert prepared == (2 if readable else 1), logins
        assert at_writable == [prepared], (prepared, at_writable, logins)  # no login until writable
        assert pair.principal.name == new.name
        assert _sessions_left(pair, new) == 0
        with psycopg.connect(pair.principal.dsn(), autocommit=True) as conn:
            assert conn.execute("SELECT v FROM t").fetchall() == [(1,)]  # DUR-1
            conn.execute("INSERT INTO t VALUES (2)")


def test_an_unprepared_switchover_and_a_stale_preparation_still_log_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``prepare_switchover`` (or when the server it prepared was replaced) the checks log in
    as before: a held session is used only by the server process it was opened to."""
    with Pair(mode="async", mirror_readable=True, links="direct") as pair, \
            _counting_logins(monkeypatch) as logins:
        at_writable: list[int] = []
        pair.switchover(on_writable=lambda: at_writable.append(len(logins)))
        assert at_writable and at_writable[0] >= 2, logins  # pre-check + at least one writable poll
        logins.clear()
        pair.prepare_switchover()
        pair.stop(pair.principal.name)  # a new server process: its held session is not used
        pair.start(pair.principal.name)
        held_before = len(logins)
        at_writable.clear()
        pair.switchover(on_writable=lambda: at_writable.append(len(logins)))
        assert at_writable[0] > held_before, logins


def test_a_held_session_its_server_closed_is_replaced_by_a_login(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server ends the held sessions between the preparation and the switchover (same server
    process, so they look usable): the pre-check and the waits log in instead, and the switchover
    completes with the data kept."""
    with Pair(mode="sync", mirror_readable=True, links="direct") as pair:
        old, new = pair.principal, pair.mirror
        _create_table(old)
        pair.prepare_switchover()
        for node in (old, new):
            with psycopg.connect(_superuser_dsn(pair, node), autocommit=True) as conn:
                ended = conn.execute("SELECT count(pg_terminate_backend(pid)) " + _HARNESS_SESSIONS,
                                     (pg.SUPERUSER,)).fetchone()[0]
            assert ended == 1, (node.name, ended)
        with _counting_logins(monkeypatch) as logins:
            pair.switchover()
        assert old.server_address[1] in logins, logins  # the pre-check logged in
        assert pair.principal.name == new.name
        with psycopg.connect(pair.principal.dsn(), autocommit=True) as conn:
            assert conn.execute("SELECT v FROM t").fetchall() == [(1,)]
