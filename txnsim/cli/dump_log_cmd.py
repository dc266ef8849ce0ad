"""`txnsim dump-log TOPIC PARTITION`: the batches on disk, like kafka-dump-log.sh.

Reads the segment files directly (the cluster need not run); a torn tail is shown, not fatal.
RocketMQ's system topics (half messages, OP records, discarded messages) are always decoded.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable

from coordinator.layout import ClusterLayout
from coordinator.rocketmq import log_format
from partitions.segment import segment_files
from proto.errors import CorruptMessageError, InvalidRecordError, UnknownTopicOrPartitionError
from proto.records import Record, RecordBatch, read_header
from proto.structs import CHECK_MAX_TOPIC, CONSUMER_OFFSETS_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, TRANSACTION_STATE_TOPIC
from txnsim.cli.common import add_data_dir_arg, exits_cleanly, partition_arg, print_data
from txnsim.cli.internal_log_decoders import describe_offsets_record, describe_transaction_log_record


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dump = sub.add_parser("dump-log", help="print the batches of one partition's log, like kafka-dump-log")
    dump.add_argument("topic")
    dump.add_argument("partition", type=partition_arg)
    add_data_dir_arg(dump)
    dump.add_argument("--print-records", action="store_true", help="also print every record's key and value")
    dump.add_argument("--transaction-log-decoder", action="store_true",
                      help="decode __transaction_state records (always done for that topic)")
    dump.add_argument("--offsets-decoder", action="store_true",
                      help="decode __consumer_offsets records (always done for that topic)")
    dump.set_defaults(func=dump_log)


@exits_cleanly
def dump_log(args: argparse.Namespace) -> int:
    layout = ClusterLayout(args.data_dir)
    if not layout.logs.is_dir():
        raise SystemExit(f"error: no cluster data at {args.data_dir} (pass the --data-dir of "
                         "`txnsim cluster start`)")
    directory = layout.logs / f"{args.topic}-{args.partition}"
    segments = [path for _base, _epoch, path in segment_files(directory)] if directory.is_dir() else []
    if not segments:
        raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] no log for {args.topic}-{args.partition} "
                                           f"in {layout.logs}")
    for segment in segments:
        print_data(f"Dumping {segment}")
        decoder = ("transactions" if args.transaction_log_decoder else "offsets" if args.offsets_decoder else None)
        for line in describe_segment(segment.read_bytes(), print_records=args.print_records, topic=args.topic,
                                     partition=args.partition, decoder=decoder):
            print_data(line)  # one batch per line, never wrapped; payloads are data, not markup
    return 0


def describe_segment(data: bytes, *, print_records: bool = False, topic: str = "", partition: int = 0,
                     decoder: str | None = None) -> list[str]:
    """One line per batch; and one per record when asked, or always, decoded, for the internal topics."""
    lines = []
    if topic == TRANSACTION_STATE_TOPIC or decoder == "transactions":
        decode: Callable[[Record], str] | None = describe_transaction_log_record
    elif topic == CONSUMER_OFFSETS_TOPIC or decoder == "offsets":
        decode = describe_offsets_record
    else:
        decode = None
    pos = 0
    while pos < len(data):
        try:
            header = read_header(data, pos)
            if pos + header.size > len(data):
                raise CorruptMessageError(f"truncated: {len(data) - pos} of {header.size} bytes")
        except CorruptMessageError as exc:
            lines.append(f"(unreadable tail at byte {pos}: {exc})")
            break
        batch = RecordBatch(header, data[pos:pos + header.size])
        h = header
        line = (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} baseSequence: {h.base_sequence} "
                f"lastSequence: {h.last_sequence} isTransactional: {str(h.is_transactional).lower()} "
                f"isControl: {str(h.is_control).lower()} position: {pos} CreateTime: {h.max_timestamp} "
                f"size: {h.size} crc: {h.crc} isValid: {str(batch.crc_ok()).lower()}")
        lines.append(line)
        if h.is_control and batch.crc_ok():
            marker = batch.control_record()
            lines.append(f"| offset: {h.base_offset} endTxnMarker: {marker.type.name} "
                         f"coordinatorEpoch: {marker.coordinator_epoch}")
        elif decode is not None and batch.crc_ok():
            lines.extend(decode(r) for r in batch.records())
        elif topic in (HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TOPIC) and batch.crc_ok():
            lines.extend(_describe_system_record(topic, partition, r) for r in batch.records())
        elif print_records and batch.crc_ok():
            for r in batch.records():
                key = None if r.key is None else r.key.decode(errors="replace")
                value = None if r.value is None else r.value[:200].decode(errors="replace")
                lines.append(f"| offset: {r.offset} key: {key} payload: {value}")
        pos += header.size
    return lines


def _describe_system_record(topic: str, shard: int, r: Record) -> str:
    """One record of RocketMQ's system topics, decoded (kafka-dump-log's --transaction-log-decoder, for them)."""
    try:
        if topic == OP_HALF_TOPIC:
            op = log_format.decode_op(r)
            copy = f" copyProducerId: {op.copy_producer_id} copySequence: {op.copy_sequence}" if op.copy_sequence >= 0 else ""
            return (f"| offset: {r.offset} op: {op.kind.value} {op.resolution.value} transactionId: {op.transaction_id} "
                    f"halfOffset: {op.first_offset} source: {op.source}{copy}")
        half = log_format.decode_half(r)
    except InvalidRecordError as exc:
        return f"| offset: {r.offset} (not decodable: {exc})"
    first = r.offset if half.first_offset is None else half.first_offset
    kind = "discarded" if topic == CHECK_MAX_TOPIC else "halfMessage" if half.first_offset is None else "checked"
    payload = None if half.value is None else half.value[:200].decode(errors="replace")
    key = None if half.key is None else half.key.decode(errors="replace")
    return (f"| offset: {r.offset} {kind}: transactionId: {log_format.transaction_id(shard, first)} "
            f"producerGroup: {half.producer_group} realTopic: {half.topic} realQueue: {half.partition} "
            f"messageId: {half.message_id} checkTimes: {half.check_times} lastCheckMs: {half.last_check_ms} "
            f"storeTimeMs: {half.store_time_ms} storage: {half.storage.value} key: {key} payload: {payload} "
            f"properties: {log_format.describe(half.user_headers)}")
