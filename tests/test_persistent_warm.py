"""Pre-attach during a coordinated switchover (the PER-1 stall; PER-1, PER-2): the reference proxy is
told which node is about to be promoted (``prepare_switchover``), opens its kept sessions' next back
connections on that hot standby and replays their state there, and the resume swaps them in. Checked
against real pairs: what was pre-attached is used, the sessions keep their state and can write on the
new principal, what cannot be pre-attached (LISTEN, an unreadable mirror) re-attaches the usual way,
and no pre-attached connection is left behind when the resume goes elsewhere."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from harness.clients.persistent.reference import ReferenceClient
from harness.faults import Faults
from harness.faults.coordination import run_coordinated
from harness.history.core import History
from harness.topology import Pair


def _connect(client: ReferenceClient) -> psycopg.Connection[Any]:
    return psycopg.connect(client.dsn(), autocommit=True, connect_timeout=5)


def _proxy_logins_on(node: Any) -> int:
    """Sessions of the test login on ``node`` (the proxy's back connections), from the server."""
    with node.admin() as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' "
                           "AND backend_type = 'client backend'").fetchone()
    return int(row[0])


def test_prepare_hook_runs_before_the_drains_and_its_failure_does_not_stop_the_switchover() -> None:
    calls: list[str] = []

    class C:
        def __init__(self, name: str, fail: bool = False) -> None:
            self.name, self.fail = name, fail

        def before_switchover(self) -> None:
            calls.append(f"before {self.name}")

        def prepare_switchover(self, address: tuple[str, int]) -> None:
            calls.append(f"prepare {self.name} {address[1]}")
            if self.fail:
                raise RuntimeError("no standby to warm")

        def after_switchover(self, address: tuple[str, int]) -> None:
            calls.append(f"after {self.name} {address[1]}")

    class Plain:
        name = "plain"

        def before_switchover(self) -> None:
            calls.append("before plain")

        def after_switchover(self, address: tuple[str, int]) -> None:
            calls.append("after plain")

    h = History()
    result = run_coordinated([C("a", fail=True), Plain(), C("b")], lambda: calls.append("switch") or 1,
                             lambda: ("127.0.0.1", 5), h.record, fault_id=3, next_address=lambda: ("127.0.0.1", 6))
    assert result == 1
    assert calls == ["prepare a 6", "prepare b 6", "before a", "before plain", "before b", "switch",
                     "after b 5", "after plain", "after a 5"]
    errors = h.events("coord.error")
    assert [(e.get("client"), e.get("phase")) for e in errors] == [("a", "prepare")]
    done = [e for e in h.events("coord.prepare_done")]
    assert [(e.get("client"), e.get("address")) for e in done] == [("b", "127.0.0.1:6")]
    calls.clear()
    run_coordinated([C("a")], lambda: calls.append("switch"), lambda: ("127.0.0.1", 5), None,
                    next_address=lambda: None, before_drain=lambda: calls.append("checkpoint"))
    assert calls == ["checkpoint", "before a", "switch", "after a 5"]  # next principal unknown: not told


