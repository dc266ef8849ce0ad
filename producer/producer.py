"""The Producer facade: Kafka's producer API (kafka-python's names) over the accumulator, the sender
thread and the transaction state machine.

send() only picks a partition and appends to a batch; everything on the wire happens in
the sender thread, except the blocking coordinator calls of the transactional API, which
run in the caller's thread with max_block_ms as their deadline.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from client.cluster import ClusterClient
from client.transport import Deadline
from producer.accumulator import RECORD_OVERHEAD, RecordAccumulator, record_size
from producer.config import ProducerConfig
from producer.future import FutureRecordMetadata
from producer.half_transactions import ClientFaults, HalfTransactions
from producer.local_transaction import TransactionSendResult
from producer.partitioner import DefaultPartitioner
from producer.sender import Sender
from producer.transaction_manager import TransactionManager, TransactionState
from producer.txn_requests import CoordinatorRequests
from proto.errors import (
    IllegalArgumentError,
    IllegalStateError,
    InvalidProducerIdMappingError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from proto.records import HEADER_SIZE, Header
from proto.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)


class Producer:
    """A Kafka-style producer: idempotent by default, transactional with a `transactional_id`.

    ::

        p = Producer(bootstrap_servers=bs, transactional_id="tx-1")
        p.init_transactions()
        p.begin_transaction()
        p.send("orders", value=b"v", key=b"k")
        p.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(42)}, "group-1")
        p.commit_transaction()          # or abort_transaction()
        p.close()

    Settings are keyword arguments with Kafka's names in snake_case and Kafka's defaults
    (see ProducerConfig): acks=-1, linger_ms=5, batch_size=16384, buffer_memory=32 MiB,
    max_block_ms=60000, max_request_size=1048576, request_timeout_ms=30000,
    delivery_timeout_ms=120000, retry_backoff_ms=100, retry_backoff_max_ms=1000,
    max_in_flight_requests_per_connection=5, client_id, enable_idempotence=True,
    transaction_timeout_ms=60000, key_serializer, value_serializer.

    Errors are txnsim.errors classes. Misuse raises IllegalStateError naming the state; after
    an abortable error commit_transaction() raises it and abort_transaction() recovers; after
    a fatal one (ProducerFencedError, ...) every call except close() raises it again.
    """

    #: close() aborts an open transaction (Kafka's behaviour); batch participants leave it to their driver
    _aborts_on_close = True
    #: transactions V2's implicit add: partitions join the transaction with their first produce request
    _implicit_add = True

    def __init__(self, **configs: Any) -> None:
        self.config = config = ProducerConfig.from_kwargs(**configs)
        try:
            self._cluster = ClusterClient(config.bootstrap_servers, request_timeout_ms=config.request_timeout_ms)
        except ValueError as exc:
            raise KafkaConfigurationError(str(exc)) from None
        self._tm = TransactionManager(config.transactional_id, idempotent=config.enable_idempotence,
                                      implicit_add=self._implicit_add)
        # several batches of a partition in flight only with sequence numbers, which keep them in order
        self._accumulator = RecordAccumulator(
            batch_size=config.batch_size, linger_ms=config.linger_ms, buffer_memory=config.buffer_memory,
            max_in_flight=config.max_in_flight_requests_per_connection if self._tm.idempotent else 1)
        self._partitioner = DefaultPartitioner()
        self._requests = CoordinatorRequests(config, self._cluster, self._tm)
        self._sender = Sender(config, self._cluster, self._accumulator, self._tm, self._requests)
        self._max_block_s = config.max_block_ms / 1000
        self._partition_counts: dict[str, int] = {}
        #: one TopicPartition per (topic, partition) sent to, so send() builds none per record
        self._topic_partitions: dict[tuple[str, int], TopicPartition] = {}
        #: send() may skip serializers and header conversion (the common case)
        self._plain = config.key_serializer is None and config.value_serializer is None
        self._closed = False
        self._close_lock = threading.Lock()
        self._half: HalfTransactions | None = None
        if config.producer_group is not None:
            self._half = HalfTransactions(self._cluster, producer_group=config.producer_group,
                                          listener=config.transaction_listener, client_id=config.client_id,
                                          request_timeout_s=config.request_timeout_ms / 1000,
                                          check_threads=config.check_thread_pool_size)
        self._sender.start()
        log.debug("producer %s started (%s)", config.client_id, self._tm.describe())

    # ------------------------------------------------------------ state queries

    @property
    def transaction_state(self) -> TransactionState:
        """The client-side state (UNINITIALIZED ... FATAL_ERROR)."""
        return self._tm.state

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        pid = self._tm.producer_id_and_epoch
        return pid.producer_id, pid.epoch

    def _ensure_open(self, action: str) -> None:
        if self._closed:
            raise IllegalStateError(f"cannot {action}: the producer is closed")
        self._tm.ensure_usable(action)

    def _deadline(self) -> float:
        return time.monotonic() + self._max_block_s

    # ------------------------------------------------------------ sending

    def send(self, topic: str, value: Any = None, key: Any = None,
             headers: Iterable[tuple[str, bytes | None]] | None = None, partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; the future resolves to its RecordMetadata once the partition has it.

        kafka-python's order of arguments (topic, value, key, headers, partition, timestamp_ms).
        A partition or timestamp of the wrong type raises TypeError, a negative one
        IllegalArgumentError (a ValueError), here and never in the I/O thread, as kafka-python
        and Kafka's ProducerRecord do.
        """
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")
        tm = self._tm
        tm.check_can_send()
        if partition is not None and (partition.__class__ is not int or not 0 <= partition <= MAX_PARTITION):
            _check_partition(partition)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        else:
            _check_timestamp(timestamp_ms)
        config = self.config
        header_list: list[Header]
        if headers is None and self._plain and (value is None or value.__class__ is bytes) and (
                key is None or key.__class__ is bytes):
            header_list, key_bytes, value_bytes = _NO_HEADERS, key, value  # nothing to convert
            size = RECORD_OVERHEAD + (0 if key is None else len(key)) + (0 if value is None else len(value))
        else:
            header_list = [] if headers is None else [(str(k), _to_bytes(v, "header value")) for k, v in headers]
            key_bytes = _to_bytes(_serialize(config.key_serializer, topic, header_list, key), "key")
            value_bytes = _to_bytes(_serialize(config.value_serializer, topic, header_list, value), "value")
            size = record_size(key_bytes, value_bytes, header_list)
        if size + HEADER_SIZE > config.max_request_size or size > config.buffer_memory:
            limit, name = min((config.max_request_size, "max_request_size"), (config.buffer_memory, "buffer_memory"))
            raise RecordTooLargeError(f"[MESSAGE_TOO_LARGE] the record is {size + HEADER_SIZE} bytes when serialized "
                                      f"(in a batch of its own), more than {name}={limit}")
        max_block_s = self._max_block_s
        num_partitions = self._partition_counts.get(topic)
        if num_partitions is None:
            deadline = Deadline(max_block_s)
            num_partitions = self._num_partitions(topic, deadline)
            max_block_s = deadline.remaining()
        accumulator = self._accumulator
        if partition is None:
            if key_bytes is None:
                sticky = self._partitioner.sticky_partition(topic, num_partitions)
                tp = self._topic_partitions.get((topic, sticky)) or self._topic_partition(topic, sticky)
                future = accumulator.append(tp, timestamp_ms, key_bytes, value_bytes, header_list,
                                            max_block_s=max_block_s, abort_on_new_batch=True, size=size)
                if future is not None:
                    return future
                partition = self._partitioner.on_new_batch(topic, num_partitions, sticky)
            else:
                partition = self._partitioner.partition(topic, key_bytes, num_partitions)
        elif partition >= num_partitions:
            num_partitions = self._num_partitions(topic, Deadline(max_block_s), refresh=True)
            if partition >= num_partitions:
                raise UnknownTopicOrPartitionError(
                    f"[UNKNOWN_TOPIC_OR_PARTITION] partition {partition} of topic {topic!r} does not exist "
                    f"(it has {num_partitions})")
        tp = self._topic_partitions.get((topic, partition)) or self._topic_partition(topic, partition)
        if tm.transactional_id is not None and tm.maybe_add_partition(tp):
            accumulator.wakeup()  # register it now, while its first batch lingers
        future = accumulator.append(tp, timestamp_ms, key_bytes, value_bytes, header_list, max_block_s=max_block_s,
                                    size=size)
        assert future is not None
        return future

    def _topic_partition(self, topic: str, partition: int) -> TopicPartition:
        tp = self._topic_partitions.get((topic, partition))
        if tp is None:
            tp = self._topic_partitions[(topic, partition)] = TopicPartition(topic, partition)
        return tp

    # ------------------------------------------------------------ RocketMQ-style transactions

    def send_message_in_transaction(self, topic: str, value: Any = None, key: Any = None, arg: Any = None,
                                    headers: Iterable[tuple[str, bytes | None]] | None = None,
                                    partition: int | None = None, *, tag: str = "", keys: str = "",
                                    check_immunity_ms: int = 0) -> TransactionSendResult:
        """RocketMQ's transactional send: store a half message (invisible), run the listener's
        execute_local_transaction(msg, arg) only once it is stored, then end the transaction one-way
        with its answer. A lost end or an UNKNOW answer is resolved by check-back, which calls
        check_local_transaction(msg) on a live producer of the group. Needs producer_group and
        transaction_listener; `check_immunity_ms` delays this message's first check (RocketMQ's
        CHECK_IMMUNITY_TIME_IN_SECONDS; default: the cluster's half_message_timeout_ms)."""
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")
        if self._half is None:
            raise IllegalStateError("send_message_in_transaction needs Producer(producer_group=..., "
                                    "transaction_listener=...)")
        config = self.config
        key_bytes = _to_bytes(_serialize(config.key_serializer, topic, [], key), "key")
        value_bytes = _to_bytes(_serialize(config.value_serializer, topic, [], value), "value")
        _check_partition(partition)
        if not isinstance(check_immunity_ms, int) or check_immunity_ms < 0:
            raise KafkaConfigurationError(f"check_immunity_ms must be a non-negative int, not {check_immunity_ms!r}")
        num_partitions = self._num_partitions(topic, Deadline(self._max_block_s))
        if partition is not None and (not isinstance(partition, int) or not 0 <= partition < num_partitions):
            raise UnknownTopicOrPartitionError(
                f"[UNKNOWN_TOPIC_OR_PARTITION] partition {partition!r} of topic {topic!r} does not exist "
                f"(it has {num_partitions})")
        return self._half.send(topic, value_bytes, key_bytes, arg, headers, partition, tag, keys, check_immunity_ms,
                               num_partitions)

    @property
    def faults(self) -> ClientFaults:
        """Faults this producer injects into its own RocketMQ-style calls on purpose (`faults.lose_ends = True`
        loses the end of each transaction, so the check-back decides it): for demos and tests."""
        if self._half is None:
            raise IllegalStateError("faults are of RocketMQ-style transactions: create the Producer with a "
                                    "producer_group")
        return self._half.faults

    def wait_for_check_backs(self, timeout: float = 10.0) -> bool:
        """Block until the cluster can reach this producer for check-backs (True), or `timeout` passed."""
        return self._half is not None and self._half.wait_registered(timeout)

    def _num_partitions(self, topic: str, deadline: Deadline, *, refresh: bool = False) -> int:
        """The topic's partition count, from the metadata cached here unless `refresh` (a partition past it was
        asked for: partitions may have been added since, as Kafka's producer asks again in waitOnMetadata)."""
        count = self._partition_counts.get(topic)
        if count is not None and not refresh:
            return count
        try:
            if refresh:
                self._cluster.refresh_metadata([topic], deadline)
            count = self._cluster.partitions_for(topic, deadline)
        except KafkaConnectionError as exc:
            raise KafkaTimeoutError(f"no metadata for topic {topic!r} within max_block_ms="
                                    f"{self.config.max_block_ms}: {exc.message}") from exc
        self._partition_counts[topic] = count
        return count

    def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition numbers; UnknownTopicOrPartitionError if it does not exist."""
        self._ensure_open("partitions_for")
        return set(range(self._num_partitions(topic, Deadline(self._max_block_s))))

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now without lingering, and wait until each batch is answered."""
        self._ensure_open("flush")
        self._flush(None if timeout is None else time.monotonic() + timeout, "flush")

    def _flush(self, deadline: float | None, what: str) -> None:
        self._accumulator.begin_flush()
        try:
            self._accumulator.await_all(deadline, what)
        finally:
            self._accumulator.end_flush()

    # ------------------------------------------------------------ transactions

    def init_transactions(self) -> None:
        """Get the producer id and a new epoch for transactional_id, fencing older instances and
        ending whatever transaction they left open. Call once, before the first transaction."""
        self._ensure_open("init_transactions")
        self._tm.begin_init()  # resumes an earlier attempt that timed out
        self._requests.init_producer_id(Deadline(self._max_block_s))

    def begin_transaction(self) -> None:
        self._ensure_open("begin_transaction")
        self._tm.begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
                                    consumer_group_metadata: ConsumerGroupMetadata | str | Any) -> None:
        """Commit the consumer's offsets as part of this transaction (KIP-447). Under transactions V2 the
        TxnOffsetCommit itself adds the group's offsets partition (no AddOffsetsToTxn round trip)."""
        self._ensure_open("send_offsets_to_transaction")
        self._tm.ensure_in_transaction("send_offsets_to_transaction")
        group = _group_metadata(consumer_group_metadata)
        normalized = {_topic_partition(tp): _offset_and_metadata(tp, om) for tp, om in offsets.items()}
        deadline = Deadline(self._max_block_s)
        if not self._tm.is_group_added(group.group_id) and not self._tm.implicit_add:
            self._requests.add_offsets(group.group_id, deadline)
        if normalized:
            self._requests.txn_offset_commit(group, normalized, deadline)

    def commit_transaction(self) -> None:
        """Flush, then commit at the coordinator. Raises the error of a failed send (abort next),
        or KafkaTimeoutError after max_block_ms (call commit_transaction() again to resume)."""
        self._ensure_open("commit_transaction")
        tm = self._tm
        tm.begin_commit()
        deadline = self._deadline()
        self._flush(deadline, "commit_transaction")
        tm.ensure_usable("commit_transaction")
        if tm.state is TransactionState.ABORTABLE_ERROR:
            raise tm.abortable_error_copy("commit_transaction")
        self._sender.await_partition_registration(deadline)
        if tm.needs_end_txn:
            self._requests.end_txn(True, Deadline(max(deadline - time.monotonic(), 0.0)))
        tm.complete_transaction()

    def abort_transaction(self) -> None:
        """Discard unsent records, wait for those in flight, and abort at the coordinator."""
        self._ensure_open("abort_transaction")
        self._abort(self._deadline())

    def _abort(self, deadline: float) -> None:
        tm = self._tm
        tm.begin_abort()
        self._accumulator.wakeup()  # the sender fails what it has not sent
        self._accumulator.await_all(deadline, "abort_transaction")
        self._sender.await_partition_registration(deadline)
        if tm.needs_end_txn and not tm.end_txn_refused:
            try:
                self._requests.end_txn(False, Deadline(max(deadline - time.monotonic(), 0.0)))
            except InvalidProducerIdMappingError:
                pass  # the id expired meanwhile: nothing left to abort there; the bump below gets a new id
        if tm.epoch_bump_required or tm.end_txn_refused:
            # KIP-360: a failed batch left sequences the node may hold, and no new epoch came with
            # EndTxn: bump it with InitProducerId(current pid/epoch) before the next transaction
            tm.begin_epoch_bump()
            self._requests.init_producer_id(Deadline(max(deadline - time.monotonic(), 0.0)))
        else:
            tm.complete_transaction()

    # ------------------------------------------------------------ closing

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (aborting an open transaction) and stop; after `timeout` seconds,
        fail whatever is left. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        deadline = None if timeout is None else time.monotonic() + timeout
        open_txn = self._tm.state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR)
        if open_txn and timeout != 0 and self._aborts_on_close:
            try:
                self._abort(deadline if deadline is not None else self._deadline())
            except KafkaError as exc:
                log.warning("closing %s: could not abort the open transaction: %s", self._tm.describe(), exc)
        if self._half is not None:
            self._half.close()
        self._sender.initiate_close()
        if threading.current_thread() is self._sender:
            # close() from a send callback: the I/O thread cannot wait for itself
            self._sender.close_cluster_on_exit = True
            self._sender.force_close()
            return
        self._sender.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        if self._sender.is_alive():
            log.warning("closing %s: unacknowledged records are failed after the close timeout",
                        self._tm.describe())
            self._sender.force_close()
            self._sender.join(self.config.request_timeout_ms / 1000)
        self._cluster.close()
        log.debug("producer %s closed", self.config.client_id)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


