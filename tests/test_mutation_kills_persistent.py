"""PER-1..PER-8 checkers on synthetic histories, written against what the mutation test
(``make mutation``, docs/mutation.md) showed the older tests let through: boundaries of every time
window, the evidence indices and ``details`` of each verdict, histories with several sessions and
switchovers, and the defaults of each checker. Each test states the rule behaviour it pins."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from harness.history.core import Event
from harness.rules import persistent as per
from harness.rules.verdict import Verdict

OPS = {"ok": "op.ok", "fail": "op.fail", "info": "op.info"}


class B:
    """A history of application sessions around switchovers; ``events()`` orders them by time."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, int, str, dict[str, Any]]] = []
        self.seq = itertools.count()
        self.op_ids = itertools.count(1)
        self.fault_ids = itertools.count(1)

    def add(self, t: float, type_: str, **fields: Any) -> int:
        n = next(self.seq)
        self.rows.append((t, n, type_, fields))
        return n

    def open(self, p: str, conn: int = 1) -> None:
        self.add(0.0, "session.open", process=p, conn=conn)

    def op(self, p: str, t0: float, t1: float | None = None, *, kind: str | None = "ok", conn: int = 1,
           done_conn: Any = "same", f: str = "point_select", lost: bool | None = None, error: str | None = None,
           timed_out: bool = False) -> int:
        """One operation; ``kind=None`` leaves it in flight. Returns its op_id."""
        op_id = next(self.op_ids)
        self.add(t0, "op.invoke", process=p, op_id=op_id, f=f, conn=conn)
        if kind is None:
            return op_id
        fields: dict[str, Any] = {"process": p, "op_id": op_id, "f": f}
        if done_conn is not None:
            fields["conn"] = conn if done_conn == "same" else done_conn
        if kind != "ok":
            fields["error"] = "server closed the connection unexpectedly" if error is None else error
            fields["conn_lost"] = True if lost is None else lost
            fields["timed_out"] = timed_out
        self.add(t1 if t1 is not None else t0 + 0.001, OPS[kind], **fields)
        return op_id

    def switchover(self, t0: float, t1: float | None, new: str | None = "n2") -> None:
        fid = next(self.fault_ids)
        self.add(t0, "fault.start", fault="switchover", id=f"s{fid}", node=None, params={})
        if new is not None:
            self.add(t0 + 0.0001, "role.change", node=new, old_role="mirror", new_role="principal")
        if t1 is not None:
            self.add(t1, "fault.end", fault="switchover", id=f"s{fid}", node=None, seconds=t1 - t0, error=None)

    def fault(self, kind: str, node: str, t0: float, t1: float | None) -> None:
        fid = f"f{next(self.fault_ids)}"
        self.add(t0, "fault.start", fault=kind, id=fid, node=node, params={})
        if t1 is not None:
            self.add(t1, "fault.end", fault=kind, id=fid, node=node, seconds=t1 - t0, error=None)

    def events(self) -> list[Event]:
        rows = sorted(self.rows, key=lambda r: (r[0], r[1]))
        self.index = {n: i for i, (_, n, _, _) in enumerate(rows)}
        return [Event(i, t, type_, fields) for i, (t, _, type_, fields) in enumerate(rows)]

    def at(self, n: int) -> int:
        """The index (after ``events()``) of the row ``add`` numbered ``n``."""
        return self.index[n]


def own(v: Verdict) -> dict[str, Any]:
    """The verdict's details without the parameters the registry wrapper records."""
    return {k: val for k, val in v.details.items() if k != "params"}


def index_of(events: list[Event], type_: str, **fields: Any) -> int:
    return next(e.index for e in events if e.type == type_ and all(e.get(k) == v for k, v in fields.items()))


# ------------------------------------------------------------------------------------- PER-1


def test_per1_without_switchover_is_unknown_naming_the_rule() -> None:
    b = B()
    b.open("s1")
    b.op("s1", 1.0)
    for check, rule in ((per.check_keepalive_on_switchover, "PER-1"), (per.check_session_state_restored, "PER-2"),
                        (per.check_recovery_window, "PER-3"), (per.check_drain_window, "PER-4")):
        v = check(b.events())
        assert (v.rule_id, v.valid) == (rule, "unknown") and "no switchover" in v.observed


def test_per1_details_count_every_session_and_the_keep_rate() -> None:
    """PER-1 judges a session that used its connection before the switchover; ``kept / judged`` is
    the keep rate; a session with no operation before it (``early`` here) is not judged."""
    b = B()
    for p in ("a-idle", "b-kept", "c-lost", "d-unused"):
        b.open(p)
    b.op("b-kept", 1.0)
    b.op("c-lost", 1.0)
    b.op("d-unused", 1.0)  # used before, never after: not judged
    b.switchover(2.0, 2.5)
    b.op("a-idle", 3.0)  # its first operation comes after the switchover
    b.op("b-kept", 3.0)
    b.op("c-lost", 2.2, kind="info")
    v = per.check_keepalive_on_switchover(b.events())
    assert v.rule_id == "PER-1" and v.valid is False
    assert own(v) == {"switchovers": 1, "judged": 2, "kept": 1, "not_judged": 1, "errors": 1, "sessions": 4,
                      "lost": ["c-lost#1 at switchover 1: server closed the connection unexpectedly"],
                      "keep_rate": 0.5}
    assert "1/2 front connections kept (50.0%)" in v.observed


