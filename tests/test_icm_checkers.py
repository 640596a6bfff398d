"""ICM-1..7 checkers on synthetic histories that keep and that break each rule (hypothesis for loads)."""

from __future__ import annotations

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from harness.errors import ConfigError
from harness.rules import registry
from harness.rules.icm import (
    check_candidate_servers,
    check_last_resort,
    check_least_loaded,
    check_no_transparent_failover,
    check_port_probe,
    check_server_availability,
    check_server_exclusions,
)
from harness.topology.icm import availability_index
from tests.support.icm_history import IcmHistory


def test_every_icm_rule_is_registered() -> None:
    assert [r for r in registry.all_rules() if r.startswith("ICM-")] == [f"ICM-{n}" for n in range(1, 8)]


def test_no_cluster_layout_is_unknown() -> None:
    from harness.history.core import History

    assert all(c([]).valid == "unknown" for c in (check_candidate_servers, check_port_probe, check_least_loaded,
                                                  check_no_transparent_failover))
    assert check_candidate_servers(History().events()).status == "unknown"


def test_nothing_judged_is_unknown_not_a_pass() -> None:
    h = IcmHistory()
    assert check_least_loaded(h.events()).status == "unknown"
    h.open(chosen="s1")
    assert check_last_resort(h.events()).status == "unknown"  # an available server: nothing for the last resort
    assert check_no_transparent_failover(h.events()).status == "unknown"


# ---------------------------------------------------------------------------------------- ICM-1
def test_icm1_kept_and_broken_by_a_marked_replica() -> None:
    h = IcmHistory()
    h.mark("s1", "mail.nsf", "out-of-service")
    h.open(chosen="s2")
    assert check_candidate_servers(h.events()).valid is True
    h.open(chosen="s1")
    v = check_candidate_servers(h.events())
    assert v.valid is False and "out-of-service" in v.observed and v.evidence
    h.mark("s1", "mail.nsf", None)
    h2 = IcmHistory()
    h2.mark("s2", "mail.nsf", "pending-delete")
    h2.open(chosen="s2")
    assert "pending-delete" in check_candidate_servers(h2.events()).observed


def test_icm1_broken_by_a_server_without_the_replica() -> None:
    h = IcmHistory()
    h.open("crm.nsf", chosen="s3")  # crm.nsf is on s1 and s2
    v = check_candidate_servers(h.events())
    assert v.valid is False and "holds no replica" in v.observed


def test_icm1_every_replica_marked_needs_an_error() -> None:
    h = IcmHistory()
    h.mark("s1", "crm.nsf", "out-of-service")
    h.mark("s2", "crm.nsf", "pending-delete")
    h.open("crm.nsf", chosen=None)
    assert check_candidate_servers(h.events()).valid is True
    h.open("crm.nsf", chosen="s2", redirect=False)
    assert check_candidate_servers(h.events()).valid is False


# ---------------------------------------------------------------------------------------- ICM-2
def test_icm2_behaviour_busy_server_treated_as_available() -> None:
    h = IcmHistory()
    h.state("s2", sessions=10, availability_threshold=95)  # index 90 < 95: BUSY
    h.state("s1", sessions=40)
    h.open(chosen="s1")
    assert check_server_availability(h.events()).valid is True
    h.open(chosen="s2", redirect=False)
    v = check_server_availability(h.events())
    assert v.valid is False and "BUSY" in v.observed


def test_icm2_reported_states_must_match_the_thresholds() -> None:
    h = IcmHistory()
    h.state("s2", sessions=10, max_users=10)
    good = [{"server": "s1", "index": 100, "states": []}, {"server": "s2", "index": 90, "states": ["MAXUSERS"]},
            {"server": "s3", "index": 100, "states": []}]
    h.open(chosen="s1", decision=good)
    assert check_server_availability(h.events()).valid is True
    bad = [dict(good[0]), {"server": "s2", "index": 90, "states": []}, dict(good[2])]
    h.open(chosen="s1", decision=bad)
    assert check_server_availability(h.events()).valid is False


#: Capacities off the default 100 (s1 37, s2 250): the index follows sessions / capacity, so a router
#: that ignores capacity (index = 100 - sessions) sees s1 as 80 (really 45: BUSY under threshold 50)
#: and s2 as 0 (really 60: the lightest available server).
CAPACITY_LOADS = {"s1": (20, 37), "s2": (100, 250), "s3": (50, 100)}


def _capacities(h: IcmHistory, with_index: bool = True) -> None:
    for server, (sessions, capacity) in CAPACITY_LOADS.items():
        h.state(server, sessions=sessions, capacity=capacity, availability_threshold=50, with_index=with_index)


