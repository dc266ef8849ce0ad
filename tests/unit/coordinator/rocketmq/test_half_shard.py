"""The half-message shard's rules, without I/O: when checks are due, how counts and decisions are
kept, what a replay of the logs rebuilds (half_shard.py)."""
from __future__ import annotations

import dataclasses

import pytest

from coordinator.rocketmq.half_shard import CheckAction, HalfShard
from coordinator.rocketmq.log_format import (
    HalfRecord,
    OpKind,
    OpRecord,
    Resolution,
    Storage,
    decode_half,
    decode_op,
    encode_half,
    encode_op,
    parse_transaction_id,
)
from proto import records
from proto.errors import IllegalMessageIdError, InvalidTransactionIdError

INTERVAL, CHECK_MAX, IMMUNITY = 1000, 3, 500


def half(topic: str = "points", partition: int = 0, stored: int = 0, **changes) -> HalfRecord:
    record = HalfRecord(topic=topic, partition=partition, producer_group="orders", message_id="m1", key=b"k",
                        value=b"v", user_headers=(("orderId", b"1"),), store_time_ms=stored,
                        check_immunity_ms=IMMUNITY, storage=Storage.ROCKETMQ)
    return dataclasses.replace(record, **changes)


#: what a producer's end names besides the transaction id (the record's group and message id, as half() makes it)
THE_SENDER = {"producer_group": "orders", "message_id": "m1"}


def shard() -> HalfShard:
    core = HalfShard(3, INTERVAL, CHECK_MAX)
    core.copy_producer_id = 77
    return core


def roundtrip(row) -> records.Record:
    """A row as it comes back from the log."""
    batch = next(records.iter_batches(records.encode_batch([row])))
    return next(batch.records())


def test_half_and_op_records_survive_the_log_format():
    record = half(check_times=2, last_check_ms=1234, first_offset=5, tag="T", keys="a b", born_timestamp_ms=9)
    assert decode_half(roundtrip(encode_half(record, 1))) == record
    op = OpRecord("TX-3-5", 5, Resolution.COMMIT, source="SERVER_CHECK", copy_producer_id=77, copy_sequence=4)
    assert decode_op(roundtrip(encode_op(op, 1))) == op
    assert parse_transaction_id("TX-3-5") == (3, 5)
    assert parse_transaction_id("garbage") is None and parse_transaction_id("TX-a-1") is None


def test_the_first_check_waits_for_the_immunity_then_one_per_interval():
    core = shard()
    pending = core.stored(10, half(stored=0))
    assert core.due(IMMUNITY - 1) == []
    [due] = core.due(IMMUNITY)
    assert due.action is CheckAction.CHECK and due.record.check_times == 1 and due.record.last_check_ms == IMMUNITY
    core.checked_durably(pending.transaction_id, 11, due.record)
    assert core.due(IMMUNITY + INTERVAL - 1) == [], "checked at most once per interval"
    [again] = core.due(IMMUNITY + INTERVAL)
    assert again.record.check_times == 2 and again.record.first_offset == 10


def test_after_check_max_checks_the_message_is_discarded():
    core = shard()
    pending = core.stored(0, half())
    now = IMMUNITY
    for count in range(1, CHECK_MAX + 1):
        [due] = core.due(now)
        assert due.action is CheckAction.CHECK and due.record.check_times == count
        core.checked_durably(pending.transaction_id, count, due.record)
        now += INTERVAL
    [due] = core.due(now)
    assert due.action is CheckAction.DISCARD
    discard = core.discard(pending.transaction_id)
    assert discard is not None and core.discard(pending.transaction_id) is None, "one discard decision"
    decision = core.decided_durably(discard)
    assert decision.resolution is Resolution.DISCARD and core.due(now + 10 * INTERVAL) == []
    assert not decision.needs_effect, "a discarded RocketMQ-stored message is never copied"


def test_a_check_that_found_no_producer_is_not_counted_and_comes_back_after_an_interval():
    core = shard()
    pending = core.stored(0, half())
    core.unanswered(pending.transaction_id, IMMUNITY)
    assert core.due(IMMUNITY + INTERVAL - 1) == []
    [due] = core.due(IMMUNITY + INTERVAL)
    assert due.record.check_times == 1 and pending.unanswered == 1