def test_per1_reconnect_event_alone_closes_the_connection_and_is_the_evidence() -> None:
    """A ``session.reconnect`` away from connection ``c`` (``previous=c``) closes it; a reconnect of
    another process does not."""
    b = B()
    b.open("p1")
    b.open("p2")
    b.op("p1", 1.0)
    b.op("p2", 1.0)
    b.switchover(2.0, 2.5)
    n = b.add(2.3, "session.reconnect", process="p2", conn=2, previous=1)
    b.op("p1", 3.0)
    b.op("p2", 3.0, conn=2)
    events = b.events()
    v = per.check_keepalive_on_switchover(events)
    assert v.valid is False and own(v)["kept"] == 1 and own(v)["judged"] == 2
    assert own(v)["lost"] == ["p2#1 at switchover 1: session.reconnect"]
    assert v.evidence == (index_of(events, "fault.start", fault="switchover"), b.at(n))


def test_per1_first_closure_is_reported_and_a_loss_at_the_start_counts() -> None:
    """The loss is the first closure at or after the switchover start (a lost operation ending
    exactly at the start counts); a later reconnect is not the evidence."""
    b = B()
    b.open("s")
    b.op("s", 1.0)
    b.switchover(2.0, 2.5)
    lost = b.op("s", 1.5, 2.0, kind="fail")
    n = b.add(2.0, "session.reconnect", process="s", conn=2, previous=1)
    events = b.events()
    v = per.check_keepalive_on_switchover(events)
    assert v.valid is False
    fail = index_of(events, "op.fail", op_id=lost)
    assert fail < b.at(n) and set(v.evidence) == {index_of(events, "fault.start", fault="switchover"), fail}


def test_per1_reconnect_exactly_at_the_start_closes_the_connection() -> None:
    b = B()
    b.open("s")
    b.op("s", 1.0)
    b.add(2.0, "session.reconnect", process="s", conn=2, previous=1)
    b.switchover(2.0, 2.5)
    b.op("s", 3.0)  # an operation on the old connection number after it: still lost
    v = per.check_keepalive_on_switchover(b.events())
    assert v.valid is False and own(v)["lost"] == ["s#1 at switchover 1: session.reconnect"]


def test_per1_kept_connections_are_judged_after_an_unjudged_or_idle_session() -> None:
    """Every session is judged on its own: one without an earlier operation, or one unused after
    the switchover, does not stop the others being judged."""
    b = B()
    for p in ("a", "b", "c"):
        b.open(p)
    b.op("b", 1.0)  # used before, not after
    b.op("c", 1.0)
    b.switchover(2.0, 2.5)
    b.op("c", 3.0)
    v = per.check_keepalive_on_switchover(b.events())
    assert v.valid is True and (own(v)["judged"], own(v)["kept"], own(v)["not_judged"]) == (1, 1, 1)


def test_per1_an_operation_ending_exactly_at_the_switchover_end_is_not_after_it() -> None:
    b = B()
    b.open("s")
    b.op("s", 1.0)
    b.switchover(2.0, 2.5)
    b.op("s", 2.4, 2.5)
    v = per.check_keepalive_on_switchover(b.events())
    assert v.valid == "unknown" and own(v)["not_judged"] == 1


def test_per1_connection_is_the_one_the_operation_ended_on() -> None:
    """An operation reports the connection it completed on (``conn`` of its end) when it has one,
    else the one it was invoked on; the alive connection is the one of the last success before the
    switchover, even when operations complete out of order."""
    b = B()
    b.open("s")
    b.op("s", 0.1, 1.8, conn=1)  # long operation on connection 1, completing last
    b.op("s", 0.2, 0.3, conn=2)
    b.switchover(2.0, 2.5)
    b.op("s", 3.0, conn=1, done_conn=None)  # its end has no conn: the invoke's counts
    v = per.check_keepalive_on_switchover(b.events())
    assert v.valid is True and own(v)["kept"] == 1

    b = B()
    b.open("s")
    b.op("s", 1.0, conn=1)
    b.switchover(2.0, 2.5)
    b.op("s", 3.0, conn=1, done_conn=2)  # invoked on 1, completed on 2: 1 was not used
    b.op("s", 3.1, kind=None, conn=2)  # in flight at the end of the history
    v = per.check_keepalive_on_switchover(b.events())
    assert v.valid == "unknown" and own(v)["not_judged"] == 1


def test_per1_alive_connection_uses_completion_order_not_connection_order() -> None:
    b = B()
    b.open("s")
    b.op("s", 0.1, 1.9, conn=1)
    b.op("s", 0.2, 0.3, conn=2)
    b.switchover(2.0, 2.5)
    b.op("s", 2.9, 3.0, conn=1)
    b.op("s", 3.4, 3.5, conn=3)
    v = per.check_keepalive_on_switchover(b.events())
    assert v.valid is True and own(v)["kept"] == 1


@pytest.mark.parametrize(("lost_at", "lost"), [
    (6.0, "s#1 at switchover 3: server closed the connection unexpectedly"),  # exactly at the third's start
    (5.2, "s#1 at switchover 2: server closed the connection unexpectedly"),  # between the second and third
])
def test_per1_losses_are_assigned_to_their_switchover_of_three(lost_at: float, lost: str) -> None:
    """A loss between switchover k and k+1 belongs to switchover k; one exactly at the start of
    k+1 belongs to k+1."""
    b = B()
    b.open("s")
    for k in range(3):
        b.op("s", 1.0 + 2 * k)
        b.switchover(2.0 + 2 * k, 2.5 + 2 * k)
    b.op("s", lost_at - 0.1, lost_at, kind="fail")
    v = per.check_keepalive_on_switchover(b.events())
    assert own(v)["lost"] == [lost]
    assert (own(v)["judged"], own(v)["kept"]) == ((3, 2) if lost_at == 6.0 else (2, 1))


