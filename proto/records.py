"""Kafka's v2 record batch format, byte for byte: the unit stored in logs and sent on the wire.

Batch header (big-endian, 61 bytes; KAFKA-REFERENCE §6):
    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (=2)
    | crc uint32 (CRC-32C of everything after it) | attributes int16 | lastOffsetDelta int32
    | baseTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16
    | baseSequence int32 | recordsCount int32
then `recordsCount` records of varint-framed fields. baseOffset and partitionLeaderEpoch sit
outside the CRC, so a partition assigns offsets without re-checksumming the batch.
"""
from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import crc32c as _crc32c

from proto import compiled, compression, record_decoding, record_encoding
from proto.errors import CorruptMessageError, KafkaError

# the layout's constants live with the one writer of batches (compiled by setup.py), re-exported here
from proto.record_encoding import ATTR_CONTROL as ATTR_CONTROL
from proto.record_encoding import ATTR_TRANSACTIONAL as ATTR_TRANSACTIONAL
from proto.record_encoding import HEADER as HEADER
from proto.record_encoding import HEADER_SIZE as HEADER_SIZE
from proto.record_encoding import LOG_OVERHEAD as LOG_OVERHEAD
from proto.record_encoding import MAGIC as MAGIC
from proto.record_encoding import NO_PRODUCER_EPOCH as NO_PRODUCER_EPOCH
from proto.record_encoding import NO_PRODUCER_ID as NO_PRODUCER_ID
from proto.record_encoding import NO_SEQUENCE as NO_SEQUENCE

_CRC_START = record_encoding.CRC_START
_BATCH_LENGTH = struct.Struct(">i")
_OFFSET_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch


class ControlType(enum.IntEnum):
    """The key type of a control record (ABORT=0, COMMIT=1, as in Kafka)."""

    ABORT = 0
    COMMIT = 1


Header = record_encoding.Header
#: one record's fields as decoded: (offset, timestamp, key, value, headers)
Fields = record_decoding.Fields


class Record(NamedTuple):
    """One record as a consumer sees it (a named tuple: one is made per record decoded, at a tenth of a
    frozen dataclass's cost)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()

    def __reduce__(self) -> tuple[type[Record], tuple[Any, ...]]:
        return Record, tuple(self)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of a v2 batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size(self) -> int:
        """Bytes on disk, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """The single record of a control batch: a transaction marker."""

    type: ControlType
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """One parsed batch: its header and its raw bytes (records are decoded on demand)."""

    header: BatchHeader
    raw: bytes

    def crc_ok(self) -> bool:
        return _crc32c.crc32c(self.raw[_CRC_START:]) == self.header.crc

    def records(self) -> Iterator[Record]:
        return _records_of(self)

    def decoded(self) -> tuple[list[Fields], str | None]:
        """Every record's fields (offset, timestamp, key, value, headers) in one call, and what stopped the
        decoding early (None if nothing did): for readers that want no object per record. A compressed
        batch is inflated first."""
        header = self.header
        if not header.attributes & compression.CODEC_MASK:
            return decode_records(self.raw, HEADER_SIZE, header.records_count, header.base_offset,
                                  header.base_timestamp)
        try:
            inflated = compression.decompress(compression.Codec.of_attributes(header.attributes),
                                              self.raw[HEADER_SIZE:])
        except KafkaError as error:
            return [], error.message
        return decode_records(inflated, 0, header.records_count, header.base_offset, header.base_timestamp)

    def control_record(self) -> ControlRecord:
        """The marker of a control batch (raises CorruptMessageError if this is not one)."""
        if not self.header.is_control:
            raise CorruptMessageError("not a control batch")
        record = next(self.records())
        if record.key is None or len(record.key) < 4 or record.value is None or len(record.value) < 6:
            raise CorruptMessageError("control record is too short")
        _version, type_id = struct.unpack(">hh", record.key[:4])
        _vversion, coordinator_epoch = struct.unpack(">hi", record.value[:6])
        try:
            return ControlRecord(ControlType(type_id), coordinator_epoch)
        except ValueError:
            raise CorruptMessageError(f"unknown control record type {type_id}") from None


# ---------------------------------------------------------------- encoding

#: proto/record_encoding.py's writer (the mypyc build setup.py made, if it is at least as new as its source;
#: RECORD_ENCODING_COMPILED says so). Keys, values and header values are bytes or None: the build refuses
#: other buffers with TypeError (the producer hands it bytes, converting bytearray and memoryview first).
_encoding, RECORD_ENCODING_COMPILED = compiled.load_module(record_encoding)
BatchBuilder: type[record_encoding.BatchBuilder] = _encoding.BatchBuilder
encode_record: Callable[[bytearray, int, int, bytes | None, bytes | None, Sequence[Header]], None] = \
    _encoding.encode_record