def test_nothing_is_checked_once_decided_and_a_repeat_is_recognised():
    core = shard()
    pending = core.stored(0, half())
    outcome = core.end(pending.transaction_id, Resolution.COMMIT, source="CLIENT", **THE_SENDER)
    assert outcome.op is not None and outcome.op.copy_sequence == 0 and outcome.op.copy_producer_id == 77
    decision = core.decided_durably(outcome.op)
    assert decision.needs_effect and core.due(10**9) == []
    assert core.end(pending.transaction_id, Resolution.COMMIT, source="SERVER_CHECK", **THE_SENDER).already_decided
    with pytest.raises(InvalidTransactionIdError, match="already decided as COMMIT"):
        core.end(pending.transaction_id, Resolution.ROLLBACK, source="CLIENT", **THE_SENDER)
    assert [op.kind for op in core.done([pending.transaction_id])] == [OpKind.DONE]
    assert core.unfinished == {}


def test_unknown_ids_groups_and_messages_are_refused():
    core = shard()
    pending = core.stored(0, half())
    with pytest.raises(InvalidTransactionIdError, match="unknown"):
        core.end("TX-3-99", Resolution.COMMIT, source="CLIENT", **THE_SENDER)
    with pytest.raises(InvalidTransactionIdError, match="producer group"):
        core.end(pending.transaction_id, Resolution.COMMIT, source="CLIENT", producer_group="other", message_id="m1")
    with pytest.raises(InvalidTransactionIdError, match="holds message"):
        core.end(pending.transaction_id, Resolution.COMMIT, source="CLIENT", producer_group="orders", message_id="other")
    with pytest.raises(IllegalMessageIdError):  # a guessed transaction id alone decides nothing
        core.end(pending.transaction_id, Resolution.COMMIT, source="CLIENT")
    with pytest.raises(InvalidTransactionIdError):
        core.end(pending.transaction_id, Resolution.COMMIT, source="CLIENT", message_id="m1")
    assert core.end(pending.transaction_id, None, source="CLIENT", **THE_SENDER).op is None, "UNKNOW decides nothing"
    assert pending.transaction_id in core.pending


def test_a_second_decision_while_the_first_is_being_written_is_refused():
    core = shard()
    pending = core.stored(0, half())
    first = core.end(pending.transaction_id, Resolution.COMMIT, source="CLIENT", **THE_SENDER)
    assert first.op is not None
    assert core.end(pending.transaction_id, Resolution.COMMIT, source="SERVER_CHECK", **THE_SENDER).already_decided
    with pytest.raises(InvalidTransactionIdError, match="being decided"):
        core.end(pending.transaction_id, Resolution.ROLLBACK, source="CLIENT", **THE_SENDER)
    assert core.due(10**9) == [], "no check while a decision is being written"


def test_copy_sequences_run_per_partition_without_gaps_even_when_a_write_fails():
    core = shard()
    a, b, c = (core.stored(i, half(partition=p)) for i, p in enumerate((0, 0, 1)))
    ops = [core.end(p.transaction_id, Resolution.COMMIT, source="CLIENT", **THE_SENDER).op for p in (a, b, c)]
    assert [(op.copy_sequence) for op in ops] == [0, 1, 0]
    core.decisions_failed(ops[1:])  # the batch holding b and c was not written
    core.decided_durably(ops[0])
    retried = [core.end(p.transaction_id, Resolution.COMMIT, source="CLIENT", **THE_SENDER).op for p in (b, c)]
    assert [op.copy_sequence for op in retried] == [1, 0]


def test_replay_rebuilds_counts_decisions_and_owed_copies():
    """What the logs hold after a crash: the first record, a re-append with its count, decisions."""
    core = shard()
    checked = half(check_times=2, last_check_ms=4000, first_offset=0)
    committed, rolled_back = half(partition=1), half(partition=2)
    halves = [(0, half()), (1, committed), (2, rolled_back), (3, checked)]
    ops = [OpRecord("TX-3-1", 1, Resolution.COMMIT, copy_producer_id=77, copy_sequence=0),
           OpRecord("TX-3-2", 2, Resolution.ROLLBACK)]
    replayed = HalfShard(3, INTERVAL, CHECK_MAX)
    for offset, record in halves:
        replayed.replay_half(offset, record)
    for op in ops:
        replayed.replay_op(op)
    assert set(replayed.pending) == {"TX-3-0"}
    assert replayed.pending["TX-3-0"].record.check_times == 2, "the count survives through the log"
    assert replayed.pending["TX-3-0"].latest_offset == 3
    assert replayed.due(4000 + INTERVAL - 1) == [], "no check repeated after a restart"
    assert list(replayed.unfinished) == ["TX-3-1"], "the commit still owes its copy"
    assert replayed.copy_producer_id == 77
    replayed.replay_op(OpRecord("TX-3-1", 1, Resolution.COMMIT, kind=OpKind.DONE))
    assert replayed.unfinished == {}
    next_op = replayed.end("TX-3-0", Resolution.COMMIT, source="CLIENT", **THE_SENDER).op
    assert next_op is not None and next_op.copy_sequence == 0, "partition 0 has no copy yet"
    assert core.pending == {}


