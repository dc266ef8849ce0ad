"""TransactionCoordinator logic over a real shard log; phase two recorded by a marker writer we control."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from coordinator.producer_ids import ProducerIdAllocator
from coordinator.txn import core
from coordinator.txn.coordinator import TransactionCoordinator
from partitions import LogManager
from proto import txnsim_pb2 as pb
from proto.errors import (
    ConcurrentTransactionsError,
    InvalidTxnStateError,
    KafkaError,
    NotCoordinatorError,
    ProducerFencedError,
)
from proto.hashing import partition_for
from tests.fakes import ManualClock, node_io
from tests.helpers import wait_until

SHARDS = 4


class RecordingMarkers:
    """Acknowledges markers at once (or refuses, to simulate a lost shard) and records them."""

    def __init__(self, succeed: bool = True) -> None:
        self.succeed = succeed
        self.written: list[tuple[int, int, bool, int, list]] = []
        self.lock = threading.Lock()

    def send(self, owed, *, coordinator_epoch):
        by_marker: dict = {}
        for marker, tp in owed:
            by_marker.setdefault(marker, []).append(tp)
        with self.lock:
            for m, tps in by_marker.items():
                self.written.append((m.producer_id, m.producer_epoch, m.committed, coordinator_epoch, sorted(tps)))
        return set(owed) if self.succeed else set()

    def send_async(self, owed, *, coordinator_epoch, done):
        done(frozenset(self.send(owed, coordinator_epoch=coordinator_epoch)))


def make(tmp_path, markers, clock=None, logs=None, assigned_here=lambda shard: False):
    logs = logs or LogManager(tmp_path / "logs")
    io = node_io(clock or ManualClock())
    tc = TransactionCoordinator(io=io, txn_shards=SHARDS, offsets_shards=2, transaction_max_timeout_ms=900_000,
                                transactional_id_expiration_ms=10_000,
                                allocator=ProducerIdAllocator(tmp_path / "pids"), markers=markers,
                                partitions_for=lambda topic: 3 if topic == "t" else None,
                                assigned_here=assigned_here)
    for shard in range(SHARDS):
        tc.load_shard(shard, logs.open_as_leader("__transaction_state", shard))
    return tc, logs


def init(tc, tid, timeout_ms=60_000):
    return tc.init_producer_id(pb.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms,
                                                        producer_id=-1, producer_epoch=-1))


def add(tc, tid, pid, epoch, *partitions):
    return tc.add_partitions(pb.AddPartitionsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch,
        partitions=[pb.TopicPartitionRef(topic="t", partition=p) for p in partitions]))


def state(tc, tid):
    return tc.describe_transactions(pb.DescribeTransactionsRequest(transactional_ids=[tid]), 0).transactions[0]


def test_commit_is_prepared_then_completed_after_markers_with_a_bumped_epoch(tmp_path):
    markers = RecordingMarkers()
    tc, _ = make(tmp_path, markers)
    ids = init(tc, "tx")
    assert add(tc, "tx", ids.producer_id, ids.producer_epoch, 0, 2).results[0].error_code == 0
    end = tc.end_txn(pb.EndTxnRequest(transactional_id="tx", producer_id=ids.producer_id,
                                      producer_epoch=ids.producer_epoch, committed=True))
    assert end.producer_epoch == ids.producer_epoch + 1
    wait_until(lambda: state(tc, "tx").state == "CompleteCommit")
    (pid, epoch, committed, _coordinator_epoch, partitions), = markers.written
    assert (pid, epoch, committed) == (ids.producer_id, ids.producer_epoch + 1, True)
    assert [tp.partition for tp in partitions] == [0, 2]
    retry = tc.end_txn(pb.EndTxnRequest(transactional_id="tx", producer_id=ids.producer_id,
                                        producer_epoch=ids.producer_epoch, committed=True))
    assert retry.producer_epoch == end.producer_epoch  # a retry, not a fence
    with pytest.raises(InvalidTxnStateError):
        tc.end_txn(pb.EndTxnRequest(transactional_id="tx", producer_id=ids.producer_id,
                                    producer_epoch=ids.producer_epoch, committed=False))


def test_a_reloaded_shard_finishes_a_prepared_commit(tmp_path):
    lost = RecordingMarkers(succeed=False)  # the first coordinator dies before any marker is acknowledged
    tc, logs = make(tmp_path, lost)
    ids = init(tc, "tx")
    add(tc, "tx", ids.producer_id, ids.producer_epoch, 1)
    tc.end_txn(pb.EndTxnRequest(transactional_id="tx", producer_id=ids.producer_id,
                                producer_epoch=ids.producer_epoch, committed=True))
    wait_until(lambda: lost.written)
    assert state(tc, "tx").state == "PrepareCommit"
    tc.close()
    logs.close_all()
    markers = RecordingMarkers()
    tc2, _ = make(tmp_path, markers)
    wait_until(lambda: state(tc2, "tx").state == "CompleteCommit")
    assert markers.written[0][2] is True
    assert markers.written[0][3] > lost.written[0][3]  # sent with the new coordinator epoch


def test_a_new_instance_fences_the_open_transaction_of_the_old_one(tmp_path):
    markers = RecordingMarkers()
    tc, _ = make(tmp_path, markers)
    old = init(tc, "tx")
    add(tc, "tx", old.producer_id, old.producer_epoch, 0)
    with pytest.raises(ConcurrentTransactionsError):
        init(tc, "tx")
    wait_until(lambda: state(tc, "tx").state == "CompleteAbort")
    assert markers.written[0][2] is False
    new = init(tc, "tx")
    assert new.producer_id == old.producer_id and new.producer_epoch > old.producer_epoch + 1
    with pytest.raises(ProducerFencedError):
        add(tc, "tx", old.producer_id, old.producer_epoch, 1)


def test_a_transaction_past_its_timeout_is_aborted_at_a_fenced_epoch(tmp_path):
    markers, clock = RecordingMarkers(), ManualClock()
    tc, _ = make(tmp_path, markers, clock)
    ids = init(tc, "tx", timeout_ms=1000)
    add(tc, "tx", ids.producer_id, ids.producer_epoch, 0)
    assert tc.abort_timed_out_transactions() == 0
    clock.advance(1001)
    assert tc.abort_timed_out_transactions() == 1
    wait_until(lambda: state(tc, "tx").state == "CompleteAbort")
    assert markers.written[0][1] == ids.producer_epoch + 1
    with pytest.raises(ProducerFencedError):
        tc.end_txn(pb.EndTxnRequest(transactional_id="tx", producer_id=ids.producer_id,
                                    producer_epoch=ids.producer_epoch, committed=True))


def test_idle_ids_expire_and_their_shard_forgets_them(tmp_path):
    clock = ManualClock()
    tc, _ = make(tmp_path, RecordingMarkers(), clock)
    init(tc, "idle")
    clock.advance(10_001)
    assert tc.expire_transactional_ids() == 1
    assert state(tc, "idle").error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND


def test_producer_ids_are_never_reused_across_allocators(tmp_path):
    first = ProducerIdAllocator(tmp_path, block_size=10)
    second = ProducerIdAllocator(tmp_path, block_size=10)
    ids = [first.allocate() for _ in range(15)] + [second.allocate() for _ in range(15)]
    assert len(set(ids)) == 30


def _allocate_in_a_process(directory: str, count: int) -> list[int]:
    allocator = ProducerIdAllocator(Path(directory), block_size=7)
    return [allocator.allocate() for _ in range(count)]


def test_producer_ids_from_racing_processes_never_collide_nor_after_a_block_size_change(tmp_path):
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        batches = pool.starmap(_allocate_in_a_process, [(str(tmp_path), 60)] * 4)
    ids = [pid for batch in batches for pid in batch]
    assert len(set(ids)) == len(ids) == 240
    resized = ProducerIdAllocator(tmp_path, block_size=1000)  # the stored size (7) still rules
    more = [resized.allocate() for _ in range(20)]
    assert not set(more) & set(ids)


def test_the_shard_of_an_id_is_kafkas():
    assert partition_for("my-txn", 50) == 45


def test_a_shard_being_taken_over_answers_load_in_progress_and_a_foreign_one_not_coordinator(tmp_path):
    from proto.errors import CoordinatorLoadInProgressError, NotCoordinatorError
    taking_over = set()
    tc, logs = make(tmp_path, RecordingMarkers(), assigned_here=lambda s: s in taking_over)
    shard = tc.shard_of("tx")
    tc.unload_shard(shard)
    with pytest.raises(NotCoordinatorError):
        init(tc, "tx")
    taking_over.add(shard)  # the placement just gave this node the shard; the load has not begun
    with pytest.raises(CoordinatorLoadInProgressError):
        init(tc, "tx")
    tc.load_shard(shard, logs.open_as_leader("__transaction_state", shard))
    assert init(tc, "tx").producer_id >= 0


# ---------------------------------------------------------------- transactions V1 (Kafka clients, EndTxn < v5)

def end_v1(tc, tid, pid, epoch, committed):
    return tc.end_txn(pb.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                       committed=committed), transaction_version=1)


def test_v1_keeps_the_epoch_across_transactions_and_writes_markers_at_it(tmp_path):
    markers = RecordingMarkers()
    tc, _ = make(tmp_path, markers)
    ids = init(tc, "tx")
    for committed in (True, False, True):
        assert add(tc, "tx", ids.producer_id, ids.producer_epoch, 1).results[0].error_code == 0
        end = end_v1(tc, "tx", ids.producer_id, ids.producer_epoch, committed)
        assert end.producer_epoch == ids.producer_epoch
        done = "CompleteCommit" if committed else "CompleteAbort"
        wait_until(lambda done=done: state(tc, "tx").state == done)
    assert [(epoch, committed) for _pid, epoch, committed, _ce, _tps in markers.written] == [
        (ids.producer_epoch, True), (ids.producer_epoch, False), (ids.producer_epoch, True)]
    assert state(tc, "tx").producer_epoch == ids.producer_epoch


def test_v1_retry_of_a_decided_end_succeeds_and_the_other_outcome_is_invalid(tmp_path):
    tc, _ = make(tmp_path, RecordingMarkers())
    ids = init(tc, "tx")
    add(tc, "tx", ids.producer_id, ids.producer_epoch, 0)
    end_v1(tc, "tx", ids.producer_id, ids.producer_epoch, True)
    wait_until(lambda: state(tc, "tx").state == "CompleteCommit")
    assert end_v1(tc, "tx", ids.producer_id, ids.producer_epoch, True).producer_epoch == ids.producer_epoch
    with pytest.raises(InvalidTxnStateError):
        end_v1(tc, "tx", ids.producer_id, ids.producer_epoch, False)


def test_v1_end_without_a_transaction_is_invalid_txn_state_and_a_stale_epoch_is_fenced(tmp_path):
    tc, _ = make(tmp_path, RecordingMarkers())
    ids = init(tc, "tx")
    with pytest.raises(InvalidTxnStateError):
        end_v1(tc, "tx", ids.producer_id, ids.producer_epoch, False)
    newer = init(tc, "tx")
    assert newer.producer_epoch == ids.producer_epoch + 1
    with pytest.raises(ProducerFencedError):
        end_v1(tc, "tx", ids.producer_id, ids.producer_epoch, True)


class GatedMarkers(RecordingMarkers):
    """Holds every marker write until `release` is set: the markers of a commit still going out."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def send(self, owed, *, coordinator_epoch):
        assert self.release.wait(10), "the test never released the markers"
        return super().send(owed, coordinator_epoch=coordinator_epoch)


