"""The benchmarks' target verdicts (PER-1 targets, harness.report.targets): intervals from the run's own
spread, and a verdict that is ``met`` or ``NOT met`` only when the whole interval says so."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.report.targets import (
    MET,
    NOT_MET,
    NOT_SHOWN,
    Interval,
    clustered_quantile_interval,
    judge,
    median_interval,
    quantile,
    verdict_text,
)

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def test_five_rounds_bound_the_median_by_their_extremes_and_three_bound_nothing() -> None:
    five = median_interval([0.7, 0.6, 0.8, 0.65, 0.72])
    assert (five.value, five.low, five.high, five.n) == (0.7, 0.6, 0.8, 5)
    assert five.span() == "0.60-0.80" and five.text("x") == "0.70x, 90% interval 0.60x-0.80x"
    three = median_interval([0.7, 0.6, 0.8])
    assert (three.low, three.high) == (None, None)
    assert three.span() == "?-?" and three.text() == "0.70, no 90% interval"
    # a lower confidence needs fewer rounds: three rounds give [min, max] at 75 %
    lower = median_interval([0.7, 0.6, 0.8], confidence=0.7)
    assert (lower.low, lower.high) == (0.6, 0.8)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=40))
def test_a_median_interval_holds_the_median_and_is_made_of_samples(values: list[float]) -> None:
    iv = median_interval(values)
    assert iv.value == quantile(values, 0.5)
    if iv.low is not None:
        assert iv.low in values and iv.low <= iv.value
    if iv.high is not None:
        assert iv.high in values and iv.high >= iv.value
    assert (iv.low is None) == (iv.high is None)  # Binomial(n, 1/2) is symmetric


@pytest.mark.parametrize("n", [5, 9, 20, 41])
def test_the_median_interval_covers_the_true_median_at_least_as_often_as_it_says(n: int) -> None:
    rng = random.Random(n)
    trials = 600
    covered = 0
    for _ in range(trials):
        iv = median_interval([rng.expovariate(1.0) for _ in range(n)])  # true median ln 2
        covered += iv.low is not None and iv.high is not None and iv.low <= 0.6931471805599453 <= iv.high
    assert covered / trials >= 0.87  # nominal 90 % (exact coverage is >= 90 %), less sampling slack


def test_identical_clusters_give_the_point_and_one_cluster_bounds_nothing() -> None:
    same = clustered_quantile_interval([[0.1, 0.2, 0.3]] * 100, 0.99)
    assert (same.value, same.low, same.high, same.n) == (0.3, 0.3, 0.3, 100)
    one = clustered_quantile_interval([[0.1, 0.2, 0.3]], 0.99)
    assert (one.low, one.high) == (None, None)
    few = clustered_quantile_interval([[0.1], [0.2], [0.3]], 0.99)
    assert (few.low, few.high) == (None, None)  # below min_clusters: a bootstrap of 3 says little


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), min_size=1, max_size=8),
                min_size=5, max_size=12))
def test_a_clustered_interval_is_ordered_within_the_data_and_repeatable(clusters: list[list[float]]) -> None:
    iv = clustered_quantile_interval(clusters, 0.5, resamples=200)
    pooled = [v for c in clusters for v in c]
    assert iv.low is not None and iv.high is not None
    assert min(pooled) <= iv.low <= iv.high <= max(pooled)
    assert iv == clustered_quantile_interval(clusters, 0.5, resamples=200)


def test_a_p99_stays_open_above_until_the_largest_stall_can_bound_it() -> None:
    """The break case of the bootstrap: 120 stalls all at 0.15 s would 'show' a p99 <= 0.2 s, but the
    chance that none of 120 values lies above the true p99 is 0.99**120 = 30 %: not shown. 300 are
    enough (0.99**300 < 5 %)."""
    rng = random.Random(3)
    short = clustered_quantile_interval([[0.1 + 0.05 * rng.random() for _ in range(20)] for _ in range(6)], 0.99)
    assert short.low is not None and short.high is None
    assert judge(short, 0.2, at_least=False) == NOT_SHOWN
    assert judge(short, 0.05, at_least=False) == NOT_MET  # a miss is shown by the lower side alone
    long = clustered_quantile_interval([[0.1 + 0.05 * rng.random() for _ in range(20)] for _ in range(15)], 0.99)
    assert long.high is not None and judge(long, 0.2, at_least=False) == MET


def test_correlated_sessions_count_as_one_sample_per_switchover() -> None:
    """Twenty sessions that all stalled alike in a switchover are one observation of that switchover:
    the interval is as wide as with one value per switchover, not twenty times narrower."""
    per_switchover = [0.12, 0.35, 0.15, 0.3, 0.14, 0.33, 0.16, 0.31]
    alone = clustered_quantile_interval([[v] for v in per_switchover], 0.5, resamples=1000)
    twenty = clustered_quantile_interval([[v] * 20 for v in per_switchover], 0.5, resamples=1000)
    assert (alone.low, alone.high) == (twenty.low, twenty.high)
    assert alone.low is not None and alone.high is not None and alone.high - alone.low > 0.1


@settings(max_examples=300, deadline=None)
@given(finite, st.one_of(st.none(), finite), st.one_of(st.none(), finite), finite)
def test_a_verdict_follows_the_whole_interval_and_mirrors(value: float, a: float | None, b: float | None,
                                                         target: float) -> None:
    low, high = (a, b) if a is None or b is None or a <= b else (b, a)
    iv = Interval(value, low, high, 0.9, 7)
    at_least = judge(iv, target, at_least=True)
    assert at_least == (MET if low is not None and low >= target
                        else NOT_MET if high is not None and high < target else NOT_SHOWN)
    mirrored = Interval(-value, None if high is None else -high, None if low is None else -low, 0.9, 7)
    assert judge(mirrored, -target, at_least=False) == at_least  # the same facts seen from the other sign


def test_a_figure_on_the_right_side_with_an_interval_across_the_target_is_not_met() -> None:
    """The break case: a point estimate that meets the target is not reported as met when the run's
    own spread reaches past it."""
    iv = median_interval([0.78, 0.81, 0.83, 0.79, 0.84])  # median 0.81 >= 0.8, min 0.78 < 0.8
    assert iv.value >= 0.8 and judge(iv, 0.8, at_least=True) == NOT_SHOWN
    assert "straddles" in verdict_text(iv, 0.8, at_least=True, unit="x", what="rounds")
    clear = median_interval([0.6, 0.65, 0.7, 0.62, 0.68])
    assert judge(clear, 0.8, at_least=True) == NOT_MET
    good = median_interval([0.81, 0.85, 0.9, 0.82, 0.88])
    assert judge(good, 0.8, at_least=True) == MET
    stall = clustered_quantile_interval([[0.25, 0.27, 0.3]] * 6, 0.99)
    assert stall.high is None and judge(stall, 0.2, at_least=False) == NOT_MET
    assert verdict_text(stall, 0.2, at_least=False, unit=" s", what="switchovers").endswith("NOT met)")


def test_bad_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError):
        median_interval([])
    with pytest.raises(ValueError):
        median_interval([1.0], confidence=1.0)
    with pytest.raises(ValueError):
        clustered_quantile_interval([[], []], 0.99)
