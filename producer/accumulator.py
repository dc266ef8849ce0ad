"""Records waiting to be sent: one queue of batches per partition, bounded by buffer_memory.

send() appends to the open batch at the tail of its partition's queue, under that batch's own
lock: the accumulator's lock (shared with the sender thread) is taken once per batch, when a
batch is opened or sealed, never per record. A batch's memory is reserved when it opens
(batch_size, as Kafka's BufferPool does) and trimmed to its real size when it is sealed.

The sender drains each queue from the head, in order: up to `max_in_flight` batches of one
partition may be in flight (Kafka's idempotent producer allows 5); the node accepts them only in
sequence order, so a batch that overtakes its predecessor is refused (OUT_OF_ORDER_SEQUENCE) and
resent. A resent batch (a retry, or half of a split batch) goes only from the head of its queue
and alone: nothing after it is sent until it is answered, so retries reach the node in order.
The first batch of a producer epoch on a partition (base sequence 0) also goes alone, with only
the batches drained with it in one record set: until the node holds state for that epoch it
would accept any sequence. A batch is sealed when it is
drained; its bytes (pid, epoch, sequence included) never change after that, retries included.
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

from producer.future import FutureRecordMetadata, ProduceRequestResult
from proto.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from proto.records import BatchBuilder, Header, iter_batches
from proto.structs import TopicPartition

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
                 "in_flight", "transactional", "lock", "exclusive", "sent_behind")

    def __init__(self, tp: TopicPartition, base_timestamp: int, max_bytes: int, created: float) -> None:
        self.topic_partition = tp
        self.builder = BatchBuilder(base_timestamp, max_bytes=max_bytes)
        self.created = created
        self.result = ProduceRequestResult(tp)
        self.futures: list[FutureRecordMetadata] = []
        #: the buffer memory this batch holds: batch_size while it is open, its real size once sealed
        self.buffered_bytes = 0
        #: guards appends against sealing: send() takes it per record, the sender once per batch
        self.lock = threading.Lock()
        self.closed = False               # no more appends (set under `lock`)
        #: in flight as a resend or an epoch's first batch: nothing after it is sent until it is answered
        self.exclusive = False
        #: drained while an earlier batch of its partition was unanswered: the node may take the two
        #: requests in either order, so an OUT_OF_ORDER_SEQUENCE for this one can mean it overtook that one
        self.sent_behind = False
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
                   size: int = 0) -> FutureRecordMetadata | None:
        """Append a record unless the batch is sealed or has no room (None). Takes the batch's own lock."""
        with self.lock:
            if self.closed:
                return None
            delta = self.builder.try_append(timestamp, key, value, headers)
            if delta < 0:
                return None
            future = FutureRecordMetadata(self.result, delta, timestamp)
            self.futures.append(future)  # in the lock: a split hands every future of the batch on
        return future

    def seal(self) -> int:
        """Close to appends; returns the change of buffered_bytes (the reservation trimmed to the real size)."""
        with self.lock:
            if self.closed:
                return 0
            self.closed = True
            held = self.buffered_bytes
            self.buffered_bytes = self.builder.size
            return self.buffered_bytes - held

    def build(self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool) -> bytes:
        self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence
        self.transactional = transactional
        self.payload = self.builder.build(producer_id=producer_id, producer_epoch=producer_epoch,
                                          base_sequence=base_sequence, transactional=transactional)
        return self.payload

    @property
    def built(self) -> bytes:
        """The v2 batch as sent: a batch is built before it is ever sent."""
        if self.payload is None:
            raise RuntimeError(f"the batch for {self.topic_partition} is sent before it was built")
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
                 clock: Callable[[], float] = time.monotonic, max_in_flight: int = 1) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.clock = clock
        #: batches of one partition in flight at once (1 keeps the order without sequence numbers)
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)  # the sender sleeps here
        self._space = threading.Condition(self._lock)   # send() waits here for buffer memory
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        #: the batch send() appends to, per partition (read without the lock: a dict read is atomic)
        self._open: dict[TopicPartition, ProducerBatch] = {}
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
        batch = self._open.get(tp)
        if batch is not None:  # the per-record path: the batch's lock only
            future = batch.try_append(timestamp, key, value, headers)
            if future is not None:
                return future
        if abort_on_new_batch:
            return None
        return self._append_to_new_batch(tp, timestamp, key, value, headers, max_block_s,
                                         record_size(key, value, headers) if size is None else size)

    def _append_to_new_batch(self, tp: TopicPartition, timestamp: int, key: bytes | None, value: bytes | None,
                             headers: Sequence[Header], max_block_s: float, size: int) -> FutureRecordMetadata:
        """Seal the full open batch and open another (the accumulator's lock: once per batch)."""
        reservation = max(size, min(self.batch_size, self.buffer_memory))
        with self._lock:
            if self._closed:
                raise IllegalStateError("cannot send: the producer is closed")
            last = self._open.get(tp)
            if last is not None:
                future = last.try_append(timestamp, key, value, headers)
                if future is not None:  # another thread opened it meanwhile
                    return future
            self._reserve_locked(reservation, max_block_s)
            if self._closed:
                self._buffered -= reservation
                raise IllegalStateError("cannot send: the producer is closed")
            # the wait for memory released the lock: another thread may have opened a batch meanwhile
            last = self._open.get(tp)
            if last is not None:
                future = last.try_append(timestamp, key, value, headers)
                if future is not None:
                    self._buffered -= reservation
                    return future
                self._seal_locked(last)  # it was full
                self._wake_sender_locked()
            now = self.clock()
            batch = ProducerBatch(TopicPartition(*tp), timestamp, self.batch_size, now)
            batch.buffered_bytes = reservation
            future = batch.try_append(timestamp, key, value, headers)
            assert future is not None  # an empty batch takes any record
            queue = self._queues.get(batch.topic_partition)
            if queue is None:
                queue = self._queues[batch.topic_partition] = deque()
            queue.append(batch)
            self._open[batch.topic_partition] = batch
            self._incomplete.add(batch)
            if now + self.linger_s < self._sender_wake_at or batch.builder.size >= self.batch_size:
                self._wake_sender_locked()
            return future

    def _seal_locked(self, batch: ProducerBatch) -> None:
        """No more appends to `batch`; its reservation shrinks to its real size (with the lock held)."""
        freed = -batch.seal()
        if self._open.get(batch.topic_partition) is batch:
            del self._open[batch.topic_partition]
        if freed:
            self._buffered -= freed
            if freed > 0:
                self._space.notify_all()

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
            for batch in list(self._open.values()):
                self._seal_locked(batch)
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

    def ready(self, now: float, next_sequence: Callable[[TopicPartition], int] | None = None,
              ) -> tuple[list[ProducerBatch], float]:
        """Batches that may be sent now, in queue order, and the earliest time another becomes ready by
        itself (inf if none). Per partition: up to max_in_flight in flight; a resend (retry or split half)
        only from the head and alone; a fresh batch once full or lingered (at once while flushing).
        `next_sequence(tp)`, for an idempotent producer, is the sequence the next fresh batch of `tp` gets:
        0 opens an epoch on that partition, and until the node holds that epoch's state it would accept
        any sequence, so the batches drained with it are marked exclusive: the sender puts them in its
        record set (appended whole, in order) and sends nothing else of `tp` until they are answered."""
        ready: list[ProducerBatch] = []
        next_ready = math.inf
        limit = self.max_in_flight
        with self._lock:
            flushing = self._flushes > 0 or self._closed
            for queue in self._queues.values():
                in_flight = 0
                opening_epoch = False
                last = len(queue) - 1
                for index, batch in enumerate(queue):
                    if batch.in_flight:
                        if batch.exclusive:
                            break  # nothing goes after a resend or an epoch's first batch until it is answered
                        in_flight += 1
                        continue
                    if in_flight >= limit:
                        break
                    if batch.payload is not None:  # a retry or a split half: in order, from the head, alone
                        if index == 0:
                            if batch.retry_at <= now:
                                batch.exclusive = True
                                batch.sent_behind = False
                                ready.append(batch)
                            else:
                                next_ready = min(next_ready, batch.retry_at)
                        break
                    if not (flushing or batch.closed or index < last or batch.builder.size >= self.batch_size):
                        at = batch.created + self.linger_s
                        if at > now:
                            next_ready = min(next_ready, at)
                            break
                    if opening_epoch:
                        batch.exclusive = True  # rides in the record set of the epoch's first batch
                    else:
                        opening_epoch = next_sequence is not None and next_sequence(batch.topic_partition) == 0
                        if opening_epoch and in_flight:
                            break
                        batch.exclusive = opening_epoch
                    batch.sent_behind = in_flight > 0
                    ready.append(batch)
                    in_flight += 1
        return ready, next_ready

    def close_for_send(self, batch: ProducerBatch) -> None:
        """The sender takes this batch: later records go to a new one."""
        with self._lock:
            self._seal_locked(batch)

    def expired(self, now: float, delivery_timeout_s: float) -> tuple[list[ProducerBatch], float]:
        """Batches not in flight whose delivery timeout has passed (removed from their queues),
        and the earliest time another one will expire."""
        expired: list[ProducerBatch] = []
        next_expiry = math.inf
        with self._lock:
            for queue in self._queues.values():
                # batches of a queue are in creation order: stop at the first one (not in flight) still in time
                for batch in [b for b in queue if not b.in_flight]:
                    at = batch.created + delivery_timeout_s
                    if at > now:
                        next_expiry = min(next_expiry, at)
                        break
                    self._seal_locked(batch)
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
                        self._seal_locked(batch)
                        taken.append(batch)
                queue.clear()
                queue.extend(keep)
        return taken

    def has_earlier_incomplete(self, batch: ProducerBatch) -> bool:
        """Whether a batch queued before `batch` for its partition is still unanswered (in flight, or
        waiting for a retry): then an OUT_OF_ORDER_SEQUENCE for `batch` only means it overtook it."""
        with self._lock:
            queue = self._queues.get(batch.topic_partition)
            return queue is not None and bool(queue) and queue[0] is not batch and batch in queue

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
            self._seal_locked(batch)
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
