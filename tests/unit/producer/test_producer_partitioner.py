"""Kafka's default partitioner: murmur2 for keys, sticky (KIP-480) for unkeyed records."""
from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producer.partitioner import DefaultPartitioner
from proto.hashing import murmur2


@pytest.mark.parametrize(("key", "unsigned", "of_3", "of_50"), [
    (b"", 275646681, 0, 31),
    (b"a", 2731586172, 1, 24),
    (b"order-1", 1221710326, 1, 26),
    (b"key-42", 4107880775, 0, 27),
])
def test_keyed_records_follow_kafka_reference_values(key: bytes, unsigned: int, of_3: int, of_50: int) -> None:
    partitioner = DefaultPartitioner()
    assert murmur2(key) == unsigned
    assert partitioner.partition("orders", key, 3) == of_3
    assert partitioner.partition("orders", key, 50) == of_50


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_keyed_partition_is_stable_and_in_range(key: bytes, partitions: int) -> None:
    a, b = DefaultPartitioner(random.Random(1)), DefaultPartitioner(random.Random(2))
    assert a.partition("t", key, partitions) == b.partition("t", key, partitions)
    assert 0 <= a.partition("t", key, partitions) < partitions


def test_unkeyed_records_stick_to_one_partition_until_a_new_batch() -> None:
    partitioner = DefaultPartitioner(random.Random(7))
    first = partitioner.partition("orders", None, 5)
    assert all(partitioner.partition("orders", None, 5) == first for _ in range(100))
    switched = partitioner.on_new_batch("orders", 5, first)
    assert switched != first
    assert partitioner.sticky_partition("orders", 5) == switched


def test_new_batch_switch_happens_once_for_concurrent_callers() -> None:
    partitioner = DefaultPartitioner(random.Random(3))
    first = partitioner.sticky_partition("orders", 4)
    switched = partitioner.on_new_batch("orders", 4, first)
    # a second caller that also saw `first` full keeps the partition the first one chose
    assert partitioner.on_new_batch("orders", 4, first) == switched


def test_switches_spread_over_every_other_partition() -> None:
    partitioner = DefaultPartitioner(random.Random(11))
    seen = set()
    current = partitioner.sticky_partition("orders", 4)
    for _ in range(200):
        nxt = partitioner.on_new_batch("orders", 4, current)
        assert nxt != current
        seen.add(nxt)
        current = nxt
    assert seen == {0, 1, 2, 3}


def test_single_partition_topic_always_uses_partition_0() -> None:
    partitioner = DefaultPartitioner()
    assert partitioner.sticky_partition("one", 1) == 0
    assert partitioner.on_new_batch("one", 1, 0) == 0


def test_sticky_partition_follows_a_shrunk_partition_count() -> None:
    partitioner = DefaultPartitioner(random.Random(5))
    partitioner._sticky["t"] = 9
    assert 0 <= partitioner.sticky_partition("t", 3) < 3
