"""Which partition a record goes to: Kafka's default partitioner.

Keyed records: toPositive(murmur2(key)) % partitions, so they land where a Java or
kafka-python producer would put them. Unkeyed records: sticky partitioning (KIP-480):
stay on one partition until its batch is full or drained, then pick another at random,
so unkeyed records still fill batches instead of spreading one record per partition.
"""
from __future__ import annotations

import random

from proto.hashing import partition_for_key


class DefaultPartitioner:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is not None:
            return partition_for_key(key, num_partitions)
        return self.sticky_partition(topic, num_partitions)

    def sticky_partition(self, topic: str, num_partitions: int) -> int:
        """The partition unkeyed records of `topic` stick to now."""
        partition = self._sticky.get(topic)
        if partition is None or partition >= num_partitions:
            partition = self._rng.randrange(num_partitions)
            self._sticky[topic] = partition
        return partition

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> int:
        """The sticky partition's batch is full or drained: move to another partition.

        Only the caller that saw `previous` as sticky moves it, so concurrent senders switch once.
        """
        current = self._sticky.get(topic)
        if current is not None and current != previous and current < num_partitions:
            return current  # another thread switched already
        if num_partitions == 1:
            partition = 0
        else:
            partition = self._rng.randrange(num_partitions - 1)
            if partition >= previous:
                partition += 1  # uniform over the others
        self._sticky[topic] = partition
        return partition
