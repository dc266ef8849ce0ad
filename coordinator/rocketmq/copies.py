"""How a committed half message is copied to its real partition (effects.py carries it out).

The copies of one partition go in sequence order as idempotent batches of the shard's copy producer
(epoch 0, the sequence fixed in the decision), so a copy redone after a crash or a failover is a
duplicate the partition recognises, never a second message.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from coordinator.rocketmq.half_shard import Decision
from coordinator.rocketmq.log_format import Resolution, Storage
from proto import records
from proto.errors import DuplicateSequenceError
from proto.structs import TopicPartition


def copies_owed(decisions: Iterable[Decision]) -> dict[TopicPartition, list[Decision]]:
    """The RocketMQ-stored commits among `decisions`, per real partition, in copy-sequence order."""
    by_partition: dict[TopicPartition, list[Decision]] = defaultdict(list)
    for decision in decisions:
        if decision.record.storage is Storage.ROCKETMQ and decision.resolution is Resolution.COMMIT:
            by_partition[decision.topic_partition].append(decision)
    for owed in by_partition.values():
        owed.sort(key=lambda d: d.copy_sequence)
    return dict(by_partition)


def copy_batches(decisions: list[Decision], now_ms: int) -> bytes:
    """The idempotent batches that copy `decisions` (consecutive sequences of one partition)."""
    producer_id = decisions[0].copy_producer_id
    return b"".join(records.encode_batch(
        [(now_ms, d.record.key, d.record.value, list(d.record.committed_headers()))],
        producer_id=producer_id, producer_epoch=0, base_sequence=d.copy_sequence) for d in decisions)


def copied(code: int) -> bool:
    """Whether a produce answered with `code` means the copies are on the partition (a duplicate: they were)."""
    return code == 0 or code == DuplicateSequenceError.errno


def split_landed(decisions: list[Decision], last_sequence: int) -> tuple[list[Decision], list[Decision]]:
    """After OUT_OF_ORDER_SEQUENCE_NUMBER: the copies that had landed already (a previous owner wrote them and
    died before its DONE record) and the rest, still to send."""
    return ([d for d in decisions if d.copy_sequence <= last_sequence],
            [d for d in decisions if d.copy_sequence > last_sequence])
