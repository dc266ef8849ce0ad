"""The partition leader: produce, fetch, offsets, markers and producer state of the logs this node owns, over
the node's I/O (coordinator/runtime/io.py), so the node process and the simulator run this same code.

Invariants: a request for a partition this node does not own gets NOT_LEADER_OR_FOLLOWER;
a transactional batch opening a transaction on a partition is accepted only after the
transaction coordinator confirms the partition was added (KIP-890 part 1); nothing is
acknowledged before it is durable (written, then made durable through the I/O, which fsyncs),
and, where the partition is replicated, before its ISR has it when the producer asked for
acks=all (markers always wait for the ISR, as Kafka writes them with acks=all).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from coordinator.observers import NO_OBSERVER, OwnershipObserver
from coordinator.rpc import answers_with
from coordinator.runtime.io import Cancellable, Failures, NodeIO, Outcome, wait_for
from coordinator.verification import AsyncVerifier, Codes, verification_error
from partitions import LogConfig, PartitionLog, ProducerSnapshot
from proto import txnsim_pb2 as pb
from proto import txnsim_pb2_grpc as rpc
from proto.errors import (
    InvalidRequestError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    TransactionAbortableError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    code_of,
)
from proto.structs import (
    CONSUMER_OFFSETS_TOPIC,
    HALF_MESSAGE_TOPICS,
    INTERNAL_TOPICS,
    IsolationLevel,
    TopicPartition,
)

log = logging.getLogger(__name__)

#: ListOffsets timestamps with a meaning of their own (Kafka's): the HW or LSO, the log start, the largest timestamp
LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP = -1, -2, -3

#: what a produce request's verification decided for one of its partitions: the producer ids verified for
#: it, or the error it is answered with
Verdict = frozenset[int] | KafkaError


#: the most one fetch answers, whatever the request's max_bytes: Kafka's broker setting fetch.max.bytes (55 MiB)
FETCH_MAX_BYTES = 55 * 1024 * 1024
T = TypeVar("T")


class Ownership(Protocol):
    """Who owns each log as this node sees the cluster (coordinator/membership.py; the simulator's view)."""

    def owner(self, topic: str, partition: int) -> int: ...
    def may_cut_off(self, node_id: int) -> bool: ...


class LeaderLogs(Protocol):
    """The logs this node leads (partitions/log_manager.py's LogManager for logs that are the only copy;
    coordinator/replication/leader_logs.py for replicas, whose leadership the controller hands out)."""

    config: LogConfig

    def get(self, topic: str, partition: int) -> PartitionLog | None: ...
    def open_as_leader(self, topic: str, partition: int, may_cut_off: Callable[[int], bool]) -> PartitionLog: ...
    def forget(self, topic: str, partition: int) -> None: ...
    def open_logs(self) -> list[PartitionLog]: ...
    def on_close(self, listener: Callable[[str, int], None]) -> None: ...


class Replication(Protocol):
    """What a leader's durable writes wait for besides their own fsync: nothing for a log that is the only
    copy (NO_REPLICATION), the ISR for acks=all on a replicated one (coordinator/replication/leader_logs.py)."""

    def check_acks(self, partition_log: PartitionLog, acks: int) -> object:
        """Before a write: NOT_ENOUGH_REPLICAS if acks=all cannot be met now; else the leadership the write is
        made under, which must still hold when it is answered (a leader that lost it may have been cut back
        to its new leader's history, and the offsets refilled by others' writes)."""

    def replicated(self, writes: Mapping[PartitionLog, tuple[int, int, object]],
                   done: Callable[[dict[PartitionLog, KafkaError]], None]) -> None:
        """Each log's durable write (its end offset, its acks, its leadership) is replicated as its acks ask:
        done(failures)."""


class _NoReplication:
    def check_acks(self, partition_log: PartitionLog, acks: int) -> object:
        return None

    def replicated(self, writes: Mapping[PartitionLog, tuple[int, int, object]],
                   done: Callable[[dict[PartitionLog, KafkaError]], None]) -> None:
        done({})


NO_REPLICATION: Replication = _NoReplication()
#: the acks a marker is written with
MARKER_ACKS = -1


class TopicTable(Protocol):
    """The topics and their settings (coordinator/topics.py TopicStore; the simulator's fixed table)."""

    def partitions(self, topic: str) -> int | None: ...
    def configs(self, topic: str) -> dict[str, str]: ...
    def configs_view(self, topic: str) -> Mapping[str, str]: ...


def unique_partitions(parts: Iterable[pb.FetchPartition]) -> list[pb.FetchPartition]:
    """Each partition once: a partition named again takes the later naming's fields and keeps the first's
    place (Kafka's FetchRequest builds a LinkedHashMap of its partitions)."""
    merged: dict[tuple[str, int], pb.FetchPartition] = {}
    for part in parts:
        merged[(part.topic, part.partition)] = part
    return list(merged.values())


class WaitingFetches:
    """Long-poll fetches waiting for data, by partition: a produce or marker request wakes only the fetches
    of the partitions it wrote, once it is done (Kafka keys its delayed fetches by partition the same way).
    A waiting fetch is a callback registered here, not a thread: waking it hands its next read to a pool."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_partition: dict[tuple[str, int], set[Callable[[], None]]] = {}

    def add(self, keys: Iterable[tuple[str, int]], wake: Callable[[], None]) -> None:
        with self._lock:
            for key in keys:
                self._by_partition.setdefault(key, set()).add(wake)

    def remove(self, keys: Iterable[tuple[str, int]], wake: Callable[[], None]) -> None:
        with self._lock:
            for key in keys:
                waiting = self._by_partition.get(key)
                if waiting is not None:
                    waiting.discard(wake)
                    if not waiting:
                        del self._by_partition[key]

    def wake(self, keys: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            wakes = {wake for key in keys for wake in self._by_partition.get(key, ())}
        for wake in wakes:
            wake()

    def wake_all(self) -> None:
        with self._lock:
            wakes = {wake for waiting in self._by_partition.values() for wake in waiting}
        for wake in wakes:
            wake()


class _WaitingFetch:
    """One long-polling fetch between its reads: read again when a partition it asked for changes, answer when
    it has min_bytes, an error, or its max wait is over. Holds no thread while it waits."""

    def __init__(self, server: PartitionServer, req: pb.FetchRequest, isolation: IsolationLevel) -> None:
        self.server = server
        self.req = req
        self.isolation = isolation
        self.future: Future[pb.FetchResponse] = Future()
        self.max_wait_ms = max(0, min(req.max_wait_ms, 30_000))
        self.expired = self.max_wait_ms == 0
        self.min_bytes = max(1, req.min_bytes)
        self.keys = {(part.topic, part.partition) for part in req.partitions}
        self._lock = threading.Lock()
        self._scheduled = False  # a read is queued or running
        self._changed = False    # a wake came while it was
        self._timer: Cancellable | None = None

    def start(self) -> None:
        """Register, then read once on the caller's thread (the common case answers here, with no hop)."""
        self.server._waiting_fetches.add(self.keys, self.wake)
        with self._lock:
            self._scheduled = True
        self._read()

    def wake(self) -> None:
        with self._lock:
            if self.future.done():
                return
            if self._scheduled:
                self._changed = True
                return
            self._scheduled = True
        if self.server._stopping:  # answer from here: the node's pool may already be going
            self._read()
        else:
            self.server._io.soon(self._read, "fetch read")

    def _expire(self) -> None:
        self.expired = True
        self.wake()

    def _read(self) -> None:
        while True:
            with self._lock:
                self._changed = False
            try:
                results, total = self.server._fetch_once(self.req, self.isolation)
            except Exception as exc:  # a node bug: answered as the blocking call would raise it
                self._finish(exc)
                return
            if total >= self.min_bytes or self.expired or any(r.error_code for r in results) \
                    or self.server._stopping:
                self._finish(pb.FetchResponse(partitions=results))
                return
            with self._lock:
                if not self._changed:
                    self._scheduled = False
                    if self._timer is None:
                        self._timer = self.server._io.after(self.max_wait_ms, self._expire, "fetch max wait")
                    return

    def _finish(self, outcome: pb.FetchResponse | Exception) -> None:
        self.server._waiting_fetches.remove(self.keys, self.wake)
        if self._timer is not None:
            self._timer.cancel()
        if self.future.done():
            return
        if isinstance(outcome, Exception):
            self.future.set_exception(outcome)
        else:
            self.future.set_result(outcome)


@dataclass(frozen=True)
class _Pending:
    """Records written to `log` from `offset` up to `end`, not yet known durable."""

    log: PartitionLog
    offset: int
    end: int
    #: the leadership it was written under (Replication.check_acks), to be still held when it is answered
    leadership: object = None


class PartitionServer:
    def __init__(self, *, io: NodeIO, logs: LeaderLogs, membership: Ownership, topics: TopicTable,
                 offsets_shards: int, txn_shards: int, verify: AsyncVerifier, half_shards: int = 10,
                 on_offsets_marker: Callable[[int, int, bool, int], None],
                 observer: OwnershipObserver = NO_OBSERVER, replication: Replication = NO_REPLICATION) -> None:
        self._io = io
        self.node_id = io.node_id
        self._logs = logs
        self._membership = membership
        self._topics = topics
        self._offsets_shards = offsets_shards
        self._txn_shards = txn_shards
        self._half_shards = half_shards
        self._verify = verify
        self._replication = replication
        self._on_offsets_marker = on_offsets_marker
        #: told when a data partition is opened here, on its first request
        self._observer = observer
        self._open_lock = threading.Lock()
        self._waiting_fetches = WaitingFetches()
        # a fetch waiting on a log that closes here (moved, fenced, deleted) answers with the error now,
        # not at its max_wait: Kafka completes delayed fetches when the broker stops leading a partition
        logs.on_close(lambda topic, partition: self._waiting_fetches.wake([(topic, partition)]))
        self._stopping = False

    def close(self) -> None:
        """The node is stopping: waiting fetches answer now (a long poll would hold the process up to 30 s
        past its stop), and nothing is opened any more, so a woken request cannot re-open a closed log."""
        self._stopping = True
        self._waiting_fetches.wake_all()

    # ------------------------------------------------------------ ownership

    def partition_count(self, topic: str) -> int | None:
        if topic == CONSUMER_OFFSETS_TOPIC:
            return self._offsets_shards
        if topic == "__transaction_state":
            return self._txn_shards
        if topic in HALF_MESSAGE_TOPICS:
            return self._half_shards
        return self._topics.partitions(topic)

    def owned_log(self, topic: str, partition: int) -> PartitionLog:
        if self._stopping:
            raise NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] node {self.node_id} is shutting down")
        count = self.partition_count(topic)
        if count is None or not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(
                f"[UNKNOWN_TOPIC_OR_PARTITION] {topic}-{partition} does not exist")
        owner = self._membership.owner(topic, partition)
        if owner != self.node_id:
            raise NotLeaderOrFollowerError(
                f"[NOT_LEADER_OR_FOLLOWER] node {self.node_id} does not own {topic}-{partition}; node {owner} does")
        existing = self._logs.get(topic, partition)
        if existing is not None:
            return self._with_topic_settings(existing)
        with self._open_lock:
            newly = self._logs.get(topic, partition) is None
            opened = self._logs.open_as_leader(topic, partition, self._membership.may_cut_off)
        if self.partition_count(topic) is None:  # deleted while it was being opened: let it go again
            self._logs.forget(topic, partition)
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] {topic}-{partition} was deleted")
        if newly and topic not in INTERNAL_TOPICS:  # the node reports the coordinator shards it takes
            self._observer.ownership_changed("acquired", topic, partition, opened.leader_epoch)
        return self._with_topic_settings(opened)

    def _with_topic_settings(self, opened: PartitionLog) -> PartitionLog:
        """The log, held to its topic's max.message.bytes and segment.bytes (changed with AlterConfigs at any
        time; internal topics keep the node's)."""
        if opened.topic in INTERNAL_TOPICS:
            return opened
        settings = self._topics.configs_view(opened.topic)
        if not settings:
            wanted = (self._logs.config.message_max_bytes, self._logs.config.segment_bytes)
        else:
            wanted = (int(settings.get("max.message.bytes", self._logs.config.message_max_bytes)),
                      int(settings.get("segment.bytes", self._logs.config.segment_bytes)))
        config = opened.config
        if (config.message_max_bytes, config.segment_bytes) != wanted:
            opened.config = dataclasses.replace(config, message_max_bytes=wanted[0], segment_bytes=wanted[1])
        return opened

    # ------------------------------------------------------------ produce

    def produce(self, req: pb.ProduceRequest) -> pb.ProduceResponse:
        """A produce, answered on the caller's thread once durable (the front doors')."""
        response: pb.ProduceResponse = wait_for(lambda done: self.produce_async(req, done))
        return response

    def produce_async(self, req: pb.ProduceRequest, done: Callable[[Outcome], None]) -> None:
        """Verify the batches that open a transaction, append every batch, make the logs durable (their fsyncs
        at once), then `done(ProduceResponse)`; a malformed request is `done(InvalidRequestError)`."""
        if req.acks not in (-1, 0, 1):
            done(InvalidRequestError(f"[INVALID_REQUEST] acks must be -1, 0 or 1, not {req.acks}"))
            return
        if not req.partitions:
            done(InvalidRequestError("[INVALID_REQUEST] a produce request must carry at least one partition"))
            return
        tid = req.transactional_id if req.HasField("transactional_id") else None

        def verified(verdicts: dict[int, Verdict]) -> None:
            written = [self._append_one(part, verdicts.get(i, frozenset()), req.acks)
                       for i, part in enumerate(req.partitions)]
            self._when_durable(written, lambda: self._produced(req, written, done), req.acks)
        self._verify_new_transactions(tid, req.partitions, req.add_partitions, verified)

    def _produced(self, req: pb.ProduceRequest, written: list[tuple[Any, _Pending | None]],
                  done: Callable[[Outcome], None]) -> None:
        self._waiting_fetches.wake((p.topic, p.partition) for p in req.partitions)
        done(pb.ProduceResponse(partitions=[result for result, _pending in written]))

    def _append_one(self, part: pb.PartitionRecords, verdict: Verdict,
                    acks: int) -> tuple[pb.PartitionProduceResult, _Pending | None]:
        """Write one partition's batches without waiting for the fsync: its result (offsets filled in once
        durable), and where they went unless they were refused."""
        result = pb.PartitionProduceResult(topic=part.topic, partition=part.partition, base_offset=-1)
        try:
            if part.topic in INTERNAL_TOPICS:
                raise InvalidTopicError(f"[INVALID_TOPIC_EXCEPTION] clients cannot write to internal topic {part.topic}")
            partition_log = self.owned_log(part.topic, part.partition)
            if isinstance(verdict, KafkaError):
                raise verdict
            leadership = self._replication.check_acks(partition_log, acks)
            appended = partition_log.append(part.records, verified_producer_ids=verdict, wait_durable=False)
        except KafkaError as exc:
            _answer_failed(result, exc)
            return result, None
        result.base_offset = appended.base_offset
        result.log_start_offset = appended.log_start_offset
        return result, _Pending(partition_log, appended.base_offset, appended.last_offset + 1, leadership)

    def _when_durable(self, written: Sequence[tuple[Any, _Pending | None]], then: Callable[[], None],
                      acks: int) -> None:
        """Make every log written durable up to its end, at once, then replicated as `acks` asks; a result whose
        log could not be is answered with why (its offsets taken back: an error answer carries -1, as Kafka's
        does); then `then()`."""
        ends: dict[PartitionLog, int] = {}
        leaderships: dict[PartitionLog, object] = {}
        for _result, pending in written:
            if pending is not None:
                ends[pending.log] = max(ends.get(pending.log, 0), pending.end)
                leaderships.setdefault(pending.log, pending.leadership)
        if not ends:
            then()
            return

        def failed(failures: Mapping[PartitionLog, KafkaError]) -> None:
            for result, pending in written:
                if pending is not None and pending.log in failures:
                    _answer_failed(result, failures[pending.log])
                    if isinstance(result, pb.PartitionProduceResult):
                        result.base_offset = -1

        def replicated(failures: dict[PartitionLog, KafkaError]) -> None:
            failed(failures)
            then()

        def durable(failures: Failures) -> None:
            failed(failures)
            self._replication.replicated({plog: (end, acks, leaderships[plog]) for plog, end in ends.items()
                                          if plog not in failures}, replicated)
        self._io.durable(ends, durable)

    def _verify_new_transactions(self, tid: str | None, parts: Sequence[pb.PartitionRecords], add: bool,
                                 done: Callable[[dict[int, Verdict]], None]) -> None:
        """KIP-890 part 1 for a whole request: each transactional batch that would open a transaction on its
        partition is checked with the transaction's coordinator first, one call per producer for all the
        request's partitions (as Kafka's AddPartitionsToTxnManager batches them), so a transaction's first
        write to two partitions of this node waits for one round trip, not two. With `add` (the request's
        add_partitions: part 2's implicit add) the same call adds the partitions to the transaction. `done`
        gets the verdicts keyed by the partition's index in the request; a partition with nothing to verify
        (or that _append_one refuses anyway) has no entry."""
        asks: dict[tuple[int, int], list[tuple[int, TopicPartition]]] = defaultdict(list)
        verdicts: dict[int, Verdict] = {}
        for i, part in enumerate(parts):
            if part.topic in INTERNAL_TOPICS:
                continue
            try:
                unverified = self.owned_log(part.topic, part.partition).needs_txn_verification(part.records)
            except KafkaError as exc:
                verdicts[i] = exc
                continue
            if unverified and not tid:
                verdicts[i] = TransactionAbortableError(
                    "[TRANSACTION_ABORTABLE] a transactional batch needs the request's transactional_id")
                continue
            for producer in unverified:
                asks[producer].append((i, TopicPartition(part.topic, part.partition)))
        if not asks:
            done(verdicts)
            return
        lock = threading.Lock()
        verified: dict[int, set[int]] = defaultdict(set)
        unanswered = [len(asks)]

        def answered(producer_id: int, producer_epoch: int, where: list[tuple[int, TopicPartition]],
                     codes: Codes) -> None:
            assert tid is not None
            with lock:
                for i, tp in where:
                    error = verification_error(codes.get(tp, UnknownServerError.errno), tid, tp, producer_id,
                                               producer_epoch)
                    if error is not None:
                        verdicts.setdefault(i, error)
                    else:
                        verified[i].add(producer_id)
                unanswered[0] -= 1
                if unanswered[0]:
                    return
                for i, pids in verified.items():
                    verdicts.setdefault(i, frozenset(pids))
            done(verdicts)
        for (producer_id, producer_epoch), where in asks.items():
            assert tid is not None
            self._verify(tid, producer_id, producer_epoch, [tp for _i, tp in where], add,
                         functools.partial(answered, producer_id, producer_epoch, where))

    # ------------------------------------------------------------ fetch

    def fetch(self, req: pb.FetchRequest) -> pb.FetchResponse:
        """A fetch, waiting up to its max_wait_ms for min_bytes (the caller's thread blocks; see fetch_future)."""
        return self.fetch_future(req).result()

    def fetch_future(self, req: pb.FetchRequest) -> Future[pb.FetchResponse]:
        """The fetch's answer to come: read at once, and while it waits for data it is only a callback woken by
        a produce or marker to one of its partitions, or by its max wait (no thread of the caller's is held)."""
        if req.isolation_level not in (0, 1):
            raise InvalidRequestError(f"[INVALID_REQUEST] isolation_level must be 0 or 1, not {req.isolation_level}")
        waiting = _WaitingFetch(self, req, IsolationLevel(req.isolation_level))
        waiting.start()
        return waiting.future

    def _fetch_once(self, req: pb.FetchRequest,
                    isolation: IsolationLevel) -> tuple[list[pb.FetchPartitionResult], int]:
        """One read of every partition asked (each once: a partition named twice is read once, the last
        naming's offset and size in the first's place, as Kafka merges them), within the whole response's
        budget (the request's max_bytes, at most FETCH_MAX_BYTES, as Kafka's fetch.max.bytes). Only the first
        partition that returns data may exceed it, by its first batch (KIP-74)."""
        results: list[pb.FetchPartitionResult] = []
        total = 0
        budget = min(req.max_bytes, FETCH_MAX_BYTES) if req.max_bytes > 0 else FETCH_MAX_BYTES
        for part in unique_partitions(req.partitions):
            result = pb.FetchPartitionResult(topic=part.topic, partition=part.partition)
            try:
                partition_log = self.owned_log(part.topic, part.partition)
                max_bytes = part.max_bytes if part.max_bytes > 0 else 1024 * 1024
                data = partition_log.read(part.fetch_offset, max(0, min(max_bytes, budget)), isolation,
                                          min_one_batch=total == 0)
                partition_log.check_still_leader()
                result.records = data.records
                result.high_watermark = data.high_watermark
                result.last_stable_offset = data.last_stable_offset
                result.log_start_offset = data.log_start_offset
                result.aborted_transactions.extend(
                    pb.AbortedTransaction(producer_id=pid, first_offset=first)
                    for pid, first in data.aborted_transactions)
                total += len(data.records)
                budget -= len(data.records)
            except KafkaError as exc:
                result.error_code = code_of(exc)
                result.error_message = str(exc)
            results.append(result)
        return results, total

    # ------------------------------------------------------------ offsets, markers, producers

    def list_offsets(self, req: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        if req.timestamps and len(req.timestamps) != len(req.partitions):
            raise InvalidRequestError(f"[INVALID_REQUEST] {len(req.timestamps)} timestamps for "
                                      f"{len(req.partitions)} partitions; give one per partition or none")
        if req.isolation_level not in (0, 1):
            raise InvalidRequestError(f"[INVALID_REQUEST] isolation_level must be 0 or 1, not {req.isolation_level}")
        isolation = IsolationLevel(req.isolation_level)
        out = []
        for i, part in enumerate(req.partitions):
            result = pb.PartitionOffsets(topic=part.topic, partition=part.partition, offset_for_timestamp=-1,
                                         timestamp=-1)
            try:
                partition_log = self.owned_log(part.topic, part.partition)
                result.log_start_offset = partition_log.log_start_offset
                result.high_watermark = partition_log.high_watermark
                result.last_stable_offset = partition_log.last_stable_offset
                timestamp = req.timestamps[i] if req.timestamps else LATEST_TIMESTAMP
                found = (partition_log.offset_for_timestamp(timestamp, isolation) if timestamp >= 0 else
                         partition_log.offset_of_max_timestamp(isolation) if timestamp == MAX_TIMESTAMP else None)
                if found is not None:
                    result.offset_for_timestamp, result.timestamp = found
                partition_log.check_still_leader()
            except KafkaError as exc:
                result.error_code = code_of(exc)
                result.error_message = str(exc)
            out.append(result)
        return pb.ListOffsetsResponse(partitions=out)

    def write_txn_markers(self, req: pb.WriteTxnMarkersRequest) -> pb.WriteTxnMarkersResponse:
        """Markers, answered on the caller's thread once durable (the front doors')."""
        response: pb.WriteTxnMarkersResponse = wait_for(lambda done: self.write_txn_markers_async(req, done))
        return response

    def write_txn_markers_async(self, req: pb.WriteTxnMarkersRequest, done: Callable[[Outcome], None]) -> None:
        """Write every marker of the request, then make each touched log durable once, the logs' fsyncs at once:
        one request's markers share their logs' group commits instead of each waiting alone."""
        written = [self._append_marker(marker, part) for marker in req.markers for part in marker.partitions]

        def durable() -> None:
            results = iter(written)
            out = []
            for marker in req.markers:
                answer = pb.TxnMarkerResult(producer_id=marker.producer_id)
                for part in marker.partitions:
                    result, pending = next(results)
                    if pending is not None and not result.error_code and part.topic == CONSUMER_OFFSETS_TOPIC:
                        # durable now: the group's offsets may show it
                        self._offsets_marker_written(result, marker, part.partition, pending.offset)
                    answer.partitions.append(result)
                out.append(answer)
            # after the whole request, not per log: a fetch woken by the first of several markers would answer
            # with that partition alone and its consumer come back for the rest
            self._waiting_fetches.wake((part.topic, part.partition) for marker in req.markers
                                       for part in marker.partitions)
            done(pb.WriteTxnMarkersResponse(markers=out))
        self._when_durable(written, durable, MARKER_ACKS)

    def _offsets_marker_written(self, result: pb.PartitionError, marker: pb.TxnMarker, partition: int,
                                offset: int) -> None:
        """Tell the group coordinator; if that fails, this marker is answered as failed (and retried)."""
        try:
            self._on_offsets_marker(partition, marker.producer_id, marker.committed, offset)
        except Exception as exc:  # this marker fails alone, not every transaction sharing the request
            if not isinstance(exc, KafkaError):  # a node bug
                log.exception("offsets marker for producer %d on partition %d failed", marker.producer_id,
                              partition)
            _answer_failed(result, exc)

    def _append_marker(self, marker: pb.TxnMarker, part: pb.TopicPartitionRef) -> tuple[pb.PartitionError,
                                                                                         _Pending | None]:
        """Write one marker without waiting for its fsync: its result, and where it went unless it failed."""
        result = pb.PartitionError(topic=part.topic, partition=part.partition)
        if self.partition_count(part.topic) is None:
            # the topic was deleted: nothing is left to mark, and a retried marker would hold its transaction
            # in Prepare* for good (Kafka's marker channel drops markers for deleted partitions too)
            result.error_message = f"{part.topic} was deleted; no marker written"
            return result, None
        try:
            partition_log = self.owned_log(part.topic, part.partition)
            if marker.HasField("admin_abort_start_offset"):
                check_admin_abort(partition_log.producer_snapshots(), marker, part)
            leadership = self._replication.check_acks(partition_log, MARKER_ACKS)
            appended = partition_log.append_marker(
                producer_id=marker.producer_id, producer_epoch=marker.producer_epoch, committed=marker.committed,
                coordinator_epoch=marker.coordinator_epoch, transaction_version=marker.transaction_version,
                wait_durable=False)
        except Exception as exc:  # this marker fails alone, not every transaction sharing the request
            if not isinstance(exc, KafkaError):  # a node bug
                log.exception("marker for producer %d on %s-%d failed", marker.producer_id, part.topic,
                              part.partition)
            _answer_failed(result, exc)
            return result, None
        return result, _Pending(partition_log, appended.base_offset, appended.base_offset + 1, leadership)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords on this partition's leader: its new log start offset (the low watermark)."""
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"[INVALID_TOPIC_EXCEPTION] records of internal topic {topic} cannot be deleted")
        if "delete" not in self._topics.configs(topic).get("cleanup.policy", "delete").split(","):
            raise PolicyViolationError(f"[POLICY_VIOLATION] records of {topic} cannot be deleted: its cleanup.policy "
                                       "does not include delete")
        if offset < -1:
            raise OffsetOutOfRangeError(f"[OFFSET_OUT_OF_RANGE] offset {offset} of {topic}-{partition} is negative")
        return self.owned_log(topic, partition).delete_records_before(offset)

    def apply_retention(self, now_ms: int, default_retention_ms: int) -> list[tuple[str, int, int]]:
        """Retention on every data log this node leads, by its topic's retention.ms and retention.bytes:
        (topic, partition, segments deleted) of those that lost some."""
        out = []
        for opened in self._logs.open_logs():
            if opened.topic in INTERNAL_TOPICS or self._membership.owner(opened.topic, opened.partition) != self.node_id:
                continue
            configs = self._topics.configs(opened.topic)
            try:
                deleted = opened.apply_retention(now_ms, int(configs.get("retention.ms", default_retention_ms)),
                                                 int(configs.get("retention.bytes", -1)))
            except KafkaError as exc:  # closed or fenced meanwhile: its next leader applies retention
                log.info("retention of %s-%d skipped: %s", opened.topic, opened.partition, exc)
                continue
            if deleted:
                out.append((opened.topic, opened.partition, deleted))
        return out

    def describe_producers(self, req: pb.DescribeProducersRequest) -> pb.DescribeProducersResponse:
        out = []
        for part in req.partitions:
            result = pb.PartitionProducers(topic=part.topic, partition=part.partition)
            try:
                partition_log = self.owned_log(part.topic, part.partition)
                producers = partition_log.producer_snapshots()
                partition_log.check_still_leader()
                for p in producers:
                    result.active_producers.append(pb.ProducerStateInfo(
                        producer_id=p.producer_id, producer_epoch=p.producer_epoch, last_sequence=p.last_sequence,
                        last_timestamp=p.last_timestamp, coordinator_epoch=p.coordinator_epoch,
                        current_txn_start_offset=p.current_txn_start_offset))
            except KafkaError as exc:
                result.error_code = code_of(exc)
                result.error_message = str(exc)
            out.append(result)
        return pb.DescribeProducersResponse(partitions=out)


