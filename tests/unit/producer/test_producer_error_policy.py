"""Which errors the producer retries, aborts or dies on, for produce vs coordinator requests."""
from __future__ import annotations

import pytest

from producer.error_policy import Action, as_fatal, classify_coordinator_error, classify_produce_error
from proto import errors as e

PRODUCE = [
    (e.NotLeaderOrFollowerError, Action.REFRESH_AND_RETRY),
    (e.UnknownTopicOrPartitionError, Action.REFRESH_AND_RETRY),
    (e.KafkaConnectionError, Action.REFRESH_AND_RETRY),
    (e.RequestTimedOutError, Action.RETRY),
    (e.KafkaTimeoutError, Action.REFRESH_AND_RETRY),  # no answer: the leader may be stalled
    (e.NotEnoughReplicasError, Action.RETRY),
    (e.KafkaStorageError, Action.RETRY),
    (e.CorruptMessageError, Action.RETRY),
    (e.DuplicateSequenceError, Action.SUCCESS),
    (e.OutOfOrderSequenceError, Action.ABORTABLE),
    (e.InvalidProducerEpochError, Action.ABORTABLE),  # KIP-588: abortable on produce
    (e.InvalidTxnStateError, Action.ABORTABLE),       # abortable on produce, fatal from a coordinator
    (e.TransactionAbortableError, Action.ABORTABLE),
    (e.RecordTooLargeError, Action.ABORTABLE),
    (e.InvalidRecordError, Action.ABORTABLE),
    (e.UnknownServerError, Action.ABORTABLE),
    (e.UnknownProducerIdError, Action.ABORTABLE),
    (e.ProducerFencedError, Action.FATAL),
]

COORDINATOR = [
    (e.NotCoordinatorError, Action.REFRESH_AND_RETRY),
    (e.CoordinatorNotAvailableError, Action.REFRESH_AND_RETRY),
    (e.KafkaConnectionError, Action.REFRESH_AND_RETRY),
    (e.CoordinatorLoadInProgressError, Action.RETRY),
    (e.ConcurrentTransactionsError, Action.RETRY),
    (e.KafkaTimeoutError, Action.REFRESH_AND_RETRY),  # no answer: ask who the coordinator is now
    (e.ProducerFencedError, Action.FATAL),
    (e.InvalidProducerEpochError, Action.FATAL),
    (e.InvalidTxnStateError, Action.FATAL),
    (e.InvalidTransactionTimeoutError, Action.FATAL),
    (e.UnknownServerError, Action.FATAL),
    (e.TransactionAbortableError, Action.ABORTABLE),
    (e.InvalidProducerIdMappingError, Action.ABORTABLE),
    (e.IllegalGenerationError, Action.ABORTABLE),
    (e.UnknownMemberIdError, Action.ABORTABLE),
    (e.FencedInstanceIdError, Action.ABORTABLE),
]


@pytest.mark.parametrize(("error", "action"), PRODUCE, ids=lambda x: getattr(x, "__name__", str(x)))
def test_produce_errors(error: type[e.KafkaError], action: Action) -> None:
    assert classify_produce_error(error("x")) is action


@pytest.mark.parametrize(("error", "action"), COORDINATOR, ids=lambda x: getattr(x, "__name__", str(x)))
def test_coordinator_errors(error: type[e.KafkaError], action: Action) -> None:
    assert classify_coordinator_error(error("x")) is action


def test_fencing_from_a_coordinator_becomes_producer_fenced_with_a_fix() -> None:
    fatal = as_fatal(e.InvalidProducerEpochError("[INVALID_PRODUCER_EPOCH] old"), "tx-1", 6)
    assert isinstance(fatal, e.ProducerFencedError)
    assert "transactional id 'tx-1' was fenced by a newer producer" in str(fatal)
    assert "create a new Producer" in str(fatal)


def test_other_fatal_errors_keep_their_class() -> None:
    error = e.InvalidTxnStateError("x")
    assert as_fatal(error, "tx-1", 0) is error