def _ignoring_capacity(sessions: int) -> int:
    return max(0, 100 - sessions)


def test_icm2_capacity_changes_the_index_here() -> None:
    """The scenario's premise: with capacity honoured and ignored the indices and states differ."""
    honoured = {s: availability_index(n, c) for s, (n, c) in CAPACITY_LOADS.items()}
    ignored = {s: _ignoring_capacity(n) for s, (n, _) in CAPACITY_LOADS.items()}
    assert honoured == {"s1": 45, "s2": 60, "s3": 50} and ignored == {"s1": 80, "s2": 0, "s3": 50}


def test_icm2_a_router_reporting_an_index_that_ignores_capacity_is_a_violation() -> None:
    def report(index_of: dict[str, int]) -> list[dict[str, object]]:
        return [{"server": s, "index": index_of[s], "states": ["BUSY"] if index_of[s] < 50 else []}
                for s in CAPACITY_LOADS]

    h = IcmHistory()
    _capacities(h)
    h.open(chosen="s2", decision=report({s: availability_index(n, c) for s, (n, c) in CAPACITY_LOADS.items()}))
    assert check_server_availability(h.events()).valid is True
    h.open(chosen="s1", decision=report({s: _ignoring_capacity(n) for s, (n, _) in CAPACITY_LOADS.items()}))
    v = check_server_availability(h.events())
    assert v.valid is False and "s1 as index 80" in v.observed and "index 45 ['BUSY']" in v.observed


@pytest.mark.parametrize("with_index", [True, False], ids=["recorded-index", "derived-index"])
def test_icm2_a_server_busy_only_by_its_capacity_is_not_available(with_index: bool) -> None:
    """No router report: the choice alone shows a router that ignores capacity (s1 looks lightest at 80,
    but 20 of 37 sessions is index 45, BUSY under threshold 50). Also when the state events carry no
    ``availability``: the model derives it from sessions and capacity."""
    h = IcmHistory()
    _capacities(h, with_index)
    h.open(chosen="s2", redirect=False)
    assert [c(h.events()).valid for c in (check_server_availability, check_server_exclusions,
                                          check_least_loaded)] == [True, True, True]
    h.open(chosen="s1", redirect=False)
    assert [c(h.events()).valid for c in (check_server_availability, check_server_exclusions,
                                          check_least_loaded)] == [False, False, False]
    assert "index 45" in check_server_availability(h.events()).observed


@settings(max_examples=200, deadline=None)
@given(sessions=st.integers(min_value=0, max_value=10**6), capacity=st.integers(min_value=-5, max_value=10**6))
def test_icm2_the_model_index_is_the_stand_ins(sessions: int, capacity: int) -> None:
    from harness.rules.icm.model import availability_index as model_index

    assert model_index(sessions, capacity) == availability_index(sessions, capacity)


# ---------------------------------------------------------------------------------------- ICM-3
def test_icm3_kept_when_the_chosen_port_was_pinged() -> None:
    h = IcmHistory()
    h.open(chosen="s1", scheme="http")
    assert check_port_probe(h.events()).valid is True


def test_icm3_broken_without_a_ping() -> None:
    h = IcmHistory()
    h.rec("conn.accepted", proxy="p-s9-http", conn_id=0, client="x")  # conn events exist in this history
    h.open(chosen="s1", probe=[], redirect=False)
    v = check_port_probe(h.events())
    assert v.valid is False and "no ping" in v.observed


def test_icm3_broken_when_only_the_other_scheme_was_pinged() -> None:
    h = IcmHistory()
    h.open(chosen="s1", scheme="https", probe_scheme="http")
    v = check_port_probe(h.events())
    assert v.valid is False and "only its http port" in v.observed


def test_icm3_broken_by_a_cut_port_and_kept_on_the_other_scheme() -> None:
    h = IcmHistory()
    fid = h.cut("s1:http")
    h.open(chosen="s1", scheme="https")
    assert check_port_probe(h.events()).valid is True
    h.open(chosen="s1", scheme="http")
    v = check_port_probe(h.events())
    assert v.valid is False and "http port cut off" in v.observed
    h.heal(fid, "s1:http")
    h2 = IcmHistory()
    h2.down("s2")
    h2.open(chosen="s2")
    assert "down" in check_port_probe(h2.events()).observed


