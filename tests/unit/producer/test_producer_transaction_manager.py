"""The client transaction state machine: the §3 table, verbs, sequences and registration bookkeeping."""
from __future__ import annotations

import itertools

import pytest

from producer.transaction_manager import (
    VALID_PREVIOUS_STATES,
    TransactionManager,
    TransactionState,
    is_transition_valid,
)
from proto.errors import (
    IllegalStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TransactionAbortableError,
)
from proto.structs import TopicPartition

S = TransactionState
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)

#: KAFKA-REFERENCE §3, written out again so a change to the table must be deliberate
EXPECTED_TABLE = {
    S.UNINITIALIZED: {S.READY, S.ABORTABLE_ERROR},
    S.INITIALIZING: {S.UNINITIALIZED, S.ABORTING_TRANSACTION},
    S.READY: {S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION},
    S.IN_TRANSACTION: {S.READY},
    S.COMMITTING_TRANSACTION: {S.IN_TRANSACTION},
    S.ABORTING_TRANSACTION: {S.IN_TRANSACTION, S.ABORTABLE_ERROR},
    S.ABORTABLE_ERROR: {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING},
    S.FATAL_ERROR: set(S),
}


def manager_in(state: TransactionState, tid: str = "tx-1") -> TransactionManager:
    tm = TransactionManager(tid)
    tm._state = state  # test set-up only: put the machine in a given state
    if state in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
        tm._last_error = TransactionAbortableError("set up")
    return tm


def test_table_matches_kafka_reference() -> None:
    assert {k: set(v) for k, v in VALID_PREVIOUS_STATES.items()} == EXPECTED_TABLE


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)),
                         ids=lambda s: s.name)
def test_every_transition_is_allowed_or_names_both_states(source: TransactionState,
                                                          target: TransactionState) -> None:
    tm = manager_in(source)
    error = ProducerFencedError("boom") if target in (S.ABORTABLE_ERROR, S.FATAL_ERROR) else None
    if source in EXPECTED_TABLE[target]:
        tm._transition_to(target, action="test", error=error)
        assert tm.state is target
        assert is_transition_valid(source, target)
    else:
        with pytest.raises(IllegalStateError) as info:
            tm._transition_to(target, action="test", error=error)
        message = str(info.value)
        assert "'tx-1'" in message and source.name in message and target.name in message
        assert tm.state is source


def test_error_states_need_the_error() -> None:
    tm = manager_in(S.IN_TRANSACTION)
    with pytest.raises(ValueError):
        tm._transition_to(S.ABORTABLE_ERROR, action="test")


def test_commit_before_begin_names_current_and_expected_state() -> None:
    tm = manager_in(S.READY)
    with pytest.raises(IllegalStateError,
                       match=r"cannot commit_transaction: transactional id 'tx-1' is in state READY, "
                             r"expected IN_TRANSACTION"):
        tm.begin_commit()


def test_begin_twice_and_init_twice_are_rejected() -> None:
    tm = manager_in(S.READY)
    tm.begin_transaction()
    with pytest.raises(IllegalStateError, match="IN_TRANSACTION"):
        tm.begin_transaction()
    with pytest.raises(IllegalStateError, match="cannot init_transactions.*IN_TRANSACTION"):
        tm.begin_init()


def test_init_can_be_resumed_after_a_timeout() -> None:
    tm = TransactionManager("tx-1")
    assert tm.begin_init() is True
    assert tm.begin_init() is False  # still INITIALIZING: the caller retries the request
    tm.complete_init(7, 0)
    assert tm.state is S.READY and tm.producer_id_and_epoch.producer_id == 7


def test_send_outside_transaction_is_illegal_for_transactional_only() -> None:
    with pytest.raises(IllegalStateError, match="cannot send: transactional id 'tx-1' is in state READY"):
        manager_in(S.READY).check_can_send()
    manager_in(S.IN_TRANSACTION).check_can_send()
    TransactionManager(None).check_can_send()  # idempotent: any non-fatal state


def test_abortable_error_blocks_commit_but_allows_abort() -> None:
    tm = manager_in(S.IN_TRANSACTION)
    assert tm.set_abortable_error(OutOfOrderSequenceError("seq gap"))
    with pytest.raises(OutOfOrderSequenceError, match="call abort_transaction"):
        tm.begin_commit()
    with pytest.raises(OutOfOrderSequenceError):
        tm.check_can_send()
    assert tm.begin_abort() is True
    tm.complete_transaction()
    assert tm.state is S.READY and tm.last_error is None


