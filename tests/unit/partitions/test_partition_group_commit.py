"""Durability and concurrency: group-committed fsyncs, the high watermark, wait_for_data."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from partitions.group_commit import GroupCommitter
from partitions.segment import Segment
from proto import records
from proto.errors import NotLeaderOrFollowerError
from proto.structs import IsolationLevel

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
COMMITTED = IsolationLevel.READ_COMMITTED
DEADLINE_S = 10.0


def data(value: bytes, count: int = 1, *, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return records.encode_batch([(1000, None, value, ())] * count, producer_id=pid,
                                producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, transactional=txn)


def test_concurrent_appends_get_distinct_contiguous_offsets_and_share_fsyncs(open_log):
    log = open_log()
    threads, per_thread = 8, 60

    def produce(worker: int) -> list[tuple[int, int]]:
        return [(r.base_offset, r.last_offset) for r in
                (log.append(data(f"{worker}-{i}".encode(), count=1 + i % 3)) for i in range(per_thread))]

    with ThreadPoolExecutor(threads) as pool:
        spans = sorted(span for result in pool.map(produce, range(threads)) for span in result)
    offsets = [o for base, last in spans for o in range(base, last + 1)]
    assert offsets == list(range(log.log_end_offset))
    assert log.high_watermark == log.log_end_offset
    assert 0 < log.fsync_count < threads * per_thread
    values = [r.value for b in log.batches() for r in b.records()]
    assert len(values) == len(offsets)


def test_appenders_covered_by_a_running_fsync_do_not_fsync_again(open_log, monkeypatch):
    """While the first fsync is held, every other appender writes; one more fsync then covers them all."""
    log = open_log()
    appenders = 6
    all_written = threading.Event()
    real_sync, real_append = Segment.sync, Segment.append
    written = []

    def counting_append(segment, data_bytes, batches):
        real_append(segment, data_bytes, batches)
        written.append(1)
        if len(written) == appenders:
            all_written.set()

    def held_sync(segment):
        assert all_written.wait(DEADLINE_S)
        real_sync(segment)

    monkeypatch.setattr(Segment, "append", counting_append)
    monkeypatch.setattr(Segment, "sync", held_sync)
    with ThreadPoolExecutor(appenders) as pool:
        results = list(pool.map(lambda i: log.append(data(bytes([i]))), range(appenders)))
    assert sorted(r.base_offset for r in results) == list(range(appenders))
    assert log.fsync_count <= 2


@pytest.mark.parametrize("storage", ["file", "memory"], indirect=True)
def test_high_watermark_advances_only_after_fsync(open_log, monkeypatch):
    log = open_log()
    log.append(data(b"durable"))
    entered, release = threading.Event(), threading.Event()
    real_sync = Segment.sync

    def gated_sync(segment):
        entered.set()
        assert release.wait(DEADLINE_S)
        real_sync(segment)

    monkeypatch.setattr(Segment, "sync", gated_sync)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(log.append, data(b"in flight"))
        assert entered.wait(DEADLINE_S)
        assert log.log_end_offset == 2 and log.high_watermark == 1
        assert [b.header.base_offset for b in records.iter_batches(log.read(0, 1 << 20, UNCOMMITTED).records)] == [0]
        assert log.read(1, 1 << 20, UNCOMMITTED).records == b""
        assert [b.header.base_offset for b in log.batches()] == [0]
        assert not log.wait_for_data(1, UNCOMMITTED, 0.0)
        assert not pending.done()
        release.set()
        assert pending.result(DEADLINE_S).base_offset == 1
    assert log.high_watermark == 2


def test_wait_for_data_wakes_when_another_thread_appends(open_log):
    log = open_log()
    waiting = threading.Event()

    def wait() -> tuple[bool, float]:
        started = time.monotonic()
        waiting.set()
        return log.wait_for_data(0, UNCOMMITTED, DEADLINE_S), time.monotonic() - started

    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(wait)
        assert waiting.wait(DEADLINE_S)
        log.append(data(b"wake up"))
        ready, elapsed = result.result(DEADLINE_S)
    assert ready and elapsed < DEADLINE_S / 2


def test_read_committed_waiters_wake_when_a_commit_becomes_durable(open_log):
    log = open_log()
    log.append(data(b"t", pid=1, seq=0, txn=True), verified_producer_ids=frozenset({1}))
    assert not log.wait_for_data(0, COMMITTED, 0.0)
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(log.wait_for_data, 0, COMMITTED, DEADLINE_S)
        log.append_marker(producer_id=1, producer_epoch=1, committed=True, coordinator_epoch=0)
        assert result.result(DEADLINE_S)


def test_wait_for_data_times_out_without_data(open_log):
    log = open_log()
    assert log.wait_for_data(0, UNCOMMITTED, 0.05) is False


def test_close_releases_waiters(open_log):
    log = open_log()
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(log.wait_for_data, 0, UNCOMMITTED, DEADLINE_S)
        log.close()
        assert result.result(DEADLINE_S) is False


def test_group_committer_runs_one_flush_for_waiters_it_covers():
    started, release = threading.Event(), threading.Event()
    calls = []

    def flush() -> int:
        calls.append(1)
        started.set()
        assert release.wait(DEADLINE_S)
        return 100

    committer = GroupCommitter(flush, durable_end=0)
    with ThreadPoolExecutor(6) as pool:
        leader = pool.submit(committer.wait_until_durable, 10)
        assert started.wait(DEADLINE_S)
        followers = [pool.submit(committer.wait_until_durable, end) for end in (20, 50, 99, 100)]
        release.set()
        for future in [leader, *followers]:
            future.result(DEADLINE_S)
    assert len(calls) == 1 and committer.durable_end == 100 and committer.flush_count == 1


def test_a_failed_flush_raises_to_its_leader_and_a_waiter_retries():
    outcomes = iter([OSError("disk on fire"), 5])

    def flush() -> int:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    committer = GroupCommitter(flush, durable_end=0)
    with pytest.raises(OSError):
        committer.wait_until_durable(3)
    assert committer.durable_end == 0
    committer.wait_until_durable(3)
    assert committer.durable_end == 5


def test_a_write_cut_back_before_it_was_durable_is_never_acknowledged():
    """A replica truncating to its leader's history: the waiter for a removed offset is told it is gone, even
    though new writes reach that offset again, and a flush that ran across the cut moves nothing."""
    written = [5]
    in_flush, release = threading.Event(), threading.Event()

    def flush() -> int:
        end = written[0]
        in_flush.set()
        assert release.wait(DEADLINE_S)
        return end

    committer = GroupCommitter(flush, durable_end=0)
    outcome: list[BaseException | None] = []

    def wait_for_five() -> None:
        try:
            committer.wait_until_durable(5)
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    waiter = threading.Thread(target=wait_for_five)
    waiter.start()
    assert in_flush.wait(DEADLINE_S)
    committer.cut_back(2)  # offsets 2..4 are gone while the flush that covered them runs
    written[0] = 6  # new writes reach past 5 again
    release.set()
    waiter.join(DEADLINE_S)
    assert len(outcome) == 1 and isinstance(outcome[0], NotLeaderOrFollowerError)
    assert committer.durable_end == 0  # the flush across the cut did not count
    committer.wait_until_durable(6)  # a write after the cut is made durable as usual
    assert committer.durable_end == 6
