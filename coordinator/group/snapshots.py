"""Snapshots of a __consumer_offsets shard, so that loading it replays only a short tail.

The files and their safety against a fenced writer are coordinator/shard_snapshots.py's (kind
"group"); the payload is an OffsetsSnapshot message: the records ShardContents.image() writes,
which replay.py applies exactly as it applies the log's. A snapshot is built from the durable
log (the previous snapshot plus the batches after it, up to the high watermark), never from the
coordinator's memory, so it equals a replay of the log below its offset.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from coordinator import shard_snapshots
from coordinator.group.replay import OffsetsRecord, ShardContents
from coordinator.shard_snapshots import SnapshottedLog
from proto import txnsim_pb2 as pb
from proto.records import RecordBatch

KIND = "group"


class FilelessLog(Protocol):
    """A log that keeps no files (the in-memory logs of unit tests): replayed whole, never snapshotted."""

    def batches(self) -> Iterator[RecordBatch]: ...


def encode(contents: ShardContents) -> bytes:
    return pb.OffsetsSnapshot(records=[
        pb.OffsetsSnapshotRecord(offset=record.offset, key=record.key, value=record.value,
                                 producer_id=record.producer_id)
        for record in contents.image()]).SerializeToString()


def decode(payload: bytes) -> list[OffsetsRecord]:
    return [OffsetsRecord(record.offset, record.key, record.value,
                          record.producer_id if record.HasField("producer_id") else None)
            for record in pb.OffsetsSnapshot.FromString(payload).records]


def restore(shard_log: SnapshottedLog | FilelessLog, number: int, now_ms: int, *,
            to_log_end: bool = False) -> ShardContents:
    """Shard `number` as of the log's high watermark (or with `to_log_end` its fsynced end: a shard taken
    over, see PartitionLog.batches): its newest usable snapshot plus the log after it.

    `replayed` on the result counts only the log records read after the snapshot.
    """
    contents = ShardContents(number, now_ms)
    if not isinstance(shard_log, SnapshottedLog):
        contents.replay(shard_log.batches())  # one copy, in memory: its end is its high watermark
        return contents
    found = shard_snapshots.newest(shard_log, KIND, decode)
    if found is not None:
        contents.snapshot_offset, records = found
        contents.next_offset = contents.snapshot_offset
        for record in records:
            contents.apply(record)
    contents.next_offset = max(contents.next_offset, shard_log.log_start_offset)  # nothing below is left
    contents.replay(shard_log.batches(contents.next_offset, to_log_end=to_log_end))
    return contents


def take_snapshot(shard_log: SnapshottedLog, number: int) -> ShardContents:
    """Write a snapshot up to the high watermark, then delete the segments its fallback covers."""
    contents = restore(shard_log, number, now_ms=0)
    shard_snapshots.commit(shard_log, KIND, contents.next_offset, encode(contents))
    return contents
