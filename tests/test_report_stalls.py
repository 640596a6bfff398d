"""Stall measures of the benchmarks (harness.report.stalls; PER-1 context): the gap a
switchover forces on a session, the longest gap near it, and the control windows without one."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.report.stalls import quiet_windows, spanning_stall, window_stall


def test_the_gap_across_the_outage_is_the_stall() -> None:
    times = [0.0, 0.1, 0.2, 1.0, 1.05]
    assert spanning_stall(times, (0.3, 0.5), (-1.0, 3.0)) == pytest.approx((0.8, False))
    assert window_stall(times, (-1.0, 3.0), 0.5) == pytest.approx((0.8, False))


def test_a_hiccup_before_the_outage_counts_in_the_window_measure_only() -> None:
    # the session waited 0.9 s on its own (e.g. a lock) well before the switchover, then waited
    # 0.05 s across it: the switchover's stall is 0.05 s, the window's longest gap 0.9 s
    times = [0.0, 0.9, 1.0, 1.05, 1.2]
    assert spanning_stall(times, (1.01, 1.02), (-0.5, 2.5)) == pytest.approx((0.05, False))
    assert window_stall(times, (-0.5, 2.5), 1.02) == pytest.approx((0.9, False))


def test_no_success_after_the_outage_is_censored_at_the_window_end() -> None:
    assert spanning_stall([0.0, 0.2], (0.3, 0.4), (0.0, 2.0)) == pytest.approx((1.8, True))
    assert window_stall([0.0, 0.2], (0.0, 2.0), 0.4) == pytest.approx((1.8, True))
    # a success after the window closed does not end the stall
    assert spanning_stall([0.0, 0.2, 2.5], (0.3, 0.4), (0.0, 2.0)) == pytest.approx((1.8, True))


def test_successes_during_the_outage_split_its_gap() -> None:
    # e.g. a read answered by a hot standby while no node accepts writes
    assert spanning_stall([0.0, 0.35, 0.6], (0.3, 0.5), (0.0, 1.0)) == pytest.approx((0.35, False))


def test_the_gap_starts_at_the_last_success_even_before_the_window() -> None:
    assert spanning_stall([0.0, 2.0], (1.5, 1.6), (1.0, 3.0)) == pytest.approx((2.0, False))
    assert window_stall([0.0, 2.0], (1.0, 3.0), 1.6) == pytest.approx((2.0, False))
    # a session with no success at all before: counted from the window's start
    assert spanning_stall([2.0], (1.5, 1.6), (1.0, 3.0)) == pytest.approx((1.0, False))


def test_an_outage_outside_its_window_is_refused() -> None:
    with pytest.raises(ValueError, match="must lie inside window"):
        spanning_stall([0.0], (0.5, 4.0), (0.0, 3.0))
    with pytest.raises(ValueError, match="positive"):
        quiet_windows(0.0, 10.0, 0.0, 3)


def test_quiet_windows_tile_the_run_and_stop_at_its_end() -> None:
    assert quiet_windows(1.0, 10.0, 2.5, 6) == [(1.0, 3.5), (3.5, 6.0), (6.0, 8.5)]
    assert quiet_windows(1.0, 10.0, 2.5, 2) == [(1.0, 3.5), (3.5, 6.0)]


sorted_times = st.lists(st.floats(min_value=0.0, max_value=10.0, allow_nan=False), max_size=40).map(sorted)
bounds = st.tuples(st.floats(min_value=0.0, max_value=10.0), st.floats(min_value=0.0, max_value=10.0)).map(sorted)


@settings(max_examples=300, deadline=None)
@given(sorted_times, bounds, st.floats(min_value=0.0, max_value=2.0), st.floats(min_value=0.0, max_value=2.0))
def test_the_spanning_stall_never_exceeds_the_window_measure(times: list[float], outage: list[float],
                                                           before: float, after: float) -> None:
    start, end = outage
    window = (start - before, end + after)
    assume(times and times[0] < window[0])  # a session that ran before the window (as in the benchmarks)
    gap, censored = spanning_stall(times, (start, end), window)
    longest, window_censored = window_stall(times, window, end)
    assert censored == window_censored
    assert gap <= longest + 1e-9
    if not censored and not any(start <= t <= end for t in times):
        assert gap >= end - start - 1e-9  # no operation succeeds across an outage it did not see end
