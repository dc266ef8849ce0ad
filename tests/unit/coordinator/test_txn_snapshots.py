"""Shard snapshots keep loading short and disk use flat, and lose nothing."""
from __future__ import annotations

import logging

from coordinator import shard_snapshots
from coordinator.txn import snapshots, state_log
from coordinator.txn.metadata import TxnMetadata
from partitions import LogConfig, LogManager
from proto.structs import TransactionState

SMALL = LogConfig(segment_bytes=4096)


def write_history(shard_log, ids: int, rounds: int) -> dict[str, TxnMetadata]:
    latest = {}
    for r in range(rounds):
        for i in range(ids):
            meta = TxnMetadata(f"tx-{i}", i, r, 60000, TransactionState.COMPLETE_COMMIT, last_update_time_ms=r)
            state_log.append_entry(shard_log, meta.transactional_id, meta)
            latest[meta.transactional_id] = meta
    return latest


def snapshot_offsets(shard_log) -> list[int]:
    return [file.next_offset for file in shard_snapshots.list_files(shard_log.directory, snapshots.KIND)]


def test_a_snapshot_plus_tail_loads_the_same_state_as_the_full_log(tmp_path):
    logs = LogManager(tmp_path, SMALL)
    shard_log = logs.open_as_leader("__transaction_state", 0)
    latest = write_history(shard_log, ids=20, rounds=30)
    state_log.append_entry(shard_log, "tx-3", None)  # a tombstone deletes an id
    del latest["tx-3"]
    full, replayed_full = state_log.load(shard_log)
    assert full == latest and replayed_full == 601

    first = state_log.take_snapshot(shard_log)
    assert (shard_log.directory / f"{first.next_offset:020d}.txn-snapshot").exists()
    assert shard_log.log_start_offset == 0  # the first snapshot has no fallback: nothing is deleted yet
    latest.update(write_history(shard_log, ids=20, rounds=10))
    state_log.take_snapshot(shard_log)
    assert 0 < shard_log.log_start_offset <= first.next_offset  # history below the fallback is gone
    latest.update(write_history(shard_log, ids=5, rounds=1))
    logs.close_all()

    reopened = LogManager(tmp_path, SMALL).open_as_leader("__transaction_state", 0)
    loaded, replayed = state_log.load(reopened)
    assert loaded == latest
    assert replayed == 5


def test_load_time_and_disk_use_stay_flat_as_history_grows(tmp_path):
    logs = LogManager(tmp_path, SMALL)
    shard_log = logs.open_as_leader("__transaction_state", 0)
    segments_after = []
    for _ in range(8):
        write_history(shard_log, ids=10, rounds=20)
        state_log.take_snapshot(shard_log)
        segments_after.append(len(list(shard_log.directory.glob("*.log"))))
        _entries, replayed = state_log.load(shard_log)
        assert replayed == 0
        assert len(snapshot_offsets(shard_log)) <= 2  # the newest and its fallback
    assert max(segments_after[2:]) <= segments_after[1]  # the log back to the fallback, no more


def test_a_damaged_newest_snapshot_falls_back_to_the_previous_one_and_loses_nothing(tmp_path):
    logs = LogManager(tmp_path, SMALL)
    shard_log = logs.open_as_leader("__transaction_state", 0)
    latest = {}
    for _ in range(3):
        latest.update(write_history(shard_log, ids=10, rounds=20))
        state_log.take_snapshot(shard_log)
    fallback, newest = snapshot_offsets(shard_log)
    assert shard_log.log_start_offset <= fallback  # the segments after the fallback are all there
    (shard_log.directory / shard_snapshots.file_name("txn", newest)).write_bytes(b"\x00\x00\x00\x00garbage")
    loaded, replayed = state_log.load(shard_log)
    assert loaded == latest
    assert replayed == newest - fallback


