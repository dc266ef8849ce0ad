"""The producer-state snapshot of a partition as bytes: what a .snapshot file holds (pure, no I/O).

A snapshot at offset N is exactly the state that replaying the log below N yields: every
producer entry (epoch, the retained batches that answer retries, coordinator epoch, last
timestamp, open transaction) and the aborted-transaction index. Decoding checks the CRC-32C
and that nothing in the snapshot lies at or past N; any failure raises CorruptSnapshotError.
Completions whose marker is not yet below the high watermark are not stored: a log opens with
everything it recovered durable, so none of them would still pin the LSO.

Why the aborted index is in the snapshot rather than in per-segment .txnindex files (Kafka's
choice): its entries are derived from the producer state (an entry's last_stable_offset needs
every other open transaction at the marker), so one file with one checksum and one offset keeps
the two from ever disagreeing; appending an ABORT marker costs no extra file or fsync; and a
lost or damaged file only means falling back to an older snapshot, never rebuilding a
segment's index without the state it was computed from. The cost is 32 bytes per abort still
in the log, rewritten at each roll; entries below the log start are dropped with their segments.

Format (big-endian; version 1). The CRC covers every byte after the crc field:
    version int16 | crc uint32 | offset int64 | producer_count int32 | producer*
                  | aborted_count int32 | aborted*
    producer := producer_id int64 | producer_epoch int16 | coordinator_epoch int32
                | last_timestamp int64 | txn_first_offset int64 (-1: none) | batch_count int16 | batch*
    batch    := first_sequence int32 | last_sequence int32 | base_offset int64 | last_offset int64
                | timestamp int64                        (oldest first; Kafka keeps only the last)
    aborted  := producer_id int64 | first_offset int64 | last_offset int64 | last_stable_offset int64
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from partitions.file_names import offset_epoch_name, parse_offset_epoch_name
from partitions.producer_state import RETAINED_BATCHES, BatchMetadata, ProducerEntry
from partitions.txn_index import AbortedTxn

VERSION = 1
SUFFIX = ".snapshot"

_PREFIX = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">qi")  # offset, producer count
_PRODUCER = struct.Struct(">qhiqqh")
_BATCH = struct.Struct(">iiqqq")
_ABORTED_COUNT = struct.Struct(">i")
_ABORTED = struct.Struct(">qqqq")


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be trusted; the log falls back to an older one or a full replay."""


@dataclass(frozen=True, slots=True)
class PartitionStateSnapshot:
    """The producer state and aborted transactions of a partition as of `offset` (exclusive)."""

    offset: int
    producers: tuple[ProducerEntry, ...]
    aborted: tuple[AbortedTxn, ...]


def snapshot_name(offset: int, epoch: int) -> str:
    """`<offset>-e<leader epoch>.snapshot`: a leader that was cut off cannot overwrite a later one's."""
    return offset_epoch_name(offset, epoch, SUFFIX)


def parse_snapshot_name(name: str) -> tuple[int, int | None] | None:
    """(offset, leader epoch) of a snapshot file name (epoch None for an older unnamed one), or None."""
    return parse_offset_epoch_name(name, SUFFIX)


def encode(snapshot: PartitionStateSnapshot) -> bytes:
    """The file contents for `snapshot`; ValueError if a field does not fit its width (e.g. an epoch > 32767)."""
    try:
        return _encode(snapshot)
    except struct.error as error:
        raise ValueError(f"cannot encode the producer snapshot at offset {snapshot.offset}: {error}") from None


