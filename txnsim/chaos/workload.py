"""The chaos workload: a generator of uniquely numbered records, and read-process-write workers.

The generator writes 1, 2, 3, ... (ASCII) to the input topic in transactions; each worker
copies the input partitions it owns to the output topic, its consumer's offsets committed
in the same transaction (exactly-once), aborting some on purpose. Every call may fail while
the nemesis works: a thread records the error, ends the transaction as the rules allow
(see checker.py for what an outcome means), recreates its clients when they are unusable
(same transactional id: the new instance fences the old), and carries on. Threads never die.
"""
from __future__ import annotations

import itertools
import logging
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from consumer import Consumer
from producer import Producer
from producer.transaction_manager import TransactionState as ClientTxnState
from proto.errors import KafkaError
from proto.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition
from txnsim.chaos.history import TXN_HEADER, History, Outcome

log = logging.getLogger(__name__)

#: clients give up on a silent (paused) or dead node after seconds, not Kafka's minutes
PRODUCER_SETTINGS = dict(request_timeout_ms=5_000, max_block_ms=10_000, delivery_timeout_ms=12_000,
                         transaction_timeout_ms=10_000, linger_ms=2, retry_backoff_max_ms=500)
CONSUMER_SETTINGS = dict(isolation_level="read_committed", auto_offset_reset="earliest", enable_auto_commit=False,
                         request_timeout_ms=5_000, fetch_max_wait_ms=200)


@dataclass(frozen=True, slots=True)
class WorkloadSettings:
    bootstrap_servers: str
    seed: int
    partitions: int = 3
    workers: int = 2
    abort_ratio: float = 0.1
    #: stop generating after this many records (None: until stopped)
    max_records: int | None = None
    #: records per generator transaction: 1 to this many
    txn_size: int = 5
    #: records per copy transaction at most
    copy_batch: int = 50
    input_topic: str = "chaos-in"
    output_topic: str = "chaos-out"
    group_id: str = "chaos"


@dataclass(slots=True)
class _OpenTxn:
    name: str
    commit_asked: bool = False
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


