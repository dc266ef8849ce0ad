"""A transactional id's coordinator-side metadata and the one table of its valid transitions.

Metadata values are immutable: a change is prepared as a new value (`transit`), written to
__transaction_state, and installed only once durable (Kafka's prepareTransitionTo /
completeTransitionTo). `check_transition` is the only place a state change is judged.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Self

from proto import txnsim_pb2 as pb
from proto.errors import UnknownServerError
from proto.structs import TopicPartition, TransactionState

S = TransactionState

#: target state -> the states it may be entered from (KAFKA-REFERENCE §1, transactions V2)
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

NO_PRODUCER_ID = -1
NO_EPOCH = -1
#: clients never get 32767, so one more fence is always possible (§8)
MAX_CLIENT_EPOCH = 32766


class IllegalTransitionError(UnknownServerError):
    """A coordinator bug: a transition that the state table forbids."""


def check_transition(transactional_id: str, source: TransactionState, target: TransactionState) -> None:
    if source not in VALID_PREVIOUS_STATES[target]:
        raise IllegalTransitionError(
            f"[UNKNOWN_SERVER_ERROR] transactional id {transactional_id!r} cannot move from {source} to {target}")


class TransactionValue:
    """What every value of __transaction_state shares (TxnMetadata, and batch_metadata.BatchTxn):
    one state, moved only through the table, with a last-update time that never goes back."""

    __slots__ = ()
    transactional_id: str
    state: TransactionState
    last_update_time_ms: int

    def transit(self, target: TransactionState, now_ms: int, **changes: object) -> Self:
        """A new value in `target`, checked against the table; timestamps never go back."""
        check_transition(self.transactional_id, self.state, target)
        changes.setdefault("last_update_time_ms", max(now_ms, self.last_update_time_ms))
        # mypy cannot see that a Self of this mixin is a dataclass (both subclasses are)
        return dataclasses.replace(self, state=target, **changes)  # type: ignore[type-var]

    @property
    def is_complete(self) -> bool:
        return self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)


@dataclass(frozen=True, slots=True)
class TxnMetadata(TransactionValue):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = S.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    start_time_ms: int = -1
    last_update_time_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    #: the last bump fenced the producer (timeout abort, new instance): its EndTxn is no retry
    ended_by_fence: bool = False
    #: of the client that ended the last transaction: 2 when its markers carry an epoch bumped past the
    #: data's (transactions V2; fences too), 1 for V1, 0 when written before this was recorded
    transaction_version: int = 0
    #: epoch before the last bump, to recognise retries; not persisted (-1 after a load)
    last_producer_epoch: int = field(default=NO_EPOCH, compare=False)

    # ------------------------------------------------------------ log codec

    def to_log_value(self) -> bytes:
        value = pb.TransactionLogValue(
            producer_id=self.producer_id, previous_producer_id=self.previous_producer_id,
            next_producer_id=self.next_producer_id, producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms, state=self.state.id,
            partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)
                        for tp in sorted(self.partitions)],
            last_update_time_ms=self.last_update_time_ms, start_time_ms=self.start_time_ms,
            ended_by_fence=self.ended_by_fence, transaction_version=self.transaction_version)
        return value.SerializeToString()

    @classmethod
    def from_log_value(cls, transactional_id: str, data: bytes) -> TxnMetadata:
        value = pb.TransactionLogValue.FromString(data)
        return cls(transactional_id=transactional_id, producer_id=value.producer_id,
                   producer_epoch=value.producer_epoch, timeout_ms=value.timeout_ms,
                   state=TransactionState.from_id(value.state),
                   partitions=frozenset(TopicPartition(p.topic, p.partition) for p in value.partitions),
                   start_time_ms=value.start_time_ms, last_update_time_ms=value.last_update_time_ms,
                   previous_producer_id=value.previous_producer_id, next_producer_id=value.next_producer_id,
                   ended_by_fence=value.ended_by_fence, transaction_version=value.transaction_version)


@dataclass(frozen=True, slots=True)
class Marker:
    """One producer's COMMIT or ABORT marker, owed to each of `partitions`."""

    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: frozenset[TopicPartition]
    #: 2: the epoch was bumped past the transaction's data (see TxnMarker.transaction_version)
    transaction_version: int = 1


#: one marker owed to one partition
Owed = tuple[Marker, TopicPartition]