def test_the_next_transactions_first_add_waits_for_the_previous_markers_instead_of_failing(tmp_path):
    markers = GatedMarkers()
    tc, _ = make(tmp_path, markers)
    ids = init(tc, "tx")
    add(tc, "tx", ids.producer_id, ids.producer_epoch, 0)
    end_v1(tc, "tx", ids.producer_id, ids.producer_epoch, True)
    answers: list = []
    adding = threading.Thread(target=lambda: answers.append(add(tc, "tx", ids.producer_id, ids.producer_epoch, 1)))
    adding.start()
    adding.join(0.2)
    assert adding.is_alive() and not answers, "AddPartitions answered while the previous commit's markers were pending"
    markers.release.set()
    adding.join(5)
    assert answers[0].results[0].error_code == 0
    assert state(tc, "tx").state == "Ongoing"


def test_a_previous_end_that_does_not_finish_in_time_is_concurrent_transactions(tmp_path, monkeypatch):
    import coordinator.txn.core as module
    monkeypatch.setattr(module, "PREVIOUS_END_HOLD_MS", 50)
    markers = GatedMarkers()
    tc, _ = make(tmp_path, markers)
    ids = init(tc, "tx")
    add(tc, "tx", ids.producer_id, ids.producer_epoch, 0)
    end_v1(tc, "tx", ids.producer_id, ids.producer_epoch, True)
    try:
        with pytest.raises(ConcurrentTransactionsError):
            add(tc, "tx", ids.producer_id, ids.producer_epoch, 1)
    finally:
        markers.release.set()