def test_per1_a_switchover_that_never_ended_cannot_be_judged() -> None:
    b = B()
    b.open("s")
    b.op("s", 1.0)
    b.switchover(2.0, None)
    b.op("s", 3.0)
    v = per.check_keepalive_on_switchover(b.events())
    assert (v.rule_id, v.valid) == ("PER-1", "unknown")
    assert "no session had an operation both before and after" in v.observed


def test_per1_caps_its_lists_and_evidence() -> None:
    """``details["lost"]`` keeps 50 names; the evidence keeps 20 losses and 20 errors; the observed
    line quotes 3 errors."""
    b = B()
    procs = [f"p{i:02d}" for i in range(55)]
    for p in procs:
        b.open(p)
        b.op(p, 1.0)
    b.switchover(2.0, 2.5)
    for i, p in enumerate(procs):
        if i < 51:
            b.add(2.1 + i * 0.001, "session.reconnect", process=p, conn=2, previous=1)
        else:
            b.op(p, 2.6 + i * 0.001, kind="info", lost=False, error=f"err-{p}")
    events = b.events()
    v = per.check_keepalive_on_switchover(events)
    assert v.valid is False and len(own(v)["lost"]) == 50 and own(v)["errors"] == 4
    assert len(v.evidence) == 1 + 20 + 4
    assert "e.g. p51: err-p51; p52: err-p52; p53: err-p53" in v.observed and "p54" not in v.observed

    b = B()
    for i in range(25):
        p = f"q{i:02d}"
        b.open(p)
        b.op(p, 1.0)
        b.op(p, 3.0)
        b.op(p, 3.5, kind="info", lost=False, error="x")
    b.switchover(2.0, 2.5)
    v = per.check_keepalive_on_switchover(b.events())
    assert v.valid is False and own(v)["kept"] == 25 and len(v.evidence) == 1 + 20


def test_per1_kept_verdict_cites_only_the_switchovers() -> None:
    b = B()
    b.open("s")
    b.op("s", 1.0)
    b.switchover(2.0, 2.5)
    b.op("s", 3.0)
    events = b.events()
    v = per.check_keepalive_on_switchover(events)
    assert (v.rule_id, v.valid, v.evidence) == ("PER-1", True, (index_of(events, "fault.start", fault="switchover"),))


# ------------------------------------------------------------------------------------- PER-2


def _state(reads: list[tuple[float, str, Any, int]], sets: list[tuple[float, str, str]] | None = None,
           switch: tuple[float, float] = (1.0, 1.5)) -> B:
    """``sets``: (t, key, value) on connection 1; ``reads``: (t, phase, value, conn) of key ``k``."""
    b = B()
    b.open("st")
    for t, key, value in sets if sets is not None else [(0.5, "k", "v1")]:
        b.add(t, "state.set", process="st", conn=1, key=key, kind="guc", value=value)
    b.switchover(*switch)
    for t, phase, value, conn in reads:
        b.add(t, "state.read", process="st", conn=conn, key="k", value=value, phase=phase)
    return b


def test_per2_without_state_set_is_unknown() -> None:
    v = per.check_session_state_restored(_state([(2.0, "after", "v1", 1)], sets=[]).events())
    assert (v.rule_id, v.valid, v.observed) == ("PER-2", "unknown", "no state.set before the switchover")


def test_per2_state_set_at_the_switchover_start_is_not_before_it() -> None:
    v = per.check_session_state_restored(_state([(2.0, "after", "other", 1)], sets=[(1.0, "k", "v1")]).events())
    assert v.valid == "unknown"


@pytest.mark.parametrize(("t", "phase"), [(1.5, "after"), (2.0, "before")])
def test_per2_only_reads_after_the_switchover_end_count(t: float, phase: str) -> None:
    """A read is the ``after`` read only with ``phase="after"`` and a time past the last switchover's
    end."""
    v = per.check_session_state_restored(_state([(t, phase, "changed", 1)]).events())
    assert (v.rule_id, v.valid) == ("PER-2", "unknown") and own(v)["not_read"] == 1
    assert v.observed == "none of 1 setting(s) was read back after the switchover"


def test_per2_details_and_evidence_of_a_broken_setting() -> None:
    b = _state([(0.8, "before", "v1", 1), (2.0, "after", "v2", 1)])
    events = b.events()
    v = per.check_session_state_restored(events)
    assert v.rule_id == "PER-2" and v.valid is False
    assert own(v) == {"settings": 1, "broken": ["st guc k: set 'v1', read 'v2'"], "not_read": 0, "kinds": {"guc": 1}}
    assert v.evidence == (index_of(events, "state.set"), index_of(events, "state.read", phase="after"))


def test_per2_notes_a_value_already_wrong_before_the_switchover() -> None:
    v = per.check_session_state_restored(_state([(0.8, "before", "v0", 1), (2.0, "after", "v0", 1)]).events())
    assert own(v)["broken"] == ["st guc k: set 'v1', read 'v0' (already 'v0' before the switchover)"]
    v = per.check_session_state_restored(_state([(1.0, "before", "v0", 1), (2.0, "after", "v0", 1)]).events())
    assert own(v)["broken"] == ["st guc k: set 'v1', read 'v0'"]  # read at the start: not "before"
    v = per.check_session_state_restored(_state([(2.0, "after", "v0", 1)]).events())
    assert own(v)["broken"] == ["st guc k: set 'v1', read 'v0'"]


