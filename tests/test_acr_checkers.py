"""ACR-1 … ACR-9 checkers on synthetic histories that keep and that break each rule (hypothesis where the
rule has a schedule: the server list order, retries x interval, timeouts). Pure: no database."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import ConfigError
from harness.history.core import Event, History
from harness.rules import registry
from harness.rules.acr import (
    check_commit_after_fetch_fails_over,
    check_group_address_tried_last,
    check_later_failure_rolls_back,
    check_no_transport_before_first_statement,
    check_reason_codes,
    check_reroute_by_server_list,
    check_seamless_statement_replay,
    check_timeout_failure_codes,
    check_unreusable_transport_error,
)

ALL = (check_reroute_by_server_list, check_seamless_statement_replay, check_later_failure_rolls_back,
       check_unreusable_transport_error, check_commit_after_fetch_fails_over, check_group_address_tried_last,
       check_no_transport_before_first_statement, check_reason_codes,
       check_timeout_failure_codes)


class H:
    """A synthetic ACR history: topology, application calls, transports, server sessions, faults."""

    def __init__(self, weights: tuple[int, int, int] = (100, 90, 80), alternate: bool = False,
                 capture: bool = True) -> None:
        self.h = History()
        self.t = 1000.0
        self.ops = itertools.count(1)
        self.conns = itertools.count(1)
        self.faults = itertools.count(1)
        self.sessions = itertools.count(1)
        self.session: str | None = None
        self.weights = dict(zip(("m1", "m2", "m3"), weights, strict=True))
        addrs = [{"name": n, "group": "primary", "proxy": f"p-{n}", "kind": "member", "weight": w}
                 for n, w in self.weights.items()]
        addrs.append({"name": "group", "group": "primary", "proxy": "p-group", "kind": "group-address", "weight": 0})
        if alternate:
            addrs += [{"name": "a1", "group": "alternate", "proxy": "p-a1", "kind": "member", "weight": 100},
                      {"name": "agroup", "group": "alternate", "proxy": "p-agroup", "kind": "group-address",
                       "weight": 0}]
        self.rec("acr.topology", addresses=addrs)
        self.rec("harness.capture", available=capture, scope="acr")
        self.publish()

    def rec(self, type_: str, dt: float = 0.001, **fields: Any) -> Event:
        self.t += dt
        return self.h.record(type_, t=self.t, **fields)

    def publish(self, down: tuple[str, ...] = ()) -> None:
        members = sorted(((n, w) for n, w in self.weights.items() if n not in down), key=lambda m: -m[1])
        self.rec("acr.members", group="primary", members=[{"name": n, "weight": w, "address": n} for n, w in members])

    def transport(self, member: str, refused: bool = False) -> int:
        """An attempt seen from outside; an accepted one opens a new server session."""
        if refused:
            self.rec("conn.refused", proxy=f"p-{member}")
            return -1
        cid = next(self.conns)
        self.rec("conn.accepted", proxy=f"p-{member}", conn_id=cid)
        self.session = f"s{next(self.sessions)}"
        self.cur = (member, cid)
        return cid

    def server(self, sql: str) -> None:
        self.rec("server.stmt", application="app", session=self.session, sql=sql)

    def kill(self, member: str) -> None:
        fid = next(self.faults)
        self.rec("fault.start", fault="member.kill", id=fid, node=member, params={})
        if getattr(self, "cur", None) and self.cur[0] == member:
            self.rec("conn.closed", proxy=f"p-{member}", conn_id=self.cur[1], by="proxy")
        self.open_faults = [*getattr(self, "open_faults", []), (fid, member, "kill")]

    def blackhole(self, member: str) -> None:
        fid = next(self.faults)
        self.rec("fault.start", fault="member.blackhole", id=fid, node=member, params={})
        self.open_faults = [*getattr(self, "open_faults", []), (fid, member, "blackhole")]

    def heal(self) -> None:
        for fid, member, how in getattr(self, "open_faults", []):
            self.rec("fault.end", fault=f"member.{how}", id=fid, node=member, seconds=0.1, error=None)
        self.open_faults = []

    def invoke(self, f: str, value: Any = None) -> int:
        op = next(self.ops)
        self.rec("op.invoke", process="app", op_id=op, f=f, value=value)
        return op

    def ok(self, op: int, f: str, value: Any = None, dt: float = 0.001) -> None:
        self.rec("op.ok", dt=dt, process="app", op_id=op, f=f, value=value)

    def fail(self, op: int, f: str, value: Any = None, sqlstate: str = "08506", dt: float = 0.001,
             **fields: Any) -> None:
        cls = {"08506": "Sql30108N", "08001": "Sql30081N"}.get(sqlstate, "Error")
        self.rec("op.fail", dt=dt, process="app", op_id=op, f=f, value=value, sqlstate=sqlstate,
                 error_class=cls, error=cls, **fields)

    # ---- application-level helpers (server view included)
    def connect(self, bind: str | None = "m1") -> None:
        op = self.invoke("connect")
        if bind:
            self.transport(bind)
        self.ok(op, "connect")

    def stmt(self, sql: str, txn: int, n: int, *, server: bool = True) -> tuple[int, dict[str, Any]]:
        value = {"sql": sql, "txn": txn, "n": n, "set": sql.upper().startswith("SET ")}
        op = self.invoke("execute", value)
        if server:
            if n == 0 and not value["set"]:
                self.server("BEGIN")
            self.server(sql)
        return op, value

    def run(self, sql: str, txn: int, n: int) -> None:
        op, value = self.stmt(sql, txn, n)
        self.ok(op, "execute", value)

    def commit(self, txn: int) -> None:
        op = self.invoke("commit", {"txn": txn})
        self.server("COMMIT")
        self.ok(op, "commit", {"txn": txn})

    def reconnect(self, member: str, sets: list[str]) -> None:
        self.transport(member)
        for s in sets:
            self.server(s)

    def events(self) -> list[Event]:
        return self.h.events()


SETS = ["SET search_path TO public", "SET statement_timeout = '20s'"]


def _prologue(alternate: bool = False, weights: tuple[int, int, int] = (100, 90, 80)) -> H:
    h = H(weights=weights, alternate=alternate)
    h.connect()
    for s in SETS:
        h.run(s, 1, 0)
    h.run("SELECT 1", 1, 0)
    h.commit(1)
    return h


def _first_statement_case(seamless: bool = True, replay: list[str] | None = None, to: str = "m2",
                          weights: tuple[int, int, int] = (100, 90, 80)) -> H:
    h = _prologue(weights=weights)
    h.kill("m1")
    h.publish(down=("m1",))
    op, value = h.stmt("SELECT 2", 2, 0, server=False)
    if seamless:
        h.reconnect(to, SETS if replay is None else replay)
        h.server("BEGIN")
        h.server("SELECT 2")
        h.ok(op, "execute", value)
    else:
        h.fail(op, "execute", value, sqlstate="08001")
    h.heal()
    return h


# ---------------------------------------------------------------------- every checker: no topology


@pytest.mark.parametrize("checker", ALL, ids=lambda c: c.__name__)
def test_a_history_without_acr_topology_is_unknown(checker: Any) -> None:
    h = History()
    h.record("op.invoke", process="app", op_id=1, f="connect")
    assert checker(h.events()).valid == "unknown"


def test_every_acr_rule_is_registered() -> None:
    assert [r for r in registry.all_rules() if r.startswith("ACR-")] == [f"ACR-{i}" for i in range(1, 10)]


# ---------------------------------------------------------------------- ACR-2


def test_acr2_kept_when_the_first_statement_is_rerun_after_the_replay() -> None:
    v = check_seamless_statement_replay(_first_statement_case().events())
    assert v.valid is True, v.summary


def test_acr2_violated_when_the_error_reaches_the_application() -> None:
    v = check_seamless_statement_replay(_first_statement_case(seamless=False).events())
    assert v.valid is False and "Sql30081N" in v.observed and v.evidence


@pytest.mark.parametrize("replay", [[], SETS[:1], list(reversed(SETS))], ids=["none", "one", "reversed"])
def test_acr2_violated_when_the_registers_are_not_replayed_in_order(replay: list[str]) -> None:
    v = check_seamless_statement_replay(_first_statement_case(replay=replay).events())
    assert v.valid is False and "SETs" in v.observed


def test_acr2_unknown_without_a_failed_first_statement_and_in_non_seamless_mode() -> None:
    assert check_seamless_statement_replay(_prologue().events()).valid == "unknown"
    assert check_seamless_statement_replay(_first_statement_case().events(), mode="non-seamless").valid == "unknown"
    with pytest.raises(ConfigError):
        check_seamless_statement_replay(_first_statement_case().events(), mode="sometimes")


# ---------------------------------------------------------------------- ACR-1 (member order, hypothesis)


@settings(max_examples=40, deadline=None)
@given(st.permutations([10, 50, 90]), st.sampled_from(["m2", "m3"]))
def test_acr1_first_reroute_goes_to_the_highest_weight(weights: list[int], to: str) -> None:
    w = tuple(weights)
    h = _first_statement_case(to=to, weights=w)  # type: ignore[arg-type]
    others = {"m2": w[1], "m3": w[2]}
    best = max(others, key=lambda n: others[n])
    v = check_reroute_by_server_list(h.events())
    assert v.valid is (to == best), (w, to, v.summary)


def test_acr1_unknown_without_a_reroute() -> None:
    assert check_reroute_by_server_list(_prologue().events()).valid == "unknown"


# ---------------------------------------------------------------------- ACR-3 and ACR-8 (reason code 2)


def _later_statement_case(outcome: str = "08506", replay: bool = True, rc: int = 2, back_to_m1: bool = False) -> H:
    h = _prologue()
    h.run("SELECT 2", 2, 0)
    h.kill("m1")
    h.publish(down=("m1",))
    op, value = h.stmt("SELECT 3", 2, 1, server=False)
    if back_to_m1:
        h.transport("m1", refused=True)
    if replay:
        h.reconnect("m2", SETS)
    if outcome == "ok":
        h.server("SELECT 3")
        h.ok(op, "execute", value)
    else:
        h.fail(op, "execute", value, sqlstate=outcome, reason_code=rc, failure_code=3)
    h.heal()
    return h


def test_acr3_kept_with_sql30108n_after_reconnect_and_replay() -> None:
    assert check_later_failure_rolls_back(_later_statement_case().events()).valid is True


@pytest.mark.parametrize("outcome", ["ok", "08001"])
def test_acr3_violated_by_a_silent_rerun_or_the_wrong_error(outcome: str) -> None:
    v = check_later_failure_rolls_back(_later_statement_case(outcome).events())
    assert v.valid is False and v.evidence


def test_acr3_violated_without_a_reconnect_before_the_error() -> None:
    v = check_later_failure_rolls_back(_later_statement_case(replay=False).events())
    assert v.valid is False and "without a reconnect" in v.observed


def test_acr8_reason_code_2_and_the_failed_member_not_reused() -> None:
    assert check_reason_codes(_later_statement_case().events()).valid is True
    v = check_reason_codes(_later_statement_case(rc=4).events())
    assert v.valid is False and "reason code 4" in v.observed
    v = check_reason_codes(_later_statement_case(back_to_m1=True).events())
    assert v.valid is False and "went back" in v.observed


# ---------------------------------------------------------------------- ACR-4


def _held_cursor_case(outcome: str = "08001", replay: list[str] | None = None) -> H:
    h = _prologue()
    h.run("DECLARE c CURSOR WITH HOLD FOR SELECT 1", 2, 0)
    h.commit(2)
    h.run("SELECT 1", 3, 0)
    h.run("SET work_mem = '8MB'", 3, 1)  # in the failed transaction: not at the COMMIT point
    h.kill("m1")
    op, value = h.stmt("SELECT 2", 3, 2, server=False)
    h.fail(op, "execute", value, sqlstate=outcome, reason_code=2)
    op, value = h.stmt("SELECT 3", 4, 0, server=False)
    h.reconnect("m2", SETS if replay is None else replay)
    h.server("BEGIN")
    h.server("SELECT 3")
    h.ok(op, "execute", value)
    h.heal()
    return h


def test_acr4_kept_with_sql30081n_and_registers_of_the_last_commit() -> None:
    assert check_unreusable_transport_error(_held_cursor_case().events()).valid is True


def test_acr4_violated_by_sql30108n_or_registers_of_the_failed_transaction() -> None:
    v = check_unreusable_transport_error(_held_cursor_case("08506").events())
    assert v.valid is False and "WITH HOLD" in v.observed
    v = check_unreusable_transport_error(_held_cursor_case(replay=[*SETS, "SET work_mem = '8MB'"]).events())
    assert v.valid is False and "last COMMIT" in v.observed


def test_acr4_closed_cursor_makes_the_transport_reusable_again() -> None:
    h = _prologue()
    h.run("DECLARE c CURSOR WITH HOLD FOR SELECT 1", 2, 0)
    h.commit(2)
    h.run("CLOSE c", 3, 0)
    h.kill("m1")
    op, value = h.stmt("SELECT 2", 3, 1, server=False)
    h.fail(op, "execute", value, sqlstate="08506", reason_code=2)
    assert check_unreusable_transport_error(h.events()).valid == "unknown"


# ---------------------------------------------------------------------- ACR-5


def _commit_case(declare: bool = False, ok: bool = True, write: bool = False, verb: str = "commit") -> H:
    h = _prologue()
    h.run("SELECT k FROM t", 2, 0)
    if declare:
        h.run("DECLARE c CURSOR FOR SELECT 1", 2, 1)
    if write:
        h.run("INSERT INTO t VALUES (1)", 2, 1)
    h.kill("m1")
    op = h.invoke(verb, {"txn": 2})
    if ok:
        h.reconnect("m2", SETS)
        h.ok(op, verb)
    else:
        h.fail(op, verb, sqlstate="08506", reason_code=2)
    h.heal()
    return h


@pytest.mark.parametrize("verb", ["commit", "rollback"])
def test_acr5_seamless_commit_or_rollback_after_full_fetch(verb: str) -> None:
    assert check_commit_after_fetch_fails_over(_commit_case(verb=verb).events()).valid is True
    v = check_commit_after_fetch_fails_over(_commit_case(ok=False, verb=verb).events())
    assert v.valid is False and "fully fetched" in v.observed


def test_acr5_a_declared_cursor_makes_it_non_seamless() -> None:
    assert check_commit_after_fetch_fails_over(_commit_case(declare=True, ok=False).events()).valid is True
    v = check_commit_after_fetch_fails_over(_commit_case(declare=True, ok=True).events())
    assert v.valid is False and "DECLARE" in v.observed


def test_acr5_does_not_judge_the_commit_of_a_writing_transaction() -> None:
    assert check_commit_after_fetch_fails_over(_commit_case(write=True, ok=False).events()).valid == "unknown"


# ---------------------------------------------------------------------- ACR-6 (attempt order, hypothesis)


@settings(max_examples=60, deadline=None)
@given(st.permutations(["m2", "m3", "group"]), st.booleans())
def test_acr6_group_address_only_after_every_running_member(order: list[str], m3_up: bool) -> None:
    h = _prologue()
    h.kill("m1")
    h.kill("m2")
    if not m3_up:
        h.kill("m3")
    op, value = h.stmt("SELECT 2", 2, 0, server=False)
    for name in order:
        if name == "group" or (name == "m3" and m3_up):
            h.transport(name)
            break
        h.transport(name, refused=True)
    h.ok(op, "execute", value)
    h.heal()
    tried = order[: order.index("group") + 1] if "group" in order else order
    group_before_m3 = m3_up and order.index("group") < order.index("m3")
    v = check_group_address_tried_last(h.events())
    if "group" not in tried or (m3_up and order.index("m3") < order.index("group")):
        assert v.valid == "unknown" or v.valid is True
    else:
        assert v.valid is (not group_before_m3), (order, m3_up, v.summary)


def test_acr6_violated_when_giving_up_without_the_group_address() -> None:
    h = _prologue()
    for m in ("m1", "m2", "m3"):
        h.kill(m)
    op, value = h.stmt("SELECT 2", 2, 0, server=False)
    h.transport("m2", refused=True)
    h.transport("m3", refused=True)
    h.fail(op, "execute", value, sqlstate="08001")
    h.heal()
    v = check_group_address_tried_last(h.events())
    assert v.valid is False and "without trying the group-wide address" in v.observed


def test_acr6_unknown_when_refused_connects_were_not_observable() -> None:
    h = H(capture=False)
    h.connect()
    for m in ("m1", "m2", "m3"):
        h.kill(m)
    op, value = h.stmt("SELECT 2", 1, 0, server=False)
    h.transport("group")
    h.ok(op, "execute", value)
    assert check_group_address_tried_last(h.events()).valid == "unknown"


# ---------------------------------------------------------------------- ACR-7


def _lazy_case(eager_connect: bool = False, eager_reconnect: bool = False, replay: list[str] | None = None) -> H:
    h = H()
    h.connect(bind="m1" if eager_connect else None)
    op, value = h.stmt(SETS[0], 1, 0, server=False)
    if not eager_connect:
        h.transport("m1")
    h.server(SETS[0])
    h.ok(op, "execute", value)
    h.run("SELECT 1", 1, 0)
    h.commit(1)
    h.run("SELECT 2", 2, 0)
    h.kill("m1")
    op, value = h.stmt("SELECT 3", 2, 1, server=False)
    if eager_reconnect:
        h.transport("m2")
    h.fail(op, "execute", value, sqlstate="08506", reason_code=2, failure_code=3)
    op, value = h.stmt("SELECT 3", 3, 0, server=False)
    if not eager_reconnect:
        h.transport("m2")
    for s in SETS[:1] if replay is None else replay:
        h.server(s)
    h.server("BEGIN")
    h.server("SELECT 3")
    h.ok(op, "execute", value)
    h.heal()
    return h


def test_acr7_kept_by_a_lazy_client() -> None:
    assert check_no_transport_before_first_statement(_lazy_case().events()).valid is True


@pytest.mark.parametrize("kw", [{"eager_connect": True}, {"eager_reconnect": True}], ids=["connect", "reconnect"])
def test_acr7_violated_by_an_eager_transport(kw: dict[str, bool]) -> None:
    v = check_no_transport_before_first_statement(_lazy_case(**kw).events())
    assert v.valid is False and "opened a transport" in v.observed


def test_acr7_violated_when_the_new_transport_lacks_the_commit_point_registers() -> None:
    v = check_no_transport_before_first_statement(_lazy_case(replay=[]).events())
    assert v.valid is False and "last COMMIT point" in v.observed
    assert check_no_transport_before_first_statement(_lazy_case().events(), mode="seamless").valid == "unknown"


# ---------------------------------------------------------------------- ACR-8 (reason code 4, alternate)


def _alternate_case(rc_second: int = 4, to: str = "a1") -> H:
    h = _prologue(alternate=True)
    h.run("SELECT 2", 2, 0)
    for m in ("m1", "m2", "m3", "group"):
        h.kill(m)
    op, value = h.stmt("SELECT 3", 2, 1, server=False)
    h.fail(op, "execute", value, sqlstate="08506", reason_code=2, failure_code=3)
    op, value = h.stmt("SELECT 3", 3, 0, server=False)
    for m in ("m2", "m3", "group"):
        h.transport(m, refused=True)
    h.fail(op, "execute", value, sqlstate="08506", reason_code=rc_second, failure_code=3)
    op, value = h.stmt("SELECT 3", 4, 0, server=False)
    h.reconnect(to, SETS)
    h.ok(op, "execute", value)
    h.heal()
    return h


def test_acr8_reason_codes_2_then_4_then_the_alternate_group() -> None:
    assert check_reason_codes(_alternate_case().events()).valid is True
    v = check_reason_codes(_alternate_case(rc_second=2).events())
    assert v.valid is False and "no member of the primary group" in v.observed


# ---------------------------------------------------------------------- ACR-9 (timeouts, hypothesis)


def _timeout_case(took: float, failure_code: int = 2, sqlstate: str = "08506", cancel: bool = False) -> H:
    h = _prologue()
    h.blackhole("m1")
    op, value = h.stmt("SELECT 2", 2, 0, server=False)
    if cancel:
        c = h.invoke("cancel")
        h.ok(c, "cancel")
    h.fail(op, "execute", value, sqlstate=sqlstate, reason_code=2, failure_code=failure_code, dt=took)
    h.heal()
    return h


@settings(max_examples=60, deadline=None)
@given(st.floats(0.2, 5.0), st.floats(0.0, 6.0), st.floats(0.0, 2.0), st.sampled_from([1, 2, 3, 4]))
def test_acr9_timeout_schedule(timeout: float, took: float, tolerance: float, fc: int) -> None:
    v = check_timeout_failure_codes(_timeout_case(took, failure_code=fc).events(), receive_timeout=timeout,
                                    tolerance=tolerance)
    in_time = took <= timeout + tolerance + 0.002  # the synthetic invoke / fail spacing
    if fc == 4:
        assert v.valid is False
    elif took > timeout + tolerance + 0.01:
        assert v.valid is False and "timeout was" in v.observed
    elif in_time and took < timeout + tolerance - 0.01:
        assert v.valid is True, v.summary


def test_acr9_interrupt_needs_failure_code_4_and_any_other_error_breaks_it() -> None:
    assert check_timeout_failure_codes(_timeout_case(0.5, failure_code=4, cancel=True).events()).valid is True
    v = check_timeout_failure_codes(_timeout_case(0.5, failure_code=2, cancel=True).events())
    assert v.valid is False and "interrupt" in v.observed
    v = check_timeout_failure_codes(_timeout_case(4.0, sqlstate="08001").events(), query_timeout=1.0)
    assert v.valid is False and "Sql30081N" in v.observed
    assert check_timeout_failure_codes(_prologue().events(), receive_timeout=1.0).valid == "unknown"
    with pytest.raises(ConfigError):
        check_timeout_failure_codes(_prologue().events(), tolerance=-1)
