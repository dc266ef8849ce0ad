"""Transactions on the partition side: verification, the LSO, markers, the aborted index, read_committed."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from partitions import AppendOrigin, OpenTransaction, PartitionLog
from partitions.segment import Segment
from proto import records
from proto.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionAbortableError,
    TransactionCoordinatorFencedError,
)
from proto.structs import IsolationLevel

COMMITTED = IsolationLevel.READ_COMMITTED
UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
pytestmark = pytest.mark.parametrize("storage", ["file", "memory"], indirect=True)


def data(*values: bytes, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return records.encode_batch([(1000, None, v, ()) for v in values],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def txn_append(log: PartitionLog, pid: int, seq: int, *values: bytes, epoch: int = 0):
    return log.append(data(*values, pid=pid, epoch=epoch, seq=seq, txn=True), verified_producer_ids=frozenset({pid}))


def end(log: PartitionLog, pid: int, *, committed: bool, epoch: int = 1, coordinator_epoch: int = 0):
    return log.append_marker(producer_id=pid, producer_epoch=epoch, committed=committed,
                             coordinator_epoch=coordinator_epoch, timestamp_ms=5000)


def fetched_offsets(log: PartitionLog, offset: int = 0, isolation: IsolationLevel = COMMITTED) -> list[int]:
    return [b.header.base_offset for b in records.iter_batches(log.read(offset, 1 << 20, isolation).records)]


def test_lso_is_held_at_an_open_transactions_first_offset_until_commit(open_log):
    log = open_log()
    log.append(data(b"plain-0", b"plain-1"))
    txn_append(log, 7, 0, b"t0")
    log.append(data(b"plain-2"))
    txn_append(log, 7, 1, b"t1")
    assert log.high_watermark == 5 and log.last_stable_offset == 2
    assert fetched_offsets(log) == [0]
    assert fetched_offsets(log, isolation=UNCOMMITTED) == [0, 2, 3, 4]
    assert log.open_transactions() == [OpenTransaction(7, 0, 2, 1000)]
    marker = end(log, 7, committed=True)
    assert marker.base_offset == 5
    assert log.last_stable_offset == log.high_watermark == 6
    assert fetched_offsets(log) == [0, 2, 3, 4, 5]
    assert log.open_transactions() == []
    assert log.read(0, 1 << 20, COMMITTED).aborted_transactions == []


def test_the_earliest_of_several_open_transactions_sets_the_lso(open_log):
    log = open_log()
    txn_append(log, 1, 0, b"a")
    txn_append(log, 2, 0, b"b")
    assert log.last_stable_offset == 0
    end(log, 1, committed=True)
    assert log.last_stable_offset == 1
    end(log, 2, committed=False)
    assert log.last_stable_offset == 4


def test_read_committed_never_returns_data_at_or_beyond_the_lso(open_log):
    log = open_log()
    log.append(data(b"a"))
    txn_append(log, 3, 0, b"open")
    for i in range(5):
        log.append(data(bytes([i])))
    for offset in (0, 1):
        for batch in records.iter_batches(log.read(offset, 1 << 20, COMMITTED).records):
            assert batch.header.last_offset < log.last_stable_offset == 1
    assert log.read(1, 1 << 20, COMMITTED).records == b""
    assert log.read(4, 1 << 20, COMMITTED).records == b""  # past the LSO but below the HW: empty, not an error
    assert not log.wait_for_data(1, COMMITTED, 0.0)
    assert log.wait_for_data(1, UNCOMMITTED, 0.0)


def test_abort_is_indexed_and_returned_to_read_committed_fetches(open_log):
    log = open_log()
    txn_append(log, 9, 0, b"doomed-0")           # offset 0
    log.append(data(b"plain"))                   # offset 1
    txn_append(log, 9, 1, b"doomed-1")           # offset 2
    assert end(log, 9, committed=False).base_offset == 3
    log.append(data(b"after"))                   # offset 4
    (entry,) = log.aborted_transactions()
    assert (entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset) == (9, 0, 3, 4)
    assert log.read(0, 1 << 20, COMMITTED).aborted_transactions == [(9, 0)]
    assert log.read(3, 1 << 20, COMMITTED).aborted_transactions == [(9, 0)]  # the marker is still ahead
    assert log.read(4, 1 << 20, COMMITTED).aborted_transactions == []       # entirely behind the fetch
    assert log.read(0, 1 << 20, UNCOMMITTED).aborted_transactions == []


def test_aborted_entries_are_bounded_by_the_returned_data(open_log):
    log = open_log()
    log.append(data(b"x" * 200))                 # offset 0
    txn_append(log, 4, 0, b"doomed")             # offset 1
    end(log, 4, committed=False)                 # offset 2
    small = log.read(0, 10, COMMITTED)
    assert [b.header.base_offset for b in records.iter_batches(small.records)] == [0]
    assert small.aborted_transactions == []      # the abort starts after the returned batch
    assert log.read(0, 1 << 20, COMMITTED).aborted_transactions == [(4, 1)]


def test_a_transaction_is_still_open_until_its_marker_is_durable(open_log, monkeypatch):
    log = open_log()
    log.append(data(b"plain"))
    txn_append(log, 1, 0, b"t")
    entered, release = threading.Event(), threading.Event()
    real_sync = Segment.sync

    def gated_sync(segment):
        entered.set()
        assert release.wait(10)
        real_sync(segment)

    monkeypatch.setattr(Segment, "sync", gated_sync)
    with ThreadPoolExecutor(1) as pool:
        marker = pool.submit(end, log, 1, committed=True)
        assert entered.wait(10)
        assert log.log_end_offset == 3 and log.high_watermark == 2
        assert log.open_transactions() == []          # closed in the producer state ...
        assert log.last_stable_offset == 1            # ... but its marker is not durable yet
        assert fetched_offsets(log) == [0]
        release.set()
        assert marker.result(10).base_offset == 2
    assert log.last_stable_offset == log.high_watermark == 3


def test_an_unverified_transactional_batch_is_rejected_as_abortable(open_log):
    log = open_log()
    first = data(b"t", pid=5, epoch=0, seq=0, txn=True)
    assert log.needs_txn_verification(first) == [(5, 0)]
    with pytest.raises(TransactionAbortableError):
        log.append(first)
    with pytest.raises(TransactionAbortableError):
        log.append(first, verified_producer_ids=frozenset({6}))
    assert log.log_end_offset == 0
    log.append(first, verified_producer_ids=frozenset({5}))
    following = data(b"u", pid=5, epoch=0, seq=1, txn=True)
    assert log.needs_txn_verification(following) == []
    log.append(following)  # the transaction is open here: no verification needed


def test_the_next_transactions_write_before_the_previous_marker_is_verified_again(open_log):
    """Transactions V2 bumps the epoch at every end: a write of the new epoch that arrives while the previous
    transaction is still open here (its marker on the way) must be checked with the coordinator, or it would
    be appended into the previous transaction and ended by its marker (the simulator found this)."""
    log = open_log()
    txn_append(log, 5, 0, b"first", epoch=0)
    next_txn = data(b"second", pid=5, epoch=1, seq=0, txn=True)
    assert log.needs_txn_verification(next_txn) == [(5, 1)]
    end(log, 5, committed=True, epoch=1)  # the previous transaction's marker, at the bumped epoch
    log.append(next_txn, verified_producer_ids=frozenset({5}))
    assert [t.first_offset for t in log.open_transactions()] == [2], "the second write opened its own transaction"


def test_a_coordinator_write_opens_a_transaction_without_verification(open_log):
    log = open_log()
    log.append(data(b"offsets", pid=8, epoch=2, txn=True), origin=AppendOrigin.COORDINATOR)
    assert log.last_stable_offset == 0
    with pytest.raises(InvalidProducerEpochError):
        log.append(data(b"late", pid=8, epoch=1, txn=True), origin=AppendOrigin.COORDINATOR)
    end(log, 8, committed=True, epoch=3)
    assert log.last_stable_offset == 2


def test_a_non_transactional_batch_during_an_open_transaction_is_an_invalid_txn_state(open_log):
    log = open_log()
    txn_append(log, 2, 0, b"t")
    with pytest.raises(InvalidTxnStateError):
        log.append(data(b"plain", pid=2, epoch=0, seq=1))


def test_marker_with_a_stale_coordinator_epoch_is_fenced(open_log):
    log = open_log()
    txn_append(log, 3, 0, b"t")
    end(log, 3, committed=True, coordinator_epoch=5)       # offset 1, from the coordinator at epoch 5
    txn_append(log, 3, 0, b"u", epoch=1)                   # offset 2, the next transaction
    with pytest.raises(TransactionCoordinatorFencedError):
        end(log, 3, committed=False, epoch=2, coordinator_epoch=4)  # a zombie coordinator
    assert log.log_end_offset == 3 and log.last_stable_offset == 2
    assert log.producer_snapshots()[0].coordinator_epoch == 5
    end(log, 3, committed=False, epoch=2, coordinator_epoch=6)
    assert log.last_stable_offset == 4


def test_marker_with_a_stale_producer_epoch_is_rejected(open_log):
    log = open_log()
    txn_append(log, 3, 0, b"t", epoch=4)
    with pytest.raises(InvalidProducerEpochError):
        end(log, 3, committed=False, epoch=3)
    assert log.last_stable_offset == 0


def test_a_marker_for_a_producer_without_an_open_transaction_is_harmless(open_log):
    log = open_log()
    log.append(data(b"a"))
    assert end(log, 11, committed=False).base_offset == 1
    assert end(log, 11, committed=False).base_offset == 2  # resent marker
    assert log.aborted_transactions() == ()
    assert log.last_stable_offset == log.high_watermark == 3
    txn_append(log, 12, 0, b"t")
    end(log, 12, committed=True)
    end(log, 12, committed=True)  # resent after completion
    assert log.last_stable_offset == log.high_watermark == 6


def test_markers_bump_the_epoch_so_the_next_transaction_restarts_at_sequence_zero(open_log):
    log = open_log()
    txn_append(log, 4, 0, b"a", b"b", epoch=0)
    end(log, 4, committed=True, epoch=1)
    with pytest.raises(InvalidProducerEpochError):
        txn_append(log, 4, 2, b"late", epoch=0)  # a zombie's produce after the transaction ended
    with pytest.raises(OutOfOrderSequenceError):
        txn_append(log, 4, 2, b"c", epoch=1)
    txn_append(log, 4, 0, b"c", epoch=1)
    snapshot = log.producer_snapshots()[0]
    assert (snapshot.producer_epoch, snapshot.last_sequence, snapshot.current_txn_start_offset) == (1, 0, 3)


def test_read_committed_result_reports_hw_and_lso(open_log):
    log = open_log()
    log.append(data(b"a"))
    txn_append(log, 1, 0, b"t")
    fetched = log.read(0, 1 << 20, COMMITTED)
    assert (fetched.high_watermark, fetched.last_stable_offset, fetched.log_start_offset) == (2, 1, 0)


def test_a_late_v2_marker_cannot_end_the_next_transaction_written_at_its_epoch(open_log):
    """KAFKA-19446, found by `txnsim simulate` with late markers: under transactions V2 the next transaction is
    written at the epoch the last markers carried, so a copy of such a marker arriving late must not end it."""
    log = open_log()
    txn_append(log, 7, 0, b"first", epoch=0)
    log.append_marker(producer_id=7, producer_epoch=1, committed=True, coordinator_epoch=0, transaction_version=2)
    txn_append(log, 7, 0, b"second", epoch=1)  # the next transaction, at the bumped epoch
    with pytest.raises(InvalidProducerEpochError, match="late marker"):
        log.append_marker(producer_id=7, producer_epoch=1, committed=False, coordinator_epoch=0,
                          transaction_version=2)
    assert log.open_transactions() == [OpenTransaction(7, 1, 2, 1000)], "the second transaction is still open"
    log.append_marker(producer_id=7, producer_epoch=2, committed=True, coordinator_epoch=0, transaction_version=2)
    assert fetched_offsets(log) == [0, 1, 2, 3]
    # a retry of that marker with nothing open is harmless (KAFKA-19999), as is any marker of V1 at the data's epoch
    log.append_marker(producer_id=7, producer_epoch=2, committed=True, coordinator_epoch=0, transaction_version=2)
    txn_append(log, 8, 0, b"v1", epoch=4)
    log.append_marker(producer_id=8, producer_epoch=4, committed=True, coordinator_epoch=0, transaction_version=1)
    assert log.open_transactions() == []
