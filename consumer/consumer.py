"""The Kafka-style Consumer: assign or subscribe, poll, seek, commit (API.md, Consumer section).

A thin facade: positions live in SubscriptionState, fetching and read_committed filtering in
Fetcher, membership in GroupMembership, commits in OffsetManager. Like Kafka's, one consumer
is used from one thread; only its heartbeat thread runs beside it.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from proto.cluster_client import ClusterClient
from proto.errors import (
    IllegalGenerationError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from proto.structs import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, TopicPartition
from proto.transport import Deadline, retrying

from consumer.config import ConsumerConfig, OffsetResetStrategy
from consumer.fetcher import Fetcher
from consumer.group import GroupCoordinatorClient, GroupMembership
from consumer.offsets import OffsetManager
from consumer.subscription import SubscriptionState

log = logging.getLogger(__name__)

_REJOIN_ERRORS = (RebalanceInProgressError, IllegalGenerationError, UnknownMemberIdError)


class ConsumerRebalanceListener(Protocol):
    """kafka-python's (and Kafka's) callbacks around a rebalance, called from poll() in the consumer's thread."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


class Consumer:
    """Reads records from txnsim topics, Kafka's way.

    `Consumer(*topics, bootstrap_servers=..., group_id=None, isolation_level="read_uncommitted",
    auto_offset_reset="latest", enable_auto_commit=<True with a group_id>, ...)`; every setting
    is a field of ConsumerConfig. Topics given positionally are subscribed to at once.
    """

    def __init__(self, *topics: str, **configs: Any) -> None:
        self.config = ConsumerConfig.from_kwargs(configs)
        self._cluster = ClusterClient(self.config.bootstrap_servers, request_timeout_ms=self.config.request_timeout_ms)
        self._subscription = SubscriptionState(self.config.auto_offset_reset)
        self._wakeup = threading.Event()
        self._fetcher = Fetcher(self._cluster, self._subscription, self.config, self._wakeup)
        self._backoff_s = max(self.config.retry_backoff_ms / 1000, 0.01)
        self._next_position_attempt = 0.0
        self._closed = False
        self._membership: GroupMembership | None = None
        self._offsets: OffsetManager | None = None
        self._listener: ConsumerRebalanceListener | None = None
        self._next_metadata_check = 0.0
        if self.config.group_id is not None:
            client = GroupCoordinatorClient(self._cluster, self.config.group_id, self.config)
            self._membership = GroupMembership(client, self.config, lambda: self._subscription.topics, self._wakeup)
            self._offsets = OffsetManager(client, self._membership, self._subscription, self.config)
        if topics:
            self.subscribe(topics)

    # ------------------------------------------------------------ what to read

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions, without group membership."""
        self._ensure_open()
        partitions = set(partitions)
        lost = self._subscription.assigned_partitions() - partitions
        self._subscription.assign_from_user(partitions)
        self._fetcher.discard(lost)

    def subscribe(self, topics: Iterable[str] | str = (), pattern: str | re.Pattern[str] | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Join the group and read the partitions its leader assigns from these topics, or from every topic
        whose name matches `pattern` (re.match, rechecked every metadata_max_age_ms); `listener` is told
        of every revocation (before the consumer rejoins) and assignment."""
        self._ensure_open()
        if self._membership is None:
            raise KafkaConfigurationError("subscribe() needs a group_id: pass group_id='...' to Consumer, "
                                          "or choose partitions with assign()")
        topics = frozenset([topics] if isinstance(topics, str) else topics)
        if bool(topics) == (pattern is not None):
            raise IllegalStateError("subscribe() takes topics or a pattern, exactly one of them")
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        before = (self._subscription.topics, self._subscription.pattern)
        was_subscribed = self._subscription.is_subscribed
        self._subscription.subscribe(topics, compiled)
        self._listener = listener
        if compiled is not None:
            self._next_metadata_check = 0.0  # resolve the pattern on the next poll
        if was_subscribed and (topics, compiled) != before:
            self._membership.request_rejoin(f"subscription changed to {sorted(topics) or compiled}")

    def unsubscribe(self) -> None:
        """Stop reading everything; a subscribed consumer commits (with auto commit) and leaves its group."""
        self._ensure_open()
        if self._subscription.is_subscribed and self._membership is not None:
            self._revoke_all("unsubscribe", Deadline(self.config.request_timeout_ms / 1000))
            self._membership.leave(Deadline(self.config.request_timeout_ms / 1000))
        self._fetcher.discard(self._subscription.assigned_partitions())
        self._subscription.unsubscribe()

    def assignment(self) -> set[TopicPartition]:
        return self._subscription.assigned_partitions()

    def subscription(self) -> set[str]:
        return set(self._subscription.topics)

    # ------------------------------------------------------------ poll

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched since the last poll, at most `max_records` (default max_poll_records).

        Waits up to `timeout_ms` for some to arrive and returns {} if none do. Retriable
        failures (a moved leader, an unreachable node) are retried on later polls, never raised.
        """
        self._ensure_open()
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or timeout_ms < 0:
            raise IllegalStateError(f"poll timeout_ms must be a number >= 0, not {timeout_ms!r}")
        if max_records is not None and (not isinstance(max_records, int) or max_records < 1):
            raise IllegalStateError(f"max_records must be a positive int, not {max_records!r}")
        if not self._subscription.is_subscribed and not self._subscription.assigned_partitions():
            raise IllegalStateError("the consumer is neither subscribed to topics nor assigned partitions; "
                                    "call subscribe() or assign() first")
        deadline = Deadline(timeout_ms / 1000)
        limit = max_records or self.config.max_poll_records
        if self._membership is not None:
            self._membership.record_poll()
        while True:
            self._wakeup.clear()
            self._maybe_check_metadata(deadline)
            self._maybe_join_group(deadline)
            if self._offsets is not None:
                self._offsets.maybe_auto_commit(deadline)
            self._update_positions(deadline)
            self._fetcher.handle_responses()
            records = self._fetcher.drain(limit)
            self._fetcher.send_fetches(deadline)  # pipelined: the next fetch runs while the app works
            if records or deadline.expired():
                return records
            wait_s = deadline.remaining()
            if not self._fetcher.has_in_flight():
                wait_s = min(wait_s, self._backoff_s)  # nothing will wake us: retry soon
            self._wakeup.wait(wait_s)

    def _maybe_join_group(self, deadline: Deadline) -> None:
        """Eager rebalance: commit and give up every partition first, then JoinGroup and SyncGroup, so that no
        partition is ever read by two members and no position is committed for a partition held by another."""
        membership = self._membership
        if membership is None or not self._subscription.is_subscribed or not membership.needs_join():
            return
        self._revoke_all("rebalance", deadline)  # nothing left to revoke once the rebalance is under way
        try:
            assignment = membership.advance(deadline)
        except KafkaError as exc:
            if exc.retriable or isinstance(exc, _REJOIN_ERRORS):
                log.info("group %r: rebalance not finished (%s); retrying", membership.group_id, exc)
                return
            raise
        if assignment is None:
            return  # the coordinator holds our JoinGroup/SyncGroup until the group is there: poll again
        mine = {tp for tp in assignment if tp.topic in self._subscription.topics}
        self._subscription.assign_from_subscribed(mine)
        log.info("group %r: assigned %s", membership.group_id, sorted(map(str, mine)) or "nothing")
        self._call_listener("on_partitions_assigned", set(mine))

    def _revoke_all(self, reason: str, deadline: Deadline) -> None:
        """Commit (with auto commit) the positions of every assigned partition, tell the listener, forget them."""
        owned = self._subscription.assigned_partitions()
        if not owned:
            return
        self._maybe_commit_on_leave(reason, deadline)
        self._call_listener("on_partitions_revoked", owned)
        self._subscription.assign_from_subscribed(())
        self._fetcher.discard(owned)

    def _call_listener(self, method: str, partitions: set[TopicPartition]) -> None:
        if self._listener is None:
            return
        try:
            getattr(self._listener, method)(partitions)
        except Exception:  # as kafka-python: the application's bug is logged, the rebalance goes on
            log.exception("group %r: %s failed", self.config.group_id, method)

    def _maybe_check_metadata(self, deadline: Deadline) -> None:
        """Every metadata_max_age_ms: re-resolve a pattern subscription; as leader, notice partitions added to
        the group's topics. Either change calls for a rebalance."""
        membership = self._membership
        if membership is None or not self._subscription.is_subscribed or time.monotonic() < self._next_metadata_check:
            return
        self._next_metadata_check = time.monotonic() + self.config.metadata_max_age_ms / 1000
        assigned_counts = membership.assigned_counts()
        pattern = self._subscription.pattern
        if pattern is None and not assigned_counts:
            return
        try:
            metadata = self._cluster.refresh_metadata((), deadline)
        except KafkaError as exc:
            log.debug("metadata check failed (%s); the next poll tries again", exc)
            self._next_metadata_check = time.monotonic() + self._backoff_s
            return
        counts = {t.name: len(t.partitions) for t in metadata.topics if not t.error_code}
        if pattern is not None:
            matched = {t.name for t in metadata.topics if not t.internal and not t.error_code and pattern.match(t.name)}
            if self._subscription.change_topics(matched):
                membership.request_rejoin(f"pattern {pattern.pattern!r} now matches {sorted(matched)}")
        if any(counts.get(topic, 0) != count for topic, count in assigned_counts.items()):
            membership.request_rejoin("partitions of the group's topics changed")

    def _maybe_commit_on_leave(self, reason: str, deadline: Deadline | None = None) -> None:
        if self._offsets is not None and self.config.enable_auto_commit:
            self._offsets.commit_quietly(self._subscription.all_consumed(),
                                         deadline or Deadline(self.config.request_timeout_ms / 1000), reason)

    def _update_positions(self, deadline: Deadline, *, force: bool = False) -> None:
        """Committed offset, else auto_offset_reset, for every partition without a position."""
        if not self._subscription.missing_positions():
            return
        now = time.monotonic()
        if not force and now < self._next_position_attempt:
            return
        self._next_position_attempt = now + self._backoff_s
        lookup = self._subscription.needs_committed_lookup()
        if lookup:
            if self._offsets is not None:
                self._offsets.fetch_positions(lookup, deadline)
            else:
                for tp in lookup:
                    self._subscription.request_reset(tp)
        self._fetcher.reset_positions(deadline)

    # ------------------------------------------------------------ positions

    def position(self, partition: TopicPartition) -> int:
        """Offset of the next record poll() will return for `partition` (looked up if unknown)."""
        self._ensure_open()
        position = self._subscription.position(partition)
        if position is not None:
            return position
        deadline = Deadline(self.config.request_timeout_ms / 1000)
        for attempt in retrying(deadline.remaining(), initial_backoff_s=self._backoff_s):
            with attempt:
                self._update_positions(deadline, force=True)
                position = self._subscription.position(partition)
                if position is None:
                    raise KafkaTimeoutError(f"the position of {partition} is not known yet")
                return position
        raise AssertionError("unreachable")

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._ensure_open()
        self._subscription.seek(partition, offset)
        self._fetcher.discard([partition])

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """To the high watermark (read_uncommitted) or the last stable offset (read_committed)."""
        self._seek_to(partitions, OffsetResetStrategy.LATEST)

    def _seek_to(self, partitions: tuple[TopicPartition, ...], strategy: OffsetResetStrategy) -> None:
        self._ensure_open()
        targets = partitions or tuple(self._subscription.assigned_partitions())
        for tp in targets:
            self._subscription.request_reset(tp, strategy)
        self._fetcher.discard(targets)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subscription.pause(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subscription.resume(tp)

    def paused(self) -> set[TopicPartition]:
        return self._subscription.paused_partitions()

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        self._ensure_open()
        bounds = self._fetcher.list_offsets(partitions, Deadline(self.config.request_timeout_ms / 1000))
        return {tp: b.log_start_offset for tp, b in bounds.items()}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermarks, or last stable offsets for a read_committed consumer (as Kafka's endOffsets)."""
        self._ensure_open()
        bounds = self._fetcher.list_offsets(partitions, Deadline(self.config.request_timeout_ms / 1000))
        return {tp: b.end_offset(self.config.isolation_level) for tp, b in bounds.items()}

    # ------------------------------------------------------------ metadata

    def partitions_for_topic(self, topic: str) -> set[int]:
        self._ensure_open()
        return set(range(self._cluster.partitions_for(topic, Deadline(self.config.request_timeout_ms / 1000))))

    def topics(self) -> set[str]:
        self._ensure_open()
        response = self._cluster.refresh_metadata((), Deadline(self.config.request_timeout_ms / 1000))
        return {t.name for t in response.topics if not t.internal and t.error_code == 0}

    # ------------------------------------------------------------ offsets of the group

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None) -> None:
        """Commit `offsets` (default: the current position of every assigned partition) and wait."""
        manager = self._require_group("commit()")
        if offsets is None:
            to_commit = self._subscription.all_consumed()
        else:
            to_commit = {tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om)
                         for tp, om in offsets.items()}
        manager.commit(to_commit, Deadline(self.config.request_timeout_ms / 1000))

    def committed(self, partition: TopicPartition, metadata: bool = False) -> int | OffsetAndMetadata | None:
        """The group's committed offset of `partition`, or None; waits while a transaction holds it undecided."""
        manager = self._require_group("committed()")
        found = manager.committed([partition], Deadline(self.config.request_timeout_ms / 1000))[partition]
        if found is None or metadata:
            return found
        return found.offset

    def group_metadata(self) -> ConsumerGroupMetadata:
        """For Producer.send_offsets_to_transaction (KIP-447): group, generation, member, instance id."""
        self._require_group("group_metadata()")
        assert self._membership is not None
        return self._membership.group_metadata()

    def _require_group(self, what: str) -> OffsetManager:
        self._ensure_open()
        if self._offsets is None:
            raise KafkaConfigurationError(f"{what} needs a group_id: pass group_id='...' to Consumer")
        return self._offsets

    # ------------------------------------------------------------ life cycle

    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("this consumer is closed; create a new Consumer")

    def close(self, autocommit: bool = True) -> None:
        """Commit (with auto commit), leave the group, stop the heartbeat, close channels. Idempotent."""
        if self._closed:
            return
        try:
            if autocommit and self._subscription.is_subscribed:
                self._revoke_all("close", Deadline(min(self.config.request_timeout_ms / 1000, 5.0)))
            elif autocommit:
                self._maybe_commit_on_leave("close")
            if self._membership is not None:
                self._membership.close()
                if self._subscription.is_subscribed:
                    self._membership.leave(Deadline(min(self.config.request_timeout_ms / 1000, 5.0)))
        finally:
            self._closed = True
            if self._offsets is not None:
                self._offsets.close()
            self._fetcher.close()
            self._cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
