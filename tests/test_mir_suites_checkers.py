"""Checker fixes made while writing ``suites/mirroring`` (synthetic histories, no I/O):

* MIR-4: a failed open with no attempt seen anywhere (refused connects never reach a fault proxy and
  the client did not report its own attempts) that gave up before the login timeout is a violation
  - it used to count as exercised and *kept*.
* MIR-13: an attempt pending at a shutdown that the client closed right after the server answered
  (e.g. "the database system is shutting down") is judged like a server close - it used to be
  skipped as "the server never closed it", leaving the verdict unknown.
"""

from __future__ import annotations

from typing import Any

from harness.history.core import Event
from harness.rules.mirroring import check_partner_alternation, check_shutdown_aborts_attempts

A, B = "pg-a", "pg-b"
LISTEN = {A: "127.0.0.1:20001", B: "127.0.0.1:20002"}
P = {"initial": A, "failover": B}
VALUE = {"initial": "127.0.0.1,20001", "failover": "127.0.0.1,20002", "database": "app", "login_timeout": 1.0}


class Hist:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self._cid = 0

    def add(self, type_: str, t: float, **fields: Any) -> Event:
        e = Event(len(self.events), t, type_, fields)
        self.events.append(e)
        return e

    def conn(self, proxy: str, t0: float, t1: float, by: str, down: int) -> None:
        self._cid += 1
        self.add("conn.accepted", t0, proxy=proxy, conn_id=self._cid, client="127.0.0.1:40000",
                 listen=LISTEN[proxy], upstream="127.0.0.1:5432", node=proxy.split("-")[1])
        self.add("conn.closed", t1, proxy=proxy, conn_id=self._cid, by=by, reason="", bytes_up=39,
                 bytes_down=down)


def _no_attempt_open(value: Any, gave_up: float) -> list[Event]:
    h = Hist()
    h.add("op.invoke", 0.0, process="c1", op_id=1, f="open", value=value)
    h.add("op.fail", gave_up, process="c1", op_id=1, f="open", error="connection refused", reason="error")
    return h.events


def test_mir_4_failed_open_without_any_seen_attempt_gave_up_early() -> None:
    v = check_partner_alternation(_no_attempt_open(VALUE, 0.002), **P, login_timeout=1.0)
    assert v.valid is False and "with no attempt seen" in v.observed and v.evidence == (0, 1)
    assert check_partner_alternation(_no_attempt_open(VALUE, 1.0), **P, login_timeout=1.0).valid is True
    assert check_partner_alternation(_no_attempt_open(VALUE, 0.5), **P, login_timeout=None).valid is False


def test_mir_4_open_refused_for_a_missing_database_is_not_judged_as_giving_up() -> None:
    no_db = {"connstring": "Server=127.0.0.1,20001; Failover Partner=127.0.0.1,20002"}
    assert check_partner_alternation(_no_attempt_open(no_db, 0.001), **P, login_timeout=1.0).valid is True
    assert check_partner_alternation(_no_attempt_open(None, 0.001), **P,
                                     login_timeout=1.0).valid is True  # value unknown


def _shutdown_history(by: str, down: int, next_after: float) -> list[Event]:
    h = Hist()
    h.add("op.invoke", 0.0, process="c1", op_id=1, f="open", value=VALUE)
    h.add("fault.start", 0.10, fault="stop", id=1, node="a", params={"mode": "fast"})
    h.conn(A, 0.0, 0.12, by=by, down=down)  # pending; ended 20 ms after the shutdown began
    h.conn(B, 0.12 + next_after, 0.13 + next_after, by="upstream", down=150)
    h.add("op.fail", 0.14 + next_after, process="c1", op_id=1, f="open", error="gave up")
    return h.events


def test_mir_13_client_close_after_the_servers_shutdown_answer_is_judged() -> None:
    assert check_shutdown_aborts_attempts(_shutdown_history("client", 108, 0.001), **P).valid is True
    v = check_shutdown_aborts_attempts(_shutdown_history("client", 108, 0.5), **P)
    assert v.valid is False and "attempt 2 came 0.500 s later" in v.observed
    # closed by the client with no byte from the server: the server did not end it - not judged
    assert check_shutdown_aborts_attempts(_shutdown_history("client", 0, 0.001), **P).valid == "unknown"