def test_per2_a_missing_read_does_not_hide_a_broken_one_and_kinds_are_counted() -> None:
    b = B()
    b.open("st")
    b.add(0.1, "state.set", process="st", conn=1, key="a", kind="guc", value="x")
    b.add(0.2, "state.set", process="st", conn=1, key="b", kind="guc", value="y")
    b.add(0.3, "state.set", process="st", conn=1, key="c", kind="prepared", value="z")
    b.switchover(1.0, 1.5)
    b.add(2.0, "state.read", process="st", conn=1, key="b", value="changed", phase="after")
    b.add(2.0, "state.read", process="st", conn=1, key="c", value="z", phase="after")
    v = per.check_session_state_restored(b.events())
    assert v.valid is False and own(v)["not_read"] == 1 and own(v)["kinds"] == {"guc": 2, "prepared": 1}
    assert v.observed.startswith("1 of 2 setting(s) not restored: st guc b")


def test_per2_kept_cites_the_switchover_and_counts_kinds() -> None:
    b = _state([(2.0, "after", "v1", 1)], sets=[(0.5, "k", "v1"), (0.6, "j", "w")])
    events = b.events()
    v = per.check_session_state_restored(events)
    assert (v.rule_id, v.valid, v.evidence) == ("PER-2", True, (index_of(events, "fault.start", fault="switchover"),))
    assert v.observed == "all 1 setting(s) of 1 kind(s) unchanged after 1 switchover(s)"


def test_per2_caps_the_quoted_settings_and_the_evidence() -> None:
    b = B()
    b.open("st")
    keys = [f"k{i:02d}" for i in range(21)]
    for k in keys:
        b.add(0.5, "state.set", process="st", conn=1, key=k, kind="guc", value="a")
    b.switchover(1.0, 1.5)
    for k in keys:
        b.add(2.0, "state.read", process="st", conn=1, key=k, value="b", phase="after")
    v = per.check_session_state_restored(b.events())
    assert len(v.evidence) == 40 and v.observed.count("set 'a', read 'b'") == 4


# ------------------------------------------------------------------------------------- PER-3


def _window(closed: float | None = None, *, used: list[float] | None = None, t0: float = 1.0, t1: float = 1.25,
            faults: list[tuple[str, str, float, float | None]] | None = None, procs: tuple[str, ...] = ("s1",),
            error: str | None = None, timed_out: bool = False, new: str | None = "n2") -> B:
    """Sessions that used connection 1 before a switchover at ``t0``..``t1``; each is lost at
    ``closed`` (if given) and/or succeeds on connection 1 at the ``used`` times."""
    b = B()
    for p in procs:
        b.open(p)
        b.op(p, 0.5)
    b.switchover(t0, t1, new=new)
    for kind, node, f0, f1 in faults or []:
        b.fault(kind, node, f0, f1)
    for p in procs:
        if closed is not None:
            b.op(p, t0 + 0.05, closed, kind="fail", error=error, timed_out=timed_out)
        for u in used or []:
            b.op(p, u - 0.01, u)
    return b


@pytest.mark.parametrize("kind", ["partition", "stop", "kill", "pause", "latency", "bandwidth", "cut_replication"])
def test_per3_a_network_or_server_fault_on_the_new_principal_delays_its_return(kind: str) -> None:
    b = _window(closed=2.0, faults=[(kind, "n2", 0.9, 6.0)])
    v = per.check_recovery_window(b.events(), recovery_window=1.5, tolerance=0.5)
    assert v.valid is True and "principal back after 5.00 s" in v.observed


def test_per3_other_faults_and_faults_elsewhere_do_not_delay_the_principal() -> None:
    b = _window(used=[2.0], faults=[("mark-state", "n2", 0.9, 6.0), ("partition", "n1", 0.9, 6.0)])
    v = per.check_recovery_window(b.events(), recovery_window=1.5, tolerance=0.5)
    assert v.valid is True and "principal back after 0.25 s" in v.observed


@pytest.mark.parametrize(("fault", "back"), [
    ((0.5, 0.8), "principal back after 0.25 s"),  # over before the switchover ended
    ((1.5, 6.0), "principal back after 0.25 s"),  # began after it ended
    ((1.25, 6.0), "principal back after 5.00 s"),  # began exactly at its end
    ((1.25, None), "principal never back"),  # never healed
    ((0.5, None), "principal never back"),
])
def test_per3_which_faults_overlap_the_switchover(fault: tuple[float, float | None], back: str) -> None:
    b = _window(closed=2.0, faults=[("partition", "n2", *fault)])
    v = per.check_recovery_window(b.events(), recovery_window=1.5, tolerance=0.5)
    assert back in v.observed


def test_per3_without_a_new_principal_the_switchover_end_counts() -> None:
    b = _window(used=[2.0], new=None, faults=[("partition", "n2", 0.9, 6.0)])
    v = per.check_recovery_window(b.events(), recovery_window=1.5, tolerance=0.5)
    assert v.valid is True and "principal back after 0.25 s" in v.observed


