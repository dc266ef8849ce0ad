"""Crash recovery: torn tails and flipped bits are cut and reported; state is rebuilt by replay."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from partitions import PartitionLog
from proto import records
from proto.errors import KafkaStorageError
from proto.records import HEADER_SIZE
from proto.structs import IsolationLevel

COMMITTED = IsolationLevel.READ_COMMITTED
FIRST_SEGMENT = "00000000000000000000-e0.log"


def data(*values: bytes, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return records.encode_batch([(1000, None, v, ()) for v in values],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def fill(log: PartitionLog, count: int) -> list[int]:
    """Append `count` one-record batches; returns their byte positions in the first segment."""
    positions, position = [], 0
    for i in range(count):
        raw = data(f"value-{i}".encode() * 5)
        log.append(raw)
        positions.append(position)
        position += len(raw)
    return positions


def write_twelve_in_small_segments(open_log, log_dir: Path) -> list[Path]:
    """Twelve one-record batches ("v0" * 30 ...) in 300-byte segments, closed; the segment files."""
    log = open_log(segment_bytes=300)
    for i in range(12):
        log.append(data(f"v{i}".encode() * 30))
    log.close()
    return sorted(log_dir.glob("*.log"))


def test_a_clean_log_reopens_without_a_report(open_log):
    log = open_log()
    fill(log, 3)
    log.close()
    log = open_log(leader_epoch=1)
    assert log.recovery_report == []
    assert log.high_watermark == log.log_end_offset == 3


def test_a_torn_tail_is_truncated_and_reported(open_log, log_dir, caplog):
    log = open_log()
    fill(log, 3)
    log.close()
    segment = log_dir / FIRST_SEGMENT
    clean = segment.read_bytes()
    torn = data(b"half-written" * 10)
    with segment.open("ab") as f:
        f.write(torn[:70])
    with caplog.at_level(logging.WARNING):
        log = open_log(leader_epoch=1)
    assert segment.read_bytes() == clean
    (line,) = log.recovery_report
    assert FIRST_SEGMENT in line and f"at byte {len(clean)}" in line and "cutting 70 bytes" in line
    assert f"torn tail: 70 of {len(torn)} bytes" in line
    assert line in caplog.text
    assert log.high_watermark == 3
    assert log.append(data(b"next")).base_offset == 3


def test_a_tail_shorter_than_a_header_is_truncated(open_log, log_dir):
    log = open_log()
    fill(log, 2)
    log.close()
    with (log_dir / FIRST_SEGMENT).open("ab") as f:
        f.write(b"\x00" * 37)
    log = open_log(leader_epoch=1)
    assert f"torn tail: 37 of {HEADER_SIZE} header bytes" in log.recovery_report[0]
    assert log.log_end_offset == 2


def test_a_flipped_bit_in_acknowledged_data_keeps_the_log_closed_until_the_loss_is_given_up(open_log, log_dir,
                                                                                              caplog):
    log = open_log()
    positions = fill(log, 5)
    log.close()
    segment = log_dir / FIRST_SEGMENT
    raw = bytearray(segment.read_bytes())
    raw[positions[2] + HEADER_SIZE + 3] ^= 0x04
    segment.write_bytes(bytes(raw))
    with caplog.at_level(logging.ERROR), pytest.raises(KafkaStorageError) as refused:
        open_log(leader_epoch=1)
    message = refused.value.message
    assert f"{segment} is damaged at byte {positions[2]}, offset 2 (CRC mismatch at offset 2)" in message
    assert "below offset 5" in message and f"echo 2 > {log_dir / 'accept-loss-from'}" in message
    assert message in caplog.text
    assert segment.read_bytes() == bytes(raw)  # nothing cut: offsets 2-4 are never handed out again
    (log_dir / "accept-loss-from").write_text("2\n")
    log = open_log(leader_epoch=2)
    (line,) = log.recovery_report
    assert "CRC mismatch at offset 2" in line and f"at byte {positions[2]}" in line
    assert f"cutting {len(raw) - positions[2]} bytes" in line
    assert segment.stat().st_size == positions[2]
    assert log.high_watermark == 2
    assert [b.header.base_offset for b in log.batches()] == [0, 1]
    log.append(data(b"after"))
    log.close()
    assert open_log(leader_epoch=3).log_end_offset == 3  # the old recovery points were forgotten with the loss


def test_a_torn_write_past_the_recovery_point_is_cut_without_asking(open_log, log_dir):
    log = open_log()
    fill(log, 2)
    log.append(data(b"written, never fsynced"), wait_durable=False)
    crashed = log_dir.parent / "after-the-crash"
    shutil.copytree(log_dir, crashed)  # the disk as a crash leaves it: the last batch was never acknowledged
    raw = bytearray((crashed / FIRST_SEGMENT).read_bytes())
    raw[-3] ^= 0xFF
    (crashed / FIRST_SEGMENT).write_bytes(bytes(raw))
    reopened = PartitionLog.open(crashed, "orders", 0, leader_epoch=1)
    try:
        assert "CRC mismatch at offset 2" in reopened.recovery_report[0]
        assert reopened.log_end_offset == 2
    finally:
        reopened.close()


def test_a_damaged_segment_takes_every_later_segment_with_it_once_the_loss_is_given_up(open_log, log_dir):
    segments = write_twelve_in_small_segments(open_log, log_dir)
    assert len(segments) >= 4
    for index in log_dir.glob("*.index"):  # no saved index (lost, or written by an older version): scanned
        index.unlink()
    damaged = segments[1]
    raw = bytearray(damaged.read_bytes())
    raw[-5] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    with pytest.raises(KafkaStorageError, match=f"{damaged.name} is damaged"):
        open_log(leader_epoch=1, segment_bytes=300)
    assert sorted(log_dir.glob("*.log")) == segments  # nothing deleted while it is refused
    end = int(damaged.name[:20]) + len(list(records.iter_batches(raw, verify_crc=False))) - 1
    (log_dir / "accept-loss-from").write_text(f"{end}\n")
    log = open_log(leader_epoch=1, segment_bytes=300)
    assert sorted(log_dir.glob("*.log")) == segments[:2]
    assert "CRC mismatch" in log.recovery_report[0]
    assert all("deleted the whole segment" in line for line in log.recovery_report[1:])
    assert len(log.recovery_report) == 1 + len(segments) - 2
    assert log.log_end_offset == end


def test_a_segment_that_does_not_continue_the_log_is_deleted(open_log, log_dir):
    log = open_log()
    fill(log, 2)
    log.close()
    stray = log_dir / "00000000000000000050.log"
    stray.write_bytes(records.set_base_offset(data(b"stray"), 50, 0))
    log = open_log(leader_epoch=1)
    assert not stray.exists()
    assert "starts at offset 50" in log.recovery_report[0]
    assert log.log_end_offset == 2


def test_an_offset_gap_inside_a_segment_is_cut(open_log, log_dir):
    log = open_log()
    fill(log, 2)
    log.close()
    with (log_dir / FIRST_SEGMENT).open("ab") as f:
        f.write(records.set_base_offset(data(b"skipped"), 9, 0))
    log = open_log(leader_epoch=1)
    assert "offset gap: expected a batch at offset 2, found 9" in log.recovery_report[0]


def test_transaction_state_is_rebuilt_after_reopen(open_log):
    log = open_log()
    log.append(data(b"p0"))                                                                   # 0
    log.append(data(b"a0", pid=1, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({1}))  # 1
    log.append(data(b"b0", pid=2, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({2}))  # 2
    log.append(data(b"i0", b"i1", pid=3, epoch=0, seq=0))                                      # 3-4
    log.append_marker(producer_id=1, producer_epoch=1, committed=False, coordinator_epoch=2)   # 5
    log.append(data(b"c0", pid=4, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({4}))  # 6
    log.append_marker(producer_id=4, producer_epoch=1, committed=True, coordinator_epoch=2)    # 7
    before = (log.last_stable_offset, log.aborted_transactions(), log.producer_snapshots(),
              log.open_transactions(), log.read(0, 1 << 20, COMMITTED))
    assert before[0] == 2
    log.close()
    log = open_log(leader_epoch=1)
    after = (log.last_stable_offset, log.aborted_transactions(), log.producer_snapshots(),
             log.open_transactions(), log.read(0, 1 << 20, COMMITTED))
    assert log.recovery_report == []
    assert after[:4] == before[:4]
    assert after[4].records == before[4].records
    assert after[4].aborted_transactions == before[4].aborted_transactions == [(1, 1)]
    log.append(data(b"i2", pid=3, epoch=0, seq=2))       # sequence continues across the restart
    log.append(data(b"b1", pid=2, epoch=0, seq=1, txn=True))  # still open: no verification needed
    log.append_marker(producer_id=2, producer_epoch=1, committed=True, coordinator_epoch=2)
    assert log.last_stable_offset == log.high_watermark


def test_cutting_a_marker_reopens_its_transaction(open_log, log_dir):
    log = open_log()
    log.append(data(b"t", pid=1, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({1}))
    marker = log.append_marker(producer_id=1, producer_epoch=1, committed=True, coordinator_epoch=0,
                               wait_durable=False)
    assert marker.base_offset == 1
    crashed = log_dir.parent / "after-the-crash"
    shutil.copytree(log_dir, crashed)  # the marker was written, never fsynced nor acknowledged: then a crash
    raw = (crashed / FIRST_SEGMENT).read_bytes()
    marker_position = len(data(b"t", pid=1, epoch=0, seq=0, txn=True))
    (crashed / FIRST_SEGMENT).write_bytes(raw[:marker_position + 20])
    reopened = PartitionLog.open(crashed, "orders", 0, leader_epoch=1)
    try:
        assert reopened.high_watermark == 1 and reopened.last_stable_offset == 0
        assert [(t.producer_id, t.first_offset) for t in reopened.open_transactions()] == [(1, 0)]
    finally:
        reopened.close()


def test_an_empty_directory_opens_as_an_empty_log(tmp_path: Path):
    log = PartitionLog.open(tmp_path / "new-3", "new", 3, leader_epoch=0)
    try:
        assert (log.log_start_offset, log.high_watermark, log.last_stable_offset) == (0, 0, 0)
        assert (tmp_path / "new-3" / FIRST_SEGMENT).exists()
    finally:
        log.close()


def test_sealed_segments_load_from_their_saved_index_and_only_the_tail_is_scanned(open_log, log_dir):
    segments = write_twelve_in_small_segments(open_log, log_dir)
    before = [f"v{i}".encode() * 30 for i in range(12)]
    assert sorted(log_dir.glob("*.index")) == [p.with_suffix(".index") for p in segments[:-1]]
    log = open_log(leader_epoch=1, segment_bytes=300)
    stats = log.recovery_stats
    assert (stats.scanned_segments, stats.indexed_segments) == (1, len(segments) - 1)
    assert [r.value for b in log.batches() for r in b.records()] == before
    assert log.log_end_offset == 12


def test_an_index_that_no_longer_describes_its_segment_is_ignored_and_the_segment_scanned(open_log, log_dir):
    segments = write_twelve_in_small_segments(open_log, log_dir)
    damaged_index = segments[0].with_suffix(".index")
    damaged_index.write_bytes(damaged_index.read_bytes()[:-3] + b"xyz")  # its CRC no longer matches
    with segments[1].open("ab") as f:  # bytes appended after the index was saved: a torn write
        f.write(b"\x00" * 17)
    log = open_log(leader_epoch=1, segment_bytes=300)
    assert log.recovery_stats.scanned_segments == 3  # the two above and the tail
    (line,) = log.recovery_report
    assert segments[1].name in line and "cutting 17 bytes" in line
    assert log.log_end_offset == 12
    log.close()
    log = open_log(leader_epoch=2, segment_bytes=300)  # both were indexed again after their scan
    assert log.recovery_stats.scanned_segments == 1