def _encode(snapshot: PartitionStateSnapshot) -> bytes:
    body = bytearray(_COUNT.pack(snapshot.offset, len(snapshot.producers)))
    for entry in snapshot.producers:
        first = -1 if entry.txn_first_offset is None else entry.txn_first_offset
        body += _PRODUCER.pack(entry.producer_id, entry.producer_epoch, entry.coordinator_epoch,
                               entry.last_timestamp, first, len(entry.batches))
        for batch in entry.batches:
            body += _BATCH.pack(batch.first_sequence, batch.last_sequence, batch.base_offset,
                                batch.last_offset, batch.timestamp)
    body += _ABORTED_COUNT.pack(len(snapshot.aborted))
    for txn in snapshot.aborted:
        body += _ABORTED.pack(txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
    return _PREFIX.pack(VERSION, crc32c.crc32c(body)) + bytes(body)


def decode(data: bytes) -> PartitionStateSnapshot:
    """The snapshot in `data`; CorruptSnapshotError if its version, CRC, length or contents are wrong."""
    if len(data) < _PREFIX.size:
        raise CorruptSnapshotError(f"only {len(data)} bytes, fewer than the {_PREFIX.size}-byte header")
    version, crc = _PREFIX.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version} (this build reads {VERSION})")
    if crc32c.crc32c(memoryview(data)[_PREFIX.size:]) != crc:
        raise CorruptSnapshotError("CRC-32C mismatch")
    try:
        snapshot, position = _decode_body(data, _PREFIX.size)
    except struct.error as error:
        raise CorruptSnapshotError(f"truncated contents: {error}") from None
    if position != len(data):
        raise CorruptSnapshotError(f"{len(data) - position} unexpected bytes after the contents")
    _check_below(snapshot)
    return snapshot


def _decode_body(data: bytes, position: int) -> tuple[PartitionStateSnapshot, int]:
    offset, producer_count = _COUNT.unpack_from(data, position)
    position += _COUNT.size
    producers = []
    for _ in range(_nonnegative(producer_count, "producer count")):
        pid, epoch, coordinator_epoch, last_timestamp, first, batch_count = _PRODUCER.unpack_from(data, position)
        position += _PRODUCER.size
        if not 0 <= batch_count <= RETAINED_BATCHES:
            raise CorruptSnapshotError(f"producer {pid} has {batch_count} batches; at most {RETAINED_BATCHES} are kept")
        batches = []
        for _ in range(batch_count):
            batches.append(BatchMetadata(*_BATCH.unpack_from(data, position)))
            position += _BATCH.size
        producers.append(ProducerEntry(pid, epoch, tuple(batches), coordinator_epoch, last_timestamp,
                                       None if first < 0 else first))
    (aborted_count,) = _ABORTED_COUNT.unpack_from(data, position)
    position += _ABORTED_COUNT.size
    end = position + _nonnegative(aborted_count, "aborted count") * _ABORTED.size
    if end > len(data):
        raise CorruptSnapshotError(f"{aborted_count} aborted transactions do not fit in {len(data)} bytes")
    aborted = tuple(AbortedTxn(*fields) for fields in _ABORTED.iter_unpack(data[position:end]))
    return PartitionStateSnapshot(offset, tuple(producers), aborted), end


def _nonnegative(count: int, what: str) -> int:
    if count < 0:
        raise CorruptSnapshotError(f"negative {what} {count}")
    return count


def _check_below(snapshot: PartitionStateSnapshot) -> None:
    """Everything a snapshot at N remembers happened below N; aborts are in strictly increasing marker order."""
    offset = snapshot.offset
    for entry in snapshot.producers:
        if entry.producer_id < 0:
            raise CorruptSnapshotError(f"negative producer id {entry.producer_id}")
        if any(batch.last_offset >= offset for batch in entry.batches) or \
                (entry.txn_first_offset is not None and entry.txn_first_offset >= offset):
            raise CorruptSnapshotError(f"producer {entry.producer_id} has state at or past offset {offset}")
    previous = -1
    for txn in snapshot.aborted:
        if not previous < txn.last_offset < offset:
            raise CorruptSnapshotError(f"aborted transaction with marker at {txn.last_offset} is out of order "
                                       f"or not below offset {offset}")
        previous = txn.last_offset
