"""Reads a cluster's files for the timeline and the message browser, as `txnsim dump-log` does: straight
from the segment files (the cluster need not run), tolerating a torn tail and the overlap a takeover
leaves between two leaders' segment files."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from coordinator.group.log_format import OffsetKey, decode_group, group_key, parse_key
from coordinator.layout import ClusterLayout, read_cluster_spec
from coordinator.placement import Placement
from coordinator.txn.metadata import TxnMetadata
from partitions.segment import segment_files
from proto import txnsim_pb2 as pb
from proto.errors import CorruptMessageError, KafkaError, UnknownTopicOrPartitionError
from proto.hashing import partition_for
from proto.records import ControlType, Record, RecordBatch, read_header
from proto.structs import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from txnsim.observe.group_timeline import GroupEntry, build_group_timeline
from txnsim.observe.timeline import DataBatch, OwnershipEvent, StateEntry, TimelineEvent, build_timeline


def read_batches(layout: ClusterLayout, tp: TopicPartition) -> Iterator[RecordBatch]:
    """Every readable batch of a partition's log in offset order, each offset once."""
    directory = layout.logs / f"{tp.topic}-{tp.partition}"
    if not directory.is_dir():
        return
    next_offset = -1
    for _base, _epoch, path in segment_files(directory):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue  # deleted by retention or a snapshot since listed
        pos = 0
        while pos < len(data):
            try:
                header = read_header(data, pos)
            except CorruptMessageError:
                break
            if pos + header.size > len(data):
                break
            batch = RecordBatch(header, data[pos:pos + header.size])
            pos += header.size
            if header.base_offset < next_offset or not batch.crc_ok():
                continue
            next_offset = header.next_offset
            yield batch


def data_batch(tp: TopicPartition, batch: RecordBatch) -> DataBatch:
    h = batch.header
    marker, coordinator_epoch = "", -1
    if h.is_control:
        control = batch.control_record()
        marker, coordinator_epoch = control.type.name, control.coordinator_epoch
    return DataBatch(tp, h.base_offset, h.last_offset, h.max_timestamp, h.producer_id, h.producer_epoch,
                     h.partition_leader_epoch, h.records_count, h.is_control, marker, coordinator_epoch)


def read_ownership(layout: ClusterLayout) -> list[OwnershipEvent]:
    try:
        lines = (layout.metadata / "ownership.log").read_bytes().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for raw in lines:
        try:
            out.append(OwnershipEvent(**json.loads(raw)))
        except (ValueError, TypeError):
            continue  # a line cut by a crash
    return out


def txn_shards(layout: ClusterLayout) -> int:
    return read_cluster_spec(layout).config.txn_shards


def read_state_entries(layout: ClusterLayout, transactional_id: str) -> tuple[int, list[StateEntry]]:
    """The id's shard, and its durable `__transaction_state` records there (batch transactions are skipped)."""
    shard = partition_for(transactional_id, txn_shards(layout))
    key = transactional_id.encode()
    entries = []
    for batch in read_batches(layout, TopicPartition(TRANSACTION_STATE_TOPIC, shard)):
        if batch.header.is_control:
            continue
        for record in batch.records():
            if record.key != key:
                continue
            value = None
            if record.value is not None:
                if pb.TransactionLogValue.FromString(record.value).HasField("batch"):
                    continue
                value = TxnMetadata.from_log_value(transactional_id, record.value)
            entries.append(StateEntry(record.offset, record.timestamp, batch.header.partition_leader_epoch, value))
    return shard, entries


def timeline_of(data_dir: Path, transactional_id: str) -> list[TimelineEvent]:
    """The timeline of `transactional_id` from the files of the cluster in `data_dir`."""
    return read_timeline(data_dir, transactional_id).events


@dataclass(frozen=True, slots=True)
class TransactionPicture:
    """A transactional id's timeline, the data partitions it was read from, and the timelines of the
    consumer groups its transactions committed offsets for (TxnOffsetCommit), by group id."""

    events: list[TimelineEvent]
    partitions: list[TopicPartition]
    groups: dict[str, list[TimelineEvent]]


def read_timeline(data_dir: Path, transactional_id: str) -> TransactionPicture:
    layout = ClusterLayout(data_dir)
    shard, entries = read_state_entries(layout, transactional_id)
    partitions = sorted({tp for e in entries if e.value is not None for tp in e.value.partitions})
    producer_ids = {e.value.producer_id for e in entries if e.value is not None}
    batches = [(tp, b) for tp in partitions for b in read_batches(layout, tp) if b.header.producer_id in producer_ids]
    placement = Placement(tuple(read_cluster_spec(layout).node_ids))
    first_owners = {(tp.topic, tp.partition): placement.owner(tp.topic, tp.partition)
                    for tp in [*partitions, TopicPartition(TRANSACTION_STATE_TOPIC, shard)]}
    ownership = read_ownership(layout)
    events = build_timeline(transactional_id, shard, entries, [data_batch(tp, b) for tp, b in batches], ownership,
                            first_owners)
    groups = {group: group_timeline(layout, group, ownership) for group in _groups_committed(batches)}
    return TransactionPicture(events, partitions, groups)


