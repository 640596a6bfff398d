"""The ACR stand-in (docs/acr.md): the server log parser and the member list format (pure), and one
real group over a PostgreSQL pair - members behind their own fault-proxy addresses, the published
member list following a member fault, the server's statements in the history, the reference
client's seamless replay and the psycopg adapter's communication error."""

from __future__ import annotations

import pytest

from harness import Pair
from harness.clients.acr import make, psycopg_multihost
from harness.errors import ConfigError, Sql30081N, Sql30108N
from harness.faults.acr import AcrFaults
from harness.history.core import History
from harness.topology.acr import AcrGroups, Member, format_members, parse_members
from harness.topology.serverlog import parse_line, to_event
from harness.workload.acr import AcrApp, error_fields, prepare


def test_log_lines_parse_into_statements_and_sessions() -> None:
    line = "1790000000.123 [4242] acr|6b0e.1|app|127.0.0.1(5555)| LOG:  execute <unnamed>: SELECT $1"
    rec = parse_line(line)
    assert rec is not None and rec["pid"] == 4242 and rec["epoch"] == pytest.approx(1790000000.123)
    assert to_event(rec) == ("server.stmt", {"session": "6b0e.1", "pid": 4242, "application": "app",
                                             "remote": "127.0.0.1:5555", "sql": "SELECT $1"})
    simple = parse_line("1.5 [1] acr|s|a|[local]| LOG:  statement: SET x = 1")
    assert simple is not None and to_event(simple) == ("server.stmt", {"session": "s", "pid": 1, "application": "a",
                                                                       "sql": "SET x = 1"})
    ended = parse_line("1.5 [1] acr|s|a|| LOG:  disconnection: session time: 0:00:00.01")
    assert ended is not None and to_event(ended)[1]["what"] == "ended"  # type: ignore[index]
    assert parse_line("2026-12-01 10:00:00 [1] LOG:  old prefix") is None
    warn = parse_line("1.5 [1] acr|s|a|| WARNING:  something")
    assert warn is not None and to_event(warn) is None


def test_member_list_round_trips_highest_weight_first() -> None:
    ms = [Member("m1", "primary", "127.0.0.1", 1, 10, "p1"), Member("m2", "primary", "127.0.0.1", 2, 90, "p2")]
    text = format_members(ms)
    assert text == "m2=127.0.0.1:2/90;m1=127.0.0.1:1/10"
    assert parse_members(text) == [("m2", "127.0.0.1", 2, 90), ("m1", "127.0.0.1", 1, 10)]
    assert parse_members("") == []


def test_sql30108n_and_sql30081n_carry_the_db2_tokens() -> None:
    e = Sql30108N(2, 3, "127.0.0.1", 5000, underlying="gone")
    assert (e.sqlstate, e.sqlcode) == ("08506", -30108) and 'Reason code: "2"' in str(e)
    assert error_fields(e)["outcome_class"] == "rerouted-retry" and error_fields(e)["failure_code"] == 3
    c = Sql30081N("127.0.0.1:5000", reason="password=secret")
    assert (c.sqlstate, c.sqlcode) == ("08001", -30081) and "secret" not in str(c)


def test_a_group_needs_three_members() -> None:
    with pytest.raises(ConfigError, match="at least 3 members"):
        AcrGroups(object(), members=2)  # type: ignore[arg-type]


def test_a_real_group_reroutes_the_reference_client_and_breaks_psycopg() -> None:
    history = History()
    with Pair(history=history) as pair, AcrGroups(pair, history) as groups:
        prepare(pair.principal.dsn(direct=True))
        faults = AcrFaults(groups, history)
        ref = AcrApp(make(history, "ref", max_acr_retries=0), groups.spec("ref"), history, "ref")
        ref.connect()
        ref.execute("SET search_path TO public")
        ref.write(1)
        ref.commit()
        with faults.member("m1"):
            assert "m1=" not in groups.published()["members"]
            assert ref.execute("SELECT count(*) FROM acr_keys") == [(1,)]  # seamless, on m2
            with faults.member("m2"), pytest.raises(Sql30108N) as info:
                ref.execute("SELECT 1")  # a later statement of the transaction
                assert info.value.reason_code == 2
        assert "m1=" in groups.published()["members"]
        ref.client.shutdown()
        lib = AcrApp(psycopg_multihost(history, "lib"), groups.spec("lib"), history, "lib")
        lib.connect()
        lib.execute("SELECT 1")
        with faults.member("m1"), pytest.raises(Sql30081N):
            lib.execute("SELECT 2")
        lib.client.shutdown()
        events = history.events()
    stmts = [e for e in events if e.type == "server.stmt" and e.get("application") == "ref"]
    sessions = list(dict.fromkeys(e.get("session") for e in stmts))
    assert len(sessions) == 3  # m1, then m2 (seamless replay), then m3 (SQL30108N after reconnect)
    second = [e.get("sql") for e in stmts if e.get("session") == sessions[1]]
    assert second.index("SET search_path TO public") < second.index("SELECT count(*) FROM acr_keys")
    pubs = [e for e in events if e.type == "acr.members" and e.get("group") == "primary"]
    assert [len(p.get("members")) for p in pubs][:3] == [3, 2, 1]
    assert any(e.type == "conn.accepted" and e.get("proxy", "").endswith("-acr-m2") for e in events)
