"""The driver of RocketMQ's pop model (pop_state.py holds the logic): one PopQueue per (consumer
group, topic, partition) this node owns, fed with the partition's committed records (read_committed,
below the LSO), its durable part kept as the group's offset commit in __consumer_offsets
(OffsetCommit with generation -1, on the owner of the group's shard).

Invariant: an ack is answered only once the commit naming it is durable; a queue is loaded again
(from the committed offset) whenever the partition's log was reopened, so a queue never outlives
the ownership it was built under.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from client.transport import Stubs, call
from coordinator.group import GroupCoordinator
from coordinator.partition_service import PartitionServer
from coordinator.rocketmq.pop_state import Delivery, PopQueue, ReceiptHandle, decode_acked
from coordinator.rocketmq.routing import OwnerRouter
from partitions import PartitionLog
from proto import records
from proto import txnsim_pb2 as pb
from proto.errors import (
    InvalidReceiptHandleError,
    KafkaError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    raise_for,
)
from proto.hashing import partition_for
from proto.read_committed import AbortedTransactions
from proto.structs import CONSUMER_OFFSETS_TOPIC, IsolationLevel

log = logging.getLogger(__name__)

#: a record is delivered only if this says so (a tag filter); others are skipped like markers
Matches = Callable[[records.Record], bool]
_READ_BYTES = 1 << 20


@dataclass(eq=False)
class _Queue:
    state: PopQueue
    log: PartitionLog
    leader_epoch: int
    lock: threading.Lock = field(default_factory=threading.Lock)


class PopService:
    def __init__(self, *, partitions: PartitionServer, groups: GroupCoordinator, router: OwnerRouter,
                 offsets_shards: int, now_ms: Callable[[], int], stopped: threading.Event) -> None:
        self._partitions = partitions
        self._groups = groups
        self._router = router
        self._offsets_shards = offsets_shards
        self._now_ms = now_ms
        self._stopped = stopped
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str, int], _Queue] = {}

    # ------------------------------------------------------------ receive

    def receive(self, group: str, topic: str, first_partition: int, max_count: int, invisible_ms: int,
                wait_s: float, matches: Matches) -> list[Delivery]:
        """Up to `max_count` messages from the topic's partitions this node owns (the requested one
        first), waiting up to `wait_s` for one; [] if none came."""
        count = self._partitions.partition_count(topic)
        if count is None:
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {topic!r} does not exist")
        order = [(first_partition + i) % count for i in range(count)]
        deadline = time.monotonic() + wait_s
        while True:
            out: list[Delivery] = []
            first: _Queue | None = None
            for partition in order:
                if self._router.owner(topic, partition) != self._router.node_id:
                    continue
                try:
                    queue = self._queue(group, topic, partition)
                except NotLeaderOrFollowerError:
                    continue  # it moved away meanwhile
                first = first or queue
                with queue.lock:
                    self._fill(queue, matches)
                    popped = queue.state.pop(self._now_ms(), max_count - len(out), invisible_ms)
                try:  # a node woken from a long stall must not hand out what a new owner saw acked meanwhile
                    queue.log.check_still_leader()
                except NotLeaderOrFollowerError:
                    continue
                out += popped
                if len(out) >= max_count:
                    break
            remaining = deadline - time.monotonic()
            if out or remaining <= 0 or self._stopped.is_set():
                return out
            if first is None:
                self._stopped.wait(min(remaining, 0.2))  # owns none now: look again as ownership moves
            else:  # woken by new data there; other partitions and expiring leases are seen within 0.2 s
                first.log.wait_for_data(first.state.scanned, IsolationLevel.READ_COMMITTED, min(remaining, 0.2))

    def _fill(self, queue: _Queue, matches: Matches) -> None:
        """Read the committed records after the queue's scan point, as far as its window allows."""
        while (start := queue.state.read_from()) is not None:
            data = queue.log.read(start, _READ_BYTES, IsolationLevel.READ_COMMITTED)
            delivered, end = committed_records(data.records, start, data.aborted_transactions)
            if end <= start:
                return
            queue.state.add_read(start, end, [(r.offset, r) for r in delivered if matches(r)])

    # ------------------------------------------------------------ ack and change

    def ack(self, group: str, topic: str, handles: list[str]) -> list[KafkaError | None]:
        """Ack each handle: None where acked (or acked before), the error where not."""
        results: list[KafkaError | None] = [None] * len(handles)
        by_partition: dict[int, list[tuple[int, ReceiptHandle]]] = {}
        for i, text in enumerate(handles):
            try:
                handle = _parse(text, topic)
                by_partition.setdefault(handle.partition, []).append((i, handle))
            except KafkaError as exc:
                results[i] = exc
        for partition, entries in by_partition.items():
            try:
                queue = self._queue_of(group, entries[0][1])
            except KafkaError as exc:
                for i, _ in entries:
                    results[i] = exc
                continue
            with queue.lock:
                offsets = []
                for i, handle in entries:
                    try:
                        if queue.state.check(handle):
                            offsets.append(handle.offset)
                    except KafkaError as exc:
                        results[i] = exc
                if not offsets:
                    continue
                commit = queue.state.prepare_ack(offsets)
                try:
                    self._commit(group, topic, partition, commit.offset, commit.metadata)
                except KafkaError as exc:
                    for i, handle in entries:
                        if handle.offset in offsets:
                            results[i] = exc
                    continue
                queue.state.acked_durably(commit)
        return results

    def change_invisible(self, group: str, topic: str, text: str, invisible_ms: int) -> ReceiptHandle:
        handle = _parse(text, topic)
        queue = self._queue_of(group, handle)
        with queue.lock:
            return queue.state.change_invisible(handle, self._now_ms(), invisible_ms)

    # ------------------------------------------------------------ queues and offsets

    def _queue_of(self, group: str, handle: ReceiptHandle) -> _Queue:
        """The queue a handle was given out by; its lease went with it if the partition moved."""
        try:
            return self._queue(group, handle.topic, handle.partition)
        except NotLeaderOrFollowerError:
            raise InvalidReceiptHandleError(
                f"[INVALID_RECEIPT_HANDLE] {handle.topic}-{handle.partition} moved to another node since this "
                "delivery; the message will be delivered again") from None

    def _queue(self, group: str, topic: str, partition: int) -> _Queue:
        """The queue, loaded from the group's commit when new or when the partition's log was reopened."""
        partition_log = self._partitions.owned_log(topic, partition)
        key = (group, topic, partition)
        with self._lock:
            queue = self._queues.get(key)
        if queue is not None and queue.log is partition_log and queue.leader_epoch == partition_log.leader_epoch:
            return queue
        offset, metadata = self._committed(group, topic, partition)
        committed = max(offset if offset >= 0 else 0, partition_log.log_start_offset)
        state = PopQueue(topic, partition, uuid.uuid4().hex[:12], committed, decode_acked(committed, metadata))
        loaded = _Queue(state, partition_log, partition_log.leader_epoch)
        with self._lock:
            current = self._queues.get(key)
            if current is not None and current.log is partition_log and current.leader_epoch == loaded.leader_epoch:
                return current  # another request loaded it first
            self._queues[key] = loaded
        log.info("pop queue of group %r on %s-%d from offset %d (%d acked above it)", group, topic, partition,
                 committed, len(state.acked))
        return loaded

    def _committed(self, group: str, topic: str, partition: int) -> tuple[int, str]:
        request = pb.OffsetFetchRequest(group_id=group, partitions=[
            pb.TopicPartitionRef(topic=topic, partition=partition)])

        def fetch(stubs: Stubs | None, timeout_s: float) -> pb.OffsetFetchResponse:
            return self._groups.offset_fetch(request) if stubs is None else call(
                stubs.groups.OffsetFetch, request, timeout_s)

        response = self._router.call(CONSUMER_OFFSETS_TOPIC, partition_for(group, self._offsets_shards), fetch)
        result = response.results[0]
        raise_for(result.error_code, result.error_message)
        return result.offset, result.metadata

    def _commit(self, group: str, topic: str, partition: int, offset: int, metadata: str) -> None:
        request = pb.OffsetCommitRequest(group_id=group, generation_id=-1, offsets=[
            pb.OffsetEntry(topic=topic, partition=partition, offset=offset, metadata=metadata)])

        def commit(stubs: Stubs | None, timeout_s: float) -> None:
            response = self._groups.offset_commit(request) if stubs is None else call(
                stubs.groups.OffsetCommit, request, timeout_s)
            for result in response.results:
                raise_for(result.error_code, result.error_message)

        self._router.call(CONSUMER_OFFSETS_TOPIC, partition_for(group, self._offsets_shards), commit)


def _parse(text: str, topic: str) -> ReceiptHandle:
    handle = ReceiptHandle.parse(text)
    if handle.topic != topic:
        raise InvalidReceiptHandleError(f"[INVALID_RECEIPT_HANDLE] the handle is of topic {handle.topic!r}, "
                                        f"not {topic!r}")
    return handle


def committed_records(buf: bytes, start: int, aborted: list[tuple[int, int]]) -> tuple[list[records.Record], int]:
    """The records a read_committed reader delivers from a read starting at `start`, and the offset
    after the read (Kafka's filter, proto/read_committed.py)."""
    hidden = AbortedTransactions(aborted)
    out: list[records.Record] = []
    end = start
    for batch in records.iter_batches(buf):
        if not hidden.hides(batch):
            out.extend(r for r in batch.records() if r.offset >= start)
        end = max(end, batch.header.next_offset)
    return out, end
