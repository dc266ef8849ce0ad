"""A batch transaction's coordinator-side state (txnsim's extension; docs/spark-exactly-once.md).

One key of __transaction_state (the query's batch transaction id) holds the batch being
written, every participant (a producer id per task attempt, with the partitions it wrote)
and the last batch id committed. Values are immutable and move through the same state table
as a transactional id's (metadata.VALID_PREVIOUS_STATES): written first, installed after.
"""
from __future__ import annotations

from dataclasses import dataclass

from coordinator.txn.metadata import TransactionValue
from proto import txnsim_pb2 as pb
from proto.structs import TopicPartition, TransactionState

S = TransactionState
NO_BATCH = -1


@dataclass(frozen=True, slots=True)
class Participant:
    producer_id: int
    producer_epoch: int
    task: int
    attempt: int
    partitions: frozenset[TopicPartition] = frozenset()


@dataclass(frozen=True, slots=True)
class BatchTxn(TransactionValue):
    transactional_id: str  # the batch transaction id; named like TxnMetadata's so both share the log
    timeout_ms: int
    state: TransactionState = S.EMPTY
    batch_id: int = NO_BATCH
    last_committed_batch: int = NO_BATCH
    participants: tuple[Participant, ...] = ()
    winners: frozenset[int] = frozenset()
    start_time_ms: int = -1
    last_update_time_ms: int = -1

    def participant(self, producer_id: int) -> Participant | None:
        for p in self.participants:
            if p.producer_id == producer_id:
                return p
        return None

    def with_participant(self, updated: Participant) -> tuple[Participant, ...]:
        return tuple(updated if p.producer_id == updated.producer_id else p for p in self.participants)

    @property
    def partitions(self) -> frozenset[TopicPartition]:
        """Every partition any participant wrote (for describe and list)."""
        return frozenset().union(*(p.partitions for p in self.participants))

    # ------------------------------------------------------------ log codec

    def to_log_value(self) -> bytes:
        batch = pb.BatchTransactionValue(
            batch_id=self.batch_id, last_committed_batch=self.last_committed_batch,
            participants=[pb.BatchParticipant(
                producer_id=p.producer_id, producer_epoch=p.producer_epoch, task=p.task, attempt=p.attempt,
                partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)
                            for tp in sorted(p.partitions)]) for p in self.participants],
            winners=sorted(self.winners), state=self.state.id, timeout_ms=self.timeout_ms,
            start_time_ms=self.start_time_ms, last_update_time_ms=self.last_update_time_ms)
        return pb.TransactionLogValue(batch=batch).SerializeToString()

    @classmethod
    def from_log_value(cls, transactional_id: str, value: pb.TransactionLogValue) -> BatchTxn:
        batch = value.batch
        return cls(
            transactional_id=transactional_id, timeout_ms=batch.timeout_ms,
            state=TransactionState.from_id(batch.state), batch_id=batch.batch_id,
            last_committed_batch=batch.last_committed_batch,
            participants=tuple(Participant(
                producer_id=p.producer_id, producer_epoch=p.producer_epoch, task=p.task, attempt=p.attempt,
                partitions=frozenset(TopicPartition(t.topic, t.partition) for t in p.partitions))
                for p in batch.participants),
            winners=frozenset(batch.winners), start_time_ms=batch.start_time_ms,
            last_update_time_ms=batch.last_update_time_ms)
