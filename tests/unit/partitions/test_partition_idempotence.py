"""The idempotent producer on the partition side (KAFKA-REFERENCE §7): epochs, sequences, duplicates."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitions import AppendOrigin, PartitionLog
from partitions.producer_state import SEQUENCE_MODULUS, in_sequence
from proto import records
from proto.errors import InvalidProducerEpochError, OutOfOrderSequenceError


def batch(count: int = 1, *, pid: int = 1, epoch: int = 0, seq: int = 0, txn: bool = False) -> bytes:
    return records.encode_batch([(1000, None, f"{pid}-{seq}-{i}".encode(), ()) for i in range(count)],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def test_duplicate_batch_is_acknowledged_with_original_offsets(open_log):
    log = open_log()
    log.append(batch(2, seq=0))
    original = log.append(batch(3, seq=2))
    log.append(batch(1, seq=5))
    retry = log.append(batch(3, seq=2))
    assert retry.duplicate
    assert (retry.base_offset, retry.last_offset) == (original.base_offset, original.last_offset) == (2, 4)
    assert log.log_end_offset == 6


def test_only_the_last_five_batches_are_recognised_as_duplicates(open_log):
    log = open_log()
    for seq in range(6):
        log.append(batch(seq=seq))
    assert log.append(batch(seq=1)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(seq=0))


def test_a_gap_in_sequences_is_out_of_order(open_log):
    log = open_log()
    log.append(batch(2, seq=0))
    with pytest.raises(OutOfOrderSequenceError, match="expected 2"):
        log.append(batch(seq=3))
    assert log.log_end_offset == 2


def test_a_retry_overlapping_a_written_batch_is_out_of_order(open_log):
    log = open_log()
    log.append(batch(3, seq=0))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(2, seq=1))


def test_a_stale_epoch_is_rejected(open_log):
    log = open_log()
    log.append(batch(seq=0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        log.append(batch(seq=1, epoch=2))


def test_a_new_epoch_must_start_at_sequence_zero(open_log):
    log = open_log()
    log.append(batch(seq=0, epoch=0))
    log.append(batch(seq=1, epoch=0))
    with pytest.raises(OutOfOrderSequenceError, match="sequence 0"):
        log.append(batch(seq=2, epoch=1))
    assert log.append(batch(seq=0, epoch=1)).base_offset == 2
    with pytest.raises(InvalidProducerEpochError):
        log.append(batch(seq=2, epoch=0))


def test_a_producer_without_state_may_start_at_any_sequence(open_log):
    log = open_log()
    assert log.append(batch(seq=41)).base_offset == 0
    assert log.append(batch(seq=42)).base_offset == 1


def test_sequences_wrap_from_int32_max_to_zero(open_log):
    log = open_log()
    log.append(batch(2, seq=SEQUENCE_MODULUS - 2))
    assert log.producer_snapshots()[0].last_sequence == SEQUENCE_MODULUS - 1
    assert not log.append(batch(seq=0)).duplicate
    assert in_sequence(SEQUENCE_MODULUS - 1, 0) and in_sequence(-1, 0) and not in_sequence(5, 7)


def test_a_batch_spanning_the_wrap_continues_at_its_wrapped_last_sequence(open_log):
    log = open_log()
    log.append(batch(3, seq=SEQUENCE_MODULUS - 1))
    assert log.producer_snapshots()[0].last_sequence == 1
    log.append(batch(seq=2))


def test_producers_are_sequenced_independently(open_log):
    log = open_log()
    log.append(batch(pid=1, seq=0))
    log.append(batch(pid=2, seq=0))
    log.append(batch(pid=1, seq=1))
    assert [(s.producer_id, s.last_sequence) for s in log.producer_snapshots()] == [(1, 1), (2, 0)]


def test_coordinator_writes_skip_sequence_checks(open_log):
    log = open_log()
    log.append(batch(seq=-1, pid=3), origin=AppendOrigin.COORDINATOR)
    log.append(batch(seq=-1, pid=3), origin=AppendOrigin.COORDINATOR)
    assert log.log_end_offset == 2


def test_duplicates_are_recognised_after_a_restart(open_log):
    log = open_log()
    log.append(batch(seq=0))
    first = log.append(batch(2, seq=1))
    log.close()
    log = open_log(leader_epoch=1)
    retry = log.append(batch(2, seq=1))
    assert retry.duplicate and retry.base_offset == first.base_offset
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(seq=5))


# A request is one of: the next batch, a resend of an earlier batch, or a batch at a wrong sequence.
requests = st.lists(st.tuples(st.sampled_from(["next", "resend", "skip", "rewind"]),
                              st.integers(1, 3), st.integers(0, 7)), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_every_sequence_lands_exactly_once_whatever_the_retries(plan):
    """Model check: the log holds each produced sequence once, in order, and answers retries with its offsets."""
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog.open(Path(tmp), "t", 0, leader_epoch=0)
        try:
            sent: list[tuple[int, int, int, int]] = []  # (seq, count, base offset, last offset)
            next_seq = 0
            for kind, count, back in plan:
                if kind == "next":
                    result = log.append(batch(count, seq=next_seq))
                    assert not result.duplicate and result.base_offset == log.log_end_offset - count
                    sent.append((next_seq, count, result.base_offset, result.last_offset))
                    next_seq += count
                elif kind == "resend" and sent:
                    seq, n, base, last = sent[-1 - back % len(sent)]
                    if back % len(sent) < 5:
                        result = log.append(batch(n, seq=seq))
                        assert result.duplicate and (result.base_offset, result.last_offset) == (base, last)
                    else:
                        with pytest.raises(OutOfOrderSequenceError):
                            log.append(batch(n, seq=seq))
                else:
                    wrong = next_seq + 1 + back if kind == "skip" else next_seq - 1 - back
                    if not sent or wrong < 0 or any(seq == wrong for seq, *_ in sent[-5:]):
                        continue
                    with pytest.raises(OutOfOrderSequenceError):
                        log.append(batch(count, seq=wrong))
            seqs = [int(r.value.split(b"-")[1]) + int(r.value.split(b"-")[2])
                    for b in log.batches() for r in b.records()]
            assert seqs == list(range(next_seq))
        finally:
            log.close()