def test_a_discard_without_its_op_record_is_still_a_decision_after_replay():
    replayed = HalfShard(3, INTERVAL, CHECK_MAX)
    replayed.replay_half(0, half())
    replayed.replay_discard(0, half(check_times=CHECK_MAX, first_offset=0))
    assert replayed.pending == {} and replayed.decided == {"TX-3-0": Resolution.DISCARD}


def test_a_discard_whose_effect_was_recorded_done_owes_nothing_after_replay():
    """A message stored in place discarded, and its DISCARD OP record lost in a crash: the next owner takes the
    decision from the discard log, writes the ABORT marker and a DONE record. Replay reads the OP log (that DONE)
    before the discard log: the discard it then finds must not owe the marker again, on every load for good."""
    replayed = HalfShard(3, INTERVAL, CHECK_MAX)
    replayed.replay_half(0, half(storage=Storage.KAFKA, producer_id=7))
    replayed.replay_op(OpRecord("TX-3-0", 0, Resolution.DISCARD, kind=OpKind.DONE))
    replayed.replay_discard(0, half(check_times=CHECK_MAX, first_offset=0, storage=Storage.KAFKA, producer_id=7))
    assert replayed.decided == {"TX-3-0": Resolution.DISCARD} and replayed.unfinished == {}


def test_a_retried_send_finds_the_message_already_stored():
    core = shard()
    pending = core.stored(0, half())
    assert core.find("orders", "m1") is pending and core.find("orders", "other") is None
    core.decided_durably(core.end(pending.transaction_id, Resolution.ROLLBACK, source="CLIENT", **THE_SENDER).op)
    assert core.find("orders", "m1") is None


def test_a_retried_send_finds_the_undecided_message_after_a_replay_where_an_earlier_one_of_its_id_was_decided():
    """A send rolled back (its in-place write failed) and sent again leaves two messages of one id in the half
    log; replaying the first one's decision must not hide the second from the retry (found by the simulator,
    seed 12: the retry stored a third message, and check-back committed both undecided ones)."""
    first = shard()
    rolled_back = first.stored(0, half())
    op = first.end(rolled_back.transaction_id, Resolution.ROLLBACK, source="SERVER").op
    assert op is not None
    again = first.stored(1, half())
    replayed = shard()
    replayed.replay_half(0, half())
    replayed.replay_half(1, half())
    replayed.replay_op(op)
    found = replayed.find("orders", "m1")
    assert found is not None and found.transaction_id == again.transaction_id


def test_only_an_undecided_message_registered_for_that_partition_may_be_written_in_place():
    from proto.structs import TopicPartition
    core = shard()
    pending = core.stored(0, half(storage=Storage.KAFKA, producer_id=500, partition=1))
    assert core.may_write_in_place(500, TopicPartition("points", 1))
    assert not core.may_write_in_place(500, TopicPartition("points", 0)), "another partition"
    assert not core.may_write_in_place(501, TopicPartition("points", 1)), "another producer"
    op = core.end(pending.transaction_id, Resolution.ROLLBACK, source="CLIENT", **THE_SENDER).op
    assert not core.may_write_in_place(500, TopicPartition("points", 1)), "being decided"
    decision = core.decided_durably(op)
    assert decision.needs_effect, "a rolled-back in-place message still owes its ABORT marker"
    assert not core.may_write_in_place(500, TopicPartition("points", 1))


def test_a_clock_that_went_back_does_not_stall_the_checks_for_the_length_of_the_jump():
    core = shard()
    pending = core.stored(0, half(stored=50_000))
    [first] = core.due(50_000 + IMMUNITY)
    core.checked_durably(pending.transaction_id, 1, first.record)
    back = 50_000 + IMMUNITY - 30_000  # the clock (or the next owner's clock) is 30 s behind the record's
    [due] = core.due(back)
    assert due.record.check_times == 2 and due.record.last_check_ms == back, "checked now, not 30 s later"
    core.checked_durably(pending.transaction_id, 2, due.record)
    assert core.due(back + INTERVAL - 1) == [], "then once per interval again, on this clock"
    assert [d.record.check_times for d in core.due(back + INTERVAL)] == [3]