#: the headers of a record sent without any (shared: nothing appends to it)
_NO_HEADERS: list[Header] = []
#: Kafka's timestamps are int64 milliseconds
MAX_TIMESTAMP_MS = 2**63 - 1
#: Kafka's partition numbers are int32
MAX_PARTITION = 2**31 - 1


def _check_partition(partition: Any) -> None:
    """Reject in send() what would otherwise fail in the I/O thread, stalling every batch to that node."""
    if partition is None:
        return
    if not isinstance(partition, int) or isinstance(partition, bool):
        raise TypeError(f"partition must be an int or None, not {type(partition).__name__} {partition!r}")
    if not 0 <= partition <= MAX_PARTITION:
        raise IllegalArgumentError(f"partition must be between 0 and {MAX_PARTITION}, not {partition}")


def _check_timestamp(timestamp_ms: Any) -> None:
    if timestamp_ms is None:
        return
    if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
        raise TypeError(f"timestamp_ms must be an int (milliseconds since the epoch) or None, "
                        f"not {type(timestamp_ms).__name__} {timestamp_ms!r}")
    if not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
        raise IllegalArgumentError(f"timestamp_ms must be between 0 and {MAX_TIMESTAMP_MS}, not {timestamp_ms}")


def _serialize(serializer: Any, topic: str, headers: list[Header], data: Any) -> Any:
    """kafka-python's two kinds of serializer: a plain callable of the data, or an object with
    serialize(topic, headers, data) (kafka.serializer.Serializer)."""
    if serializer is None:
        return data
    serialize = getattr(serializer, "serialize", None)
    if callable(serialize):
        return serialize(topic, headers, data)
    return serializer(data)


