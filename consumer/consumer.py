"""The Kafka-style Consumer: assign or subscribe, poll, seek, commit (API.md, Consumer section).

A thin facade: positions live in SubscriptionState, fetching and read_committed filtering in
Fetcher, membership in GroupMembership, commits in OffsetManager. Like Kafka's, one consumer
is used from one thread; only its heartbeat and async-commit threads run beside it. Iteration
(`for record in consumer`) hands records out one at a time from a buffer; what the application
sees (position(), commit()) counts only the records it was handed, as kafka-python's iterator.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol, overload

from client.cluster import ClusterClient
from client.transport import Deadline, retrying
from consumer.arguments import as_offset_and_metadata, as_topic_partition, check_offset, check_timestamp
from consumer.config import ConsumerConfig, OffsetResetStrategy
from consumer.fetcher import Fetcher
from consumer.group import GroupCoordinatorClient, GroupMembership
from consumer.iteration import IterationBuffer
from consumer.offsets import CommitCallback, CommitFuture, OffsetManager
from consumer.subscription import SubscriptionState
from proto.errors import (
    IllegalArgumentError,
    IllegalGenerationError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from proto.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

log = logging.getLogger(__name__)

_REJOIN_ERRORS = (RebalanceInProgressError, IllegalGenerationError, UnknownMemberIdError)
#: the longest one poll() inside iteration waits; iteration itself waits consumer_timeout_ms (or forever)
_ITERATION_POLL_S = 1.0


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
        self._iteration = IterationBuffer()
        if self.config.group_id is not None:
            client = GroupCoordinatorClient(self._cluster, self.config.group_id, self.config)
            self._membership = GroupMembership(client, self.config, lambda: self._subscription.topics, self._wakeup)
            self._offsets = OffsetManager(client, self._membership, self._subscription, self.config)
        if topics:
            self.subscribe(topics)

    # ------------------------------------------------------------ what to read

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions, without group membership (TopicPartitions of txnsim or kafka-python)."""
        self._ensure_open()
        partitions = {as_topic_partition(tp, "assign()'s partition") for tp in partitions}
        self._rewind_iteration()
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
        self._rewind_iteration()
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
        self._rewind_iteration()
        return self._poll(Deadline(timeout_ms / 1000), max_records or self.config.max_poll_records)

    def _poll(self, deadline: Deadline, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        if not self._subscription.is_subscribed and not self._subscription.assigned_partitions():
            raise IllegalStateError("the consumer is neither subscribed to topics nor assigned partitions; "
                                    "call subscribe() or assign() first")
        if self._offsets is not None:
            self._offsets.invoke_completed_callbacks()
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

    # ------------------------------------------------------------ iteration

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record, polling as needed; StopIteration once consumer_timeout_ms passes without one
        (never, by default) or the consumer is closed, as kafka-python's iterator."""
        if self._closed:
            raise StopIteration("the consumer is closed")
        deadline = Deadline(self.config.iteration_timeout_s)
        while True:
            record = self._iteration.pop(self._subscription.is_assigned)
            if record is not None:
                return record
            if deadline.expired():
                raise StopIteration
            self._iteration.extend(self._poll(Deadline(min(deadline.remaining(), _ITERATION_POLL_S)),
                                              self.config.max_poll_records))

    def _rewind_iteration(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Records fetched for iteration but not handed out go back to the log (see consumer/iteration.py)."""
        if not self._iteration:
            return
        resume_at = self._iteration.rewind(partitions)
        for tp, offset in resume_at.items():
            if self._subscription.is_assigned(tp):
                self._subscription.seek(tp, offset)
        self._fetcher.discard(resume_at)

    def _maybe_join_group(self, deadline: Deadline) -> None:
        """Eager rebalance: commit and give up every partition first, then JoinGroup and SyncGroup, so that no
        partition is ever read by two members and no position is committed for a partition held by another."""
        membership = self._membership
        if membership is not None:
            membership.raise_if_fenced()
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

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """Offset of the next record poll() will return for `partition` (looked up if unknown)."""
        self._ensure_open()
        partition = as_topic_partition(partition)
        position = self._iteration.position(partition)
        if position is not None:
            return position
        position = self._subscription.position(partition)
        if position is not None:
            return position
        deadline = self._deadline(timeout_ms)
        for attempt in retrying(deadline.remaining(), initial_backoff_s=self._backoff_s):
            with attempt:
                self._update_positions(deadline, force=True)
                position = self._subscription.position(partition)
                if position is None:
                    raise KafkaTimeoutError(f"the position of {partition} is not known yet")
                return position
        raise AssertionError("unreachable")

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read `partition` from `offset` on; a bad partition (TypeError) or offset (IllegalArgumentError, a
        ValueError as kafka-python raises) fails here and changes nothing."""
        self._ensure_open()
        partition = as_topic_partition(partition)
        offset = check_offset(offset, "seek()'s offset")
        self._subscription.position(partition)  # IllegalStateError if unassigned, before anything changes
        self._rewind_iteration([partition])
        self._subscription.seek(partition, offset)
        self._fetcher.discard([partition])

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """To the high watermark (read_uncommitted) or the last stable offset (read_committed)."""
        self._seek_to(partitions, OffsetResetStrategy.LATEST)

    def _seek_to(self, partitions: tuple[TopicPartition, ...], strategy: OffsetResetStrategy) -> None:
        self._ensure_open()
        targets = tuple(as_topic_partition(tp) for tp in partitions) or tuple(self._subscription.assigned_partitions())
        for tp in targets:
            self._subscription.position(tp)  # IllegalStateError if unassigned, before anything changes
        self._rewind_iteration(targets)
        for tp in targets:
            self._subscription.request_reset(tp, strategy)
        self._fetcher.discard(targets)

    def pause(self, *partitions: TopicPartition) -> None:
        targets = [as_topic_partition(tp) for tp in partitions]
        self._rewind_iteration(targets)  # iteration hands out nothing more of a paused partition
        for tp in targets:
            self._subscription.pause(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in [as_topic_partition(tp) for tp in partitions]:
            self._subscription.resume(tp)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark the last fetch of `partition` saw (the offset the next record will get), or None
        before any fetch answered; no request is sent (kafka-python's highwater)."""
        self._ensure_open()
        return self._subscription.high_watermark(as_topic_partition(partition))

    def paused(self) -> set[TopicPartition]:
        return self._subscription.paused_partitions()

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
                          ) -> dict[TopicPartition, int]:
        """Each partition's log start offset; UnknownTopicOrPartitionError at once for one that does not exist."""
        bounds = self._log_bounds(partitions, timeout_ms)
        return {tp: b.log_start_offset for tp, b in bounds.items()}

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
                    ) -> dict[TopicPartition, int]:
        """High watermarks, or last stable offsets for a read_committed consumer (as Kafka's endOffsets)."""
        bounds = self._log_bounds(partitions, timeout_ms)
        return {tp: b.end_offset(self.config.isolation_level) for tp, b in bounds.items()}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first record whose timestamp is >= the one given (within the LSO for
        read_committed), or None if there is none; the partitions need not be assigned (kafka-python's)."""
        wanted: dict[TopicPartition, int] = {}
        for key, timestamp in timestamps.items():
            tp = as_topic_partition(key)
            wanted[tp] = check_timestamp(timestamp, tp)
        bounds = self._log_bounds(wanted, timeout_ms, timestamps=wanted)
        return {tp: (OffsetAndTimestamp(b.offset_for_timestamp, b.timestamp, -1) if b.offset_for_timestamp >= 0
                     else None) for tp, b in bounds.items()}

    def _log_bounds(self, partitions: Iterable[TopicPartition], timeout_ms: int | None,
                    timestamps: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, Any]:
        self._ensure_open()
        wanted = [as_topic_partition(tp) for tp in partitions]
        return self._fetcher.list_offsets(wanted, self._deadline(timeout_ms), timestamps=timestamps, fail_fast=True)

    def _deadline(self, timeout_ms: int | None) -> Deadline:
        if timeout_ms is None:
            return Deadline(self.config.request_timeout_ms / 1000)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or timeout_ms < 0:
            raise IllegalArgumentError(f"timeout_ms must be a number >= 0, not {timeout_ms!r}")
        return Deadline(timeout_ms / 1000)

    # ------------------------------------------------------------ metadata

    def partitions_for_topic(self, topic: str) -> set[int]:
        self._ensure_open()
        return set(range(self._cluster.partitions_for(topic, Deadline(self.config.request_timeout_ms / 1000))))

    def topics(self) -> set[str]:
        self._ensure_open()
        response = self._cluster.refresh_metadata((), Deadline(self.config.request_timeout_ms / 1000))
        return {t.name for t in response.topics if not t.internal and t.error_code == 0}

    # ------------------------------------------------------------ offsets of the group

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
               timeout_ms: int | None = None) -> None:
        """Commit `offsets` (default: the current position of every assigned partition) and wait, after every
        earlier commit_async (whose callbacks run first). A partition that does not exist fails at once."""
        manager = self._require_group("commit()")
        to_commit = self._to_commit(offsets)
        deadline = self._deadline(timeout_ms)
        try:
            manager.commit(to_commit, deadline)
        finally:
            manager.invoke_completed_callbacks()

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: CommitCallback | None = None) -> CommitFuture:
        """Commit without waiting: sent once, in order after earlier commits; `callback(offsets, None or the
        exception)` (default: default_offset_commit_callback) runs in this thread during a later poll(),
        commit(), commit_async() or close(), as kafka-python's. Returns kafka-python's kind of future."""
        manager = self._require_group("commit_async()")
        to_commit = self._to_commit(offsets)
        manager.invoke_completed_callbacks()
        return manager.commit_async(to_commit, callback or self.config.default_offset_commit_callback)

    def _to_commit(self, offsets: Mapping[Any, Any] | None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Checked at the call (TypeError / IllegalArgumentError), kafka-python's named tuples accepted."""
        if offsets is None:
            return self._iteration.consumed(self._subscription.all_consumed())
        to_commit = {}
        for key, value in offsets.items():
            tp = as_topic_partition(key, "a partition to commit")
            to_commit[tp] = as_offset_and_metadata(value, tp)
        return to_commit

    @overload
    def committed(self, partition: TopicPartition, metadata: Literal[False] = False,
                  timeout_ms: int | None = None) -> int | None: ...

    @overload
    def committed(self, partition: TopicPartition, metadata: Literal[True],
                  timeout_ms: int | None = None) -> OffsetAndMetadata | None: ...

    @overload
    def committed(self, partition: TopicPartition, metadata: bool,
                  timeout_ms: int | None = None) -> int | OffsetAndMetadata | None: ...

    def committed(self, partition: TopicPartition, metadata: bool = False,
                  timeout_ms: int | None = None) -> int | OffsetAndMetadata | None:
        """The group's committed offset of `partition`, or None; waits while a transaction holds it undecided."""
        manager = self._require_group("committed()")
        partition = as_topic_partition(partition)
        found = manager.committed([partition], self._deadline(timeout_ms))[partition]
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

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit (with auto commit), wait for async commits, leave the group, stop the heartbeat, close
        channels. Idempotent. `timeout_ms` bounds it all (default: up to 5 s for each step)."""
        if self._closed:
            return
        overall = None if timeout_ms is None else self._deadline(timeout_ms)
        self._rewind_iteration()

        def step() -> Deadline:
            return overall or Deadline(min(self.config.request_timeout_ms / 1000, 5.0))

        try:
            if autocommit and self._subscription.is_subscribed:
                self._revoke_all("close", step())
            elif autocommit:
                self._maybe_commit_on_leave("close", step())
            if self._membership is not None:
                self._membership.close()
                if self._subscription.is_subscribed:
                    self._membership.leave(step())
        finally:
            self._closed = True
            if self._offsets is not None:
                self._offsets.close(step())
            self._fetcher.close()
            self._cluster.close()
            for deserializer in (self.config.key_deserializer, self.config.value_deserializer):
                if callable(getattr(deserializer, "deserialize", None)) and callable(getattr(deserializer, "close", None)):
                    deserializer.close()  # kafka-python closes Deserializer objects with the consumer

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
