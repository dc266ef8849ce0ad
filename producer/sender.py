"""The producer's one background I/O thread: registers partitions, drains batches, handles answers.

Each round: apply the answers that arrived (gRPC done-callbacks only queue them and ring
the accumulator's condition), get a producer id if an idempotent producer needs one,
send AddPartitionsToTxn for the transaction's new partitions, expire old batches, then
drain the ready queue heads, group them by leader and send one ProduceRequest per node
(split at max_request_size, at most max_in_flight_requests_per_connection per node).
Invariants: an idempotent producer has up to max_in_flight_requests_per_connection batches of a
partition in flight, each in a request of its own; the node appends them only in sequence order,
and a batch that overtook an unanswered predecessor (OUT_OF_ORDER_SEQUENCE) is resent once it
heads its queue (the accumulator sends resends from the head, alone, so they arrive in order).
Without idempotence a partition has one batch in flight. A retry resends the same bytes (same
sequence), so a node can recognise a duplicate; no transactional batch goes to a partition
before the coordinator has registered it.
"""
from __future__ import annotations

import logging
import math
import random
import struct
import threading
from collections import defaultdict, deque
from collections.abc import Callable

import grpc

from client.cluster import LOOKUP_TIMEOUT_S, ClusterClient
from client.transport import Deadline, call, call_future, call_in_worker, result_of
from producer.accumulator import ProducerBatch, RecordAccumulator
from producer.config import ProducerConfig
from producer.error_policy import Action, classify_produce_error, fenced_error
from producer.transaction_manager import SENDABLE_STATES, TransactionManager
from producer.txn_requests import CoordinatorRequests, completing_backoff_s
from proto import txnsim_pb2 as pb
from proto.errors import (
    DuplicateSequenceError,
    InvalidRecordError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    TransactionAbortedError,
    UnknownServerError,
    for_code,
)
from proto.structs import TopicPartition

log = logging.getLogger(__name__)



_jitter = random.Random()


def retry_backoff_s(config: ProducerConfig, attempts: int) -> float:
    """Kafka's exponential backoff: retry_backoff_ms * 2^(attempts-1), capped, with 20% jitter."""
    base: int = config.retry_backoff_ms * (2 ** max(attempts - 1, 0))  # int ** int is typed Any (a power may be <1)
    capped = min(base, max(config.retry_backoff_max_ms, config.retry_backoff_ms))
    return capped * _jitter.uniform(0.8, 1.2) / 1000


