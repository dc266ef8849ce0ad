"""Committed offsets of the consumer's group: commit, commit_async, committed (require_stable), auto commit.

A commit from a group member carries its generation and member id so the coordinator can
fence a member that was rebalanced away; an assign()-only consumer commits with generation
-1 and member id "". Offsets committed inside a transaction stay invisible to
`committed()` until the transaction is decided (KAFKA-REFERENCE §10): it waits for that.
Commits leave in call order: commit_async ones from one worker thread, one at a time, and
commit() waits for those before it sends its own (as Kafka's commitSync).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

import grpc

from client.transport import Deadline, call_future, result_of
from consumer.config import ConsumerConfig
from consumer.fetcher import PartitionMissing
from consumer.group import GroupCoordinatorClient, GroupMembership
from consumer.subscription import SubscriptionState
from proto import txnsim_pb2 as pb
from proto.errors import (
    IllegalGenerationError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
    for_code,
)
from proto.structs import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

_MEMBERSHIP_ERRORS = (IllegalGenerationError, UnknownMemberIdError, RebalanceInProgressError)


def _raise_partition_errors(results: Iterable[Any]) -> None:
    for result in results:
        if result.error_code:
            raise for_code(result.error_code, f"{result.topic}-{result.partition}: {result.error_message}")


#: commit_async's callback: (offsets, None on success or the exception)
CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], Exception | None], Any]


class CommitFuture:
    """What commit_async() returns: kafka-python's Future (is_done, value, exception, succeeded(), failed(),
    add_callback/add_errback/add_both), plus get(timeout). Its own callbacks run in the thread that
    completes it; commit_async's `callback` runs in the consumer's thread instead (see Consumer)."""

    def __init__(self) -> None:
        self.is_done = False
        self.value: None = None
        self.exception: Exception | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[tuple[bool, Callable[[Any], Any]]] = []

    def succeeded(self) -> bool:
        return self.is_done and self.exception is None

    def failed(self) -> bool:
        return self.is_done and self.exception is not None

    def retriable(self) -> bool:
        return self.exception is not None and bool(getattr(self.exception, "retriable", False))

    def get(self, timeout: float | None = None) -> None:
        """Wait for the commit; raise its error, or KafkaTimeoutError if `timeout` seconds pass first."""
        if not self._done.wait(timeout):
            raise KafkaTimeoutError(f"the async commit did not finish within {timeout} s")
        if self.exception is not None:
            raise self.exception

    def _complete(self, exception: Exception | None) -> None:
        with self._lock:
            self.exception = exception
            self.is_done = True
            callbacks, self._callbacks = self._callbacks, []
        self._done.set()
        for on_success, fn in callbacks:
            self._run(on_success, fn)

    def _run(self, on_success: bool, fn: Callable[[Any], Any]) -> None:
        if on_success != (self.exception is None):
            return
        try:
            fn(self.value if on_success else self.exception)
        except Exception:  # as kafka-python's Future: a callback's bug is logged, the others still run
            log.exception("commit future callback %r failed", fn)

    def _add(self, on_success: bool, fn: Callable[[Any], Any]) -> CommitFuture:
        with self._lock:
            if not self.is_done:
                self._callbacks.append((on_success, fn))
                return self
        self._run(on_success, fn)
        return self

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> CommitFuture:
        return self._add(True, lambda value: fn(*args, value, **kwargs))

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> CommitFuture:
        return self._add(False, lambda error: fn(*args, error, **kwargs))

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> CommitFuture:
        self.add_callback(fn, *args, **kwargs)
        return self.add_errback(fn, *args, **kwargs)


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
        #: commit_async's one worker (started on first use), and the last commit given to it
        self._async_worker: ThreadPoolExecutor | None = None
        self._last_async: Future[None] | None = None
        #: finished commit_async calls whose callback the consumer's thread has still to call
        self._completed: collections.deque[tuple[CommitCallback, Mapping[TopicPartition, OffsetAndMetadata],
                                                 Exception | None]] = collections.deque()
        self._lock = threading.Lock()

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
        """Store `offsets` durably, retrying retriable errors until `deadline`, after every earlier commit_async."""
        self.wait_for_async(deadline)
        if offsets:
            self._commit(offsets, deadline, retry=True)

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     callback: CommitCallback | None) -> CommitFuture:
        """Send `offsets` from the worker thread, once, after every earlier commit_async (Kafka retries none:
        a retried one could land after a later commit and move the offset back)."""
        future = CommitFuture()
        with self._lock:
            if self._async_worker is None:
                self._async_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"commit-{self.group_id}")
            self._last_async = self._async_worker.submit(self._commit_async_now, dict(offsets), callback, future)
        return future

    def _commit_async_now(self, offsets: dict[TopicPartition, OffsetAndMetadata], callback: CommitCallback | None,
                          future: CommitFuture) -> None:
        error: Exception | None = None
        try:
            deadline = Deadline(self._config.request_timeout_ms / 1000)
            self._wait_for_auto_commit(deadline)
            if offsets:
                self._commit(offsets, deadline, retry=False)
        except Exception as exc:  # noqa: BLE001 - every failure goes to the future and the callback, as kafka-python's
            error = exc
            log.debug("group %r: async commit failed: %s", self.group_id, exc)
        if callback is not None:
            self._completed.append((callback, offsets, error))
        future._complete(error)

    def wait_for_async(self, deadline: Deadline) -> None:
        """Wait until every commit_async and auto commit so far is answered; KafkaTimeoutError at `deadline`."""
        self._wait_for_auto_commit(deadline)
        with self._lock:
            last = self._last_async
        if last is None or last.done():
            return
        try:
            last.result(deadline.remaining())
        except FutureTimeoutError:
            raise KafkaTimeoutError(f"earlier async commits of group {self.group_id!r} were not answered "
                                    f"in time; this commit waits for them to keep commits in order") from None

    def _wait_for_auto_commit(self, deadline: Deadline) -> None:
        """An auto commit in flight is older than any commit being sent now: let it land first, so that the
        node (which may run two commits of one group at once) never applies it after the newer one."""
        auto = self._auto_commit_future
        if auto is None or auto.done():
            return
        try:
            auto.exception(timeout=deadline.remaining())
        except (grpc.FutureTimeoutError, grpc.FutureCancelledError):
            pass  # not answered in time: the newer commit goes anyway, as it did before

    def invoke_completed_callbacks(self) -> None:
        """commit_async callbacks of finished commits, in commit order; called from the consumer's thread."""
        while self._completed:
            callback, offsets, error = self._completed.popleft()
            callback(offsets, error)

    def _commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], deadline: Deadline, *,
                retry: bool) -> None:
        request = self._commit_request(offsets)

        def check(response: pb.OffsetCommitResponse) -> None:
            try:
                _raise_partition_errors(response.results)
            except UnknownTopicOrPartitionError as exc:  # retriable in Kafka; final once metadata agrees
                if self._missing_from_metadata(response.results, deadline):
                    raise PartitionMissing(exc) from None
                raise

        try:
            if retry:
                self._client.call_with_retries("OffsetCommit", request, deadline, check=check)
            else:
                check(self._client.call("OffsetCommit", request, deadline))
        except PartitionMissing as missing:
            raise missing.error from None
        except _MEMBERSHIP_ERRORS as exc:
            if self._membership is not None:
                self._membership.handle_group_error(exc, request.generation_id, request.member_id)
            raise type(exc)(f"{exc} -- commit of group {self.group_id!r} failed: the group rebalanced and these "
                            f"partitions may belong to another member now; poll() to rejoin") from None
        with self._lock:
            self._last_committed.update(offsets)
        log.debug("group %r committed %s", self.group_id, {str(tp): om.offset for tp, om in offsets.items()})

    def _missing_from_metadata(self, results: Iterable[Any], deadline: Deadline) -> bool:
        """Whether fresh metadata says a partition the coordinator called unknown does not exist."""
        unknown = [TopicPartition(r.topic, r.partition) for r in results
                   if r.error_code == UnknownTopicOrPartitionError.errno]
        try:
            metadata = self._client.cluster.refresh_metadata(sorted({tp.topic for tp in unknown}), deadline)
        except KafkaError as exc:
            log.debug("group %r: metadata to confirm an unknown partition failed: %s", self.group_id, exc)
            return False
        counts = {t.name: (len(t.partitions) if not t.error_code else 0) for t in metadata.topics}
        return any(tp.partition >= counts.get(tp.topic, 0) for tp in unknown)

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
        with self._lock:
            if self._last_async is not None and not self._last_async.done():
                return  # after the commit_async calls still on their way, on a later poll
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self._config.auto_commit_interval_ms / 1000
        if self._membership is not None and self._membership.needs_join():
            return  # the rebalance commits before it gives partitions away
        with self._lock:
            offsets = {tp: om for tp, om in self._subscription.all_consumed().items()
                       if self._last_committed.get(tp) != om}
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
        with self._lock:
            self._last_committed.update(self._pending_auto_commit)

    def close(self, deadline: Deadline | None = None) -> None:
        """Wait (until `deadline`) for commit_async calls still on their way and call their callbacks."""
        if deadline is not None:
            try:
                self.wait_for_async(deadline)
                self.invoke_completed_callbacks()
            except KafkaError as exc:
                log.warning("group %r: close: %s", self.group_id, exc)
        with self._lock:
            worker, self._async_worker = self._async_worker, None
        if worker is not None:
            worker.shutdown(wait=False)  # a commit still queued fails on the closed channels, futures complete
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
