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

from proto import compiled, record_decoding
from proto.errors import CorruptMessageError

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
_CRC_START = 21  # offset of the attributes field; the CRC covers [21, end)
_BATCH_LENGTH = struct.Struct(">i")
_OFFSET_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


class ControlType(enum.IntEnum):
    """The key type of a control record (ABORT=0, COMMIT=1, as in Kafka)."""

    ABORT = 0
    COMMIT = 1


Header = tuple[str, bytes | None]
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
        decoding early (None if nothing did): for readers that want no object per record."""
        return decode_records(self.raw, HEADER_SIZE, self.header.records_count, self.header.base_offset,
                              self.header.base_timestamp)

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


# ---------------------------------------------------------------- varints

def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _write_varint(out: bytearray, n: int) -> None:
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


# ---------------------------------------------------------------- encoding

#: varints of zigzag values below this are precomputed: every length, delta and count of a typical record
_VARINT_TABLE_SIZE = 1 << 14
_VARINTS: tuple[bytes, ...] = ()  # filled below, once _write_varint exists


def _varint_bytes(n: int) -> bytes:
    """The zigzag varint of `n`: from the table when it is small (the per-record path), else written out."""
    z = (n << 1) ^ (n >> 63)
    if 0 <= z < _VARINT_TABLE_SIZE:
        return _VARINTS[z]
    out = bytearray()
    _write_varint(out, n)
    return bytes(out)


def _zigzag_table() -> tuple[bytes, ...]:
    table = []
    for z in range(_VARINT_TABLE_SIZE):
        out = bytearray()
        _write_varint(out, (z >> 1) ^ -(z & 1))  # the n whose zigzag is z
        table.append(bytes(out))
    return tuple(table)


_VARINTS = _zigzag_table()
_NULL = _VARINTS[1]  # varint -1: a null key or value
_ZERO = b"\x00"


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers: Sequence[Header] = ()) -> None:
    """Append one varint-framed record to `out`, in place: no per-record buffer or object (the producer
    calls this once per send(), so the common case is table lookups and one bytes join)."""
    table, size = _VARINTS, _VARINT_TABLE_SIZE
    z = (timestamp_delta << 1) ^ (timestamp_delta >> 63)
    ts = table[z] if 0 <= z < size else _varint_bytes(timestamp_delta)
    od = table[offset_delta << 1] if offset_delta < size >> 1 else _varint_bytes(offset_delta)
    if key is None:
        key_length, key = _NULL, b""
    else:
        n = len(key)
        key_length = table[n << 1] if n < size >> 1 else _varint_bytes(n)
    if value is None:
        value_length, value = _NULL, b""
    else:
        n = len(value)
        value_length = table[n << 1] if n < size >> 1 else _varint_bytes(n)
    if headers:
        extra = bytearray(_varint_bytes(len(headers)))
        for hkey, hvalue in headers:
            _write_bytes(extra, hkey.encode("utf-8"))
            _write_bytes(extra, hvalue)
        trailer = bytes(extra)
    else:
        trailer = _ZERO
    body_length = (1 + len(ts) + len(od) + len(key_length) + len(key) + len(value_length) + len(value)
                   + len(trailer))
    out += b"".join((table[body_length << 1] if body_length < size >> 1 else _varint_bytes(body_length), _ZERO,
                     ts, od, key_length, key, value_length, value, trailer))


class BatchBuilder:
    """Accumulates records into one batch; the producer closes it with its pid, epoch and sequence.

    The producer fills a builder while a batch lingers and fixes the idempotence fields
    only when it drains the batch, as Kafka's ProducerBatch does.
    """

    def __init__(self, base_timestamp: int, max_bytes: int = 1 << 20) -> None:
        self.base_timestamp = base_timestamp
        self.max_timestamp = base_timestamp
        self.max_bytes = max_bytes
        self.count = 0
        self._body = bytearray()

    @property
    def size(self) -> int:
        return HEADER_SIZE + len(self._body)

    def has_room_for(self, key: bytes | None, value: bytes | None) -> bool:
        """Kafka's rule: an empty batch always takes its first record, however large."""
        if self.count == 0:
            return True
        estimate = len(key or b"") + len(value or b"") + 24
        return self.size + estimate <= self.max_bytes

    def try_append(self, timestamp: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[Header] = ()) -> int:
        """append() unless the record would take the batch past max_bytes (the check of has_room_for()):
        returns its offset delta, or -1 when it does not fit. The producer's per-record path, so the
        common record (no headers, fields under 8 KB, within 64 ms of the batch's first) is written
        with table lookups and one concatenation, straight into the batch's buffer."""
        body = self._body
        count = self.count
        key_size = 0 if key is None else len(key)
        value_size = 0 if value is None else len(value)
        if count and HEADER_SIZE + len(body) + key_size + value_size + 24 > self.max_bytes:
            return -1
        delta_t = timestamp - self.base_timestamp
        if not headers and 0 <= delta_t < 64 and count < 8192 and key_size < 8000 and value_size < 8000:
            table = _VARINTS
            offset_delta = table[count << 1]
            key_length = _NULL if key is None else table[key_size << 1]
            value_length = _NULL if value is None else table[value_size << 1]
            length = 3 + len(offset_delta) + len(key_length) + key_size + len(value_length) + value_size
            body += ((table[length << 1] if length < 8192 else _varint_bytes(length)) + _ZERO + table[delta_t << 1] + offset_delta + key_length + (key or b"")
                     + value_length + (value or b"") + _ZERO)
        else:
            encode_record(body, count, delta_t, key, value, headers)
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self.count = count + 1
        return count

    def append(self, timestamp: int, key: bytes | None, value: bytes | None,
               headers: Sequence[Header] = ()) -> int:
        """Add a record; returns its offset delta within the batch."""
        delta = self.count
        encode_record(self._body, delta, timestamp - self.base_timestamp, key, value, headers)
        self.max_timestamp = max(self.max_timestamp, timestamp)
        self.count += 1
        return delta

    def build(self, *, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
              base_sequence: int = NO_SEQUENCE, transactional: bool = False, base_offset: int = 0,
              attributes: int = 0) -> bytes:
        if self.count == 0:
            raise ValueError("an empty batch cannot be built")
        attrs = attributes | (ATTR_TRANSACTIONAL if transactional else 0)
        return _assemble(base_offset, -1, attrs, self.count - 1, self.base_timestamp, self.max_timestamp,
                         producer_id, producer_epoch, base_sequence, self.count, bytes(self._body))


