"""Committed offsets of the consumer's group: commit, committed (require_stable), auto commit.

A commit from a group member carries its generation and member id so the coordinator can
fence a member that was rebalanced away; an assign()-only consumer commits with generation
-1 and member id "". Offsets committed inside a transaction stay invisible to
`committed()` until the transaction is decided (KAFKA-REFERENCE §10): it waits for that.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import grpc

from proto import txnsim_pb2 as pb
from proto.errors import (
    IllegalGenerationError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
    for_code,
)
from proto.structs import OffsetAndMetadata, TopicPartition
from proto.transport import Deadline, call_future, result_of

from consumer.config import ConsumerConfig
from consumer.group import GroupCoordinatorClient, GroupMembership
from consumer.subscription import SubscriptionState

log = logging.getLogger(__name__)

_MEMBERSHIP_ERRORS = (IllegalGenerationError, UnknownMemberIdError, RebalanceInProgressError)


def _raise_partition_errors(results: Iterable[Any]) -> None:
    for result in results:
        if result.error_code:
            raise for_code(result.error_code, f"{result.topic}-{result.partition}: {result.error_message}")


class OffsetManager:
    """Commits and reads the group's offsets through its coordinator."""

    def __init__(self, client: GroupCoordinatorClient, membership: GroupMembership | None,
                 subscription: SubscriptionState, config: ConsumerConfig) -> None:
        self._client = client
        self._membership = membership
        self._subscription = subscription
        self._config = config
        self._auto_commit_future: grpc.Future | None = None
        self._auto_commit_generation: tuple[int, str] = (-1, "")
        self._next_auto_commit = time.monotonic() + config.auto_commit_interval_ms / 1000
        self._last_committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self._pending_auto_commit: dict[TopicPartition, OffsetAndMetadata] = {}

    @property
    def group_id(self) -> str:
        return self._client.group_id

    def _generation(self) -> tuple[int, str]:
        return self._membership.generation() if self._membership is not None else (-1, "")

    def _commit_request(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> pb.OffsetCommitRequest:
        generation_id, member_id = self._generation()
        return pb.OffsetCommitRequest(
            group_id=self.group_id, generation_id=generation_id, member_id=member_id,
            offsets=[pb.OffsetEntry(topic=tp.topic, partition=tp.partition, offset=om.offset, metadata=om.metadata)
                     for tp, om in sorted(offsets.items())])

    # ------------------------------------------------------------ commit

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], deadline: Deadline) -> None:
        """Store `offsets` durably, retrying retriable errors until `deadline`."""
        if not offsets:
            return
        request = self._commit_request(offsets)
        try:
            self._client.call_with_retries("OffsetCommit", request, deadline,
                                           check=lambda r: _raise_partition_errors(r.results))
        except _MEMBERSHIP_ERRORS as exc:
            if self._membership is not None:
                self._membership.handle_group_error(exc, request.generation_id, request.member_id)
            raise type(exc)(f"{exc} -- commit of group {self.group_id!r} failed: the group rebalanced and these "
                            f"partitions may belong to another member now; poll() to rejoin") from None
        self._last_committed.update(offsets)
        log.debug("group %r committed %s", self.group_id, {str(tp): om.offset for tp, om in offsets.items()})

    def commit_quietly(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], deadline: Deadline,
                       reason: str) -> None:
        """An automatic commit (rebalance, close): a failure is logged, not raised."""
        try:
            self.commit(offsets, deadline)
        except KafkaError as exc:
            log.warning("group %r: auto commit on %s failed: %s", self.group_id, reason, exc)

    def maybe_auto_commit(self, deadline: Deadline) -> None:
        """Every auto_commit_interval_ms, commit current positions without waiting for the answer."""
        if not self._config.enable_auto_commit:
            return
        if self._auto_commit_future is not None:
            if not self._auto_commit_future.done():
                return
            self._finish_auto_commit()
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self._config.auto_commit_interval_ms / 1000
        if self._membership is not None and self._membership.needs_join():
            return  # the rebalance commits before it gives partitions away
        offsets = {tp: om for tp, om in self._subscription.all_consumed().items() if self._last_committed.get(tp) != om}
        if not offsets:
            return
        request = self._commit_request(offsets)
        try:
            stub = self._client.coordinator_stub(deadline)
        except KafkaError as exc:
            log.debug("group %r: auto commit postponed: %s", self.group_id, exc)
            return
        self._pending_auto_commit = offsets
        self._auto_commit_generation = (request.generation_id, request.member_id)
        self._auto_commit_future = call_future(stub.OffsetCommit, request, self._config.request_timeout_ms / 1000)

    def _finish_auto_commit(self) -> None:
        future, self._auto_commit_future = self._auto_commit_future, None
        try:
            response = result_of(future)
            _raise_partition_errors(response.results)
        except KafkaError as exc:
            self._client.note_error(exc)
            if isinstance(exc, _MEMBERSHIP_ERRORS) and self._membership is not None:
                self._membership.handle_group_error(exc, *self._auto_commit_generation)
            log.warning("group %r: auto commit failed: %s", self.group_id, exc)
            return
        self._last_committed.update(self._pending_auto_commit)

    def close(self) -> None:
        if self._auto_commit_future is not None:
            self._auto_commit_future.cancel()
            self._auto_commit_future = None

    # ------------------------------------------------------------ committed offsets

    def committed(self, partitions: Iterable[TopicPartition], deadline: Deadline
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets; waits out undecided transactional commits until `deadline`."""
        wanted = sorted(set(partitions))
        request = pb.OffsetFetchRequest(group_id=self.group_id, require_stable=True,
                                        partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)
                                                    for tp in wanted])
        try:
            response = self._client.call_with_retries("OffsetFetch", request, deadline,
                                                      check=lambda r: _raise_partition_errors(r.results))
        except UnstableOffsetCommitError as exc:
            raise KafkaTimeoutError(
                f"committed offsets of group {self.group_id!r} are still pending a transaction decision after "
                f"{self._config.request_timeout_ms} ms (request_timeout_ms): {exc}") from None
        return self._parse_fetch(response, wanted)

    @staticmethod
    def _parse_fetch(response: pb.OffsetFetchResponse, wanted: list[TopicPartition]
                     ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        found: dict[TopicPartition, OffsetAndMetadata | None] = {tp: None for tp in wanted}
        for r in response.results:
            tp = TopicPartition(r.topic, r.partition)
            if tp in found and not r.error_code and r.offset >= 0:
                found[tp] = OffsetAndMetadata(r.offset, r.metadata)
        return found

    def fetch_positions(self, partitions: list[TopicPartition], deadline: Deadline) -> None:
        """One OffsetFetch for partitions without a position: committed offset, else a reset.

        read_committed consumers require stable offsets (as Kafka's do): a partition whose
        transactional commit is undecided keeps no position and is asked again later.
        """
        request = pb.OffsetFetchRequest(group_id=self.group_id, require_stable=self._config.reads_committed,
                                        partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)
                                                    for tp in partitions])
        try:
            response = self._client.call("OffsetFetch", request, deadline)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.debug("group %r: committed offsets unavailable (%s); retrying", self.group_id, exc)
            return
        for r in response.results:
            tp = TopicPartition(r.topic, r.partition)
            if not self._subscription.is_assigned(tp) or self._subscription.position(tp) is not None:
                continue
            if r.error_code:
                error = for_code(r.error_code, r.error_message)
                if not error.retriable:
                    raise error
                log.debug("group %r: committed offset of %s not stable yet (%s)", self.group_id, tp, error)
                continue
            if r.offset >= 0:
                self._subscription.seek(tp, r.offset)
            else:
                self._subscription.request_reset(tp)