def _groups_committed(batches: Iterable[tuple[TopicPartition, RecordBatch]]) -> list[str]:
    """The groups named by the offsets the producer wrote to __consumer_offsets in its transactions."""
    found = set()
    for tp, batch in batches:
        if tp.topic != CONSUMER_OFFSETS_TOPIC or batch.header.is_control:
            continue
        for record in batch.records():
            try:
                key = parse_key(record.key)
            except KafkaError:
                continue
            if isinstance(key, OffsetKey):
                found.add(key.group_id)
    return sorted(found)


def read_group_entries(layout: ClusterLayout, group_id: str) -> tuple[int, list[GroupEntry]]:
    """The group's offsets shard, and its durable membership records there (an unreadable one is skipped)."""
    shard = partition_for(group_id, read_cluster_spec(layout).config.offsets_shards)
    key = group_key(group_id)
    entries = []
    for batch in read_batches(layout, TopicPartition(CONSUMER_OFFSETS_TOPIC, shard)):
        if batch.header.is_control:
            continue
        for record in batch.records():
            if record.key != key:
                continue
            try:
                value = None if record.value is None else decode_group(record.value)
            except KafkaError:
                continue
            entries.append(GroupEntry(record.offset, record.timestamp, batch.header.partition_leader_epoch, value))
    return shard, entries


def group_timeline(layout: ClusterLayout, group_id: str,
                   ownership: list[OwnershipEvent] | None = None) -> list[TimelineEvent]:
    """Every generation of `group_id` that the cluster's `__consumer_offsets` still holds, oldest first."""
    shard, entries = read_group_entries(layout, group_id)
    placement = Placement(tuple(read_cluster_spec(layout).node_ids))
    first_owners = {(CONSUMER_OFFSETS_TOPIC, shard): placement.owner(CONSUMER_OFFSETS_TOPIC, shard)}
    return build_group_timeline(group_id, shard, entries, read_ownership(layout) if ownership is None else ownership,
                                first_owners)


def group_timeline_of(data_dir: Path, group_id: str) -> list[TimelineEvent]:
    return group_timeline(ClusterLayout(data_dir), group_id)


def group_signature(data_dir: Path, group_id: str) -> tuple[object, ...]:
    """What a group's timeline was read from (its offsets shard and the ownership log)."""
    layout = ClusterLayout(data_dir)
    shard = TopicPartition(CONSUMER_OFFSETS_TOPIC, partition_for(group_id, read_cluster_spec(layout).config.offsets_shards))
    return _stats([layout.metadata / "ownership.log", *(p for _b, _e, p in _segments(layout, shard))])


@dataclass(frozen=True, slots=True)
class BrowsedRecord:
    """One record of a partition, with the fate of its transaction."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    #: "committed", "aborted", "open" for a transactional record, "" for a plain one
    transaction: str


def browse(data_dir: Path, tp: TopicPartition, start_offset: int = 0, limit: int = 100) -> list[BrowsedRecord]:
    """Records of a partition from `start_offset` (control records left out), each with its transaction status."""
    layout = ClusterLayout(data_dir)
    if not (layout.logs / f"{tp.topic}-{tp.partition}").is_dir():
        raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] no log for {tp.topic}-{tp.partition}")
    pending: list[tuple[Record, RecordBatch]] = []
    outcome: dict[int, str] = {}            # offset of a transactional record -> its outcome
    open_of: dict[int, list[int]] = {}      # producer id -> offsets of its undecided records
    for batch in read_batches(layout, tp):
        h = batch.header
        if h.is_control:
            decided = "committed" if batch.control_record().type == ControlType.COMMIT else "aborted"
            for offset in open_of.pop(h.producer_id, []):
                outcome[offset] = decided
            continue
        if h.last_offset < start_offset:
            if h.is_transactional:
                open_of.setdefault(h.producer_id, [])  # its marker may come after start_offset
            continue
        for record in batch.records():
            if record.offset >= start_offset and len(pending) < limit:
                pending.append((record, batch))
                if h.is_transactional:
                    open_of.setdefault(h.producer_id, []).append(record.offset)
    return [BrowsedRecord(r.offset, r.timestamp, r.key, r.value, tuple(r.headers), b.header.producer_id,
                          outcome.get(r.offset, "open") if b.header.is_transactional else "")
            for r, b in pending]



def files_signature(data_dir: Path, transactional_id: str, partitions: Iterable[TopicPartition]) -> tuple[object, ...]:
    """What a timeline was read from (size and change time of each file): equal signatures, equal timelines."""
    layout = ClusterLayout(data_dir)
    shard = TopicPartition(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, txn_shards(layout)))
    return _stats([layout.metadata / "ownership.log",
                   *(p for tp in [shard, *partitions] for _b, _e, p in _segments(layout, tp))])


def partition_signature(data_dir: Path, tp: TopicPartition) -> tuple[object, ...]:
    """The same for one partition's log (what the message browser reads)."""
    return _stats([p for _b, _e, p in _segments(ClusterLayout(data_dir), tp)])


def _stats(paths: Iterable[Path]) -> tuple[object, ...]:
    stats: list[object] = []
    for path in paths:
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        stats.append((str(path), st.st_size, st.st_mtime_ns))
    return tuple(stats)


def _segments(layout: ClusterLayout, tp: TopicPartition) -> list[tuple[int, int | None, Path]]:
    directory = layout.logs / f"{tp.topic}-{tp.partition}"
    return segment_files(directory) if directory.is_dir() else []