class PartitionsServicer(rpc.PartitionsServicer):
    """Thin gRPC adapter over PartitionServer (and, on a node that keeps replicas, its ReplicaManager's fetch)."""

    def __init__(self, server: PartitionServer,
                 replica_fetch: Callable[[pb.ReplicaFetchRequest, Callable[[Outcome], None]], None] | None = None
                 ) -> None:
        self._server = server
        self._replica_fetch = replica_fetch

    @answers_with(pb.ReplicaFetchResponse)
    def ReplicaFetch(self, request: pb.ReplicaFetchRequest, context: Any) -> pb.ReplicaFetchResponse:
        if self._replica_fetch is not None:
            fetch = self._replica_fetch
            response: pb.ReplicaFetchResponse = wait_for(lambda done: fetch(request, done))
            return response
        # a node of a shared-directory cluster keeps no replicas: no partition has a leader here to follow
        refused = NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] node {self._server.node_id} keeps no replicas: "
                                           "its cluster shares one data directory, and every log exists once")
        return pb.ReplicaFetchResponse(partitions=[pb.ReplicaFetchPartitionData(
            topic=p.topic, partition=p.partition, error_code=code_of(refused), error_message=refused.message,
            diverging_epoch=-1, diverging_end_offset=-1) for p in request.partitions])

    @answers_with(pb.ProduceResponse)
    def Produce(self, request: pb.ProduceRequest, context: Any) -> pb.ProduceResponse:
        return self._server.produce(request)

    @answers_with(pb.FetchResponse)
    def Fetch(self, request: pb.FetchRequest, context: Any) -> pb.FetchResponse:
        return self._server.fetch(request)

    @answers_with(pb.ListOffsetsResponse)
    def ListOffsets(self, request: pb.ListOffsetsRequest, context: Any) -> pb.ListOffsetsResponse:
        return self._server.list_offsets(request)

    @answers_with(pb.WriteTxnMarkersResponse)
    def WriteTxnMarkers(self, request: pb.WriteTxnMarkersRequest, context: Any) -> pb.WriteTxnMarkersResponse:
        return self._server.write_txn_markers(request)

    @answers_with(pb.DescribeProducersResponse)
    def DescribeProducers(self, request: pb.DescribeProducersRequest, context: Any) -> pb.DescribeProducersResponse:
        return self._server.describe_producers(request)