class _TransactionalLoop(threading.Thread):
    """One thread with one transactional producer, kept alive through every failure."""

    def __init__(self, who: str, transactional_id: str, settings: WorkloadSettings, history: History,
                 stop: threading.Event) -> None:
        super().__init__(name=f"chaos-{who}", daemon=True)
        self.who = who
        self.transactional_id = transactional_id
        self.settings = settings
        self.history = history
        self.stop_event = stop
        self.rng = random.Random(f"{settings.seed}/{who}")
        self.producer: Producer | None = None
        self.producer_session = ""
        self._instances = itertools.count(1)
        self._txns = itertools.count(1)
        self.open_txn: _OpenTxn | None = None
        self._backoff_s = 0.05

    def run(self) -> None:
        while not self.stop_event.is_set() and not self.finished():
            try:
                self.step()
                self._backoff_s = 0.05
            except Exception as exc:  # every failure is recorded and recovered from; the loop never dies
                log.info("%s: %s: %s", self.who, type(exc).__name__, exc)
                self.history.error(self.who, exc)
                self.recover(exc)
                self.stop_event.wait(self._backoff_s)  # back off before retrying a failing cluster
                self._backoff_s = min(self._backoff_s * 2, 1.0)
        self.close()

    def finished(self) -> bool:
        return False

    def step(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ the producer and its transactions

    def ready_producer(self) -> Producer:
        if self.producer is None:
            self.producer_session = f"{self.who}.{next(self._instances)}"
            producer = Producer(bootstrap_servers=self.settings.bootstrap_servers,
                                transactional_id=self.transactional_id, client_id=self.producer_session,
                                **PRODUCER_SETTINGS)
            try:
                producer.init_transactions()  # fences the previous instance and ends its transaction
            except BaseException:
                producer.close(timeout=2)
                raise
            self.producer = producer
            self.on_new_producer()
        return self.producer

    def on_new_producer(self) -> None:
        """A new instance finished init_transactions."""

    def begin(self, producer: Producer) -> _OpenTxn:
        txn = _OpenTxn(f"{self.producer_session}/{next(self._txns)}")
        producer.begin_transaction()
        self.open_txn = txn
        self.history.begun(txn.name, self.producer_session)
        return txn

    def send_all(self, producer: Producer, txn: _OpenTxn, topic: str,
                 records: Sequence[tuple[bytes, bytes | None, int | None]]) -> None:
        """Send (value, key, partition) triples; record each acknowledgement; raise the first failure."""
        header = [(TXN_HEADER, txn.name.encode())]
        futures = []
        first_error: BaseException | None = None
        for value, key, partition in records:
            try:
                futures.append((value, producer.send(topic, value=value, key=key, partition=partition,
                                                     headers=header)))
            except KafkaError as exc:
                self.history.sent(self.producer_session, txn.name, topic, partition, int(value), None, exc)
                first_error = first_error or exc
                break
        for value, future in futures:
            try:
                meta = future.get(timeout=PRODUCER_SETTINGS["delivery_timeout_ms"] / 1000 + 5)
                self.history.sent(self.producer_session, txn.name, topic, meta.partition, int(value), meta.offset)
            except KafkaError as exc:
                self.history.sent(self.producer_session, txn.name, topic, None, int(value), None, exc)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    def end(self, producer: Producer, txn: _OpenTxn) -> bool:
        """Commit, or abort on purpose (--abort-ratio); True if committed."""
        if self.rng.random() < self.settings.abort_ratio:
            producer.abort_transaction()
            self.open_txn = None
            self.history.ended(txn.name, Outcome.ABORTED, on_purpose=True, offsets=txn.offsets)
            return False
        txn.commit_asked = True
        self.history.commit_started(txn.name)
        producer.commit_transaction()
        self.open_txn = None
        self.history.ended(txn.name, Outcome.COMMITTED, offsets=txn.offsets)
        return True

    def recover(self, exc: BaseException) -> None:
        """End the open transaction as well as the producer still can; drop an unusable producer."""
        txn, self.open_txn = self.open_txn, None
        producer = self.producer
        outcome: Outcome | None = None
        if txn is not None and producer is not None:
            if txn.commit_asked and getattr(exc, "retriable", False):
                outcome = self._attempt(producer.commit_transaction, Outcome.COMMITTED)  # Kafka's resume
            if outcome is None:
                outcome = self._attempt(producer.abort_transaction, Outcome.ABORTED)
        if txn is not None:
            # no answer: unknown if commit was asked for, else aborted (it cannot commit without EndTxn)
            outcome = outcome or (Outcome.UNKNOWN if txn.commit_asked else Outcome.ABORTED)
            self.history.ended(txn.name, outcome, offsets=txn.offsets)
        if producer is not None and producer.transaction_state is not ClientTxnState.READY:
            self.drop_producer()

    def _attempt(self, action: Callable[[], None], outcome: Outcome) -> Outcome | None:
        try:
            action()
            return outcome
        except Exception as exc:
            self.history.error(self.who, exc)
            return None

    def drop_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            try:
                producer.close(timeout=2)  # best effort: the next instance's init_transactions ends it anyway
            except Exception as exc:
                self.history.error(self.who, exc)

    def close(self) -> None:
        if self.open_txn is not None and self.producer is not None:
            self.recover(KafkaError("the run is over"))
        self.drop_producer()


class Generator(_TransactionalLoop):
    """Writes 1, 2, 3, ... to the input topic, `value % partitions` deciding the partition."""

    def __init__(self, settings: WorkloadSettings, history: History, stop: threading.Event) -> None:
        super().__init__("gen", "chaos-generator", settings, history, stop)
        self._values = itertools.count(1)
        self.generated = 0

    def finished(self) -> bool:
        limit = self.settings.max_records
        return limit is not None and self.generated >= limit

    def step(self) -> None:
        producer = self.ready_producer()
        count = self.rng.randint(1, self.settings.txn_size)
        if self.settings.max_records is not None:
            count = min(count, self.settings.max_records - self.generated)
        values = [next(self._values) for _ in range(count)]
        self.generated += count
        txn = self.begin(producer)
        self.send_all(producer, txn, self.settings.input_topic,
                      [(str(v).encode(), None, v % self.settings.partitions) for v in values])
        self.end(producer, txn)


class Worker(_TransactionalLoop):
    """Copies its input partitions (p % workers == index) to the output topic, exactly once."""

    def __init__(self, index: int, settings: WorkloadSettings, history: History, stop: threading.Event) -> None:
        super().__init__(f"w{index}", f"chaos-worker-{index}", settings, history, stop)
        self.key = f"worker-{index}".encode()
        self.partitions = [TopicPartition(settings.input_topic, p) for p in range(settings.partitions)
                           if p % settings.workers == index]
        self.consumer: Consumer | None = None
        self.consumer_session = ""
        self._consumers = itertools.count(1)

    def step(self) -> None:
        producer = self.ready_producer()
        consumer = self.ready_consumer()
        batch = consumer.poll(timeout_ms=200, max_records=self.settings.copy_batch)
        records: list[ConsumerRecord] = [r for tp in sorted(batch) for r in batch[tp]]
        self.history.polled(self.consumer_session, records)
        if not records:
            return
        txn = self.begin(producer)
        txn.offsets = {tp: consumer.position(tp) for tp in batch}
        self.send_all(producer, txn, self.settings.output_topic, [(r.value or b"", self.key, None) for r in records])
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(o) for tp, o in txn.offsets.items()},
                                             consumer.group_metadata())
        if not self.end(producer, txn):
            self.rewind("aborted on purpose")

    def ready_consumer(self) -> Consumer:
        if self.consumer is None:
            session = f"{self.who}.c{next(self._consumers)}"
            consumer = Consumer(bootstrap_servers=self.settings.bootstrap_servers, group_id=self.settings.group_id,
                                client_id=session, **CONSUMER_SETTINGS)
            try:
                consumer.assign(self.partitions)
                starts = {tp: consumer.position(tp) for tp in self.partitions}  # the committed offsets
            except BaseException:
                consumer.close(autocommit=False)
                raise
            self.consumer, self.consumer_session = consumer, session
            for tp, offset in starts.items():
                self.history.seeked(session, tp, offset, "new consumer")
        return self.consumer

    def on_new_producer(self) -> None:
        # the old instance's last transaction is decided only now: positions come from committed offsets
        self.drop_consumer()

    def rewind(self, reason: str) -> None:
        """Back to the group's committed offsets, as after any abort."""
        consumer = self.consumer
        if consumer is None:
            return
        for tp in self.partitions:
            committed = consumer.committed(tp)
            offset = committed if committed is not None else consumer.beginning_offsets([tp])[tp]
            consumer.seek(tp, offset)
            self.history.seeked(self.consumer_session, tp, offset, reason)

    def recover(self, exc: BaseException) -> None:
        had_txn = self.open_txn is not None
        super().recover(exc)
        if self.producer is None or not had_txn:
            # recreated after the next producer's init_transactions, or at once: a fresh start either way
            self.drop_consumer()
        else:
            try:
                self.rewind(f"aborted after {type(exc).__name__}")
            except Exception as rewind_error:
                self.history.error(self.who, rewind_error)
                self.drop_consumer()

    def drop_consumer(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            try:
                consumer.close(autocommit=False)
            except Exception as exc:
                self.history.error(self.who, exc)

    def close(self) -> None:
        super().close()
        self.drop_consumer()