_assemble: Callable[[int, int, int, int, int, int, int, int, int, int, bytes | bytearray], bytes] = \
    _encoding.assemble


def encode_batch(records: Sequence[tuple[int, bytes | None, bytes | None, Sequence[Header]]], *,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE, transactional: bool = False, base_offset: int = 0,
                 codec: compression.Codec = compression.Codec.NONE) -> bytes:
    """One batch from (timestamp, key, value, headers) tuples, its records compressed with `codec`."""
    if not records:
        raise ValueError("a batch needs at least one record")
    builder = BatchBuilder(min(r[0] for r in records), max_bytes=1 << 62)
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, headers)
    batch = builder.build(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                          transactional=transactional, base_offset=base_offset)
    return batch if codec is compression.Codec.NONE else compress_batch(batch, codec)


def compress_batch(batch: bytes, codec: compression.Codec) -> bytes:
    """An uncompressed batch with its records compressed by `codec` (the header's fields kept, CRC redone)."""
    header = read_header(batch)
    return _assemble(header.base_offset, header.partition_leader_epoch, header.attributes | int(codec),
                     header.last_offset_delta, header.base_timestamp, header.max_timestamp, header.producer_id,
                     header.producer_epoch, header.base_sequence, header.records_count,
                     compression.compress(codec, batch[HEADER_SIZE:]))


def encode_control_batch(*, producer_id: int, producer_epoch: int, control_type: ControlType,
                         coordinator_epoch: int, timestamp: int, base_offset: int = 0,
                         partition_leader_epoch: int = -1) -> bytes:
    """A transaction marker: one control record, both control and transactional bits set."""
    body = bytearray()
    encode_record(body, 0, 0, struct.pack(">hh", 0, int(control_type)), struct.pack(">hi", 0, coordinator_epoch), ())
    return _assemble(base_offset, partition_leader_epoch, ATTR_CONTROL | ATTR_TRANSACTIONAL, 0, timestamp,
                     timestamp, producer_id, producer_epoch, NO_SEQUENCE, 1, body)


def set_base_offset(batch: bytes, base_offset: int, partition_leader_epoch: int) -> bytes:
    """The same batch placed at `base_offset` (both fields lie outside the CRC)."""
    return _OFFSET_AND_EPOCH.pack(base_offset, len(batch) - LOG_OVERHEAD, partition_leader_epoch) + batch[16:]


# ---------------------------------------------------------------- decoding

#: the records of a batch, decoded by proto/record_decoding.py (the mypyc build setup.py made, if it is at
#: least as new as its source; RECORD_DECODING_COMPILED says so)
decode_records: Callable[[bytes, int, int, int, int], tuple[list[Fields], str | None]]
decode_records, RECORD_DECODING_COMPILED = compiled.load(record_decoding, "decode_records")


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`; CorruptMessageError if it is short or not magic 2."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptMessageError(f"batch header at byte {pos} is truncated ({len(buf) - pos} of {HEADER_SIZE} bytes)")
    header = BatchHeader(*HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptMessageError(f"batch at byte {pos} has magic {header.magic}, expected {MAGIC}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptMessageError(f"batch at byte {pos} has impossible length {header.batch_length}")
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptMessageError(f"batch at byte {pos} has a negative record count or offset delta")
    return header


def iter_batches(buf: bytes | memoryview, *, verify_crc: bool = True) -> Iterator[RecordBatch]:
    """Every batch in `buf`, in order; CorruptMessageError on a truncated or damaged one."""
    pos = 0
    end = len(buf)
    while pos < end:
        header = read_header(buf, pos)
        stop = pos + header.size
        if stop > end:
            raise CorruptMessageError(f"batch at byte {pos} is truncated ({end - pos} of {header.size} bytes)")
        batch = RecordBatch(header, bytes(buf[pos:stop]))
        if verify_crc and not batch.crc_ok():
            raise CorruptMessageError(f"batch at byte {pos} (offset {header.base_offset}) fails its CRC-32C")
        yield batch
        pos = stop


def _records_of(batch: RecordBatch) -> Iterator[Record]:
    """RecordBatch.records(): the decoded fields as Records, then the decoding's error if it stopped early."""
    decoded, problem = batch.decoded()
    yield from map(Record._make, decoded)
    if problem is not None:
        raise CorruptMessageError(problem)