def test_per3_the_new_principal_is_the_node_promoted_during_the_switchover() -> None:
    """Only a ``role.change`` to principal while the switchover runs names the new principal (the
    first one); a demotion, or a promotion after the switchover ended, does not."""
    b = _window(used=[2.0], new=None, faults=[("partition", "n1", 0.9, 6.0)])
    b.add(1.1, "role.change", node="n1", old_role="principal", new_role="mirror")
    b.add(1.2, "role.change", node="n2", old_role="mirror", new_role="principal")
    b.add(1.21, "role.change", node="n1", old_role="mirror", new_role="principal")
    b.add(1.3, "role.change", node="n1", old_role="mirror", new_role="principal")
    v = per.check_recovery_window(b.events(), recovery_window=1.5, tolerance=0.5)
    assert v.valid is True and "principal back after 0.25 s" in v.observed

    b = _window(used=[2.0], new=None, faults=[("partition", "n1", 0.9, 6.0)])
    b.add(1.3, "role.change", node="n1", old_role="mirror", new_role="principal")
    v = per.check_recovery_window(b.events(), recovery_window=1.5, tolerance=0.5)
    assert "principal back after 0.25 s" in v.observed


def test_per3_defaults_are_a_60_s_window_and_1_s_tolerance() -> None:
    b = _window(closed=62.5, faults=[("partition", "n2", 0.9, 100.0)])
    v = per.check_recovery_window(b.events())
    assert v.valid is False and "closed late" in v.observed and "(window 60.0 s)" in v.observed
    b = _window(closed=61.5, faults=[("partition", "n2", 0.9, 100.0)])
    assert per.check_recovery_window(b.events()).valid is True


def test_per3_window_is_measured_from_the_switchover_start() -> None:
    b = _window(used=[12.0], t0=10.0, t1=11.0)
    v = per.check_recovery_window(b.events(), recovery_window=3.0)
    assert v.valid is True and own(v) == {"judged": 1, "good": 1, "bad": [],
                                          "outcomes": ["principal back after 1.00 s"]}
    b = _window(used=[12.0], t0=10.0, t1=11.5)
    assert per.check_recovery_window(b.events(), recovery_window=1.5).valid is True  # back exactly at the window


def test_per3_in_window_every_session_is_judged() -> None:
    b = _window(used=[2.0], procs=("a", "b"))
    b.open("a0-idle")  # no operation before the switchover: not judged
    b.open("d-unused")
    b.op("d-unused", 0.6)  # not used after, not closed: not judged
    v = per.check_recovery_window(b.events(), recovery_window=3.0)
    assert (v.rule_id, v.valid) == ("PER-3", True) and (own(v)["judged"], own(v)["good"]) == (2, 2)
    assert v.observed == "2/2 session(s) as required (principal back after 0.25 s)"


def test_per3_in_window_a_closed_connection_is_wrong_even_if_used_again() -> None:
    events = _window(closed=1.2, used=[2.0]).events()
    v = per.check_recovery_window(events, recovery_window=3.0)
    closed = index_of(events, "op.fail")
    assert (v.rule_id, v.valid) == ("PER-3", False) and own(v)["judged"] == 1
    assert v.evidence == (index_of(events, "fault.start", fault="switchover"), closed)
    assert own(v)["bad"] == ["s1#1 closed although the principal was back in the window: "
                             "server closed the connection unexpectedly"]


def test_per3_in_window_an_unused_session_is_not_judged() -> None:
    v = per.check_recovery_window(_window().events(), recovery_window=3.0)
    assert (v.rule_id, v.valid) == ("PER-3", "unknown") and own(v)["judged"] == 0
    assert v.observed == "no session was observed after the switchover"


def test_per3_out_of_window_sessions_silently_continued_cite_their_first_success() -> None:
    b = _window(used=[8.0, 9.0], procs=("a-unused", "b"), faults=[("partition", "n2", 0.9, 6.0)])
    events = b.events()
    v = per.check_recovery_window(events, recovery_window=1.5, tolerance=0.5)
    first_ok = [e.index for e in events if e.type == "op.ok" and e.get("process") == "a-unused" and e.t == 8.0]
    assert v.valid is False and set(first_ok) <= set(v.evidence)
    assert own(v)["judged"] == 2 and len(own(v)["bad"]) == 2
    assert own(v)["bad"][0] == "a-unused#1 not closed: an operation succeeded on it 7.00 s after the switchover"


def test_per3_out_of_window_an_untouched_session_does_not_stop_the_others() -> None:
    b = _window(faults=[("partition", "n2", 0.9, 6.0)], procs=("a",))
    b.open("b")
    b.op("b", 0.5)
    b.op("b", 1.1, 5.0, kind="fail")  # closed late
    v = per.check_recovery_window(b.events(), recovery_window=1.5, tolerance=0.5)
    assert v.valid is False and own(v)["judged"] == 1 and "b#1 closed late" in own(v)["bad"][0]


def test_per3_closing_exactly_at_the_deadline_is_in_time() -> None:
    b = _window(closed=3.0, faults=[("partition", "n2", 0.9, 6.0)])
    v = per.check_recovery_window(b.events(), recovery_window=1.5, tolerance=0.5)  # deadline 1 + 1.5 + 0.5
    assert v.valid is True and own(v)["good"] == 1


def test_per3_evidence_of_a_late_close_and_of_a_client_giving_up() -> None:
    for kwargs, why in (({"closed": 4.0}, "closed late"), ({"closed": 2.0, "timed_out": True}, "gave up waiting")):
        events = _window(**kwargs, faults=[("partition", "n2", 0.9, 6.0)]).events()  # type: ignore[arg-type]
        v = per.check_recovery_window(events, recovery_window=1.5, tolerance=0.5)
        assert v.valid is False and why in v.observed
        assert v.evidence == (index_of(events, "fault.start", fault="switchover"), index_of(events, "op.fail"))


