"""How a half message stored in place (`Storage.KAFKA`) reaches its real partition and is ended (coordinator.py
writes it, effects.py writes its marker).

The message is a one-message transaction of its own producer id, written at epoch 0 with sequence 0, under
the reserved transactional id of its shard (the partition asks that shard to verify the first write). The
decision ends it with a COMMIT or ABORT marker at epoch 1, so a write delayed past the decision is refused
(INVALID_PRODUCER_EPOCH) and can never open a transaction nobody ends. Because the write is idempotent, a
send retried after a lost answer, or after the shard's owner died between the registration and the write,
writes it again safely: a duplicate the partition recognises, or the write the dead owner never made.
"""
from __future__ import annotations

from collections.abc import Iterable

from coordinator.rocketmq.half_shard import Decision
from coordinator.rocketmq.log_format import HalfRecord, Resolution, Storage
from coordinator.txn.metadata import Marker, Owed
from proto import records

WRITE_EPOCH, MARKER_EPOCH = 0, 1


def in_place_batch(record: HalfRecord) -> bytes:
    """The message as the transactional batch that opens its one-message transaction."""
    return records.encode_batch([(record.store_time_ms, record.key, record.value, list(record.committed_headers()))],
                                producer_id=record.producer_id, producer_epoch=WRITE_EPOCH, base_sequence=0,
                                transactional=True)


def in_place_decisions(decisions: Iterable[Decision]) -> list[Decision]:
    """The decisions of messages stored in place: each owes its marker, commit or not."""
    return [d for d in decisions if d.record.storage is Storage.KAFKA]


def in_place_markers(decisions: Iterable[Decision]) -> list[Owed]:
    """The marker each in-place decision owes to its partition (fenced by the shard's leader epoch, given
    as the coordinator epoch when they are sent)."""
    return [(Marker(d.record.producer_id, MARKER_EPOCH, d.resolution is Resolution.COMMIT,
                    frozenset({d.topic_partition})), d.topic_partition) for d in in_place_decisions(decisions)]