def test_icm3_probe_window_is_a_parameter() -> None:
    h = IcmHistory()
    h.open(chosen="s1", probe=["s1"])  # pinged in this request
    h.t += 30
    h.open(chosen="s1", probe=[], redirect=False)
    assert check_port_probe(h.events(), probe_window=5.0).valid is False
    assert check_port_probe(h.events(), probe_window=60.0).valid is True


def test_icm3_a_router_that_declares_probing_and_never_probes_is_a_violation() -> None:
    """No fault-proxy events at all (an external proxy) does not hide a router that never pings."""
    h = IcmHistory()
    h.router("never-pings")  # no ICM-3 limitation: it claims to probe
    h.open(chosen="s1", probe=[], conns=False)
    h.open(chosen="s2", probe=[], conns=False, redirect=False)
    v = check_port_probe(h.events())
    assert v.valid is False and v.rule_id == "ICM-3"
    assert "no ping of its https port" in v.observed and "declares that it probes" in v.observed
    assert h.events()[-1].index not in v.evidence and any(
        h.events()[i].type == "icm.router.start" for i in v.evidence)  # the declaration is evidence
    assert len(v.details["violations"]) == 2


def test_icm3_a_router_that_declares_it_cannot_probe_is_judged_all_the_same() -> None:
    h = IcmHistory()
    h.router("nginx", "proxy", {"ICM-3": "no active health checks"})
    h.open(chosen="s1", probe=[], conns=False, redirect=False)
    v = check_port_probe(h.events())
    assert v.valid is False and "declares it cannot: no active health checks" in v.observed


def test_icm3_kept_by_pings_through_the_fault_proxy_without_connection_events() -> None:
    h = IcmHistory()
    h.router()
    h.open(chosen="s1", via="proxy", conns=False)
    assert check_port_probe(h.events()).status == "kept"


def test_icm3_unknown_only_when_the_pings_path_cannot_be_observed() -> None:
    """Pings seen at the server, but neither ``via`` nor fault-proxy events: the path is not observable."""
    h = IcmHistory()
    h.router()
    h.open(chosen="s1", conns=False)
    v = check_port_probe(h.events())
    assert v.status == "unknown" and "external proxy" in v.observed
    h.t += 30  # beyond the probe window of the first request's pings
    h.open(chosen="s2", probe=[], conns=False)  # an observable violation is still one
    assert check_port_probe(h.events()).valid is False


def test_icm3_pings_bypassing_the_fault_proxy_do_not_count() -> None:
    kept = IcmHistory()
    kept.open(chosen="s1", via="proxy")
    assert check_port_probe(kept.events()).valid is True
    h = IcmHistory()
    h.cut("s1:http")  # a direct ping still answers on a cut port; the request is https, so s1 is reachable
    h.open(chosen="s1", via="direct")
    v = check_port_probe(h.events())
    assert v.valid is False and "bypassing its fault proxy" in v.observed
    assert all(h.events()[i].get("via") == "direct" for i in v.evidence if h.events()[i].type == "icm.ping")


def test_icm3_pings_without_via_and_no_connection_at_the_proxy_bypassed_it() -> None:
    h = IcmHistory()
    h.rec("conn.accepted", proxy="p-s9-http", conn_id=0, client="x")  # the proxy reports connections
    h.open(chosen="s1", conns=False)
    v = check_port_probe(h.events())
    assert v.valid is False and "bypassed the fault proxy" in v.observed


@pytest.mark.parametrize("redirect", [True, False], ids=["redirect", "proxy"])
def test_icm3_a_ping_after_the_decision_is_no_probe_even_at_the_same_timestamp(redirect: bool) -> None:
    """Log order decides "before the decision", not timestamps: every event here has the same ``t``."""
    h = IcmHistory(ticks=iter(()))  # every step 0: one timestamp for the whole history
    h.open(chosen="s1", via="proxy", probe_late=True, redirect=redirect)
    assert len({e.t for e in h.events()}) == 1
    v = check_port_probe(h.events())
    assert v.valid is False and "no ping" in v.observed
    h2 = IcmHistory(ticks=iter(()))
    h2.open(chosen="s1", via="proxy", redirect=redirect)
    assert check_port_probe(h2.events()).valid is True


# ---------------------------------------------------------------------------------------- ICM-4
@pytest.mark.parametrize("settings_", [{"restricted": 1}, {"sessions": 5, "max_users": 5},
                                       {"sessions": 5, "availability_threshold": 99}])
def test_icm4_excluded_states(settings_: dict[str, int]) -> None:
    h = IcmHistory()
    h.state("s1", **settings_)
    h.open(chosen="s2")
    assert check_server_exclusions(h.events()).valid is True
    h.open(chosen="s1")
    assert check_server_exclusions(h.events()).valid is False


