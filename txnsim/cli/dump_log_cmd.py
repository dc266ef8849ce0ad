"""`txnsim dump-log TOPIC PARTITION`: the batches on disk, like kafka-dump-log.sh.

Reads the segment files directly (the cluster need not run); a torn tail is shown, not fatal.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from coordinator.layout import ClusterLayout
from partitions.segment import segment_files
from proto.errors import CorruptMessageError, UnknownTopicOrPartitionError
from proto.records import RecordBatch, read_header
from txnsim.cli.common import exits_cleanly, print_data


def register(sub: argparse._SubParsersAction) -> None:
    dump = sub.add_parser("dump-log", help="print the batches of one partition's log, like kafka-dump-log")
    dump.add_argument("topic")
    dump.add_argument("partition", type=int)
    dump.add_argument("--data-dir", type=Path, default=Path("./txnsim-data"))
    dump.add_argument("--print-records", action="store_true", help="also print every record's key and value")
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
        for line in describe_segment(segment.read_bytes(), print_records=args.print_records):
            print_data(line)  # one batch per line, never wrapped; payloads are data, not markup
    return 0


def describe_segment(data: bytes, *, print_records: bool = False) -> list[str]:
    lines = []
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
        elif print_records and batch.crc_ok():
            for r in batch.records():
                key = None if r.key is None else r.key.decode(errors="replace")
                value = None if r.value is None else r.value[:200].decode(errors="replace")
                lines.append(f"| offset: {r.offset} key: {key} payload: {value}")
        pos += header.size
    return lines
