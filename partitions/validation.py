"""Structural checks of the record batches of one produce request, before any state is consulted.

Parses with proto.records and rejects what no producer state could make valid: garbage,
bad CRCs, other magics, oversize batches, control batches, empty or inconsistent batches.
Pure: either every batch passes and the parsed list is returned, or the first failure raises.
"""
from __future__ import annotations

from partitions.model import AppendOrigin, LogConfig
from proto import records
from proto.errors import InvalidRecordError, RecordTooLargeError
from proto.records import RecordBatch


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
        if header.is_transactional and header.producer_id < 0:
            raise InvalidRecordError(f"{where} is transactional but carries no producer id")
        if origin is AppendOrigin.CLIENT and header.producer_id >= 0 and header.base_sequence < 0:
            raise InvalidRecordError(f"{where} carries a producer id but no sequence number")
    return batches