def test_icm4_unreachable_never_chosen() -> None:
    h = IcmHistory()
    h.cut("s2:https")
    h.open(chosen="s2")
    v = check_server_exclusions(h.events())
    assert v.valid is False and "unreachable" in v.observed


# ---------------------------------------------------------------------------------------- ICM-5
def test_icm5_tie_break_is_explicit() -> None:
    h = IcmHistory()
    h.state("s3", sessions=50)
    h.open(chosen="s2")  # s1 and s2 both 100
    assert check_least_loaded(h.events(), tie_break="any").valid is True
    assert check_least_loaded(h.events(), tie_break="last").valid is True
    assert check_least_loaded(h.events(), tie_break="first").valid is False
    with pytest.raises(ConfigError):
        check_least_loaded(h.events(), tie_break="random")
    with pytest.raises(ConfigError):
        registry.check("ICM-5", h.events(), tie_break=3)


loads = st.lists(st.integers(min_value=0, max_value=100), min_size=3, max_size=3)


@settings(max_examples=60, deadline=None)
@given(loads=loads, pick=st.integers(min_value=0, max_value=2))
def test_icm5_lightest_by_availability_index(loads: list[int], pick: int) -> None:
    h = IcmHistory()
    for server, sessions in zip(("s1", "s2", "s3"), loads, strict=True):
        h.state(server, sessions=sessions)
    indices = [availability_index(s, 100) for s in loads]
    chosen = f"s{pick + 1}"
    h.open(chosen=chosen)
    v = check_least_loaded(h.events())
    assert v.valid is (indices[pick] == max(indices))


# ---------------------------------------------------------------------------------------- ICM-6
def _all_in_a_state(h: IcmHistory) -> None:
    h.state("s1", sessions=30, availability_threshold=80)  # BUSY, index 70
    h.state("s2", sessions=20, max_users=20)  # MAXUSERS, index 80
    h.state("s3", sessions=50, restricted=2)  # RESTRICTED, index 50


def test_icm6_last_resort_lightest() -> None:
    h = IcmHistory()
    _all_in_a_state(h)
    h.open(chosen="s2")
    assert check_last_resort(h.events()).valid is True
    h.open(chosen="s1")
    assert check_last_resort(h.events()).valid is False


def test_icm6_error_while_a_last_resort_answers_is_a_violation() -> None:
    h = IcmHistory()
    _all_in_a_state(h)
    h.open(chosen=None)
    v = check_last_resort(h.events())
    assert v.valid is False and "last resort" in v.observed


def test_icm6_never_an_unreachable_one() -> None:
    h = IcmHistory()
    for s in ("s1", "s2", "s3"):
        h.cut(f"{s}:https")
    h.open(chosen=None)
    assert check_last_resort(h.events()).valid is True
    h.open(chosen="s3", served=False)
    v = check_last_resort(h.events())
    assert v.valid is False and "every one unreachable" in v.observed


# ---------------------------------------------------------------------------------------- ICM-7
def _connected(h: IcmHistory) -> None:
    h.open(chosen="s1", process="alice")  # login at s1
    h.open(chosen="s2", process="alice")  # login at s2: alice is on s2
    h.open(chosen="s2", process="bob")
    h.down("s2")


def test_icm7_kept_error_then_icm_then_login_only_where_needed() -> None:
    h = IcmHistory()
    _connected(h)
    h.open(chosen=None, process="alice", target="bookmark")
    h.open(chosen="s1", process="alice", auth="session")
    h.open(chosen=None, process="bob", target="bookmark")
    h.open(chosen="s1", process="bob", auth="login")
    assert check_no_transparent_failover(h.events()).valid is True


def test_icm7_broken_by_transparent_failover() -> None:
    h = IcmHistory()
    _connected(h)
    h.open(chosen="s1", process="alice", target="bookmark", redirect=False, auth="session")
    v = check_no_transparent_failover(h.events())
    assert v.valid is False and "transparent failover" in v.observed


def test_icm7_broken_without_a_login_at_a_new_server() -> None:
    h = IcmHistory()
    _connected(h)
    h.open(chosen=None, process="bob", target="bookmark")
    h.open(chosen="s3", process="bob", auth="session")
    assert check_no_transparent_failover(h.events()).valid is False


def test_icm7_broken_by_a_second_login_where_the_user_had_one() -> None:
    h = IcmHistory()
    _connected(h)
    h.open(chosen=None, process="alice", target="bookmark")
    h.open(chosen="s1", process="alice", auth="login")
    v = check_no_transparent_failover(h.events())
    assert v.valid is False and "already authenticated" in v.observed


