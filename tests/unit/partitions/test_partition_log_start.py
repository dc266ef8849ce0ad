"""DeleteRecords and retention move the log start: what lies before it is never read again, whole segments
below it are deleted, and the start survives a restart."""
from __future__ import annotations

import pytest

from proto import records
from proto.errors import OffsetOutOfRangeError
from proto.structs import IsolationLevel

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED


def batch(value: bytes, timestamp: int = 1000) -> bytes:
    return records.encode_batch([(timestamp, None, value, ())])


def test_records_deleted_inside_a_segment_are_never_read_and_the_start_survives_a_restart(open_log, log_dir):
    log = open_log()
    for i in range(10):
        log.append(batch(b"v%d" % i))
    assert log.delete_records_before(4) == 4 == log.log_start_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 1 << 20, UNCOMMITTED)
    first = next(records.iter_batches(log.read(4, 1 << 20, UNCOMMITTED).records))
    assert first.header.base_offset == 4
    assert log.delete_records_before(2) == 4  # never backwards
    with pytest.raises(OffsetOutOfRangeError, match="past the high watermark 10"):
        log.delete_records_before(11)
    log.close()
    reopened = open_log(leader_epoch=1)
    assert reopened.log_start_offset == 4
    assert reopened.delete_records_before(-1) == 10  # -1: up to the high watermark, as Kafka's DeleteRecords


def test_whole_segments_below_the_start_are_deleted(open_log, log_dir):
    log = open_log(segment_bytes=300)
    for i in range(12):
        log.append(batch(b"x" * 100))
    before = sorted(log_dir.glob("*.log"))
    assert len(before) > 3
    log.delete_records_before(9)
    after = sorted(log_dir.glob("*.log"))
    assert len(after) < len(before) and int(after[0].name[:20]) <= 9


def test_retention_deletes_sealed_segments_by_age_and_by_size_never_the_active_one(open_log, log_dir):
    log = open_log(segment_bytes=300)
    for i in range(12):
        log.append(batch(b"x" * 100, timestamp=1000 + i))
    assert log.apply_retention(now_ms=10**6, retention_ms=-1, retention_bytes=-1) == 0
    # every record older than 1005 - 100: the segments whose newest record is, go
    assert log.apply_retention(now_ms=1005 + 100, retention_ms=100, retention_bytes=-1) > 0
    assert 0 < log.log_start_offset <= 5
    segment = len(batch(b"x" * 100))
    assert log.apply_retention(now_ms=0, retention_ms=-1, retention_bytes=4 * segment) > 0
    assert sum(p.stat().st_size for p in log_dir.glob("*.log")) <= 4 * segment + 300
    assert log.apply_retention(now_ms=10**9, retention_ms=0, retention_bytes=-1) > 0
    assert len(list(log_dir.glob("*.log"))) == 1  # the active segment stays, however old
    assert log.read(log.log_start_offset, 1 << 20, UNCOMMITTED).records
