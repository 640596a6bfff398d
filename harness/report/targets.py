"""A benchmark figure against its target, with the spread the run itself measured (docs/persistent-proxy.md,
Performance: the persistent proxy's throughput >= 0.8x direct and stall p99 <= 0.2 s). One run's median or p99 is a
noisy number on a 2-core machine - measured: the reference proxy's throughput ratio was anywhere
from 0.63 to 0.80 in six runs of the same code, back to back (2026-12-01) - so a figure is reported
with an interval and judged by it:

* ``met`` - the whole interval is on the good side of the target;
* ``NOT met`` - the whole interval is on the wrong side;
* ``not shown`` - the interval straddles the target, or is unbounded on the side that matters (too
  few samples): the run cannot tell, and says how many samples would let it. Like a rule verdict
  the harness could not observe, it is never reported as either of the others.

Two intervals, both pure and deterministic:

* :func:`median_interval` - distribution-free, from order statistics (the binomial law of how many
  samples fall below the true median): for the median of per-round ratios, rounds being independent
  runs in which the clients took turns;
* :func:`clustered_quantile_interval` - a percentile bootstrap that resamples whole *clusters*: the
  stall of every session in one switchover depends on that switchover, so the samples of one
  switchover are not independent and are drawn together (a seeded generator: same input, same
  interval). A bootstrap cannot reach past the largest value seen, so a p99's upper side stays open
  until the values are enough for their largest to bound it (299 at 90 %): a stall target can be
  shown missed by a short run, and shown met only by a long one (``--switchovers 15`` and more)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

MET, NOT_MET, NOT_SHOWN = "met", "NOT met", "not shown"


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval; ``low``/``high`` are None where the samples
    bound nothing (``n`` samples, or clusters, behind it)."""

    value: float
    low: float | None
    high: float | None
    confidence: float
    n: int

    def span(self, unit: str = "", digits: int = 2) -> str:
        """``0.60-0.80`` for a table column, ``?`` for an open side."""
        lo, hi = ("?" if b is None else f"{b:.{digits}f}{unit}" for b in (self.low, self.high))
        return f"{lo}-{hi}"

    def text(self, unit: str = "", digits: int = 2) -> str:
        """``0.65x, 90% interval 0.60-0.80x``; an open side reads ``>= 0.60x`` / ``<= 0.80x``, both
        open ``no 90% interval``."""
        conf = f"{self.confidence:.0%}"
        lo, hi = (None if b is None else f"{b:.{digits}f}{unit}" for b in (self.low, self.high))
        if lo is None and hi is None:
            span = f"no {conf} interval"
        elif lo is None or hi is None:
            span = f"{conf} interval {'>= ' + str(lo) if hi is None else '<= ' + str(hi)}"
        else:
            span = f"{conf} interval {lo}-{hi}"
        return f"{self.value:.{digits}f}{unit}, {span}"


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-quantile of ``values`` (the benchmarks' p50 / p99)."""
    if not values:
        raise ValueError("quantile of no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(0, k + 1)) if k >= 0 else 0.0


def median_interval(values: Sequence[float], confidence: float = 0.9) -> Interval:
    """The median of ``values`` with a distribution-free two-sided ``confidence`` interval from order
    statistics: ``[x(l), x(u)]`` with the widest-needed l, u such that each tail outside has probability
    <= (1 - confidence) / 2 under Binomial(n, 1/2). Too few values for that leave a side open
    (None): five values give ``[min, max]`` at 94 %, three bound nothing at 90 %."""
    if not values:
        raise ValueError("median of no values")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    ordered = sorted(values)
    n, tail = len(ordered), (1 - confidence) / 2
    low_rank = 0  # 1-based rank of the lower bound; 0 = unbounded
    for rank in range(1, n + 1):  # the true median is below x(rank) with probability P(Bin < rank)
        if _binomial_cdf(rank - 1, n, 0.5) <= tail:
            low_rank = rank
        else:
            break
    high_rank = n - low_rank + 1 if low_rank else n + 1  # the law of Bin(n, 1/2) is symmetric
    return Interval(value=quantile(ordered, 0.5), low=ordered[low_rank - 1] if low_rank else None,
                    high=ordered[high_rank - 1] if high_rank <= n else None, confidence=confidence, n=n)


def clustered_quantile_interval(clusters: Sequence[Sequence[float]], q: float, confidence: float = 0.9,
                                resamples: int = 2000, seed: int = 15, min_clusters: int = 5) -> Interval:
    """The ``q``-quantile of every value of ``clusters`` with a percentile-bootstrap interval that
    resamples whole clusters (e.g. one switchover's stalls of all sessions). Fewer than
    ``min_clusters`` bound nothing (a bootstrap of three draws says little about the spread), and
    too few values leave a tail quantile's far side open (below); the interval of identical
    clusters is the point itself."""
    groups = [list(c) for c in clusters if len(c)]
    if not groups:
        raise ValueError("quantile of no values")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    value = quantile([v for g in groups for v in g], q)
    if len(groups) < max(2, min_clusters):
        return Interval(value=value, low=None, high=None, confidence=confidence, n=len(groups))
    rng = random.Random(seed)
    estimates = sorted(quantile([v for g in rng.choices(groups, k=len(groups)) for v in g], q)
                       for _ in range(resamples))
    tail = (1 - confidence) / 2
    low: float | None = estimates[int(math.floor(tail * (resamples - 1)))]
    high: float | None = estimates[int(math.ceil((1 - tail) * (resamples - 1)))]
    # a bootstrap never reaches past the sample's extremes, so for a tail quantile it is optimistic:
    # a side stays open until there are enough values for the extreme itself to bound the quantile
    # (1 - q**n >= 1 - tail for the upper side), e.g. 299 stalls for a p99 at 90 % two-sided
    count = sum(len(g) for g in groups)
    if q < 1 and count < _values_to_bound(q, tail):
        high = None
    if q > 0 and count < _values_to_bound(1 - q, tail):
        low = None
    return Interval(value=value, low=low, high=high, confidence=confidence, n=len(groups))


def _values_to_bound(q: float, tail: float) -> int:
    """The fewest independent values whose largest is above the ``q``-quantile with probability at
    least ``1 - tail``."""
    return math.ceil(math.log(tail) / math.log(q)) if 0 < q < 1 else 1


def judge(interval: Interval, target: float, *, at_least: bool) -> str:
    """:data:`MET`, :data:`NOT_MET` or :data:`NOT_SHOWN` for a figure that must be ``>= target``
    (``at_least``, e.g. a throughput ratio) or ``<= target`` (e.g. a stall p99), by its interval."""
    good_bound, bad_bound = (interval.low, interval.high) if at_least else (interval.high, interval.low)
    if good_bound is not None and (good_bound >= target if at_least else good_bound <= target):
        return MET
    if bad_bound is not None and (bad_bound < target if at_least else bad_bound > target):
        return NOT_MET
    return NOT_SHOWN


def verdict_text(interval: Interval, target: float, *, at_least: bool, unit: str = "", what: str = "samples") -> str:
    """``0.65x, 90% interval 0.60-0.70x (5 rounds; target >= 0.8x: NOT met)``: the figure, its interval
    and :func:`judge`'s verdict; a ``not shown`` one says what is open."""
    verdict = judge(interval, target, at_least=at_least)
    sign = ">=" if at_least else "<="
    text = f"{interval.text(unit)} ({interval.n} {what}; target {sign} {target:g}{unit}: {verdict}"
    if verdict == NOT_SHOWN:
        open_sides = [side for side, bound in (("lower", interval.low), ("upper", interval.high)) if bound is None]
        text += (f": {interval.n} {what} leave the {' and '.join(open_sides)} side open at this confidence"
                 if open_sides else ": the interval straddles the target")
    return text + ")"
