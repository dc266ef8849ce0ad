"""Which partitions this consumer reads, and where it is in each: the consumer's only position state.

Invariant: a partition has a position only while it is assigned; a position is the offset of
the next record the application will see (records before it have been returned, skipped as
aborted, or were control markers). Positions move by seek() or by the fetcher draining records.
"""
from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from consumer.arguments import as_topic_partition
from consumer.config import OffsetResetStrategy
from proto.errors import IllegalStateError
from proto.structs import OffsetAndMetadata, TopicPartition


class SubscriptionType(enum.Enum):
    NONE = "none"
    #: subscribe(topics): the group coordinator assigns partitions
    AUTO_TOPICS = "auto_topics"
    #: assign(partitions): the application chose them, no group membership
    USER_ASSIGNED = "user_assigned"


@dataclass(slots=True)
class PartitionState:
    """What the consumer knows about one assigned partition."""

    position: int | None = None
    paused: bool = False
    #: set when the position must be (re)computed from the log's bounds
    reset_strategy: OffsetResetStrategy | None = None
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None


class SubscriptionState:
    """Assigned partitions with their positions, pause flags and last known log bounds."""

    def __init__(self, default_reset: OffsetResetStrategy) -> None:
        self.default_reset = default_reset
        self.type = SubscriptionType.NONE
        self.topics: frozenset[str] = frozenset()
        #: subscribe(pattern=...): `topics` are the cluster's topics it matched at the last check
        self.pattern: re.Pattern[str] | None = None
        self._assignment: dict[TopicPartition, PartitionState] = {}

    # ------------------------------------------------------------ what is read

    def subscribe(self, topics: Iterable[str], pattern: re.Pattern[str] | None = None) -> None:
        """Topics by name, or (with `pattern`) the topics matching it, which the consumer keeps resolving."""
        topics = frozenset(topics)
        if self.type is SubscriptionType.USER_ASSIGNED:
            raise IllegalStateError("subscribe() after assign(): call unsubscribe() first "
                                    "(a consumer either joins a group or chooses its partitions)")
        if not topics and pattern is None:
            raise IllegalStateError("subscribe() needs at least one topic; use unsubscribe() to stop reading")
        self.type = SubscriptionType.AUTO_TOPICS
        self.topics = topics
        self.pattern = pattern

    def change_topics(self, topics: Iterable[str]) -> bool:
        """A pattern subscription matched these topics now; True if that changed the subscription."""
        topics = frozenset(topics)
        changed = topics != self.topics
        self.topics = topics
        return changed

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        if self.type is SubscriptionType.AUTO_TOPICS:
            raise IllegalStateError("assign() after subscribe(): call unsubscribe() first")
        partitions = {as_topic_partition(tp, "assign()'s partition") for tp in partitions}
        self.type = SubscriptionType.USER_ASSIGNED if partitions else SubscriptionType.NONE
        self._set_assignment(partitions)

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Install the group's assignment; returns the partitions lost (their positions are dropped)."""
        if self.type is not SubscriptionType.AUTO_TOPICS:
            raise IllegalStateError("a group assignment arrived but the consumer is not subscribed")
        return self._set_assignment(set(partitions))

    def unsubscribe(self) -> None:
        self.type = SubscriptionType.NONE
        self.topics = frozenset()
        self.pattern = None
        self._assignment.clear()

    def _set_assignment(self, partitions: set[TopicPartition]) -> set[TopicPartition]:
        lost = set(self._assignment) - partitions
        self._assignment = {tp: self._assignment.get(tp) or PartitionState() for tp in sorted(partitions)}
        return lost

    @property
    def is_subscribed(self) -> bool:
        return self.type is SubscriptionType.AUTO_TOPICS

    def assigned_partitions(self) -> set[TopicPartition]:
        return set(self._assignment)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._assignment

    def is_fetchable(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and not state.paused and state.position is not None

    def fetchable_partitions(self) -> list[TopicPartition]:
        return [tp for tp, s in self._assignment.items() if not s.paused and s.position is not None]

    # ------------------------------------------------------------ positions

    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self._assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"partition {tp} is not assigned to this consumer; assignment is "
                                    f"{sorted(map(str, self._assignment))}")
        return state

    def position(self, tp: TopicPartition) -> int | None:
        return self._state(tp).position

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise IllegalStateError(f"seek offset must be an int >= 0, not {offset!r}")
        state = self._state(tp)
        state.position = offset
        state.reset_strategy = None

    def request_reset(self, tp: TopicPartition, strategy: OffsetResetStrategy | None = None) -> None:
        state = self._state(tp)
        state.position = None
        state.reset_strategy = strategy or self.default_reset

    def needs_committed_lookup(self) -> list[TopicPartition]:
        """Partitions with no position and no reset asked for: the committed offset decides."""
        return [tp for tp, s in self._assignment.items() if s.position is None and s.reset_strategy is None]

    def awaiting_reset(self) -> dict[TopicPartition, OffsetResetStrategy]:
        return {tp: s.reset_strategy for tp, s in self._assignment.items()
                if s.position is None and s.reset_strategy is not None}

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, s in self._assignment.items() if s.position is None]

    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The offsets a commit() without arguments stores: every known position."""
        return {tp: OffsetAndMetadata(s.position) for tp, s in self._assignment.items() if s.position is not None}

    def high_watermark(self, tp: TopicPartition) -> int | None:
        """The high watermark the last fetch of `tp` saw (None before one answered)."""
        return self._state(tp).high_watermark

    def update_bounds(self, tp: TopicPartition, *, high_watermark: int, last_stable_offset: int,
                      log_start_offset: int) -> None:
        state = self._assignment.get(tp)
        if state is not None:
            state.high_watermark = high_watermark
            state.last_stable_offset = last_stable_offset
            state.log_start_offset = log_start_offset

    # ------------------------------------------------------------ pause

    def pause(self, tp: TopicPartition) -> None:
        self._state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        self._state(tp).paused = False

    def paused_partitions(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.paused}
