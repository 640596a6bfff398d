"""A correct ACR client that replays its SETs and reruns the failed statement within one millisecond
of a real PostgreSQL server's log keeps every ACR rule (RULEBOOK ACR-2: the replay is judged in the
server's log order, never by time or text). Real server; the pure properties of the same ordering
are in tests/test_acr_log_order.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from test_acr_checkers import ALL, SETS, _prologue
from test_acr_log_order import _judge

from harness import Pair
from harness.history.core import History
from harness.topology.serverlog import SETTINGS, parse_line, to_event


def _one_millisecond_burst(pair: Pair, statements: list[str], tries: int = 400) -> list[dict[str, Any]]:
    """Send ``statements`` in one pipeline (one session) until the server logs them all in one
    millisecond; their parsed log records, in log order."""
    log = Path(pair.principal.log_path)
    with psycopg.connect(pair.principal.dsn(direct=True), autocommit=True, application_name="app") as conn:
        for _ in range(tries):
            start = log.stat().st_size
            with conn.pipeline():
                for sql in statements:
                    conn.execute(sql)
            with log.open("r", errors="replace") as fh:
                fh.seek(start)
                recs = [r for r in map(parse_line, fh.read().splitlines()) if r and r["application"] == "app"]
            stmts = [r for r in recs if (ev := to_event(r)) and ev[0] == "server.stmt"]
            sqls = [ev[1]["sql"] for r in stmts if (ev := to_event(r))]
            if sqls == statements and len({r["epoch"] for r in stmts}) == 1:
                return stmts
    raise AssertionError(f"the server never logged {len(statements)} pipelined statements in one millisecond "
                         f"in {tries} tries")


def test_a_fast_correct_client_keeps_every_acr_rule_from_a_real_server_log() -> None:
    """A correct client replays its SETs and reruns the failed first statement within one millisecond
    of the server's log (measured on a real PostgreSQL 15): every ACR rule is kept or unknown, ACR-2
    kept - never a violation."""
    with Pair(history=History()) as pair:
        with pair.principal.admin() as conn:
            for key, value in SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {key} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")
        burst = _one_millisecond_burst(pair, [*SETS, "SELECT 2"])
    # the failure case of the checker tests, with the replay session's statements from the real log
    h = _prologue()
    h.kill("m1")
    h.publish(down=("m1",))
    op, value = h.stmt("SELECT 2", 2, 0, server=False)
    h.transport("m2")
    t = h.t + 0.001
    for rec in burst:
        _, fields = to_event(rec)  # type: ignore[misc]
        h.h.record("server.stmt", t=t, node="n1", **{**fields, "session": h.session})
    h.t = t
    h.ok(op, "execute", value)
    h.heal()
    events = h.events()
    replay = [e for e in events if e.type == "server.stmt" and e.get("session") == h.session]
    assert len({e.t for e in replay}) == 1 and len(replay) == 3  # one millisecond, as the server logged it
    verdicts = {c.__name__: _judge(c, events) for c in ALL}
    replay = verdicts["check_seamless_statement_replay"]
    assert replay.valid is True, replay.summary
    assert all(v.valid is not False for v in verdicts.values()), {k: v.summary for k, v in verdicts.items()}
