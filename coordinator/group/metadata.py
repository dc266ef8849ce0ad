"""In-memory state of one consumer group: its membership (classic.py), committed and pending offsets.

Plain data plus the rules that need no I/O (applying a transaction marker to pending offsets). The coordinator changes it only after the matching log write is
durable, under the group's own lock. Invariant: an offset with a greater log position wins,
in memory as in replay, so a reload rebuilds exactly what was served.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.group.classic import ClassicGroup, GroupConfig
from proto.structs import TopicPartition

#: topic -> partition count (None or 0 when the topic does not exist)
PartitionCount = Callable[[str], "int | None"]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_time_ms: int
    #: where the record sits in __consumer_offsets (None if the log did not say); orders commits
    log_offset: int | None
    #: the leader epoch of the record the offset follows, as the committer gave it (-1: none)
    leader_epoch: int = -1

    def older_than(self, other: CommittedOffset) -> bool:
        if self.log_offset is None or other.log_offset is None:
            return True  # no positions to compare: the later call wins, as it did in the log
        return self.log_offset < other.log_offset


@dataclass(eq=False)
class GroupMetadata:
    group_id: str
    #: membership and rebalances (Kafka's classic protocol); the coordinator sets its config and id source
    classic: ClassicGroup = field(init=False)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    #: producer id -> offsets written in its open transaction (invisible until its marker)
    pending: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    #: reentrant: the node's I/O may complete a write on the thread that made it, and the write's
    #: continuation takes the lock the write was made under (coordinator.py)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def __post_init__(self) -> None:
        self.classic = ClassicGroup(self.group_id, GroupConfig(), _unset_member_id)

    def pending_partitions(self) -> set[TopicPartition]:
        return {tp for offsets in self.pending.values() for tp in offsets}

    def apply_commit(self, tp: TopicPartition, value: CommittedOffset) -> None:
        current = self.offsets.get(tp)
        if current is None or current.older_than(value):
            self.offsets[tp] = value

    def remove_offsets(self, partitions: set[TopicPartition]) -> None:
        """Forget the committed and pending offsets of `partitions` (their topic was deleted, or a tombstone
        says so): a marker arriving later must not bring a pending one back."""
        for tp in partitions:
            self.offsets.pop(tp, None)
        for offsets in self.pending.values():
            for tp in partitions:
                offsets.pop(tp, None)

    def partitions_of(self, topic: str) -> set[TopicPartition]:
        """Every partition of `topic` with a committed or pending offset."""
        return {tp for tp in set(self.offsets) | self.pending_partitions() if tp.topic == topic}

    def add_pending(self, producer_id: int, tp: TopicPartition, value: CommittedOffset) -> None:
        self.pending.setdefault(producer_id, {})[tp] = value

    def complete_pending(self, producer_id: int, committed: bool, marker_offset: int | None = None) -> None:
        """A COMMIT makes the producer's pending offsets current, an ABORT drops them.

        With `marker_offset`, offsets written after the marker belong to a later transaction
        and stay pending.
        """
        entries = self.pending.pop(producer_id, None)
        if not entries:
            return
        later: dict[TopicPartition, CommittedOffset] = {}
        for tp, value in entries.items():
            if marker_offset is not None and value.log_offset is not None and value.log_offset > marker_offset:
                later[tp] = value
            elif committed:
                self.apply_commit(tp, value)
        if later:
            self.pending[producer_id] = later


def _unset_member_id(client_id: str, instance_id: str | None) -> str:
    raise AssertionError("the group coordinator gives every group its member id source before serving it")
