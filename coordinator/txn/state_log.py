"""One shard of __transaction_state: durable writes of metadata values and replay on load.

Records are keyed by transactional id; the last value per key wins and a null value
(tombstone) deletes the id, as in Kafka's compacted transaction log.
"""
from __future__ import annotations

import logging
import time

from coordinator.txn.metadata import TxnMetadata
from partitions import AppendOrigin, PartitionLog
from proto import records

log = logging.getLogger(__name__)


def encode_entry(transactional_id: str, metadata: TxnMetadata | None) -> bytes:
    value = None if metadata is None else metadata.to_log_value()
    return records.encode_batch([(int(time.time() * 1000), transactional_id.encode(), value, ())])


def append_entry(shard_log: PartitionLog, transactional_id: str, metadata: TxnMetadata | None) -> None:
    """Returns once the entry is durable (the log group-commits its fsyncs)."""
    shard_log.append(encode_entry(transactional_id, metadata), origin=AppendOrigin.COORDINATOR)


def replay(shard_log: PartitionLog) -> dict[str, TxnMetadata]:
    """Every live transactional id of the shard, from the start of its log."""
    entries: dict[str, TxnMetadata] = {}
    for batch in shard_log.batches():
        if batch.header.is_control:
            continue
        for record in batch.records():
            if record.key is None:
                continue
            tid = record.key.decode()
            if record.value is None:
                entries.pop(tid, None)
            else:
                entries[tid] = TxnMetadata.from_log_value(tid, record.value)
    return entries
