"""Structural checks of the record batches of one produce request, before any state is consulted.

Parses with proto.records and rejects what no producer state could make valid: garbage,
bad CRCs, other magics, oversize batches, control batches, empty or inconsistent batches,
records whose framing a consumer could not decode (CORRUPT_MESSAGE), and compressed batches
that do not inflate, inflate too far (CORRUPT_MESSAGE) or name no codec (UNSUPPORTED_COMPRESSION_TYPE):
as Kafka's LogValidator, a compressed batch is inflated and its records walked like any other.
Pure: either every batch passes and the parsed list is returned, or the first failure raises.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from partitions import framing
from partitions.model import AppendOrigin, LogConfig
from proto import compiled, compression, records
from proto.compression import Codec
from proto.errors import CorruptMessageError, InvalidRecordError, RecordTooLargeError, UnsupportedCompressionTypeError
from proto.records import HEADER_SIZE, RecordBatch

log = logging.getLogger(__name__)


def framing_problem_from_source() -> Callable[[bytes, int], str | None]:
    """partitions/framing.py's check run from its source, whatever setup.py built from it."""
    check: Callable[[bytes, int], str | None] = compiled.from_source(framing, "framing_problem")
    return check


#: what makes an uncompressed batch's records undecodable, or None (see partitions.framing), and whether
#: it is the mypyc build setup.py made
framing_problem: Callable[[bytes, int], str | None]
framing_problem, FRAMING_COMPILED = compiled.load(framing, "framing_problem")
#: the same walk over records that start anywhere (the inflated block of a compressed batch)
records_problem: Callable[[bytes, int, int], str | None] = compiled.load(framing, "records_problem")[0]


def _records_problem(batch: RecordBatch) -> str | None:
    """What makes a client's batch undecodable, or None; UNSUPPORTED_COMPRESSION_TYPE for an unknown codec."""
    header = batch.header
    try:
        codec = Codec.of_attributes(header.attributes)
    except UnsupportedCompressionTypeError as error:
        raise UnsupportedCompressionTypeError(f"[UNSUPPORTED_COMPRESSION_TYPE] batch at base offset "
                                              f"{header.base_offset}: {error.message}") from None
    if codec is Codec.NONE:
        return framing_problem(batch.raw, header.records_count)
    try:
        inflated = compression.decompress(codec, batch.raw[HEADER_SIZE:])
    except CorruptMessageError as error:
        return error.message
    return records_problem(inflated, 0, header.records_count)


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
        if origin is AppendOrigin.CLIENT:
            problem = _records_problem(batch)
            if problem is not None:
                raise CorruptMessageError(f"[CORRUPT_MESSAGE] {where}: {problem}; its CRC is valid, so the "
                                          "producer built it wrong")
        if header.is_transactional and header.producer_id < 0:
            raise InvalidRecordError(f"{where} is transactional but carries no producer id")
        if origin is AppendOrigin.CLIENT and header.producer_id >= 0 and header.base_sequence < 0:
            raise InvalidRecordError(f"{where} carries a producer id but no sequence number")
    return batches