def _answer_failed(result: Any, exc: Exception) -> None:
    """One partition's marker answered with its error: Kafka's code, or UNKNOWN_SERVER_ERROR with the exception's
    type for a node bug (as `rpc.answer` answers a whole request)."""
    result.error_code = code_of(exc)
    result.error_message = str(exc) if isinstance(exc, KafkaError) else f"{type(exc).__name__}: {exc}"


def check_admin_abort(producers: list[ProducerSnapshot], marker: pb.TxnMarker, part: pb.TopicPartitionRef) -> None:
    """An admin abort names the open transaction it means by its first offset; a marker for anything else
    would be a stray ABORT (a producer with nothing open, or another transaction of it)."""
    start = marker.admin_abort_start_offset
    where = f"{part.topic}-{part.partition}"
    if start < 0:
        raise InvalidRequestError(f"[INVALID_REQUEST] start offset {start} on {where} is negative")
    producer = next((p for p in producers if p.producer_id == marker.producer_id), None)
    if producer is None or producer.current_txn_start_offset < 0:
        raise InvalidTxnStateError(f"[INVALID_TXN_STATE] producer {marker.producer_id} has no open transaction "
                                   f"on {where}; no marker written")
    if producer.current_txn_start_offset != start:
        raise InvalidRequestError(f"[INVALID_REQUEST] the open transaction of producer {marker.producer_id} on "
                                  f"{where} starts at offset {producer.current_txn_start_offset}, not {start}")