def test_switchover_takes_the_sessions_pre_attached_on_the_hot_standby() -> None:
    """Readable mirror: 6 sessions with settings and both kinds of prepared statements are
    pre-attached on the mirror and taken as they are at the resume (``persist.replayed`` ``warm``);
    they keep their state, write on the new principal, and the LISTEN session (refused during
    recovery) re-attaches the usual way, its LISTEN working."""
    h = History()
    with Pair(mode="sync", mirror_readable=True, history=h) as pair:
        faults = Faults(pair, h)
        with ReferenceClient(pair, h, drain_window=5.0, recovery_window=20.0) as client:
            faults.coordinate(client)
            conns = [_connect(client) for _ in range(6)]
            listener = _connect(client)
            conns[0].execute("CREATE TABLE warm_t (w int, n int)")
            for i, c in enumerate(conns):
                c.execute(f"SET application_name = 'warm{i}'")
                c.execute("PREPARE ins (int, int) AS INSERT INTO warm_t VALUES ($1, $2)")
                c.execute("SELECT %s::int + 1", (i,), prepare=True)  # protocol-level, named by psycopg
            listener.execute("LISTEN warm_channel")
            time.sleep(0.2)  # the mirror has replayed the table (sync pair: it has it already)
            new = pair.mirror
            faults.switchover()
            assert pair.principal.name == new.name
            resumed = [e for e in h.events("coord.after_done")][-1].get("result")
            assert resumed["resumed"] == 7 and resumed["warm_used"] == 6 and resumed["warm_failed"] == 0
            replayed = h.events("persist.replayed")
            assert sorted(bool(e.get("warm")) for e in replayed) == [False] + [True] * 6
            prepared = [e for e in h.events("coord.prepare_done")]
            assert prepared and prepared[-1].get("address") == "{}:{}".format(*new.client_address)
            for i, c in enumerate(conns):
                assert c.execute("SHOW application_name").fetchone()[0] == f"warm{i}"
                assert c.execute("SELECT %s::int + 1", (i,), prepare=True).fetchone()[0] == i + 1
                c.execute(f"EXECUTE ins({i}, 1)")  # a write: the pre-attached session is read-write now
                assert c.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
            assert conns[0].execute("SELECT count(*) FROM warm_t").fetchone()[0] == 6
            conns[0].execute("NOTIFY warm_channel, 'after'")
            got = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
            assert got == ["after"]
            for c in [*conns, listener]:
                c.close()


def test_unreadable_mirror_refuses_the_pre_attach_and_sessions_reattach_as_before() -> None:
    h = History()
    with Pair(mode="async", history=h) as pair:  # mirror_readable=False: hot_standby=off
        faults = Faults(pair, h)
        with ReferenceClient(pair, h, drain_window=5.0, recovery_window=20.0) as client:
            faults.coordinate(client)
            conns = [_connect(client) for _ in range(3)]
            for i, c in enumerate(conns):
                c.execute(f"SET application_name = 'cold{i}'")
            mirror_log = pair.path / pair.mirror.name / "postgres.log"
            refused_before = mirror_log.read_text().count("Hot standby mode is disabled")
            faults.switchover()
            # one login attempt there (the warm probe), not one per session
            assert mirror_log.read_text().count("Hot standby mode is disabled") - refused_before == 1
            resumed = [e for e in h.events("coord.after_done")][-1].get("result")
            assert resumed["resumed"] == 3 and resumed["warm_used"] == 0 and resumed["warm_failed"] == 3
            assert not any(e.get("warm") for e in h.events("persist.replayed"))
            for i, c in enumerate(conns):
                assert c.execute("SHOW application_name").fetchone()[0] == f"cold{i}"
                c.close()


def test_pre_attached_connections_are_closed_when_the_resume_goes_elsewhere() -> None:
    """Drain, pre-attach on the mirror, then resume on the old principal (no switchover): the
    sessions re-attach there the usual way and the mirror is left with none of the proxy's logins."""
    h = History()
    with Pair(mode="sync", mirror_readable=True, history=h) as pair:
        with ReferenceClient(pair, h, drain_window=5.0, recovery_window=20.0) as client:
            conns = [_connect(client) for _ in range(4)]
            for c in conns:
                c.execute("SELECT 1")
            client.before_switchover()
            started = client.prepare_switchover(pair.mirror.client_address)
            assert started["warming"] == 4
            deadline = time.monotonic() + 10
            while _proxy_logins_on(pair.mirror) < 5 and time.monotonic() < deadline:  # 4 + the probe
                time.sleep(0.05)
            assert _proxy_logins_on(pair.mirror) == 5
            resumed = client.after_switchover(pair.principal.client_address)
            assert resumed["resumed"] == 4 and resumed["warm_used"] == 0
            deadline = time.monotonic() + 10
            while _proxy_logins_on(pair.mirror) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _proxy_logins_on(pair.mirror) == 0
            for c in conns:
                assert c.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
                c.close()