def test_first_abortable_error_is_kept() -> None:
    tm = manager_in(S.IN_TRANSACTION)
    first = OutOfOrderSequenceError("first")
    tm.set_abortable_error(first)
    tm.set_abortable_error(TransactionAbortableError("second"))
    assert tm.last_error is first


def test_abortable_error_is_ignored_while_aborting() -> None:
    tm = manager_in(S.ABORTING_TRANSACTION)
    assert tm.set_abortable_error(TransactionAbortableError("late")) is False
    assert tm.state is S.ABORTING_TRANSACTION


def test_fatal_error_is_raised_by_every_verb() -> None:
    tm = manager_in(S.IN_TRANSACTION)
    tm.set_fatal_error(ProducerFencedError("fenced"))
    for verb in (tm.begin_transaction, tm.begin_commit, tm.begin_abort, tm.begin_init, tm.check_can_send):
        with pytest.raises(ProducerFencedError):
            verb()
    assert tm.state is S.FATAL_ERROR


def test_non_transactional_producer_rejects_transactional_calls() -> None:
    tm = TransactionManager(None)
    with pytest.raises(IllegalStateError, match="no transactional_id"):
        tm.begin_transaction()


def test_sequences_advance_by_record_count_and_reset_on_new_epoch() -> None:
    tm = TransactionManager("tx-1")
    tm.begin_init()
    tm.complete_init(5, 0)
    assert tm.next_sequence(TP0, 3) == 0
    assert tm.next_sequence(TP0, 2) == 3
    assert tm.next_sequence(TP1, 1) == 0
    assert tm.sequence(TP0) == 5
    tm.set_producer_id_and_epoch(5, 1)  # Transactions V2: EndTxn bumped the epoch
    assert tm.sequence(TP0) == 0 and tm.sequence(TP1) == 0


def test_sequence_wraps_at_int32_max() -> None:
    tm = TransactionManager(None)
    tm._sequences[TP0] = 2**31 - 2
    assert tm.next_sequence(TP0, 3) == 2**31 - 2
    assert tm.sequence(TP0) == 1


def test_same_pid_and_epoch_keeps_sequences() -> None:
    tm = TransactionManager("tx-1")
    tm.set_producer_id_and_epoch(5, 0)
    tm.next_sequence(TP0, 4)
    tm.set_producer_id_and_epoch(5, 0)  # a TV1 EndTxn echo changes nothing
    assert tm.sequence(TP0) == 4


def test_partition_registration_bookkeeping() -> None:
    tm = manager_in(S.IN_TRANSACTION)
    assert tm.maybe_add_partition(TP0) is True
    assert tm.maybe_add_partition(TP0) is False
    assert not tm.needs_end_txn
    assert tm.take_partitions_to_add() == [TP0]
    assert tm.needs_end_txn and tm.is_adding_partitions()
    assert tm.maybe_add_partition(TP0) is False  # in flight
    tm.partitions_not_added([TP0])
    assert tm.take_partitions_to_add() == [TP0]
    tm.partitions_added([TP0])
    assert tm.is_partition_added(TP0) and not tm.is_adding_partitions()
    assert tm.maybe_add_partition(TP0) is False
    tm.begin_commit()
    tm.complete_transaction()
    assert not tm.is_partition_added(TP0) and not tm.needs_end_txn


def test_no_registration_starts_once_abort_began() -> None:
    tm = manager_in(S.IN_TRANSACTION)
    tm.maybe_add_partition(TP0)
    tm.begin_abort()
    assert tm.take_partitions_to_add() == []


def test_idempotent_epoch_bump_goes_through_uninitialized() -> None:
    tm = TransactionManager(None)
    assert tm.needs_producer_id()
    tm.start_idempotent_init()
    tm.complete_init(9, 0)
    tm.next_sequence(TP0, 10)
    tm.require_epoch_bump()
    assert tm.needs_producer_id()
    tm.start_idempotent_init()
    assert tm.state is S.INITIALIZING
    tm.complete_init(9, 0)  # even the same pid/epoch from the node means a fresh start
    assert tm.state is S.READY and tm.sequence(TP0) == 0 and not tm.needs_producer_id()