def test_icm7_restarted_server_may_serve_the_bookmark() -> None:
    h = IcmHistory()
    _connected(h)
    h.up("s2")
    h.open(chosen="s2", process="alice", target="bookmark", redirect=False, auth="login")
    assert check_no_transparent_failover(h.events()).valid is True


# ---------------------------------------------------------------------------------- log order, not clocks
SERVERS = ("s1", "s2", "s3")
_state = st.tuples(st.just("state"), st.sampled_from(SERVERS), st.integers(0, 120), st.sampled_from((37, 100, 250)),
                   st.sampled_from((0, 50, 95)), st.sampled_from((0, 10)), st.sampled_from((0, 1)))
_cut = st.tuples(st.just("cut"), st.sampled_from(SERVERS), st.sampled_from(("http", "https")))
_down = st.tuples(st.just("down"), st.sampled_from(SERVERS))
_open = st.fixed_dictionaries({
    "database": st.sampled_from(("mail.nsf", "crm.nsf", "docs.nsf")),
    "chosen": st.sampled_from((None, *SERVERS)), "scheme": st.sampled_from(("http", "https")),
    "process": st.sampled_from(("alice", "bob")), "target": st.sampled_from(("router", "router", "bookmark")),
    "probe": st.sampled_from((None, [], ["s1"], ["s2", "s3"])), "probe_scheme": st.sampled_from((None, "http")),
    "redirect": st.booleans(), "auth": st.sampled_from(("login", "session")), "via": st.sampled_from((None, "proxy",
                                                                                                   "direct")),
    "conns": st.booleans(), "probe_late": st.booleans(),
}).map(lambda kw: ("open", kw))
_steps = st.lists(st.one_of(_state, _cut, _down, _open, _open, _open), min_size=1, max_size=15)
#: A router pinging only after its redirect: at one timestamp, a clock-ordered checker takes the pings
#: for probes before the decision.
LATE_PINGS = [("open", {"database": "mail.nsf", "chosen": "s1", "scheme": "https", "process": "alice",
                        "target": "router", "probe": None, "probe_scheme": None, "redirect": True, "auth": "login",
                        "via": None, "conns": True, "probe_late": True})]
#: Steps between events: 0 (the same timestamp as the one before) or one step of a 1 ms log clock.
_ticks = st.lists(st.sampled_from((0.0, 0.0, 0.001)), min_size=1, max_size=400)


def _history(steps: list[tuple[object, ...]], ticks: list[float] | None) -> IcmHistory:
    h = IcmHistory(ticks=None if ticks is None else iter(ticks))
    h.router()
    cuts: dict[str, int] = {}
    for step in steps:
        kind = step[0]
        if kind == "state":
            _, server, sessions, capacity, threshold, max_users, restricted = step
            h.state(server, sessions=sessions, capacity=capacity, availability_threshold=threshold,
                    max_users=max_users, restricted=restricted)
        elif kind == "cut":
            port = f"{step[1]}:{step[2]}"
            if port in cuts:
                h.heal(cuts.pop(port), port)
            else:
                cuts[port] = h.cut(port)
        elif kind == "down":
            (h.up if step[1] in h.down_servers else h.down)(step[1])
        else:
            h.open(**step[1])  # type: ignore[arg-type]
    return h


def _verdicts(h: IcmHistory) -> list[object]:
    events = h.events()
    return [c(events).valid for c in (check_candidate_servers, check_server_availability, check_port_probe,
                                      check_server_exclusions, check_least_loaded, check_last_resort,
                                      check_no_transparent_failover)]


@settings(max_examples=300, deadline=None)
@given(steps=_steps, ticks=_ticks)
@example(steps=LATE_PINGS, ticks=[0.0])
def test_equal_timestamps_give_the_verdicts_of_distinct_ones(steps: list[tuple[object, ...]],
                                                             ticks: list[float]) -> None:
    """Every ICM checker orders by the history's order (event index): a history whose events share
    timestamps - a 1 ms log clock, most steps 0, the rest of the history on one timestamp - is judged
    exactly as the same history with a distinct timestamp per event."""
    distinct = _history(steps, None)
    coarse = _history(steps, ticks)
    assert [e.type for e in coarse.events()] == [e.type for e in distinct.events()]
    assert distinct.events()[-1].t - distinct.events()[0].t < 5.0  # inside one probe window either way
    assume(len({e.t for e in coarse.events()}) < len(coarse.events()))  # timestamps really are shared
    assert _verdicts(coarse) == _verdicts(distinct)