def test_per3_a_close_needs_an_error_message_unless_it_is_a_reconnect() -> None:
    events = _window(closed=2.0, error="", faults=[("partition", "n2", 0.9, 6.0)]).events()
    v = per.check_recovery_window(events, recovery_window=1.5, tolerance=0.5)
    assert v.valid is False and own(v)["bad"] == ["s1#1 closed without an error message"]
    assert v.evidence == (index_of(events, "fault.start", fault="switchover"), index_of(events, "op.fail"))

    b = _window(faults=[("partition", "n2", 0.9, 6.0)])
    b.add(2.0, "session.reconnect", process="s1", conn=2, previous=1)
    v = per.check_recovery_window(b.events(), recovery_window=1.5, tolerance=0.5)
    assert v.valid is True and own(v)["good"] == 1


def test_per3_caps_its_lists_and_evidence() -> None:
    procs = tuple(f"p{i:02d}" for i in range(51))
    events = _window(closed=4.0, procs=procs, faults=[("partition", "n2", 0.9, 6.0)]).events()
    v = per.check_recovery_window(events, recovery_window=1.5, tolerance=0.5)
    assert len(own(v)["bad"]) == 50 and len(v.evidence) == 31 and v.observed.count("closed late") == 3


# ------------------------------------------------------------------------------------- PER-4 .. PER-8


def _tx(end: float | None, *, closed: float | None = None, probe: float | None = None, t0: float = 1.0,
        t1: float = 1.5, begin: tuple[float, float] = (0.5, 0.6), end_f: str = "commit",
        end_done: float | None = "soon", procs: tuple[str, ...] = ("tx",)) -> B:  # type: ignore[assignment]
    """A session inside a transaction at the switchover: ``begin`` ok, then ``end_f`` invoked at
    ``end`` (None: never), the connection lost at ``closed``, a probe succeeding at ``probe``."""
    b = B()
    for p in procs:
        b.open(p)
        b.op(p, *begin, f="begin")
        b.op(p, begin[1] + 0.01, f="write")
    b.switchover(t0, t1)
    for p in procs:
        if end is not None:
            done = end + 0.001 if end_done == "soon" else end_done
            b.op(p, end, done, f=end_f, kind="ok" if done is not None else None)
        if closed is not None:
            b.op(p, closed - 0.01, closed, kind="fail")
        if probe is not None:
            b.op(p, probe - 0.01, probe, f="probe")
    return b


def test_per4_defaults_are_a_60_s_window_and_a_quarter_second_margin() -> None:
    """PER-4 with its defaults: a transaction ending 60.5 s after the switchover began is past the
    window (so closing it is right); one ending at 59.5 s is inside it (so it must be kept)."""
    assert per.check_drain_window(_tx(61.5, closed=62.0, t1=61.0).events()).valid is True
    assert per.check_open_transaction_not_kept(_tx(61.5, closed=62.0, t1=61.0).events()).valid is True
    v = per.check_drain_window(_tx(60.5, probe=62.0, t1=61.0).events())
    assert (v.rule_id, v.valid) == ("PER-4", True) and own(v)["good"] == 1
    assert per.check_drain_window(_tx(61.5, probe=62.0, t1=61.0).events()).valid is False


@pytest.mark.parametrize(("end", "judged"), [(2.75, True), (3.25, True), (2.8, False), (3.2, False)])
def test_per4_margin_edges_are_exclusive(end: float, judged: bool) -> None:
    """With window 2 s and margin 0.25 s from a start at 1 s, work ending at 2.75 s is inside the
    window and at 3.25 s outside it (both judged); strictly between them it is not judged."""
    v = per.check_drain_window(_tx(end, closed=3.5 if end > 3 else None, probe=4.0 if end < 3 else None).events(),
                               drain_window=2.0, margin=0.25)
    assert (v.valid is True) if judged else (v.valid == "unknown")


def test_per4_counts_and_lists_each_case() -> None:
    b = _tx(1.2, probe=2.0, procs=("a-kept",), t1=1.5)
    b.open("b-edge")
    b.op("b-edge", 0.4, f="begin")  # its case comes first
    b.op("b-edge", 3.0, f="commit")  # 2.0 s after the start: on the edge, not judged
    events = b.events()
    v = per.check_drain_window(events, drain_window=2.0)
    assert v.valid is True
    assert own(v) == {"judged": 1, "good": 1, "not_judged": 1, "bad": [],
                      "ok": ["a-kept#1 (transaction open) kept"]}
    assert v.observed == "1/1 session(s) as required: a-kept#1 (transaction open) kept"


def test_per4_a_case_inside_the_window_with_no_later_use_is_not_judged() -> None:
    v = per.check_drain_window(_tx(1.2).events(), drain_window=2.0)
    assert v.valid == "unknown" and own(v)["not_judged"] == 1 and own(v)["judged"] == 0


def test_per4_a_closed_case_inside_the_window_is_a_violation_with_evidence() -> None:
    events = _tx(1.2, closed=1.4).events()
    v = per.check_drain_window(events, drain_window=2.0)
    begin = index_of(events, "op.invoke", f="begin")
    start = index_of(events, "fault.start", fault="switchover")
    assert v.valid is False and v.evidence == (start, begin, index_of(events, "op.fail"))
    assert own(v)["bad"] == ["tx#1 (transaction open) ended 0.20 s into the 2.0 s drain window but was closed: "
                             "server closed the connection unexpectedly"]