def test_a_damaged_snapshot_is_ignored_and_the_log_still_loads(tmp_path):
    logs = LogManager(tmp_path, LogConfig())
    shard_log = logs.open_as_leader("__transaction_state", 0)
    latest = write_history(shard_log, ids=3, rounds=2)
    image = state_log.take_snapshot(shard_log)  # one big segment: nothing is deleted
    (shard_log.directory / shard_snapshots.file_name("txn", image.next_offset)).write_bytes(b"\x00garbage")
    loaded, replayed = state_log.load(shard_log)
    assert loaded == latest and replayed == 6


def test_a_stale_writer_cannot_replace_or_delete_a_newer_snapshot(tmp_path):
    logs = LogManager(tmp_path, SMALL)
    shard_log = logs.open_as_leader("__transaction_state", 0)
    write_history(shard_log, ids=10, rounds=10)
    old = state_log.take_snapshot(shard_log)  # what a node that is later fenced would have built
    old_payload = snapshots.encode(old)
    latest = write_history(shard_log, ids=10, rounds=20)
    state_log.take_snapshot(shard_log)
    newest = state_log.take_snapshot(shard_log).next_offset  # no new records: the same file, kept as it is
    latest.update(write_history(shard_log, ids=10, rounds=20))
    state_log.take_snapshot(shard_log)
    assert shard_log.log_start_offset > old.next_offset

    shard_snapshots.write(shard_log.directory, "txn", old.next_offset, old_payload)  # the fenced node wakes up
    assert old.next_offset in snapshot_offsets(shard_log) and max(snapshot_offsets(shard_log)) > newest
    loaded, replayed = state_log.load(shard_log)
    assert loaded == latest and replayed == 0


def test_a_fallback_below_the_log_start_is_loaded_with_a_warning(tmp_path, caplog):
    logs = LogManager(tmp_path, SMALL)
    shard_log = logs.open_as_leader("__transaction_state", 0)
    write_history(shard_log, ids=10, rounds=10)
    old = state_log.take_snapshot(shard_log)
    for _ in range(3):
        write_history(shard_log, ids=10, rounds=20)
        state_log.take_snapshot(shard_log)
    shard_snapshots.write(shard_log.directory, "txn", old.next_offset, snapshots.encode(old))  # a stale writer's
    for offset in snapshot_offsets(shard_log)[1:]:  # every newer snapshot is damaged
        (shard_log.directory / shard_snapshots.file_name("txn", offset)).write_bytes(b"rot")
    with caplog.at_level(logging.WARNING):
        loaded, replayed = state_log.load(shard_log)
    assert "is lost" in caplog.text and str(shard_log.log_start_offset) in caplog.text
    assert replayed == shard_log.high_watermark - shard_log.log_start_offset  # what exists still loads
    assert set(loaded) == {f"tx-{i}" for i in range(10)}


def test_the_single_snapshot_file_of_earlier_versions_is_converted(tmp_path):
    logs = LogManager(tmp_path, SMALL)
    shard_log = logs.open_as_leader("__transaction_state", 0)
    latest = write_history(shard_log, ids=10, rounds=20)
    image = snapshots.ShardImage()
    state_log.advance(shard_log, image)
    (shard_log.directory / snapshots.LEGACY_FILE).write_bytes(shard_snapshots.frame(snapshots.encode(image)))
    latest.update(write_history(shard_log, ids=2, rounds=1))

    loaded, replayed = state_log.load(shard_log)
    assert loaded == latest and replayed == 2
    assert not (shard_log.directory / snapshots.LEGACY_FILE).exists()
    assert snapshot_offsets(shard_log) == [image.next_offset]


def test_a_half_written_snapshot_is_ignored_and_cleared_by_the_next_one(tmp_path):
    logs = LogManager(tmp_path, SMALL)
    shard_log = logs.open_as_leader("__transaction_state", 0)
    latest = write_history(shard_log, ids=10, rounds=5)
    torn = shard_log.directory / f"{shard_snapshots.file_name('txn', 25)}.4242.tmp"  # a crash mid-write
    torn.write_bytes(b"\x00half")
    loaded, replayed = state_log.load(shard_log)
    assert loaded == latest and replayed == 50
    state_log.take_snapshot(shard_log)
    assert not torn.exists()
