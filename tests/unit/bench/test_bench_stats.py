"""Percentiles, medians and ratios of benchmark samples."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnsim.bench.stats import Summary, median, median_confidence_interval, paired_ratios, percentile, ratio


def test_percentile_interpolates_between_ranks_like_numpy():
    samples = [10.0, 20.0, 30.0, 40.0]
    assert percentile(samples, 0) == 10.0
    assert percentile(samples, 50) == 25.0
    assert percentile(samples, 100) == 40.0
    assert percentile(samples, 99) == pytest.approx(39.7)


def test_percentile_ignores_input_order():
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_median_of_an_odd_count_is_the_middle_sample():
    assert median([5.0, 1.0, 9.0, 7.0, 3.0]) == 5.0


def test_percentile_of_one_sample_is_that_sample():
    assert percentile([42.0], 99) == 42.0


def test_percentile_rejects_no_samples_and_out_of_range_q():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1), st.floats(min_value=0, max_value=100))
def test_a_percentile_lies_within_the_samples(samples, q):
    assert min(samples) - 1e-6 <= percentile(samples, q) <= max(samples) + 1e-6


def test_ratio_against_a_zero_baseline_is_nan():
    assert ratio(95.0, 100.0) == 0.95
    assert math.isnan(ratio(1.0, 0.0))


def test_paired_ratios_compare_runs_of_the_same_round():
    assert paired_ratios([90.0, 50.0], [100.0, 50.0]) == [0.9, 1.0]
    with pytest.raises(ValueError):
        paired_ratios([1.0], [1.0, 2.0])


def test_summary_holds_p50_p99_and_max():
    summary = Summary.of([float(v) for v in range(1, 101)])
    assert summary.count == 100
    assert summary.p50 == 50.5
    assert summary.p99 == pytest.approx(99.01)
    assert summary.maximum == 100.0


def test_median_interval_uses_binomial_order_statistics():
    samples = [float(v) for v in range(1, 26)]  # n = 25: the 8th smallest and 8th largest
    assert median_confidence_interval(samples) == (8.0, 18.0)
    assert median_confidence_interval([float(v) for v in range(1, 10)]) == (2.0, 8.0)  # n = 9


def test_median_interval_of_few_samples_is_the_whole_range():
    assert median_confidence_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    with pytest.raises(ValueError):
        median_confidence_interval([])


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=60))
def test_median_interval_contains_the_sample_median(samples):
    low, high = median_confidence_interval(samples)
    assert low <= median(samples) <= high
