"""Rebuilding the groups of a __consumer_offsets shard from records: the log's, or a snapshot's.

Both go through ShardContents.apply, one record at a time, so a snapshot (snapshots.py) loads
to exactly what replaying the log below its offset builds. image() writes the contents back
as records that replay to the same groups, offsets, pending offsets and membership.
Nobody else sees a ShardContents while it is replayed: no locks here.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from coordinator.group import log_format
from coordinator.group.metadata import CommittedOffset, GroupMetadata
from proto.errors import KafkaError
from proto.records import ControlType, RecordBatch
from proto.structs import TopicPartition

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OffsetsRecord:
    """One record as replay applies it."""

    #: where the record sat in the log (orders commits of one partition); unused for membership
    offset: int
    key: bytes | None
    value: bytes | None
    #: the producer whose transaction wrote it, None for a plain (non-transactional) record
    producer_id: int | None = None


@dataclass(eq=False)
class ShardContents:
    """The groups of shard `number` as of log position `next_offset`."""

    number: int
    #: replayed members count as having heartbeated at this time
    now_ms: int
    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    #: producer id -> groups that hold its pending offsets
    txn_groups: dict[int, set[str]] = field(default_factory=dict)
    next_offset: int = 0
    #: the snapshot the contents started from (None: the log's start)
    snapshot_offset: int | None = None
    #: records (markers included) read from the log, as opposed to from a snapshot
    replayed: int = 0

    def replay(self, batches: Iterable[RecordBatch]) -> None:
        """Apply durable log batches from `next_offset` on."""
        for batch in batches:
            header = batch.header
            if header.is_control:
                if header.base_offset >= self.next_offset:
                    self.replayed += 1
                    self.complete(header.producer_id, batch.control_record().type is ControlType.COMMIT,
                                  header.base_offset)
            else:
                producer_id = header.producer_id if header.is_transactional else None
                for record in batch.records():
                    if record.offset >= self.next_offset:
                        self.replayed += 1
                        self.apply(OffsetsRecord(record.offset, record.key, record.value, producer_id))
            self.next_offset = max(self.next_offset, header.next_offset)

    def apply(self, record: OffsetsRecord) -> None:
        try:
            key = log_format.parse_key(record.key)
        except KafkaError as exc:  # not ours to interpret; the rest of the shard still loads
            logger.warning("__consumer_offsets-%d offset %d skipped: %s", self.number, record.offset, exc)
            return
        group = self.groups.get(key.group_id)
        if group is None:
            group = self.groups[key.group_id] = GroupMetadata(key.group_id)
        if isinstance(key, log_format.GroupKey):
            if record.value is not None:
                group.classic.load(log_format.decode_group(record.value), self.now_ms)
            elif not group.pending:  # DeleteGroups: the group and its offsets are gone
                del self.groups[key.group_id]
            else:
                group.offsets.clear()
        elif record.producer_id is not None:
            if record.value is not None:
                group.add_pending(record.producer_id, key.tp, log_format.decode_offset(record.value, record.offset))
                self.txn_groups.setdefault(record.producer_id, set()).add(key.group_id)
        elif record.value is None:
            group.remove_offsets({key.tp})
        else:
            group.apply_commit(key.tp, log_format.decode_offset(record.value, record.offset))

    def complete(self, producer_id: int, committed: bool, marker_offset: int | None) -> None:
        """A COMMIT/ABORT marker of `producer_id` at `marker_offset`: apply or drop its pending offsets."""
        for name in self.txn_groups.pop(producer_id, ()):
            group = self.groups[name]
            group.complete_pending(producer_id, committed, marker_offset)
            if producer_id in group.pending:
                self.txn_groups.setdefault(producer_id, set()).add(name)

    def image(self) -> Iterator[OffsetsRecord]:
        """Records that apply() turns back into these contents: per group its membership (so that
        every group exists, even one left empty), its committed offsets, and its pending ones."""
        for group in self.groups.values():
            yield OffsetsRecord(-1, log_format.group_key(group.group_id),
                                log_format.encode_group(group.classic.record()))
            for tp, value in group.offsets.items():
                yield _offset_record(group.group_id, tp, value, None)
            for producer_id, pending in group.pending.items():
                for tp, value in pending.items():
                    yield _offset_record(group.group_id, tp, value, producer_id)


def _offset_record(group_id: str, tp: TopicPartition, value: CommittedOffset, producer_id: int | None
                   ) -> OffsetsRecord:
    assert value.log_offset is not None, "replayed offsets always know their log position"
    return OffsetsRecord(value.log_offset, log_format.offset_key(group_id, tp), log_format.encode_offset(value),
                         producer_id)
