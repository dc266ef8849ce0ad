"""Producer-state snapshots: reopening loads the newest good snapshot and replays only the tail after it."""
from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from partitions import LogConfig, PartitionLog
from partitions.producer_snapshot import snapshot_name
from partitions.snapshot_files import RETAINED_SNAPSHOTS
from proto import records
from proto.errors import KafkaStorageError
from proto.records import HEADER_SIZE
from proto.structs import IsolationLevel

COMMITTED = IsolationLevel.READ_COMMITTED
SEGMENT_BYTES = 400


def data(*values: bytes, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return records.encode_batch([(1000 + len(v), None, v, ()) for v in values],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


@dataclass
class History:
    """What the scenario wrote that a test needs afterwards."""

    idempotent_batches: list[tuple[bytes, int, int]]  # raw batch, base offset, last offset
    open_txn_retry: tuple[bytes, int]  # a batch of the still-open transaction, and its base offset
    early_abort_first_offset: int


def write_scenario(log: PartitionLog) -> History:
    """Committed, aborted (early and late) and open transactions and an idempotent producer, over several segments."""
    def txn(pid: int, seq: int, *values: bytes) -> int:
        return log.append(data(*values, pid=pid, epoch=0, seq=seq, txn=True),
                          verified_producer_ids=frozenset({pid})).base_offset

    def marker(pid: int, committed: bool) -> None:
        log.append_marker(producer_id=pid, producer_epoch=1, committed=committed, coordinator_epoch=3)

    filler = b"x" * 60
    log.append(data(b"plain-0", filler))
    txn(1, 0, b"committed-a", filler)
    early_abort = txn(2, 0, b"aborted-early", filler)
    txn(1, 2, b"committed-b", filler)  # two records a batch: sequences go by 2
    marker(2, committed=False)
    marker(1, committed=True)
    idempotent = []
    for seq in range(0, 14, 2):
        raw = data(f"idem-{seq}".encode(), filler, pid=5, epoch=0, seq=seq)
        result = log.append(raw)
        idempotent.append((raw, result.base_offset, result.last_offset))
    txn(3, 0, b"open-a", filler)
    txn(6, 0, b"aborted-late", filler)
    log.append(data(b"plain-1", filler))
    open_raw = data(b"open-b", filler, pid=3, epoch=0, seq=2, txn=True)
    open_base = log.append(open_raw).base_offset
    marker(6, committed=False)
    log.append(data(b"plain-2", filler))
    return History(idempotent, (open_raw, open_base), early_abort)


def observe(log: PartitionLog) -> dict[str, object]:
    """Everything the producer state decides, including a read_committed fetch from every offset."""
    lso = log.last_stable_offset
    fetches = []
    for offset in range(log.log_start_offset, lso):
        fetch = log.read(offset, 1 << 20, COMMITTED)
        fetches.append((offset, fetch.records, fetch.aborted_transactions, fetch.last_stable_offset))
    return {"lso": lso, "hw": log.high_watermark, "end": log.log_end_offset, "producers": log.producer_snapshots(),
            "open": log.open_transactions(), "aborted": log.aborted_transactions(), "fetches": fetches}


def snapshot_offsets(directory: Path) -> list[int]:
    return sorted(int(path.name[:20]) for path in directory.glob("*.snapshot"))


def segment_bases(directory: Path) -> list[int]:
    return sorted(int(path.name[:20]) for path in directory.glob("*.log"))


def batch_count(log: PartitionLog, start: int = 0) -> int:
    return sum(1 for batch in log.batches() if batch.header.base_offset >= start)


@pytest.fixture
def open_at(tmp_path: Path) -> Iterator[Callable[..., PartitionLog]]:
    """open_at(directory, leader_epoch) opens a log anywhere (crash images are copies of a log directory)."""
    opened: list[PartitionLog] = []

    def _open(directory: Path, leader_epoch: int = 1) -> PartitionLog:
        log = PartitionLog.open(directory, "orders", 0, leader_epoch=leader_epoch,
                                config=LogConfig(segment_bytes=SEGMENT_BYTES))
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def test_a_clean_reopen_loads_the_close_snapshot_and_replays_nothing(open_log, log_dir, caplog):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_scenario(log)
    before = observe(log)
    assert len(segment_bases(log_dir)) >= 4
    assert before["lso"] < before["hw"] and len(before["aborted"]) == 2
    log.close()
    end = before["end"]
    assert (log_dir / snapshot_name(end, 0)).exists()
    assert len(snapshot_offsets(log_dir)) == RETAINED_SNAPSHOTS
    with caplog.at_level(logging.INFO, logger="partitions.producer_state_recovery"):
        log = open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    assert (log.recovery_stats.snapshot_offset, log.recovery_stats.replayed_batches) == (end, 0)
    assert f"snapshot at offset {end}, replayed 0 batches" in caplog.text
    assert observe(log) == before
    assert log.recovery_report == [] and log.recovery_stats.discarded_snapshots == ()


def test_after_a_crash_only_the_batches_after_the_roll_snapshot_are_replayed(open_log, log_dir, open_at, tmp_path):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_scenario(log)
    before = observe(log)
    crash_image = tmp_path / "crashed" / "orders-0"
    shutil.copytree(log_dir, crash_image)  # appends return once durable: this is what a crash leaves
    active_base = segment_bases(log_dir)[-1]
    assert snapshot_offsets(crash_image)[-1] == active_base
    crashed = open_at(crash_image)
    stats = crashed.recovery_stats
    assert stats.snapshot_offset == stats.replayed_from == active_base
    assert 0 < stats.replayed_batches == batch_count(log, active_base) < batch_count(log)
    assert observe(crashed) == before


def test_retries_after_reopen_are_still_recognised_as_duplicates(open_log):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    history = write_scenario(log)
    log.close()
    log = open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    end = log.log_end_offset
    for raw, base, last in history.idempotent_batches[-5:]:  # the five batches a producer may retry
        retry = log.append(raw)
        assert retry.duplicate and (retry.base_offset, retry.last_offset) == (base, last)
    open_raw, open_base = history.open_txn_retry
    retry = log.append(open_raw)
    assert retry.duplicate and retry.base_offset == open_base
    assert log.log_end_offset == end
    next_seq = log.append(data(b"idem-next", pid=5, epoch=0, seq=14))  # and the sequence goes on
    assert not next_seq.duplicate and next_seq.base_offset == end


def test_an_abort_before_the_snapshot_still_filters_fetches_of_older_offsets(open_log):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    history = write_scenario(log)
    log.close()
    log = open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    assert log.recovery_stats.replayed_batches == 0
    fetch = log.read(history.early_abort_first_offset, 1 << 20, COMMITTED)
    assert (2, history.early_abort_first_offset) in fetch.aborted_transactions


def test_a_damaged_newest_snapshot_falls_back_to_the_older_one(open_log, log_dir, caplog):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_scenario(log)
    before = observe(log)
    log.close()
    older, newest = snapshot_offsets(log_dir)
    path = log_dir / snapshot_name(newest, 0)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        log = open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    stats = log.recovery_stats
    assert stats.snapshot_offset == older and stats.replayed_batches == batch_count(log, older) > 0
    (line,) = stats.discarded_snapshots
    assert path.name in line and "CRC-32C mismatch" in line and line in caplog.text
    assert not path.exists()
    assert log.recovery_report == []
    assert observe(log) == before


def test_when_no_snapshot_is_readable_the_whole_log_is_replayed(open_log, log_dir):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_scenario(log)
    before = observe(log)
    log.close()
    older, newest = snapshot_offsets(log_dir)
    (log_dir / snapshot_name(older, 0)).write_bytes(b"\x00\x01")  # shorter than a header
    (log_dir / snapshot_name(newest, 0)).write_bytes((log_dir / snapshot_name(newest, 0)).read_bytes()[:-7])
    log = open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    assert log.recovery_stats.snapshot_offset is None
    assert log.recovery_stats.replayed_batches == batch_count(log)
    assert len(log.recovery_stats.discarded_snapshots) == 2
    assert observe(log) == before


def test_a_misnamed_snapshot_is_not_trusted(open_log, log_dir):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_scenario(log)
    before = observe(log)
    log.close()
    older, newest = snapshot_offsets(log_dir)
    (log_dir / snapshot_name(older, 0)).rename(log_dir / snapshot_name(newest - 1, 0))
    (log_dir / snapshot_name(newest, 0)).unlink()
    log = open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    assert log.recovery_stats.snapshot_offset is None
    (line,) = log.recovery_stats.discarded_snapshots
    assert "no batch starts at offset" in line or "not at" in line
    assert observe(log) == before


def test_a_torn_tail_past_the_snapshot_is_cut_and_the_snapshot_beyond_the_end_discarded(
        open_log, log_dir, open_at, tmp_path):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_scenario(log)
    log.close()
    end, active_base = log.log_end_offset, segment_bases(log_dir)[-1]
    assert snapshot_offsets(log_dir) == [active_base, end]
    active = log_dir / f"{active_base:020d}-e0.log"
    raw = bytearray(active.read_bytes())
    last_batch = list(records.iter_batches(bytes(raw)))[-1]
    last_batch_position, damaged_offset = len(raw) - len(last_batch.raw), last_batch.header.base_offset
    raw[last_batch_position + HEADER_SIZE + 2] ^= 0x01  # the last batch (a plain one) fails its CRC
    active.write_bytes(bytes(raw))

    reference = tmp_path / "reference" / "orders-0"  # the same damaged log, without snapshots: full replay
    shutil.copytree(log_dir, reference)
    (reference / "accept-loss-from").write_text(f"{damaged_offset}\n")
    for path in reference.glob("*.snapshot"):
        path.unlink()

    # the damaged batch was fsynced (a clean close): the log refuses to cut it, until an operator gives it up
    with pytest.raises(KafkaStorageError, match=f"{active.name} is damaged at byte {last_batch_position}"):
        open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    assert active.read_bytes() == bytes(raw)
    (log_dir / "accept-loss-from").write_text(f"{damaged_offset + 1}\n")  # less than the damage costs: refused
    with pytest.raises(KafkaStorageError, match=f"echo {damaged_offset} > "):
        open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    (log_dir / "accept-loss-from").write_text(f"{damaged_offset}\n")
    log = open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    assert not (log_dir / "accept-loss-from").exists()
    assert "CRC mismatch" in log.recovery_report[0]
    assert log.log_end_offset < end
    stats = log.recovery_stats
    (line,) = stats.discarded_snapshots
    assert snapshot_name(end, 0) in line and "past the log end" in line
    assert snapshot_offsets(log_dir) == [active_base]
    assert stats.snapshot_offset == active_base and stats.replayed_batches == batch_count(log, active_base)
    replayed = open_at(reference)
    assert replayed.recovery_stats.replayed_batches == batch_count(replayed)
    assert observe(log) == observe(replayed)
    # the offsets the discarded snapshot covered are written again; reopening must see the new batches
    log.append(data(b"rewritten", b"y" * 60, pid=9, epoch=0, seq=0))
    new_end = log.log_end_offset
    log.close()
    log = open_log(leader_epoch=2, segment_bytes=SEGMENT_BYTES)
    assert log.recovery_stats.snapshot_offset == new_end
    assert 9 in {p.producer_id for p in log.producer_snapshots()}


def test_only_the_newest_snapshots_are_kept_as_segments_roll(open_log, log_dir):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    for seq in range(30):
        log.append(data(f"v{seq}".encode() + b"z" * 80, pid=7, epoch=0, seq=seq))
    bases = segment_bases(log_dir)
    assert len(bases) > RETAINED_SNAPSHOTS + 1
    assert snapshot_offsets(log_dir) == bases[-RETAINED_SNAPSHOTS:]


def test_deleting_segments_drops_older_snapshots_and_keeps_the_state(open_log, log_dir):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_scenario(log)
    bases = segment_bases(log_dir)
    deleted = log.delete_segments_before(bases[-1])
    assert deleted == len(bases) - 1 and log.log_start_offset == bases[-1]
    assert all(offset >= log.log_start_offset for offset in snapshot_offsets(log_dir))
    assert all(txn.last_offset >= log.log_start_offset for txn in log.aborted_transactions())
    before = observe(log)
    log.close()
    log = open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    assert log.recovery_stats.snapshot_offset == before["end"]
    assert observe(log) == before


def test_deleting_segments_without_a_snapshot_above_them_writes_one_first(open_log, log_dir, open_at, tmp_path):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_scenario(log)
    for path in log_dir.glob("*.snapshot"):  # e.g. a log written before snapshots existed
        path.unlink()
    before = observe(log)
    bases = segment_bases(log_dir)
    log.delete_segments_before(bases[-1])
    assert snapshot_offsets(log_dir) == [before["end"]]
    crash_image = tmp_path / "crashed" / "orders-0"
    shutil.copytree(log_dir, crash_image)
    crashed = open_at(crash_image)
    assert crashed.recovery_stats.snapshot_offset == before["end"]
    assert crashed.producer_snapshots() == before["producers"]
    assert crashed.last_stable_offset == before["lso"]


def test_a_half_written_snapshot_is_deleted_on_open(open_log, log_dir):
    log = open_log()
    log.append(data(b"a"))
    log.close()
    stray = log_dir / (snapshot_name(7, 0) + ".tmp")
    stray.write_bytes(b"half")
    log = open_log(leader_epoch=1)
    assert not stray.exists()
    assert log.recovery_stats.snapshot_offset == 1


def test_a_log_from_before_snapshots_is_replayed_whole_then_snapshotted_on_close(open_log, log_dir):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_scenario(log)
    before = observe(log)
    log.close()
    for path in log_dir.glob("*.snapshot"):
        path.unlink()
    log = open_log(leader_epoch=1, segment_bytes=SEGMENT_BYTES)
    assert log.recovery_stats.snapshot_offset is None
    assert log.recovery_stats.replayed_batches == batch_count(log)
    assert observe(log) == before
    log.close()
    assert snapshot_offsets(log_dir) == [before["end"]]
