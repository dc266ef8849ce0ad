"""Interleaved schedules: every variant runs in every round, and none always runs first."""
from __future__ import annotations

from txnsim.bench.schedule import interleaved, rotated


def test_rotated_starts_each_round_at_the_next_item():
    items = ["base", "10ms", "100ms"]
    assert [rotated(items, k) for k in range(4)] == [
        ["base", "10ms", "100ms"], ["10ms", "100ms", "base"], ["100ms", "base", "10ms"], ["base", "10ms", "100ms"]]


def test_rotated_of_nothing_is_empty():
    assert rotated([], 3) == []


def test_interleaved_alternates_items_until_each_count_is_used():
    assert interleaved([(10, 3), (1000, 2), (10000, 1)]) == [10, 1000, 10000, 10, 1000, 10]


def test_interleaved_keeps_every_count():
    schedule = interleaved([("a", 100), ("b", 50), ("c", 20)])
    assert (schedule.count("a"), schedule.count("b"), schedule.count("c")) == (100, 50, 20)
