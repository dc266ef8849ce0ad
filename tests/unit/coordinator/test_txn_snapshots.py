"""Shard snapshots keep loading short and disk use flat, and lose nothing."""
from __future__ import annotations

from coordinator.txn import state_log
from coordinator.txn.metadata import TxnMetadata
from coordinator.txn.snapshots import SNAPSHOT_FILE
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


def test_a_snapshot_plus_tail_loads_the_same_state_as_the_full_log(tmp_path):
    logs = LogManager(tmp_path, SMALL)
    shard_log = logs.open_as_leader("__transaction_state", 0)
    latest = write_history(shard_log, ids=20, rounds=30)
    state_log.append_entry(shard_log, "tx-3", None)  # a tombstone deletes an id
    del latest["tx-3"]
    full, replayed_full = state_log.load(shard_log)
    assert full == latest and replayed_full == 601

    state_log.take_snapshot(shard_log)
    assert (shard_log.directory / SNAPSHOT_FILE).exists()
    assert shard_log.log_start_offset > 0  # the segments the snapshot covers are gone
    latest.update(write_history(shard_log, ids=5, rounds=1))
    logs.close_all()

    reopened = LogManager(tmp_path, SMALL).open_as_leader("__transaction_state", 0)
    loaded, replayed = state_log.load(reopened)
    assert loaded == latest
    assert replayed == 5


def test_load_time_stays_flat_as_history_grows(tmp_path):
    logs = LogManager(tmp_path, SMALL)
    shard_log = logs.open_as_leader("__transaction_state", 0)
    files_after = []
    for _ in range(5):
        write_history(shard_log, ids=10, rounds=20)
        state_log.take_snapshot(shard_log)
        files_after.append(len(list(shard_log.directory.glob("*.log"))))
        _entries, replayed = state_log.load(shard_log)
        assert replayed == 0
    assert max(files_after) <= 2  # the active segment and at most one below the snapshot


def test_a_damaged_snapshot_is_ignored_and_the_log_still_loads(tmp_path):
    logs = LogManager(tmp_path, LogConfig())
    shard_log = logs.open_as_leader("__transaction_state", 0)
    latest = write_history(shard_log, ids=3, rounds=2)
    state_log.take_snapshot(shard_log)  # one big segment: nothing is deleted
    snapshot = shard_log.directory / SNAPSHOT_FILE
    snapshot.write_bytes(b"\x00\x00\x00\x00garbage")
    loaded, _ = state_log.load(shard_log)
    assert loaded == latest