def test_a_call_held_for_the_previous_markers_is_answered_when_the_coordinator_closes(tmp_path, monkeypatch):
    """A node stopping must not leave a request thread blocked for ever: the hold's timer stops with the
    coordinator, so the held call hears NOT_COORDINATOR (its client retries at the shard's next owner)."""
    monkeypatch.setattr(core, "PREVIOUS_END_HOLD_MS", 60_000)  # the hold outlasts the test, however slow
    tc, _ = make(tmp_path, RecordingMarkers(succeed=False))  # the markers are never acknowledged
    ids = init(tc, "held")
    add(tc, "held", ids.producer_id, ids.producer_epoch, 0)
    tc.end_txn(pb.EndTxnRequest(transactional_id="held", producer_id=ids.producer_id,
                                producer_epoch=ids.producer_epoch, committed=True))
    outcome: list[BaseException | object] = []
    held = threading.Thread(target=lambda: outcome.append(_outcome(
        lambda: add(tc, "held", ids.producer_id, ids.producer_epoch + 1, 1))), daemon=True)
    held.start()
    wait_until(lambda: tc.core.waiting_calls() == 1, what="the next transaction's AddPartitions held")
    tc.close()
    held.join(timeout=5)
    assert not held.is_alive(), "the held call was never answered"
    assert isinstance(outcome[0], NotCoordinatorError), outcome


def _outcome(fn):
    try:
        return fn()
    except KafkaError as exc:  # the test inspects which error it was
        return exc