def test_per4_in_flight_requests_of_every_kind_are_cases() -> None:
    for f in ("stream", "copy", "slow_query"):
        b = B()
        b.open("r")
        b.op("r", 0.2)
        b.op("r", 0.5, 1.8, f=f)  # ends 0.8 s into the window: must be kept
        b.switchover(1.0, 1.5)
        b.op("r", 2.5)
        v = per.check_drain_window(b.events(), drain_window=2.0)
        assert v.valid is True and own(v)["ok"] == [f"r#1 ({f} in progress) kept"], f


def test_per4_in_flight_means_invoked_before_the_start_and_not_finished_before_it() -> None:
    for (t0, t1), valid in (((0.5, 0.999), "unknown"), ((1.0, 1.1), "unknown"), ((0.5, 1.0), True)):
        b = B()
        b.open("r")
        b.op("r", t0, t1, f="slow_query")
        b.switchover(1.0, 1.5)
        b.op("r", 2.5)
        assert per.check_drain_window(b.events(), drain_window=2.0).valid == valid, (t0, t1)


def test_per4_caps_its_lists_and_evidence() -> None:
    procs = tuple(f"p{i:02d}" for i in range(51))
    events = _tx(1.2, closed=1.4, procs=procs).events()
    v = per.check_drain_window(events, drain_window=2.0)
    assert len(own(v)["bad"]) == 50 and len(v.evidence) == 31 and v.observed.count("but was closed") == 3
    events = _tx(1.2, probe=2.0, procs=procs).events()
    v = per.check_drain_window(events, drain_window=2.0)
    assert v.valid is True and len(own(v)["ok"]) == 50 and v.observed.count(" kept") == 3


@pytest.mark.parametrize(("end_f", "end", "case"), [
    ("rollback", 0.8, False),  # ended before the switchover: no open transaction
    ("commit", 0.8, False),
    ("commit", 0.95, True),  # commit still running when the switchover began
    ("rollback", 0.95, True),
])
def test_per7_which_transactions_are_open_at_the_switchover(end_f: str, end: float, case: bool) -> None:
    b = _tx(end, end_f=end_f, end_done=1.2 if case else end + 0.01)
    b.op("tx", 9.0, 9.01, kind="fail")  # closed after the window
    v = per.check_open_transaction_not_kept(b.events(), drain_window=2.0)
    assert v.valid == ("unknown" if not case else "unknown")  # ended (invoked) inside the window: not PER-7's case
    assert own(v)["not_judged"] == (1 if case else 0)


def test_per7_transaction_begun_at_the_start_or_failed_begin_is_not_open() -> None:
    assert per.check_open_transaction_not_kept(_tx(None, closed=9.0, begin=(0.5, 1.0)).events(),
                                               drain_window=2.0).valid == "unknown"
    b = B()
    b.open("tx")
    b.op("tx", 0.5, kind="fail", f="begin", lost=False)
    b.switchover(1.0, 1.5)
    b.op("tx", 9.0, kind="fail")
    assert per.check_open_transaction_not_kept(b.events(), drain_window=2.0).valid == "unknown"


def test_per7_commit_invoked_at_the_start_or_still_running_keeps_the_transaction_open() -> None:
    for end, done in ((1.0, 1.01), (0.9, None), (0.9, 1.0)):
        b = _tx(end, end_done=done, closed=9.0)
        v = per.check_open_transaction_not_kept(b.events(), drain_window=2.0)
        assert own(v)["judged"] + own(v)["not_judged"] == 1


def test_per7_a_later_commit_ends_the_open_transaction() -> None:
    """The end of the open transaction is the first commit/rollback after its begin (here a rollback
    6 s in: past the 2 s window, and the session was closed: as required)."""
    b = _tx(None)
    b.op("tx", 7.0, 7.1, f="rollback")
    b.op("tx", 8.0, kind="fail")
    v = per.check_open_transaction_not_kept(b.events(), drain_window=2.0)
    assert v.valid is True and own(v)["ok"] == ["tx#1 (transaction open) closed: "
                                                "server closed the connection unexpectedly"]
    assert (own(v)["judged"], own(v)["good"]) == (1, 1)


def test_per7_an_open_transaction_neither_closed_nor_used_is_not_judged() -> None:
    v = per.check_open_transaction_not_kept(_tx(None).events(), drain_window=2.0)
    assert v.valid == "unknown" and (own(v)["judged"], own(v)["not_judged"]) == (0, 1)


def test_per7_sessions_without_a_transaction_do_not_stop_the_others() -> None:
    b = _tx(None, closed=9.0, procs=("b-tx",))
    b.open("a-none")
    b.op("a-none", 0.4)
    v = per.check_open_transaction_not_kept(b.events(), drain_window=2.0)
    assert (v.rule_id, v.valid) == ("PER-7", True) and own(v)["judged"] == 1


def test_per7_use_within_the_margin_after_the_window_is_not_continued_use() -> None:
    """Closed early, then an operation succeeds at start + window: not judged as "continued" (only
    successes after window + margin are), so the close stands."""
    b = _tx(None, closed=1.3, probe=3.0)
    v = per.check_open_transaction_not_kept(b.events(), drain_window=2.0, margin=0.25)
    assert v.valid is True
    b = _tx(None, closed=1.3, probe=3.3)
    v = per.check_open_transaction_not_kept(b.events(), drain_window=2.0, margin=0.25)
    assert v.valid is False and "not closed: an operation succeeded" in v.observed


