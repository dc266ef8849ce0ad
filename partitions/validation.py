"""Structural checks of the record batches of one produce request, before any state is consulted.

Parses with proto.records and rejects what no producer state could make valid: garbage,
bad CRCs, other magics, oversize batches, control batches, empty or inconsistent batches,
and uncompressed records whose framing a consumer could not decode (CORRUPT_MESSAGE).
Pure: either every batch passes and the parsed list is returned, or the first failure raises.
"""
from __future__ import annotations

from partitions.model import AppendOrigin, LogConfig
from proto import records
from proto.errors import CorruptMessageError, InvalidRecordError, RecordTooLargeError
from proto.records import HEADER_SIZE, RecordBatch

#: attribute bits 0-2: the compression codec (0 = none)
_COMPRESSION_MASK = 0x07
#: the smallest record: length, attributes, timestamp delta, offset delta, key, value, header count
_MIN_RECORD_BODY = 6


def parse_batches(data: bytes) -> list[RecordBatch]:
    """Every batch of `data`; CorruptMessageError on garbage, truncation, a bad CRC or magic != 2."""
    return list(records.iter_batches(data))


def validate_batches(data: bytes, config: LogConfig, origin: AppendOrigin) -> list[RecordBatch]:
    batches = parse_batches(data)
    if not batches:
        raise InvalidRecordError("the produce request holds no record batch")
    for batch in batches:
        header = batch.header
        where = f"batch at base offset {header.base_offset} (producer {header.producer_id})"
        if header.size > config.message_max_bytes:
            raise RecordTooLargeError(
                f"{where} is {header.size} bytes; this log accepts at most {config.message_max_bytes} "
                "(message_max_bytes): split it or raise the limit")
        if header.is_control:
            raise InvalidRecordError(f"{where} has the control bit set; only transaction markers may, "
                                     "and they are written with WriteTxnMarkers")
        if header.records_count == 0:
            raise InvalidRecordError(f"{where} holds no records")
        if header.records_count != header.last_offset_delta + 1:
            raise InvalidRecordError(f"{where} holds {header.records_count} records but its last offset delta "
                                     f"is {header.last_offset_delta}")
        if origin is AppendOrigin.CLIENT and not header.attributes & _COMPRESSION_MASK:
            problem = framing_problem(batch.raw, header.records_count)
            if problem is not None:
                raise CorruptMessageError(f"[CORRUPT_MESSAGE] {where}: {problem}; its CRC is valid, so the "
                                          "producer built it wrong")
        if header.is_transactional and header.producer_id < 0:
            raise InvalidRecordError(f"{where} is transactional but carries no producer id")
        if origin is AppendOrigin.CLIENT and header.producer_id >= 0 and header.base_sequence < 0:
            raise InvalidRecordError(f"{where} carries a producer id but no sequence number")
    return batches


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos` (IndexError past the end); the one-byte case, by far the commonest, first."""
    value = raw[pos]
    pos += 1
    if value < 0x80:
        return (value >> 1) ^ -(value & 1), pos
    value &= 0x7F
    shift = 7
    while True:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise IndexError("varint longer than 10 bytes")


def framing_problem(raw: bytes, records_count: int) -> str | None:
    """What makes the records of an uncompressed batch undecodable, or None.

    Walks the varint lengths only (record, key, value, headers), copying nothing, so a batch a
    consumer would choke on is refused at append (Kafka's LogValidator decodes each record; this
    catches what a consumer's decoder would, at well under half the cost of decoding them)."""
    pos = HEADER_SIZE
    end = len(raw)
    count = 0
    try:
        while pos < end:
            length, pos = _varint(raw, pos)
            stop = pos + length
            if length < _MIN_RECORD_BODY or stop > end:
                return f"record {count} claims {length} bytes, {end - pos} remain in the batch"
            _timestamp_delta, pos = _varint(raw, pos + 1)  # after the attributes byte
            offset_delta, pos = _varint(raw, pos)
            if offset_delta != count:
                return f"record {count} has offset delta {offset_delta}"
            key_length, pos = _varint(raw, pos)
            pos += max(key_length, 0)
            value_length, pos = _varint(raw, pos)
            pos += max(value_length, 0)
            header_count, pos = _varint(raw, pos)
            if header_count < 0:
                return f"record {count} has {header_count} headers"
            for _ in range(header_count):
                header_key_length, pos = _varint(raw, pos)
                if header_key_length < 0:
                    return f"a header of record {count} has no key"
                pos += header_key_length
                header_value_length, pos = _varint(raw, pos)
                pos += max(header_value_length, 0)
            if pos != stop:
                return f"the fields of record {count} end at byte {pos}, its length says {stop}"
            count += 1
    except IndexError:
        return f"record {count} runs past the end of the batch"
    if count != records_count:
        return f"the header says {records_count} records, the batch holds {count}"
    return None
