"""Order statistics and ratios for benchmark samples: pure functions, no clock, no I/O.

Percentiles interpolate linearly between the two nearest ranks (numpy's default), so the
p50 of an even number of samples is the mean of the middle two, and p100 is the maximum.
Noisy ratios are judged by their median with a distribution-free confidence interval.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of `samples`; ValueError for no samples."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, not {q}")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 50)


def ratio(value: float, baseline: float) -> float:
    """value / baseline; NaN when the baseline is zero (nothing to compare against)."""
    return value / baseline if baseline else math.nan


def paired_ratios(values: Sequence[float], baselines: Sequence[float]) -> list[float]:
    """Ratio of each run to the baseline run of the same round (runs interleaved in rounds)."""
    if len(values) != len(baselines):
        raise ValueError(f"{len(values)} runs against {len(baselines)} baseline runs")
    return [ratio(v, b) for v, b in zip(values, baselines)]


def median_confidence_interval(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval that holds the true median with at least `confidence`:
    the k-th smallest and k-th largest samples, k from the binomial(n, 1/2) tail. With too few
    samples for that confidence, the whole range (min, max)."""
    if not samples:
        raise ValueError("confidence interval of no samples")
    ordered = sorted(samples)
    n = len(ordered)
    alpha = 1 - confidence
    k, tail = 0, 0.0  # tail = P(Binomial(n, 1/2) <= k - 1)
    while True:
        next_tail = tail + math.comb(n, k) / 2 ** n
        if next_tail > alpha / 2:
            break
        tail, k = next_tail, k + 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


@dataclass(frozen=True, slots=True)
class Summary:
    """p50, p99 and max of a set of samples (in the samples' unit)."""

    count: int
    p50: float
    p99: float
    maximum: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Summary:
        return cls(len(samples), percentile(samples, 50), percentile(samples, 99), max(samples))