def test_per7_a_success_at_the_moment_of_the_close_is_continued_use() -> None:
    b = _tx(None, closed=4.0)
    b.op("tx", 3.99, 4.0, f="probe")
    v = per.check_open_transaction_not_kept(b.events(), drain_window=2.0, margin=0.25)
    assert v.valid is False


def _temps(keys: list[str], dropped: list[str], at: float = 0.5) -> B:
    b = B()
    b.open("t")
    for k in keys:
        b.add(at, "state.set", process="t", conn=1, key=k, kind="temp_table", value="present")
    for k in dropped:
        b.add(at + 0.1, "state.set", process="t", conn=1, key=k, kind="temp_table_dropped", value=None)
    b.switchover(1.0, 1.5)
    b.op("t", 1.6, f="probe")
    return b


def test_per5_each_temp_table_is_held_until_its_own_drop() -> None:
    v = per.check_temp_tables_not_kept(_temps(["t1", "t2"], ["t1"]).events())
    assert (v.rule_id, v.valid) == ("PER-5", False) and own(v)["bad"][0].startswith("t#1 (holds temp_table t2)")
    assert per.check_temp_tables_not_kept(_temps(["t1"], ["t1"]).events()).valid == "unknown"
    assert per.check_temp_tables_not_kept(_temps(["t1"], [], at=1.0).events()).valid == "unknown"  # set at the start


def test_per5_other_state_does_not_count() -> None:
    b = _temps([], [])
    b.add(0.5, "state.set", process="t", conn=1, key="x", value="y")  # no kind at all
    b.add(0.5, "state.set", process="t", conn=1, key="tt", kind="temp_table", value="present")
    b.add(0.6, "state.read", process="t", conn=1, key="tt", value="present", phase="before")
    v = per.check_temp_tables_not_kept(b.events())
    assert v.valid is False and own(v)["judged"] == 1


def _streams(progress: list[bool], end: float, closed: bool) -> B:
    b = B()
    b.open("r")
    b.op("r", 0.2)
    for i, has in enumerate(progress):
        op_id = next(b.op_ids)
        b.add(0.5, "op.invoke", process="r", op_id=op_id, f="stream", conn=1)
        if has:
            b.add(0.6 + i * 0.01, "stream.progress", process="r", op_id=op_id, conn=1, rows=10)
        b.add(end, "op.ok", process="r", op_id=op_id, f="stream", value=1, conn=1)
    b.switchover(1.0, 1.5)
    if closed:
        b.op("r", end + 0.5, kind="fail")
    else:
        b.op("r", end + 0.5, f="probe")
    return b


def test_per6_only_streams_with_progress_before_the_start_are_cases() -> None:
    v = per.check_partial_result_not_kept(_streams([False, True], 4.0, closed=False).events(), drain_window=1.0)
    assert (v.rule_id, v.valid) == ("PER-6", False) and own(v)["judged"] == 1
    b = _streams([False], 4.0, closed=False)
    b.add(1.0, "stream.progress", process="r", op_id=2, conn=1, rows=10)  # at the start: not before it
    assert per.check_partial_result_not_kept(b.events(), drain_window=1.0).valid == "unknown"
    b = _streams([False], 4.0, closed=False)
    b.add(0.7, "stream.row", process="r", op_id=2, conn=1)  # not a progress event
    assert per.check_partial_result_not_kept(b.events(), drain_window=1.0).valid == "unknown"


def test_per6_defaults_are_a_60_s_window_and_a_quarter_second_margin() -> None:
    """A partly delivered result finishing 60.5 s after the start is past the default window: the
    session had to be closed (it was)."""
    v = per.check_partial_result_not_kept(_streams([True], 61.5, closed=True).events())
    assert v.valid is True and own(v)["good"] == 1


def test_per6_a_result_finished_in_the_window_is_not_judged_even_if_used_after() -> None:
    v = per.check_partial_result_not_kept(_streams([True], 1.4, closed=False).events(), drain_window=1.0)
    assert v.valid == "unknown" and own(v)["not_judged"] == 1


def _copy(end: float | None, closed_at: float | None) -> B:
    b = B()
    b.open("cp")
    b.op("cp", 0.2)
    b.add(0.7, "op.invoke", process="cp", op_id=900, f="copy", conn=1)
    b.switchover(1.0, 1.5)
    if end is not None:
        b.add(end, "op.ok", process="cp", op_id=900, f="copy", value=1, conn=1)
    if closed_at is not None:
        b.op("cp", closed_at - 0.01, closed_at, kind="fail")
    else:
        b.op("cp", 9.0, f="probe")
    return b


@pytest.mark.parametrize(("end", "valid"), [(2.0, "unknown"), (2.25, "unknown"), (2.3, False), (None, False)])
def test_per8_a_copy_is_a_case_only_when_unfinished_past_window_and_margin(end: float | None, valid: Any) -> None:
    v = per.check_cursor_not_kept(_copy(end, None).events(), drain_window=1.0)
    assert (v.rule_id, v.valid) == ("PER-8", valid)


def test_per8_defaults_and_a_cursor_case() -> None:
    assert per.check_cursor_not_kept(_copy(61.2, None).events()).valid == "unknown"
    assert per.check_cursor_not_kept(_copy(61.3, None).events()).valid is False
    b = _copy(2.0, 3.0)
    b.add(0.5, "state.set", process="cp", conn=1, key="c1", kind="cursor", value="open")
    v = per.check_cursor_not_kept(b.events(), drain_window=1.0)
    assert v.valid is True and own(v)["ok"] == ["cp#1 (holds cursor c1) closed: "
                                                "server closed the connection unexpectedly"]
