"""Writing v2 batches: the producer's Python work per record (BatchBuilder.try_append, once per send()).

setup.py compiles this module with mypyc (as proto/record_decoding.py and partitions/framing.py): the same
source, several times faster. Where no C compiler was at hand it runs interpreted and writes the same
bytes; proto.records hands out whichever is current (RECORD_ENCODING_COMPILED says which). The batch
layout's constants live here, with the one writer of batches, and proto.records re-exports them. Keep the
module to plain functions and one class over bytes and ints, which mypyc compiles well, and free of
imports from the rest of txnsim (proto.records imports it).
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import crc32c

MAGIC: Final = 2
HEADER: Final = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE: Final = 61  # HEADER.size
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength: the bytes not counted by batchLength
CRC_START: Final = 21  # offset of the attributes field; the CRC covers [21, end)
CRC_AT: Final = 17  # offset of the CRC itself

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1

ATTR_TRANSACTIONAL: Final = 0x10
ATTR_CONTROL: Final = 0x20

#: a record header: (key, value); the key is written as UTF-8
Header = tuple[str, bytes | None]

#: varints of zigzag values below this are precomputed: every length, delta and count of a typical record
_TABLE_SIZE: Final = 1 << 14
_CRC: Final = struct.Struct(">I")
_ZERO: Final = b"\x00"


def _write_varint(out: bytearray, n: int) -> None:
    """The zigzag varint of `n` (taken as a 64-bit integer, as Kafka's varlong is)."""
    v = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _zigzag_table() -> tuple[bytes, ...]:
    table = []
    for z in range(_TABLE_SIZE):
        out = bytearray()
        _write_varint(out, (z >> 1) ^ -(z & 1))  # the n whose zigzag is z
        table.append(bytes(out))
    return tuple(table)


_VARINTS: Final = _zigzag_table()
_NULL: Final = _VARINTS[1]  # varint -1: a null key or value


def varint_bytes(n: int) -> bytes:
    """The zigzag varint of `n`: from the table when it is small (every length and delta of a typical
    record), else written out."""
    z = (n << 1) ^ (n >> 63)
    if 0 <= z < _TABLE_SIZE:
        return _VARINTS[z]
    out = bytearray()
    _write_varint(out, n)
    return bytes(out)


def _field(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _NULL
    else:
        out += varint_bytes(len(data))
        out += data


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers: Sequence[Header] = ()) -> None:
    """Append one varint-framed record to `out`, in place, with no buffer or object of its own beyond the
    header block's (a record's length comes first, so its parts are measured before they are written)."""
    ts = varint_bytes(timestamp_delta)
    od = varint_bytes(offset_delta)
    key_length = _NULL if key is None else varint_bytes(len(key))
    value_length = _NULL if value is None else varint_bytes(len(value))
    if headers:
        block = bytearray(varint_bytes(len(headers)))
        for name, header_value in headers:
            _field(block, name.encode("utf-8"))
            _field(block, header_value)
        trailer = bytes(block)
    else:
        trailer = _ZERO
    length = (1 + len(ts) + len(od) + len(key_length) + (0 if key is None else len(key)) + len(value_length)
              + (0 if value is None else len(value)) + len(trailer))
    out += varint_bytes(length)
    out += _ZERO  # attributes: none are defined for records
    out += ts
    out += od
    out += key_length
    if key is not None:
        out += key
    out += value_length
    if value is not None:
        out += value
    out += trailer


def assemble(base_offset: int, partition_leader_epoch: int, attributes: int, last_offset_delta: int,
             base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
             base_sequence: int, count: int, body: bytes | bytearray) -> bytes:
    """The batch: its 61-byte header (CRC-32C of everything after the CRC field) and `body`, its records."""
    header = bytearray(HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), partition_leader_epoch,
                                   MAGIC, 0, attributes, last_offset_delta, base_timestamp, max_timestamp,
                                   producer_id, producer_epoch, base_sequence, count))
    crc: int = crc32c.crc32c(body, crc32c.crc32c(bytes(header[CRC_START:])))
    header[CRC_AT:CRC_START] = _CRC.pack(crc)
    header += body
    return bytes(header)


class BatchBuilder:
    """Accumulates records into one batch; the producer closes it with its pid, epoch and sequence.

    The producer fills a builder while a batch lingers and fixes the idempotence fields only when it
    drains the batch, as Kafka's ProducerBatch does.
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
        estimate = (0 if key is None else len(key)) + (0 if value is None else len(value)) + 24
        return HEADER_SIZE + len(self._body) + estimate <= self.max_bytes

    def try_append(self, timestamp: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[Header] = ()) -> int:
        """append() unless the record would take the batch past max_bytes (the check of has_room_for()):
        returns its offset delta, or -1 when it does not fit."""
        if not self.has_room_for(key, value):
            return -1
        return self.append(timestamp, key, value, headers)

    def append(self, timestamp: int, key: bytes | None, value: bytes | None,
               headers: Sequence[Header] = ()) -> int:
        """Add a record; returns its offset delta within the batch."""
        delta = self.count
        encode_record(self._body, delta, timestamp - self.base_timestamp, key, value, headers)
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self.count = delta + 1
        return delta

    def build(self, *, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
              base_sequence: int = NO_SEQUENCE, transactional: bool = False, base_offset: int = 0,
              attributes: int = 0) -> bytes:
        if self.count == 0:
            raise ValueError("an empty batch cannot be built")
        attrs = attributes | (ATTR_TRANSACTIONAL if transactional else 0)
        return assemble(base_offset, -1, attrs, self.count - 1, self.base_timestamp, self.max_timestamp,
                        producer_id, producer_epoch, base_sequence, self.count, self._body)
