"""One shard of __transaction_state: durable writes of metadata values and replay on load.

Records are keyed by transactional id; the last value per key wins and a null value
(tombstone) deletes the id, as in Kafka's compacted transaction log. Loading starts from the
shard's newest usable snapshot (if any; coordinator/shard_snapshots.py) and replays only the
records after it.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

from coordinator.txn import snapshots
from coordinator.txn.batch_metadata import BatchTxn
from coordinator.txn.metadata import TxnMetadata
from coordinator.txn.snapshots import ShardImage
from partitions import AppendOrigin, PartitionLog
from proto import records
from proto import txnsim_pb2 as pb


def decode_entry(key: str, data: bytes) -> TxnMetadata | BatchTxn:
    value = pb.TransactionLogValue.FromString(data)
    if value.HasField("batch"):
        return BatchTxn.from_log_value(key, value)
    return TxnMetadata.from_log_value(key, data)


def encode_entry(transactional_id: str, metadata: TxnMetadata | BatchTxn | None, timestamp_ms: int,
                 passing: Sequence[TxnMetadata | BatchTxn] = ()) -> bytes:
    """One batch: a record per value in `passing`, then `metadata`'s (one CRC: all of them or none)."""
    key = transactional_id.encode()
    values = [value.to_log_value() for value in passing] + [None if metadata is None else metadata.to_log_value()]
    return records.encode_batch([(timestamp_ms, key, value, ()) for value in values])


def append_entry(shard_log: PartitionLog, transactional_id: str, metadata: TxnMetadata | BatchTxn | None,
                 timestamp_ms: int | None = None, *, wait_durable: bool = True,
                 passing: Sequence[TxnMetadata | BatchTxn] = ()) -> int:
    """Returns once the entry is durable (the log group-commits its fsyncs), or with `wait_durable` False
    once written (then make_durable(returned end offset) before acting on it). The record's timestamp is
    the coordinator's time of the change (the wall clock if not given). `passing`: values of the same id
    written before it in the same batch (see core.WriteEntry)."""
    stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    appended = shard_log.append(encode_entry(transactional_id, metadata, stamp, passing),
                                origin=AppendOrigin.COORDINATOR, wait_durable=wait_durable)
    return appended.last_offset + 1


def advance(shard_log: PartitionLog, image: ShardImage, *, to_log_end: bool = False) -> int:
    """Apply the records from image.next_offset on to `image`, up to the high watermark (or with `to_log_end`
    all the log has fsynced: a shard taken over); returns how many records it read."""
    count = 0
    image.next_offset = max(image.next_offset, shard_log.log_start_offset)  # below it nothing is left to read
    for batch in shard_log.batches(image.next_offset, to_log_end=to_log_end):
        if not batch.header.is_control:
            for record in batch.records():
                if record.offset < image.next_offset or record.key is None:
                    continue
                count += 1
                tid = record.key.decode()
                if record.value is None:
                    image.values.pop(tid, None)
                else:
                    image.values[tid] = record.value
        image.next_offset = batch.header.next_offset
    return count


def load(shard_log: PartitionLog) -> tuple[dict[str, TxnMetadata | BatchTxn], int]:
    """Every live transactional id (and batch transaction id) of the shard, and how many log records
    the load replayed."""
    image = snapshots.read(shard_log) or ShardImage()  # a gap below the log start is logged there
    replayed = advance(shard_log, image, to_log_end=True)
    entries = {key: decode_entry(key, value) for key, value in image.values.items()}
    return entries, replayed


def take_snapshot(shard_log: PartitionLog) -> ShardImage:
    """Write a new snapshot up to the high watermark, then delete the segments its fallback covers."""
    image = snapshots.read(shard_log) or ShardImage()
    advance(shard_log, image)
    snapshots.write(shard_log, image)
    return image