def _to_bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"the record {what} must be bytes or None (or set a serializer), not {type(value).__name__}")


def _topic_partition(tp: TopicPartition | tuple[str, int]) -> TopicPartition:
    if isinstance(tp, TopicPartition):
        return tp
    topic, partition = tp
    return TopicPartition(str(topic), int(partition))


def _offset_and_metadata(tp: Any, om: OffsetAndMetadata | int) -> OffsetAndMetadata:
    """Check an offset before anything is sent: a negative one would be refused by the group coordinator
    after AddOffsetsToTxn, leaving the transaction open (Kafka's OffsetAndMetadata refuses it at once)."""
    if not isinstance(om, tuple):  # a bare offset; OffsetAndMetadata and kafka-python's are tuples
        om = OffsetAndMetadata(om)
    offset = om[0]
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise TypeError(f"the offset of {tp} must be an int, not {type(offset).__name__} {offset!r}")
    if offset < 0:
        raise IllegalArgumentError(f"the offset of {tp} is {offset}; offsets to commit must be 0 or more")
    metadata = om[1] if len(om) > 1 else ""
    leader_epoch = om[2] if len(om) > 2 else -1
    return OffsetAndMetadata(offset, metadata, leader_epoch)


def _group_metadata(group: ConsumerGroupMetadata | str | Any) -> ConsumerGroupMetadata:
    """A bare group id, our ConsumerGroupMetadata, or any object shaped like a consumer's group_metadata()."""
    if isinstance(group, ConsumerGroupMetadata):
        metadata = group
    elif isinstance(group, str):
        metadata = ConsumerGroupMetadata(group)
    elif hasattr(group, "group_id"):
        metadata = ConsumerGroupMetadata(group.group_id, getattr(group, "generation_id", -1),
                                         getattr(group, "member_id", "") or "",
                                         getattr(group, "group_instance_id", None))
    else:
        raise TypeError(f"expected a group id or a consumer's group_metadata(), not {type(group).__name__}")
    if not metadata.group_id:
        raise ValueError("the consumer group id is empty")
    return metadata