class Sender(threading.Thread):
    def __init__(self, config: ProducerConfig, cluster: ClusterClient, accumulator: RecordAccumulator,
                 tm: TransactionManager, requests: CoordinatorRequests) -> None:
        super().__init__(name=f"txnsim-producer-io-{config.client_id}", daemon=True)
        self._config = config
        self._cluster = cluster
        self._acc = accumulator
        self._tm = tm
        self._requests = requests
        self._clock = accumulator.clock
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._delivery_timeout_s = config.delivery_timeout_ms / 1000
        self._wire_acks = -1 if config.acks == -1 else 1  # txnsim nodes know -1 and 1; acks=0 waits like 1
        self._completions: deque[Callable[[], None]] = deque()
        self._in_flight: dict[str, int] = defaultdict(int)
        self._futures: set[grpc.Future] = set()
        self._leader_retry_at: dict[TopicPartition, tuple[float, int]] = {}
        self._pid_retry_at = 0.0
        self._pid_attempts = 0
        self._add_retry_at = 0.0
        self._add_attempts = 0
        self._add_settled = threading.Condition()
        self._running = True
        self._forced = False
        #: close() was called on this thread (from a callback): the thread closes the channels itself
        self.close_cluster_on_exit = False

    # ------------------------------------------------------------ control from the caller's threads

    def initiate_close(self) -> None:
        """Send what is queued, then stop."""
        self._running = False
        self._acc.close()

    def force_close(self) -> None:
        """Stop now: fail whatever is not yet acknowledged."""
        self._running = False
        self._forced = True
        self._acc.close()
        for future in list(self._futures):
            future.cancel()

    def await_partition_registration(self, deadline: float) -> None:
        """Wait until no AddPartitionsToTxn is in flight (before EndTxn)."""
        with self._add_settled:
            while self._tm.is_adding_partitions():
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise KafkaTimeoutError(f"AddPartitionsToTxn for {self._tm.describe()} still in flight")
                self._add_settled.wait(remaining)

    # ------------------------------------------------------------ the loop

    def run(self) -> None:
        log.debug("%s started", self.name)
        while True:
            try:
                wake_at = self._run_once()
            except Exception:  # a bug in one round must not leave every future hanging forever
                log.exception("unexpected error in the producer I/O thread; continuing")
                wake_at = self._clock() + self._config.retry_backoff_ms / 1000
            if self._forced or (not self._running and self._idle()):
                break
            self._acc.await_wakeup(wake_at)
        self._fail_all(KafkaError("the producer was closed before the record was acknowledged"))
        if self.close_cluster_on_exit:
            self._cluster.close()
        log.debug("%s stopped", self.name)

    def _idle(self) -> bool:
        return not self._acc.has_incomplete() and not any(self._in_flight.values()) and not self._completions

    def _run_once(self) -> float:
        while self._completions:
            self._completions.popleft()()
        now = self._clock()
        if self._forced:
            return now
        tm = self._tm
        if tm.has_error or tm.is_aborting:
            self._fail_unsent()
        wake_at = math.inf
        if tm.needs_producer_id():
            if not self._acc.has_incomplete():
                return math.inf  # lazily: only once there is something to send
            if now >= self._pid_retry_at:
                self._init_idempotent_producer_id(now)
            if tm.needs_producer_id():
                expired_wake = self._expire(now)
                return min(self._pid_retry_at, expired_wake) if not tm.has_error else now
        if tm.is_transactional and tm.has_pending_partitions() and not tm.is_adding_partitions():
            if now >= self._add_retry_at:
                self._send_add_partitions()
            else:
                wake_at = min(wake_at, self._add_retry_at)
        wake_at = min(wake_at, self._expire(now))
        ready, next_ready = self._acc.ready(now, tm.sequence if tm.idempotent else None)
        wake_at = min(wake_at, next_ready)
        if ready and self._may_produce():
            wake_at = min(wake_at, self._drain(ready, now))
        return wake_at

    def _may_produce(self) -> bool:
        tm = self._tm
        if tm.is_transactional:
            return tm.state in SENDABLE_STATES and tm.has_producer_id
        if tm.idempotent:
            return tm.has_producer_id and not tm.epoch_bump_required and not tm.has_error
        return not tm.has_error

    # ------------------------------------------------------------ producer id of an idempotent producer

    def _init_idempotent_producer_id(self, now: float) -> None:
        tm = self._tm
        tm.start_idempotent_init()
        current = tm.producer_id_and_epoch
        request = pb.InitProducerIdRequest(transaction_timeout_ms=self._config.transaction_timeout_ms,
                                           producer_id=current.producer_id, producer_epoch=current.epoch)
        address = self._cluster.known_addresses()[0]
        try:
            response = call(self._cluster.stubs(address).transactions.InitProducerId, request,
                            min(self._request_timeout_s, LOOKUP_TIMEOUT_S))
        except KafkaError as exc:
            if exc.retriable:
                self._pid_attempts += 1
                self._pid_retry_at = now + retry_backoff_s(self._config, self._pid_attempts)
                log.warning("InitProducerId via %s failed, retrying: %s", address, exc)
                return
            log.error("InitProducerId failed for good: %s", exc)
            tm.set_fatal_error(exc)
            return
        self._pid_attempts = 0
        tm.complete_init(response.producer_id, response.producer_epoch)
        log.debug("idempotent producer id %s epoch %s", response.producer_id, response.producer_epoch)

    # ------------------------------------------------------------ partition registration

    def _send_add_partitions(self) -> None:
        partitions = self._tm.take_partitions_to_add()
        if not partitions:
            return
        try:
            address = self._requests.coordinator_address(Deadline(LOOKUP_TIMEOUT_S))
            request = self._requests.add_partitions_request(partitions)
            future = call_in_worker(self._cluster.stubs(address).transactions.AddPartitionsToTxn, request,
                                    self._request_timeout_s)
        except KafkaError as exc:
            self._after_add_partitions(partitions, None, exc)
            return
        except ValueError as exc:  # the channel was closed under us (close())
            self._after_add_partitions(partitions, None, KafkaConnectionError(str(exc)))
            return
        log.debug("AddPartitionsToTxn %s -> %s", partitions, address)
        self._track(future, lambda f: self._handle_add_partitions(partitions, f))

    def _handle_add_partitions(self, partitions: list[TopicPartition], future: grpc.Future) -> None:
        try:
            response = result_of(future, check=False)
        except KafkaError as exc:
            self._after_add_partitions(partitions, None, exc)
            return
        self._after_add_partitions(partitions, response, None)

    def _after_add_partitions(self, partitions: list[TopicPartition], response: pb.AddPartitionsToTxnResponse | None,
                              error: KafkaError | None) -> None:
        backoff = self._requests.handle_add_partitions(partitions, response, error)
        if backoff is None:
            self._add_attempts = 0
        else:
            self._add_attempts += 1
            quick = completing_backoff_s(self._add_attempts) if backoff < 0 else None
            delay = quick if quick is not None else retry_backoff_s(self._config, self._add_attempts)
            self._add_retry_at = self._clock() + delay
        with self._add_settled:
            self._add_settled.notify_all()

    # ------------------------------------------------------------ produce

    def _drain(self, ready: list[ProducerBatch], now: float) -> float:
        wake_at = math.inf
        by_node: dict[str, list[ProducerBatch]] = defaultdict(list)
        for batch in ready:
            tp = batch.topic_partition
            if self._tm.is_transactional and not self._tm.is_partition_added(tp) and not self._tm.add_implicitly(tp):
                self._tm.maybe_add_partition(tp)  # the AddPartitionsToTxn answer wakes us
                continue
            backoff = self._leader_retry_at.get(tp)
            if backoff is not None and now < backoff[0]:
                wake_at = min(wake_at, backoff[0])
                continue
            try:
                address = self._cluster.leader_address(tp, Deadline(LOOKUP_TIMEOUT_S))
            except KafkaError as exc:
                attempts = backoff[1] + 1 if backoff else 1
                retry_at = now + retry_backoff_s(self._config, attempts)
                self._leader_retry_at[tp] = (retry_at, attempts)
                wake_at = min(wake_at, retry_at)
                log.warning("no leader for %s yet: %s", tp, exc)
                continue
            self._leader_retry_at.pop(tp, None)
            by_node[address].append(batch)
        for address, batches in by_node.items():
            self._send_to_node(address, batches)
        return wake_at

    def _send_to_node(self, address: str, batches: list[ProducerBatch]) -> None:
        limit = self._config.max_in_flight_requests_per_connection
        chunk: list[ProducerBatch] = []
        chunk_bytes = 0
        in_chunk: set[TopicPartition] = set()
        sent: set[TopicPartition] = set()  # partitions of the requests already sent this round
        held_back: set[TopicPartition] = set()
        for batch in batches:
            tp = batch.topic_partition
            if tp in held_back or tp in sent:
                # batches of one partition drained together share one record set (an epoch's first ones
                # must): what cannot join its predecessor's waits for a later round
                held_back.add(tp)
                continue
            if self._in_flight[address] >= limit:
                break  # an answer from this node wakes us for the rest
            try:
                payload = batch.payload if batch.payload is not None else self._build(batch)
            except (ValueError, TypeError, OverflowError, struct.error) as exc:
                # send() checks its arguments; this is the backstop that keeps one bad record from
                # stalling every batch bound for this node round after round
                self._fail_batch(batch, InvalidRecordError(
                    f"[INVALID_RECORD] the batch for {tp} cannot be encoded: {exc}"))
                continue
            if chunk and chunk_bytes + len(payload) > self._config.max_request_size:
                if tp in in_chunk:
                    held_back.add(tp)  # built: it is resent from the head of its queue, after its predecessor
                    continue
                self._send_produce(address, chunk)
                chunk, chunk_bytes = [], 0
                sent |= in_chunk
                in_chunk.clear()
                if self._in_flight[address] >= limit:
                    break
            chunk.append(batch)
            in_chunk.add(tp)
            chunk_bytes += len(payload)
        if chunk:
            self._send_produce(address, chunk)

    def _build(self, batch: ProducerBatch) -> bytes:
        """Fix pid, epoch and sequence; sequences advance here, in each partition's queue order."""
        self._acc.close_for_send(batch)
        tm = self._tm
        if tm.idempotent:
            pid = tm.producer_id_and_epoch
            sequence = tm.next_sequence(batch.topic_partition, batch.record_count)
            return batch.build(pid.producer_id, pid.epoch, sequence, tm.is_transactional)
        return batch.build(-1, -1, -1, False)

    def _send_produce(self, address: str, batches: list[ProducerBatch]) -> None:
        """One request; batches of one partition travel as one record set, in queue order: the node appends a
        record set whole and in order, but the partitions of a request, and separate requests, in parallel.
        A record set of several batches only ever holds first attempts (the accumulator sends a resend alone):
        the node answers a record set that holds an already written batch as a duplicate as a whole."""
        by_partition: dict[TopicPartition, list[ProducerBatch]] = {}
        for batch in batches:
            by_partition.setdefault(batch.topic_partition, []).append(batch)
        request = pb.ProduceRequest(acks=self._wire_acks, timeout_ms=self._config.request_timeout_ms,
                                    partitions=[pb.PartitionRecords(
                                        topic=tp.topic, partition=tp.partition,
                                        records=group[0].built if len(group) == 1 else
                                        b"".join(b.built for b in group))
                                        for tp, group in by_partition.items()])
        if self._tm.transactional_id is not None:
            request.transactional_id = self._tm.transactional_id
            request.add_partitions = self._tm.implicit_add
        for batch in batches:
            batch.in_flight = True
            batch.attempts += 1
        self._in_flight[address] += 1
        try:
            future = call_future(self._cluster.stubs(address).partitions.Produce, request, self._request_timeout_s)
        except ValueError as exc:  # the channel was closed under us (close())
            self._in_flight[address] -= 1
            for batch in batches:
                self._on_batch_error(batch, KafkaConnectionError(str(exc)))
            return
        self._track(future, lambda f: self._handle_produce(address, batches, f))

    def _handle_produce(self, address: str, batches: list[ProducerBatch], future: grpc.Future) -> None:
        self._in_flight[address] -= 1
        for batch in batches:
            batch.in_flight = False
        try:
            response = result_of(future, check=False)
        except KafkaError as exc:
            for batch in batches:
                self._on_batch_error(batch, exc)
            return
        if response.error_code:
            error = for_code(response.error_code, response.error_message)
            for batch in batches:
                self._on_batch_error(batch, error)
            return
        results = {(r.topic, r.partition): r for r in response.partitions}
        next_offset: dict[TopicPartition, int] = {}
        shared: dict[TopicPartition, int] = {}  # batches per record set
        for batch in batches:
            shared[batch.topic_partition] = shared.get(batch.topic_partition, 0) + 1
        for batch in batches:  # in request order: a partition's batches follow each other in its record set
            tp = batch.topic_partition
            result = results.get((tp.topic, tp.partition))
            if result is None:
                self._on_batch_error(batch, UnknownServerError(f"[UNKNOWN_SERVER_ERROR] no answer for {tp}"))
            elif result.error_code == 0 or result.error_code == DuplicateSequenceError.errno:
                base = next_offset.get(tp, result.base_offset if result.error_code == 0 else -1)
                if base >= 0:
                    next_offset[tp] = base + batch.record_count
                self._acc.complete(batch, base_offset=base)
            else:
                error = for_code(result.error_code, f"{tp}: {result.error_message}")
                if isinstance(error, RecordTooLargeError) and shared.get(tp, 0) > 1 and self._resend(batch, error):
                    continue  # which batch of the record set was too large, it alone can tell: each goes alone
                self._on_batch_error(batch, error)

    def _resend(self, batch: ProducerBatch, error: KafkaError) -> bool:
        """Resend `batch` as is, at once, once it heads its queue; False when it must fail instead."""
        if batch.is_done or self._reason_not_to_retry(batch, error, count_attempts=False) is not None:
            return False
        batch.retry_at = self._clock()
        return True

    def _on_batch_error(self, batch: ProducerBatch, error: KafkaError) -> None:
        if batch.is_done:
            return  # failed already (forced close)
        tp = batch.topic_partition
        if isinstance(error, RecordTooLargeError) and batch.record_count > 1 and not self._forced:
            # Kafka's Sender: a batch over the node's limit is split and its parts resent, in order and
            # with the same sequences, instead of failing records that would each have fitted
            halves = self._acc.split_and_reenqueue(batch)
            if halves is not None:
                log.warning("the node refused a batch of %d records for %s as too large; resending it in two "
                            "(%d + %d records): %s", batch.record_count, tp, halves[0].record_count,
                            halves[1].record_count, error)
                return
        overtaken = batch.sent_behind or self._acc.has_earlier_incomplete(batch)
        if isinstance(error, OutOfOrderSequenceError) and overtaken:
            # it overtook a batch of its partition that was unanswered when it was sent (the node may take two
            # requests in either order, and that batch's answer may have been handled first) or still is (in
            # flight, or failed and waiting to be resent): the node wrote nothing; resend it, at once, when it
            # heads the queue (a resend goes alone, so a second refusal is a real gap)
            if self._resend(batch, error):
                log.debug("%r overtook an unanswered batch of its partition; resending it after that one", batch)
                return
            error = self._reason_not_to_retry(batch, error, count_attempts=False) or error
        action = classify_produce_error(error)
        if action is Action.SUCCESS:
            self._acc.complete(batch, base_offset=-1)
            return
        if action in (Action.RETRY, Action.REFRESH_AND_RETRY):
            if action is Action.REFRESH_AND_RETRY:
                self._cluster.invalidate(tp)
            final = self._reason_not_to_retry(batch, error)
            if final is None:
                batch.retry_at = self._clock() + retry_backoff_s(self._config, batch.attempts)
                log.warning("produce to %s failed (attempt %d), retrying the same batch (sequence %d): %s",
                            tp, batch.attempts, batch.base_sequence, error)
                return
            error = final
        elif action is Action.FATAL:
            epoch = batch.producer_epoch
            fatal = fenced_error(self._tm.transactional_id, epoch, error) if self._tm.is_transactional else error
            if self._tm.idempotent:
                self._tm.set_fatal_error(fatal)
            error = fatal
        self._fail_batch(batch, error)

    def _reason_not_to_retry(self, batch: ProducerBatch, error: KafkaError, *,
                             count_attempts: bool = True) -> KafkaError | None:
        tm = self._tm
        if tm.is_aborting:
            return TransactionAbortedError(
                f"[TRANSACTION_ABORTED] {batch.record_count} record(s) for {batch.topic_partition} were not "
                f"acknowledged before the transaction was aborted")
        if tm.has_error and tm.last_error is not None:
            return tm.last_error
        if self._forced:
            return KafkaError("the producer was closed before the record was acknowledged")
        if self._clock() >= batch.created + self._delivery_timeout_s:
            return KafkaTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.topic_partition}: delivery_timeout_ms="
                f"{self._config.delivery_timeout_ms} has passed since the batch was created; last error: {error}")
        if count_attempts and batch.attempts > self._config.retries:
            return error
        return None

    def _fail_batch(self, batch: ProducerBatch, error: KafkaError) -> None:
        """Fail one batch; the state machine learns first, so a waiting commit sees the error."""
        tm = self._tm
        if batch.holds_sequences:
            tm.require_epoch_bump()  # the node may or may not have these sequences now
        if tm.is_transactional and not isinstance(error, TransactionAbortedError) and error is not tm.last_error:
            tm.set_abortable_error(error)
        log.debug("failing %r: %s", batch, error)
        self._acc.complete(batch, error=error)

    def _expire(self, now: float) -> float:
        expired, next_expiry = self._acc.expired(now, self._delivery_timeout_s)
        for batch in expired:
            self._fail_batch(batch, KafkaTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.topic_partition}: delivery_timeout_ms="
                f"{self._config.delivery_timeout_ms} has passed since the batch was created"))
        return next_expiry

    def _fail_unsent(self) -> None:
        tm = self._tm
        if tm.is_aborting:
            def error_for(batch: ProducerBatch) -> KafkaError:
                return TransactionAbortedError(
                    f"[TRANSACTION_ABORTED] {batch.record_count} record(s) for {batch.topic_partition} were "
                    f"discarded because the transaction of {tm.describe()} is being aborted")
        else:
            last = tm.last_error or KafkaError("the producer is in an error state")

            def error_for(batch: ProducerBatch) -> KafkaError:
                return last
        for batch in self._acc.take_unsent():
            if batch.holds_sequences:
                tm.require_epoch_bump()
            self._acc.complete(batch, error=error_for(batch))

    def _fail_all(self, error: KafkaError) -> None:
        for future in list(self._futures):
            future.cancel()
        for batch in self._acc.incomplete_batches():
            self._acc.complete(batch, error=error)
        with self._add_settled:
            self._tm.partitions_failed(self._tm.adding_partitions)
            self._add_settled.notify_all()

    # ------------------------------------------------------------ answers from gRPC threads

    def _track(self, future: grpc.Future, handler: Callable[[grpc.Future], None]) -> None:
        self._futures.add(future)

        def handle() -> None:
            self._futures.discard(future)
            handler(future)

        def done(_: grpc.Future) -> None:  # runs on a gRPC thread: queue the answer, ring the bell
            self._completions.append(handle)
            self._acc.wakeup()

        future.add_done_callback(done)
