"""The coordinator's transaction state table is Kafka's, and nothing outside it is allowed."""
from __future__ import annotations

import itertools

import pytest

from coordinator.txn.metadata import VALID_PREVIOUS_STATES, IllegalTransitionError, TxnMetadata, check_transition
from proto.structs import TopicPartition, TransactionState

S = TransactionState

KAFKA_TABLE = {  # KAFKA-REFERENCE §1, transactions V2
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def test_the_table_matches_kafkas():
    assert {k: set(v) for k, v in VALID_PREVIOUS_STATES.items()} == KAFKA_TABLE


@pytest.mark.parametrize("source,target", list(itertools.product(S, S)))
def test_every_pair_is_judged_by_the_table(source, target):
    if source in KAFKA_TABLE[target]:
        check_transition("tx", source, target)
    else:
        with pytest.raises(IllegalTransitionError) as failure:
            check_transition("tx", source, target)
        assert str(source) in str(failure.value) and str(target) in str(failure.value)


def test_state_ids_are_kafkas():
    assert [s.id for s in (S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT,
                           S.COMPLETE_ABORT, S.DEAD, S.PREPARE_EPOCH_FENCE)] == list(range(8))


def test_metadata_round_trips_through_its_log_value():
    meta = TxnMetadata("tx-1", 7, 3, 60000, S.ONGOING, frozenset({TopicPartition("a", 1), TopicPartition("b", 0)}),
                       start_time_ms=10, last_update_time_ms=20, previous_producer_id=5, next_producer_id=-1)
    assert TxnMetadata.from_log_value("tx-1", meta.to_log_value()) == meta


def test_transit_never_moves_time_backwards():
    meta = TxnMetadata("tx", 1, 0, 1000, S.EMPTY, last_update_time_ms=500)
    assert meta.transit(S.ONGOING, 100).last_update_time_ms == 500