def _assemble(base_offset: int, partition_leader_epoch: int, attributes: int, last_offset_delta: int,
              base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
              base_sequence: int, count: int, body: bytes) -> bytes:
    header = bytearray(HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), partition_leader_epoch,
                                   MAGIC, 0, attributes, last_offset_delta, base_timestamp, max_timestamp,
                                   producer_id, producer_epoch, base_sequence, count))
    crc = _crc32c.crc32c(body, _crc32c.crc32c(bytes(header[_CRC_START:])))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + body


def encode_batch(records: Sequence[tuple[int, bytes | None, bytes | None, Sequence[Header]]], *,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE, transactional: bool = False, base_offset: int = 0) -> bytes:
    """One batch from (timestamp, key, value, headers) tuples."""
    if not records:
        raise ValueError("a batch needs at least one record")
    builder = BatchBuilder(min(r[0] for r in records), max_bytes=1 << 62)
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, headers)
    return builder.build(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                         transactional=transactional, base_offset=base_offset)


def encode_control_batch(*, producer_id: int, producer_epoch: int, control_type: ControlType,
                         coordinator_epoch: int, timestamp: int, base_offset: int = 0,
                         partition_leader_epoch: int = -1) -> bytes:
    """A transaction marker: one control record, both control and transactional bits set."""
    body = bytearray()
    encode_record(body, 0, 0, struct.pack(">hh", 0, int(control_type)), struct.pack(">hi", 0, coordinator_epoch))
    return _assemble(base_offset, partition_leader_epoch, ATTR_CONTROL | ATTR_TRANSACTIONAL, 0, timestamp,
                     timestamp, producer_id, producer_epoch, NO_SEQUENCE, 1, bytes(body))


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
