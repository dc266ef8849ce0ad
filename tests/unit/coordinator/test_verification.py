"""What a partition leader (or a group coordinator) answers when the transaction coordinator's answer to its
verification or implicit add is not "yes": Kafka's leader's mapping, shared with the simulator."""
from __future__ import annotations

import pytest

from coordinator.verification import verification_error
from proto.errors import (
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    NotEnoughReplicasError,
    TransactionAbortableError,
)
from proto.structs import TopicPartition

TP = TopicPartition("orders", 0)


@pytest.mark.parametrize(("code", "expected"), [
    (15, NotEnoughReplicasError),         # COORDINATOR_NOT_AVAILABLE: the coordinator is moving, resend
    (51, NotEnoughReplicasError),         # CONCURRENT_TRANSACTIONS: held past its deadline, resend
    (55, NotEnoughReplicasError),         # OPERATION_NOT_ATTEMPTED: another partition of the call was refused
    (90, InvalidProducerEpochError),      # PRODUCER_FENCED: what producers handle on a produce (KIP-588)
    (49, InvalidProducerIdMappingError),  # the id expired: passed on, the abort then skips EndTxn
    (48, TransactionAbortableError),      # INVALID_TXN_STATE: the transaction cannot take this write
])
def test_each_coordinator_answer_becomes_the_produce_error_kafkas_leader_gives(code, expected):
    error = verification_error(code, "tx-1", TP, 7, 3)
    assert isinstance(error, expected) and error.retriable == (expected is NotEnoughReplicasError)


def test_a_yes_lets_the_write_through():
    assert verification_error(0, "tx-1", TP, 7, 3) is None
