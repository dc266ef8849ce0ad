"""Appending and reading a partition log: offsets, segments, validation, fetch bounds."""
from __future__ import annotations

from pathlib import Path

import pytest

from partitions import AppendOrigin, PartitionLog
from proto import records
from proto.errors import (
    CorruptMessageError,
    InvalidRecordError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from proto.structs import IsolationLevel

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED


def batch(*values: bytes, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return records.encode_batch([(1000 + i, b"k", v, ()) for i, v in enumerate(values)],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def read_values(log: PartitionLog, offset: int = 0, isolation: IsolationLevel = UNCOMMITTED) -> list[tuple[int, bytes]]:
    data = log.read(offset, 1 << 30, isolation).records
    return [(r.offset, r.value) for b in records.iter_batches(data) for r in b.records()]


def dir_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_appended_records_read_back_with_assigned_offsets(open_log):
    log = open_log()
    first = log.append(batch(b"a", b"b", b"c"))
    second = log.append(batch(b"d"))
    assert (first.base_offset, first.last_offset, second.base_offset, second.last_offset) == (0, 2, 3, 3)
    assert log.high_watermark == log.log_end_offset == log.last_stable_offset == 4
    assert read_values(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_stored_batches_carry_offset_and_leader_epoch_and_keep_a_valid_crc(open_log, log_dir):
    log = open_log(leader_epoch=7)
    log.append(batch(b"x"))
    log.append(batch(b"y", b"z"))
    stored = list(records.iter_batches((log_dir / "00000000000000000000-e7.log").read_bytes()))
    assert [(b.header.base_offset, b.header.partition_leader_epoch) for b in stored] == [(0, 7), (1, 7)]
    assert all(b.crc_ok() for b in stored)


def test_offsets_stay_contiguous_across_rolled_segments(open_log, log_dir):
    log = open_log(segment_bytes=400)
    results = [log.append(batch(b"v" * 50, b"w" * 50)) for _ in range(12)]
    assert [r.base_offset for r in results] == list(range(0, 24, 2))
    names = sorted(p.name for p in log_dir.glob("*.log"))
    assert len(names) > 3
    assert names[0] == "00000000000000000000-e0.log"
    bases = [int(name[:20]) for name in names]
    assert bases == sorted(bases)
    for path in log_dir.glob("*.log"):
        assert path.stat().st_size <= 400
        first = next(records.iter_batches(path.read_bytes()))
        assert first.header.base_offset == int(path.name[:20])
    assert [b.header.base_offset for b in log.batches()] == list(range(0, 24, 2))
    assert [o for o, _ in read_values(log, 5)] == list(range(4, 24))


def test_read_returns_the_whole_batch_holding_a_mid_batch_offset(open_log):
    log = open_log()
    log.append(batch(b"a", b"b", b"c"))
    log.append(batch(b"d"))
    assert read_values(log, 1)[0] == (0, b"a")


def test_read_returns_at_least_one_batch_even_above_max_bytes(open_log):
    log = open_log()
    log.append(batch(b"x" * 1000))
    log.append(batch(b"y"))
    data = log.read(0, 10, UNCOMMITTED).records
    assert [b.header.base_offset for b in records.iter_batches(data)] == [0]


def test_read_stops_at_max_bytes_on_a_batch_boundary(open_log):
    log = open_log(segment_bytes=300)
    for i in range(10):
        log.append(batch(bytes([65 + i]) * 40))
    one = len(batch(b"x" * 40))
    data = log.read(2, 3 * one + 5, UNCOMMITTED).records
    assert [b.header.base_offset for b in records.iter_batches(data)] == [2, 3, 4]


def test_read_at_the_high_watermark_is_empty_and_beyond_it_out_of_range(open_log):
    log = open_log()
    log.append(batch(b"a"))
    fetched = log.read(1, 1000, UNCOMMITTED)
    assert fetched.records == b"" and fetched.high_watermark == 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 1000, UNCOMMITTED)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000, UNCOMMITTED)


def test_garbage_bytes_are_a_corrupt_message(open_log):
    log = open_log()
    with pytest.raises(CorruptMessageError):
        log.append(b"\x00" * 10 + b"not a batch at all, just bytes" * 3)
    assert log.log_end_offset == 0


def test_a_batch_with_a_damaged_crc_is_a_corrupt_message(open_log):
    log = open_log()
    raw = bytearray(batch(b"payload"))
    raw[-1] ^= 0x01
    with pytest.raises(CorruptMessageError):
        log.append(bytes(raw))


def test_a_batch_with_another_magic_is_a_corrupt_message(open_log):
    log = open_log()
    raw = bytearray(batch(b"payload"))
    raw[16] = 1
    with pytest.raises(CorruptMessageError):
        log.append(bytes(raw))


def test_a_batch_above_message_max_bytes_is_too_large(open_log):
    log = open_log(message_max_bytes=200)
    log.append(batch(b"x" * 50))
    with pytest.raises(RecordTooLargeError):
        log.append(batch(b"x" * 300))
    assert log.log_end_offset == 1


def test_control_batches_from_producers_are_invalid(open_log):
    log = open_log()
    marker = records.encode_control_batch(producer_id=1, producer_epoch=0, control_type=records.ControlType.COMMIT,
                                          coordinator_epoch=0, timestamp=1)
    for origin in AppendOrigin:
        with pytest.raises(InvalidRecordError):
            log.append(marker, origin=origin)


def test_an_empty_request_is_invalid(open_log):
    with pytest.raises(InvalidRecordError):
        open_log().append(b"")


def test_a_rejected_request_writes_nothing_at_all(open_log, log_dir):
    log = open_log()
    log.append(batch(b"a", pid=5, epoch=0, seq=0))
    before = dir_bytes(log_dir)
    snapshots = log.producer_snapshots()
    good = batch(b"b", pid=5, epoch=0, seq=1)
    marker = records.encode_control_batch(producer_id=9, producer_epoch=0, control_type=records.ControlType.ABORT,
                                          coordinator_epoch=0, timestamp=1)
    bad_requests = [
        (good + batch(b"c", pid=5, epoch=0, seq=7), OutOfOrderSequenceError),
        (good + marker, InvalidRecordError),
        (good + batch(b"d") + b"\x01\x02\x03", CorruptMessageError),
        (good + batch(b"e", pid=6, epoch=0), InvalidRecordError),  # a producer id without a sequence
    ]
    for request, error in bad_requests:
        with pytest.raises(error):
            log.append(request)
    assert dir_bytes(log_dir) == before
    assert log.log_end_offset == log.high_watermark == 1
    assert log.producer_snapshots() == snapshots
    assert log.append(good).base_offset == 1  # the state was not advanced by the rejected requests


def test_a_multi_batch_request_lands_contiguously(open_log):
    log = open_log()
    result = log.append(batch(b"a", pid=1, epoch=0, seq=0) + batch(b"b", b"c", pid=1, epoch=0, seq=1))
    assert (result.base_offset, result.last_offset) == (0, 2)
    assert log.producer_snapshots()[0].last_sequence == 2


def test_batches_iterates_durable_batches_from_an_offset_up_to_a_bound(open_log):
    log = open_log(segment_bytes=200)
    for i in range(6):
        log.append(batch(bytes([i]) * 30, bytes([i]) * 30))
    assert [b.header.base_offset for b in log.batches(3)] == [2, 4, 6, 8, 10]
    assert [b.header.base_offset for b in log.batches(0, up_to=6)] == [0, 2, 4]
    assert all(b.crc_ok() for b in log.batches())


def test_a_closed_log_refuses_appends_and_reads(open_log):
    log = open_log()
    log.append(batch(b"a"))
    log.close()
    with pytest.raises(NotLeaderOrFollowerError):
        log.append(batch(b"b"))
    with pytest.raises(NotLeaderOrFollowerError):
        log.read(0, 100, UNCOMMITTED)
