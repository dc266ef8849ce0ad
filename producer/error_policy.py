"""What the producer does with each error, by the kind of request that got it (KAFKA-REFERENCE §3, §5).

The same wire code can mean different things: INVALID_PRODUCER_EPOCH fails one batch
(abortable) when a partition says it, but means "fenced" (fatal) when a coordinator does.
These two functions are the one place that decides; the sender and the coordinator
requests only act on the answer.
"""
from __future__ import annotations

import enum

from proto import errors as e
from proto.errors import KafkaError


class Action(enum.Enum):
    #: the batch is already written (a duplicate): complete it
    SUCCESS = "success"
    #: back off and send the same request again
    RETRY = "retry"
    #: forget the leader / coordinator, find it again, then retry
    REFRESH_AND_RETRY = "refresh-and-retry"
    #: fail this batch or call; a transactional producer must abort its transaction
    ABORTABLE = "abortable"
    #: the producer instance is unusable (fenced, misconfigured); only close() is left
    FATAL = "fatal"


#: coordinator answers that mean another producer with the same transactional id took over
FENCED_ON_COORDINATOR = (e.ProducerFencedError, e.InvalidProducerEpochError)

#: coordinator answers after which the transaction can still be aborted
ABORTABLE_ON_COORDINATOR = (
    e.TransactionAbortableError, e.InvalidProducerIdMappingError, e.UnknownProducerIdError,
    e.IllegalGenerationError, e.UnknownMemberIdError, e.FencedInstanceIdError,
)


def classify_produce_error(error: KafkaError) -> Action:
    """A partition's answer to one batch (or a transport failure of the whole request)."""
    if isinstance(error, e.DuplicateSequenceError):
        return Action.SUCCESS
    if isinstance(error, e.ProducerFencedError):
        return Action.FATAL
    if error.retriable:
        return Action.REFRESH_AND_RETRY if e.needs_rediscovery(error) else Action.RETRY
    # KIP-588: INVALID_PRODUCER_EPOCH on produce is abortable; so are OUT_OF_ORDER_SEQUENCE,
    # INVALID_TXN_STATE, TRANSACTION_ABORTABLE, MESSAGE_TOO_LARGE, INVALID_RECORD and anything else
    return Action.ABORTABLE


def classify_coordinator_error(error: KafkaError) -> Action:
    """A transaction or group coordinator's answer (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
    TxnOffsetCommit, EndTxn)."""
    if error.retriable:
        # NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, unreachable or silent node: ask who the coordinator is now
        return Action.REFRESH_AND_RETRY if e.needs_rediscovery(error) else Action.RETRY
    if isinstance(error, ABORTABLE_ON_COORDINATOR):
        return Action.ABORTABLE
    # PRODUCER_FENCED / INVALID_PRODUCER_EPOCH (fenced), INVALID_TXN_STATE, INVALID_TRANSACTION_TIMEOUT,
    # and any unexpected code: Kafka makes them fatal
    return Action.FATAL


def fenced_error(transactional_id: str | None, epoch: int, cause: KafkaError | None = None) -> e.ProducerFencedError:
    """Fencing, said once and with the fix (the node's own words stay reachable as __cause__)."""
    error = e.ProducerFencedError(
        f"[PRODUCER_FENCED] transactional id {transactional_id!r} was fenced by a newer producer "
        f"(this one has epoch {epoch}); create a new Producer")
    error.__cause__ = cause
    return error


def as_fatal(error: KafkaError, transactional_id: str | None, epoch: int) -> KafkaError:
    """The exception a fatal coordinator error is raised as: fencing becomes ProducerFencedError."""
    if isinstance(error, FENCED_ON_COORDINATOR):
        return fenced_error(transactional_id, epoch, error)
    return error
