"""The PER-9 (read-only node removal) and PER-10 (endpoint support) checkers on synthetic histories:
each with histories that keep the rule, histories that break it, and the cases it cannot judge."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.rules import persistent as per
from harness.rules import registry
from tests.test_per_checkers import Builder

PORTS = {"n1": 5001, "n2": 5002, "n3": 5003}


def _base() -> Builder:
    b = Builder()
    b.add(0.0, "node.ports", ports=PORTS)
    return b


def _removal(b: Builder, t0: float, t1: float, node: str = "n2", fid: int = 77) -> None:
    b.add(t0, "fault.start", fault="remove_node", id=fid, node=node, params={})
    b.add(t1, "fault.end", fault="remove_node", id=fid, node=node, seconds=t1 - t0, error=None)


def _idle_on(b: Builder, p: str, node: str, after: str | None, kind: str | None = None) -> None:
    """Session ``p`` served by ``node`` before the removal at 2.0; then served by ``after`` (None:
    its next operation loses the front connection)."""
    b.open(p)
    if kind is not None:
        b.add(0.01, "session.endpoint", process=p, endpoint=kind)
    b.ok(p, 1.0, value=PORTS[node])
    if after is None:
        b.lost(p, 4.0)
    else:
        b.ok(p, 4.0, value=PORTS[after])


def test_registered() -> None:
    assert registry.get("PER-9").checker is per.check_readonly_node_removal
    assert registry.get("PER-10").checker is per.check_endpoint_support


def test_per9_idle_sessions_moved_keep_the_rule() -> None:
    b = _base()
    _idle_on(b, "ro-1", "n2", "n3")
    _idle_on(b, "ro-2", "n3", "n3")  # not on the removed node: not judged as "on node"
    _removal(b, 2.0, 2.2)
    v = per.check_readonly_node_removal(b.events())
    assert v.valid is True, v.summary
    assert v.details["good"] == 1


def test_per9_idle_session_closed_breaks_the_rule() -> None:
    b = _base()
    _idle_on(b, "ro-1", "n2", None)
    _removal(b, 2.0, 2.2)
    v = per.check_readonly_node_removal(b.events())
    assert v.valid is False
    assert "closed" in v.observed and "ro-1" in v.observed


def test_per9_new_query_on_removed_node_breaks_the_rule() -> None:
    b = _base()
    _idle_on(b, "ro-1", "n2", "n3")
    b.open("ro-2", t=2.5)
    b.ok("ro-2", 2.6, value=PORTS["n2"])  # a new connection routed to the removed node
    _removal(b, 2.0, 2.2)
    v = per.check_readonly_node_removal(b.events())
    assert v.valid is False
    assert "ran on n2" in v.observed


def test_per9_direct_connections_are_not_routed() -> None:
    """A direct connection to the node goes on there until the node stops: not PER-9's business."""
    b = _base()
    _idle_on(b, "ro-1", "n2", "n3", kind="custom-active")
    _idle_on(b, "d-1", "n2", "n2", kind="direct")
    _removal(b, 2.0, 2.2)
    assert per.check_readonly_node_removal(b.events()).valid is True
    assert per.check_endpoint_support(b.events()).valid is False  # but PER-10 wants it disconnected


def test_per9_within_grace_is_tolerated() -> None:
    b = _base()
    _idle_on(b, "ro-1", "n2", "n3")
    b.open("ro-2", t=2.1)
    b.ok("ro-2", 2.1, value=PORTS["n2"])  # inside the 0.5 s routing grace
    _removal(b, 2.0, 2.2)
    assert per.check_readonly_node_removal(b.events(), routing_grace=0.5).valid is True
    assert per.check_readonly_node_removal(b.events(), routing_grace=0.05).valid is False


def test_per9_running_query_finishing_in_window_is_kept() -> None:
    b = _base()
    b.open("ro-1")
    b.ok("ro-1", 1.0, value=PORTS["n2"])
    b.ok("ro-1", 1.5, 4.0, f="long_read", value=PORTS["n2"])  # running at 2.0, ends 2 s later
    b.ok("ro-1", 4.5, value=PORTS["n3"])
    _removal(b, 2.0, 2.1)
    assert per.check_readonly_node_removal(b.events(), window=5.0).valid is True
    # the same history with a 1 s window: the query ran past it and the connection was kept
    assert per.check_readonly_node_removal(b.events(), window=1.0).valid is False


