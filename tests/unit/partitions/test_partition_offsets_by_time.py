"""ListOffsets by time on a partition log: the first record at or after a timestamp, and the max timestamp."""
from __future__ import annotations

import pytest

from partitions import PartitionLog
from proto import records
from proto.structs import IsolationLevel

UNCOMMITTED, COMMITTED = IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED
pytestmark = pytest.mark.parametrize("storage", ["file", "memory"], indirect=True)


def batch(*timestamps: int, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return records.encode_batch([(ts, b"k", b"v", ()) for ts in timestamps], producer_id=pid,
                                producer_epoch=epoch, base_sequence=seq, transactional=txn)


def test_the_first_record_at_or_after_a_timestamp_inside_the_batch_that_crosses_it(open_log):
    log: PartitionLog = open_log()
    log.append(batch(100, 110, 120))   # offsets 0-2
    log.append(batch(200, 190, 210))   # offsets 3-5: out of order inside the batch
    log.append(batch(300))             # offset 6
    assert log.offset_for_timestamp(0, UNCOMMITTED) == (0, 100)
    assert log.offset_for_timestamp(110, UNCOMMITTED) == (1, 110)
    assert log.offset_for_timestamp(121, UNCOMMITTED) == (3, 200)
    assert log.offset_for_timestamp(195, UNCOMMITTED) == (3, 200)
    assert log.offset_for_timestamp(205, UNCOMMITTED) == (5, 210)
    assert log.offset_for_timestamp(300, UNCOMMITTED) == (6, 300)
    assert log.offset_for_timestamp(301, UNCOMMITTED) is None


def test_the_lookup_survives_segment_rolls_and_a_reopen_from_saved_indexes(open_log):
    log = open_log(segment_bytes=200)
    for ts in range(1000, 1010):
        log.append(batch(ts, ts))
    assert log.offset_for_timestamp(1004, UNCOMMITTED) == (8, 1004)
    log.close()
    reopened = open_log(leader_epoch=1, segment_bytes=200)
    assert reopened.offset_for_timestamp(1004, UNCOMMITTED) == (8, 1004)
    assert reopened.offset_for_timestamp(1009, UNCOMMITTED) == (18, 1009)
    assert reopened.offset_of_max_timestamp(UNCOMMITTED) == (18, 1009)


def test_max_timestamp_is_the_first_record_holding_the_largest_timestamp(open_log):
    log = open_log()
    assert log.offset_of_max_timestamp(UNCOMMITTED) is None
    log.append(batch(100, 500, 200))
    log.append(batch(500, 100))
    assert log.offset_of_max_timestamp(UNCOMMITTED) == (1, 500)


def test_read_committed_finds_nothing_at_or_past_the_lso(open_log):
    log = open_log()
    log.append(batch(100))
    log.append(batch(200, pid=7, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({7}))
    assert log.offset_for_timestamp(150, UNCOMMITTED) == (1, 200)
    assert log.offset_for_timestamp(150, COMMITTED) is None
    assert log.offset_of_max_timestamp(COMMITTED) is None
    log.append_marker(producer_id=7, producer_epoch=0, committed=True, coordinator_epoch=0, timestamp_ms=250)
    assert log.offset_for_timestamp(150, COMMITTED) == (1, 200)
    assert log.offset_of_max_timestamp(COMMITTED) == (2, 250)  # the marker's timestamp, as in Kafka
