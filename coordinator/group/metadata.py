"""In-memory state of one consumer group: members, generation, assignment, committed and pending offsets.

Plain data plus the rules that need no I/O (range assignment, expiry, applying a transaction
marker to pending offsets). The coordinator changes it only after the matching log write is
durable, under the group's own lock. Invariant: an offset with a greater log position wins,
in memory as in replay, so a reload rebuilds exactly what was served.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from proto.structs import TopicPartition

#: topic -> partition count (None or 0 when the topic does not exist)
PartitionCount = Callable[[str], "int | None"]


@dataclass(slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    last_heartbeat_ms: int = 0
    #: the generation this member last joined or synced at (-1: none yet)
    generation: int = -1


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_time_ms: int
    #: where the record sits in __consumer_offsets (None if the log did not say); orders commits
    log_offset: int | None

    def older_than(self, other: CommittedOffset) -> bool:
        if self.log_offset is None or other.log_offset is None:
            return True  # no positions to compare: the later call wins, as it did in the log
        return self.log_offset < other.log_offset


def range_assignment(members: Mapping[str, MemberMetadata], partition_count: PartitionCount | None
                     ) -> dict[str, tuple[TopicPartition, ...]]:
    """Kafka's RangeAssignor: per topic, contiguous ranges over the sorted subscribed members."""
    assigned: dict[str, list[TopicPartition]] = {member_id: [] for member_id in members}
    topics = sorted({topic for m in members.values() for topic in m.topics})
    for topic in topics:
        count = (partition_count(topic) if partition_count is not None else 0) or 0
        subscribers = sorted(member_id for member_id, m in members.items() if topic in m.topics)
        per_member, extra = divmod(count, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            length = per_member + (1 if i < extra else 0)
            assigned[member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
            start += length
    return {member_id: tuple(tps) for member_id, tps in assigned.items()}


@dataclass(eq=False)
class GroupMetadata:
    group_id: str
    #: bumped by every membership or assignment change; 0 = never had members
    generation: int = 0
    #: insertion order = join order; the first is the (nominal) leader
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    assignment: dict[str, tuple[TopicPartition, ...]] = field(default_factory=dict)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    #: producer id -> offsets written in its open transaction (invisible until its marker)
    pending: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    rebalance_started_ms: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def leader_id(self) -> str:
        return next(iter(self.members), "")

    def pending_partitions(self) -> set[TopicPartition]:
        return {tp for offsets in self.pending.values() for tp in offsets}

    def apply_commit(self, tp: TopicPartition, value: CommittedOffset) -> None:
        current = self.offsets.get(tp)
        if current is None or current.older_than(value):
            self.offsets[tp] = value

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

    def expired_members(self, now_ms: int) -> list[str]:
        """Members whose session lapsed, or who did not rejoin within their rebalance timeout."""
        expired = []
        for member_id, m in self.members.items():
            if now_ms - m.last_heartbeat_ms > m.session_timeout_ms:
                expired.append(member_id)
            elif m.generation < self.generation and now_ms - self.rebalance_started_ms > m.rebalance_timeout_ms:
                expired.append(member_id)
        return expired