def test_per9_running_query_past_window_closed_keeps_the_rule() -> None:
    b = _base()
    b.open("ro-1")
    b.ok("ro-1", 1.0, value=PORTS["n2"])
    b.lost("ro-1", 1.5, 3.1, f="long_read")  # closed at the end of a 1 s window
    _removal(b, 2.0, 2.1)
    assert per.check_readonly_node_removal(b.events(), window=1.0, tolerance=0.5).valid is True
    # closed at once although the window was 5 s: the query could have finished... it did not end
    # in time either way, so closing is allowed; but closing an idle one is not (see above)
    late = _base()
    late.open("ro-1")
    late.ok("ro-1", 1.0, value=PORTS["n2"])
    late.lost("ro-1", 1.5, 9.0, f="long_read")  # closed 7 s after the removal, window 1 s
    _removal(late, 2.0, 2.1)
    assert per.check_readonly_node_removal(late.events(), window=1.0, tolerance=0.5).valid is False


def test_per9_unknown_without_removal_or_ports() -> None:
    b = Builder()
    _idle_on(b, "ro-1", "n2", "n3")
    assert per.check_readonly_node_removal(b.events()).valid == "unknown"
    _removal(b, 2.0, 2.2)
    v = per.check_readonly_node_removal(b.events())
    assert v.valid == "unknown" and "node.ports" in v.observed


def test_per10_kinds() -> None:
    b = _base()
    _idle_on(b, "c-1", "n2", "n3", kind="cluster")
    _idle_on(b, "a-1", "n2", "n1", kind="custom-active")
    _idle_on(b, "k-1", "n2", None, kind="custom-connection")
    _idle_on(b, "d-1", "n2", None, kind="direct")
    _removal(b, 2.0, 2.2)
    v = per.check_endpoint_support(b.events())
    assert v.valid is True, v.summary
    assert v.details["by_kind"] == {"cluster": 1, "custom-active": 1, "custom-connection": 1, "direct": 1}


def test_per10_connection_based_kept_breaks_the_rule() -> None:
    b = _base()
    _idle_on(b, "k-1", "n2", "n3", kind="custom-connection")  # moved instead of disconnected
    _removal(b, 2.0, 2.2)
    v = per.check_endpoint_support(b.events())
    assert v.valid is False and "custom-connection kept" in v.observed


def test_per10_late_disconnect_breaks_the_rule() -> None:
    late = _base()
    late.open("k-1")
    late.add(0.01, "session.endpoint", process="k-1", endpoint="custom-connection")
    late.ok("k-1", 1.0, value=PORTS["n2"])
    late.ok("k-1", 2.1, value=PORTS["n2"])  # served during the removal: allowed
    late.lost("k-1", 9.0)  # lost 6.8 s after the removal ended, window 1 s
    _removal(late, 2.0, 2.2)
    v = per.check_endpoint_support(late.events(), window=1.0, tolerance=0.5)
    assert v.valid is False and "disconnected only" in v.observed
    assert per.check_endpoint_support(late.events(), window=10.0).valid is True


def test_per10_cluster_closed_breaks_the_rule() -> None:
    b = _base()
    _idle_on(b, "c-1", "n2", None, kind="cluster")
    _removal(b, 2.0, 2.2)
    assert per.check_endpoint_support(b.events()).valid is False


def test_per10_unknown() -> None:
    b = _base()
    _idle_on(b, "c-1", "n2", "n3")  # no endpoint kind recorded
    _removal(b, 2.0, 2.2)
    assert per.check_endpoint_support(b.events()).valid == "unknown"
    b2 = _base()
    _idle_on(b2, "c-1", "n3", "n3", kind="cluster")  # not on the removed node
    _removal(b2, 2.0, 2.2)
    assert per.check_endpoint_support(b2.events()).valid == "unknown"


KINDS = per.PERSISTENT_ENDPOINTS + per.DISCONNECTED_ENDPOINTS


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.booleans(), st.sampled_from(["n1", "n2", "n3"])),
                min_size=1, max_size=8))
def test_per9_per10_match_a_model(sessions: list[tuple[str, bool, str]]) -> None:
    """Random sessions (endpoint kind, kept or closed, node before the removal of n2): the verdicts
    follow the rules' text - PER-10 violated iff some session on n2 was treated against its kind,
    PER-9 violated iff some idle session on n2 through a persistent endpoint was closed."""
    b = _base()
    for i, (kind, kept, node) in enumerate(sessions):
        _idle_on(b, f"s{i}", node, "n3" if kept else None, kind=kind)
    _removal(b, 2.0, 2.2)
    on_n2 = [(k, kept) for k, kept, node in sessions if node == "n2"]
    v10 = per.check_endpoint_support(b.events())
    v9 = per.check_readonly_node_removal(b.events())
    if not on_n2:
        assert v10.valid == "unknown"
        return
    wrong10 = any((k in per.PERSISTENT_ENDPOINTS) != kept for k, kept in on_n2)
    assert v10.valid is (not wrong10)
    persistent = [kept for k, kept in on_n2 if k in per.PERSISTENT_ENDPOINTS]
    if persistent:
        assert v9.valid is all(persistent)
    else:  # only connection-balanced / direct sessions there: PER-10's, nothing for PER-9 to judge
        assert v9.valid == "unknown"
