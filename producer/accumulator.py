"""Records waiting to be sent: one queue of batches per partition, bounded by buffer_memory.

send() appends to the open batch at the tail of its partition's queue; the sender thread
drains only the head of each queue, so a partition has at most one batch in flight and
its sequences reach the node in order. A batch is closed to appends when it is drained;
its bytes (pid, epoch, sequence included) never change after that, retries included.
The accumulator's condition is also the sender's alarm clock: it is notified when a batch
fills, a new batch would outlive the sender's sleep, a flush starts or an answer arrives.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from proto.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from proto.records import BatchBuilder, Header, iter_batches
from proto.structs import TopicPartition

from producer.future import FutureRecordMetadata, ProduceRequestResult

log = logging.getLogger(__name__)

#: varint framing, attributes, deltas and header counts of one record, roughly
RECORD_OVERHEAD = 21


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for hkey, hvalue in headers:
        size += len(hkey) + len(hvalue or b"") + 4
    return size


class ProducerBatch:
    """Records for one partition that travel together; built once, sent until answered."""

    __slots__ = ("topic_partition", "builder", "created", "result", "futures", "buffered_bytes", "closed",
                 "payload", "producer_id", "producer_epoch", "base_sequence", "attempts", "retry_at",
                 "in_flight", "transactional")

    def __init__(self, tp: TopicPartition, base_timestamp: int, max_bytes: int, created: float) -> None:
        self.topic_partition = tp
        self.builder = BatchBuilder(base_timestamp, max_bytes=max_bytes)
        self.created = created
        self.result = ProduceRequestResult(tp)
        self.futures: list[FutureRecordMetadata] = []
        self.buffered_bytes = 0
        self.closed = False               # no more appends
        self.payload: bytes | None = None  # the v2 batch, once built
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.in_flight = False
        self.transactional = False

    @property
    def record_count(self) -> int:
        return self.builder.count

    @property
    def holds_sequences(self) -> bool:
        return self.base_sequence >= 0

    @property
    def is_done(self) -> bool:
        return self.result.is_done

    def try_append(self, timestamp: int, key: bytes | None, value: bytes | None, headers: Sequence[Header],
                   size: int) -> FutureRecordMetadata | None:
        if self.closed or not self.builder.has_room_for(key, value):
            return None
        delta = self.builder.append(timestamp, key, value, headers)
        self.buffered_bytes += size
        future = FutureRecordMetadata(self.result, delta, timestamp)
        self.futures.append(future)
        return future

    def build(self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool) -> bytes:
        self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence
        self.transactional = transactional
        self.payload = self.builder.build(producer_id=producer_id, producer_epoch=producer_epoch,
                                          base_sequence=base_sequence, transactional=transactional)
        return self.payload

    def split_in_halves(self) -> tuple[ProducerBatch, ProducerBatch]:
        """Two batches holding this one's records, first half first, with its producer id, epoch,
        sequences (the second starts where the first ends) and creation time, built and ready to
        send; this batch's futures follow their records (Kafka's ProducerBatch.split, in halves so
        that repeated splits always reach batches the node accepts)."""
        assert self.payload is not None and self.record_count > 1
        (built,) = iter_batches(self.payload)
        decoded = list(built.records())
        middle = len(decoded) // 2
        halves = []
        for start, part in ((0, decoded[:middle]), (middle, decoded[middle:])):
            half = ProducerBatch(self.topic_partition, min(r.timestamp for r in part), 1 << 62, self.created)
            for record in part:
                half.builder.append(record.timestamp, record.key, record.value, record.headers)
            half.futures = self.futures[start:start + len(part)]
            first_share = self.buffered_bytes * middle // len(decoded)
            half.buffered_bytes = self.buffered_bytes - first_share if start else first_share
            sequence = self.base_sequence + start if self.holds_sequences else -1
            half.build(self.producer_id, self.producer_epoch, sequence, self.transactional)
            half.closed = True
            halves.append(half)
        first, second = halves
        return first, second

    def complete(self, base_offset: int, error: KafkaError | None) -> None:
        self.result.set(base_offset, error)
        for future in self.futures:
            if future.has_callbacks():
                future.fire_callbacks()

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.topic_partition}, records={self.record_count}, seq={self.base_sequence}, "
                f"attempts={self.attempts})")


class RecordAccumulator:
    def __init__(self, *, batch_size: int, linger_ms: int, buffer_memory: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.clock = clock
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)  # the sender sleeps here
        self._space = threading.Condition(self._lock)   # send() waits here for buffer memory
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._buffered = 0
        self._flushes = 0
        self._closed = False
        self._wake_requested = False
        #: when the sleeping sender will wake by itself; +inf while it is awake (so nothing is missed)
        self._sender_wake_at = math.inf

    # ------------------------------------------------------------ the caller's side

    def append(self, tp: TopicPartition, timestamp: int, key: bytes | None, value: bytes | None,
               headers: Sequence[Header], *, max_block_s: float, abort_on_new_batch: bool = False,
               size: int | None = None) -> FutureRecordMetadata | None:
        """Add one record to `tp`'s open batch (opening one if needed).

        Returns None, appending nothing, when `abort_on_new_batch` is set and the record would
        need a new batch: the sticky partitioner then picks another partition (KIP-480).
        `size` is record_size() of the record, when the caller has it already.
        """
        if size is None:
            size = record_size(key, value, headers)
        with self._lock:
            if self._closed:
                raise IllegalStateError("cannot send: the producer is closed")
            queue = self._queues.get(tp)
            last = queue[-1] if queue else None
            if last is not None:
                future = last.try_append(timestamp, key, value, headers, size)
                if future is not None:
                    self._buffered += size
                    if last.builder.size >= self.batch_size:
                        self._wake_sender_locked()  # full: no reason to linger
                    return future
            if abort_on_new_batch:
                return None
            self._reserve_locked(size, max_block_s)
            if self._closed:
                self._buffered -= size
                raise IllegalStateError("cannot send: the producer is closed")
            # the wait for memory released the lock: the queue may have changed meanwhile
            queue = self._queues.get(tp)
            last = queue[-1] if queue else None
            if last is not None:
                future = last.try_append(timestamp, key, value, headers, size)
                if future is not None:
                    return future
            now = self.clock()
            batch = ProducerBatch(tp, timestamp, self.batch_size, now)
            future = batch.try_append(timestamp, key, value, headers, size)
            assert future is not None  # an empty batch takes any record
            if queue is None:
                queue = self._queues[tp] = deque()
            if last is not None and not last.closed:
                last.closed = True  # it was full
                self._wake_sender_locked()
            queue.append(batch)
            self._incomplete.add(batch)
            if now + self.linger_s < self._sender_wake_at or batch.builder.size >= self.batch_size:
                self._wake_sender_locked()
            return future

    def _reserve_locked(self, size: int, max_block_s: float) -> None:
        if self._buffered + size <= self.buffer_memory or self._buffered == 0:
            self._buffered += size
            return
        deadline = self.clock() + max_block_s
        self._wake_sender_locked()  # whatever is queued should go out now
        while self._buffered + size > self.buffer_memory and self._buffered > 0 and not self._closed:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"could not allocate {size} bytes within max_block_ms: {self._buffered} of buffer_memory="
                    f"{self.buffer_memory} bytes are held by unacknowledged records")
            self._space.wait(remaining)
        self._buffered += size

    @property
    def buffered_bytes(self) -> int:
        return self._buffered

    def begin_flush(self) -> None:
        """Every batch is ready from now until end_flush(): flush() and commit do not linger."""
        with self._lock:
            self._flushes += 1
            self._wake_sender_locked()

    def end_flush(self) -> None:
        with self._lock:
            self._flushes -= 1

    def close(self) -> None:
        """No more appends; everything queued is ready."""
        with self._lock:
            self._closed = True
            self._space.notify_all()
            self._wake_sender_locked()

    def incomplete_batches(self) -> list[ProducerBatch]:
        with self._lock:
            return list(self._incomplete)

    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def await_all(self, deadline: float | None, what: str = "flush") -> None:
        """Wait until every batch that exists now is answered; KafkaTimeoutError at `deadline` (monotonic)."""
        results = [batch.result for batch in self.incomplete_batches()]
        while results:
            result = results.pop()
            remaining = None if deadline is None else max(0.0, deadline - self.clock())
            if not result.wait(remaining):
                pending = len(self._incomplete)
                raise KafkaTimeoutError(f"{what} timed out with {pending} batch(es) still unacknowledged")
            if result.children is not None:  # split (MESSAGE_TOO_LARGE): its parts are what was sent
                results.extend(child for _start, child in result.children)

    # ------------------------------------------------------------ the sender's alarm clock

    def wakeup(self) -> None:
        with self._lock:
            self._wake_sender_locked()

    def _wake_sender_locked(self) -> None:
        self._wake_requested = True
        self._wakeup.notify()

    def await_wakeup(self, until: float) -> None:
        """The sender sleeps until `until` (monotonic) or a wakeup(), whichever is first."""
        with self._lock:
            now = self.clock()
            if not self._wake_requested and until > now:
                self._sender_wake_at = until
                self._wakeup.wait(None if until == math.inf else min(until - now, threading.TIMEOUT_MAX))
            self._wake_requested = False
            self._sender_wake_at = math.inf

    # ------------------------------------------------------------ the sender's side

    def ready(self, now: float) -> tuple[list[ProducerBatch], float]:
        """Heads of queues that may be sent now (not in flight, backoff over, full or lingered), and
        the earliest time another head becomes ready by itself (inf if none)."""
        ready: list[ProducerBatch] = []
        next_ready = math.inf
        with self._lock:
            flushing = self._flushes > 0 or self._closed
            for queue in self._queues.values():
                if not queue:
                    continue
                head = queue[0]
                if head.in_flight:
                    continue
                if head.payload is not None:  # a retry
                    at = head.retry_at
                elif flushing or head.closed or len(queue) > 1 or head.builder.size >= self.batch_size:
                    at = now
                else:
                    at = head.created + self.linger_s
                if at <= now:
                    ready.append(head)
                else:
                    next_ready = min(next_ready, at)
        return ready, next_ready

    def close_for_send(self, batch: ProducerBatch) -> None:
        """The sender takes this batch: later records go to a new one."""
        with self._lock:
            batch.closed = True

    def expired(self, now: float, delivery_timeout_s: float) -> tuple[list[ProducerBatch], float]:
        """Batches not in flight whose delivery timeout has passed (removed from their queues),
        and the earliest time another one will expire."""
        expired: list[ProducerBatch] = []
        next_expiry = math.inf
        with self._lock:
            for queue in self._queues.values():
                # batches of a queue are in creation order: stop at the first one still in time
                while queue:
                    batch = queue[0] if not queue[0].in_flight else (queue[1] if len(queue) > 1 else None)
                    if batch is None:
                        break
                    at = batch.created + delivery_timeout_s
                    if at > now:
                        next_expiry = min(next_expiry, at)
                        break
                    batch.closed = True
                    queue.remove(batch)
                    expired.append(batch)
        return expired, next_expiry

    def take_unsent(self) -> list[ProducerBatch]:
        """Remove every batch that is not in flight (abort, error state, forced close)."""
        taken: list[ProducerBatch] = []
        with self._lock:
            for queue in self._queues.values():
                keep = [b for b in queue if b.in_flight]
                for batch in queue:
                    if not batch.in_flight:
                        batch.closed = True
                        taken.append(batch)
                queue.clear()
                queue.extend(keep)
        return taken

    def complete(self, batch: ProducerBatch, base_offset: int = -1, error: KafkaError | None = None) -> None:
        """Resolve a batch's futures and give its memory back. Safe to call once per batch."""
        with self._lock:
            if batch not in self._incomplete:
                return
            self._incomplete.discard(batch)
            queue = self._queues.get(batch.topic_partition)
            if queue:
                try:
                    queue.remove(batch)
                except ValueError:
                    pass  # already taken out (expired or aborted)
                if not queue:
                    del self._queues[batch.topic_partition]
            batch.closed = True
            batch.in_flight = False
            self._buffered -= batch.buffered_bytes
            self._space.notify_all()
        batch.complete(base_offset, error)

    def split_and_reenqueue(self, batch: ProducerBatch) -> tuple[ProducerBatch, ProducerBatch] | None:
        """Put the two halves of a batch the node refused as too large where it stood in its queue, so
        they are sent next, in order; None if the batch is no longer queued (aborted, expired)."""
        first, second = batch.split_in_halves()
        with self._lock:
            queue = self._queues.get(batch.topic_partition)
            if batch not in self._incomplete or not queue or batch not in queue:
                return None
            index = queue.index(batch)
            del queue[index]
            queue.insert(index, second)
            queue.insert(index, first)
            self._incomplete.discard(batch)
            self._incomplete.update((first, second))
            batch.result.split(((0, first.result), (first.record_count, second.result)))
            self._wake_sender_locked()
        return first, second

    def complete_all(self, batches: Iterable[ProducerBatch], error_for: Callable[[ProducerBatch], KafkaError]) -> None:
        for batch in batches:
            self.complete(batch, error=error_for(batch))
