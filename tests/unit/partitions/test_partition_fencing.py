"""Fencing: a leader cut off by a later epoch never acknowledges again, and what it writes anyway
(it may be mid-write when the new leader takes over) never becomes part of the log.

Two LogManagers with different node ids stand for two node processes sharing the data directory;
the "old" one keeps running its code after the "new" one claimed the log, exactly what a node
resumed from SIGSTOP does before it notices.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from partitions import LogConfig, LogManager, PartitionLog
from partitions.leader_epochs import LeaderEpochs
from partitions.producer_snapshot import PartitionStateSnapshot
from partitions.snapshot_files import write_snapshot
from proto import records
from proto.errors import KafkaStorageError, NotLeaderOrFollowerError
from proto.structs import IsolationLevel

SMALL = LogConfig(segment_bytes=400)


def batch(value: bytes) -> bytes:
    return records.encode_batch([(1000, None, value, ())])


def values(log: PartitionLog) -> list[bytes]:
    return [r.value for b in log.batches() for r in b.records()]


def take_over(root: Path, config: LogConfig = LogConfig()) -> tuple[LogManager, PartitionLog]:
    manager = LogManager(root, config, node_id=2)
    return manager, manager.open_as_leader("t", 0, may_cut_off=lambda node: node == 1)


def test_the_cut_off_leader_cannot_acknowledge_and_its_late_write_is_not_in_the_log(tmp_path: Path):
    old_manager = LogManager(tmp_path, node_id=1)
    old = old_manager.open_as_leader("t", 0)
    for i in range(3):
        old.append(batch(b"acked-%d" % i))
    new_manager, new = take_over(tmp_path)
    assert new.high_watermark == 3 and values(new) == [b"acked-0", b"acked-1", b"acked-2"]

    with pytest.raises(NotLeaderOrFollowerError, match="superseded"):
        old.append(batch(b"late"))  # written to its file, fsynced, then refused: never acknowledged
    assert old.high_watermark == 3  # and never readable on the old leader either
    with pytest.raises(NotLeaderOrFollowerError):
        old.read(0, 1 << 20, IsolationLevel.READ_UNCOMMITTED)

    new.append(batch(b"new-0"))
    new_manager.close_all()
    old_manager.close_all()
    reopened = LogManager(tmp_path, node_id=3).open_as_leader("t", 0)
    assert values(reopened) == [b"acked-0", b"acked-1", b"acked-2", b"new-0"]
    (line,) = reopened.recovery_report
    assert "by epoch 0 after a later epoch took over at offset 3" in line
    assert [(b.header.base_offset, b.header.partition_leader_epoch) for b in reopened.batches()] == [
        (0, 0), (1, 0), (2, 0), (3, 1)]
    reopened.close()


def test_segments_the_cut_off_leader_creates_are_deleted_whole(tmp_path: Path):
    old_manager = LogManager(tmp_path, SMALL, node_id=1)
    old = old_manager.open_as_leader("t", 0)
    old.append(batch(b"x" * 300))
    new_manager, new = take_over(tmp_path, SMALL)
    with pytest.raises(NotLeaderOrFollowerError):
        old.append(batch(b"y" * 300))  # does not fit: the old leader rolls a segment of its own epoch
    late_files = sorted(path.name for path in (tmp_path / "t-0").glob("*-e0.log"))
    assert len(late_files) == 2
    for i in range(3):  # the new leader's own segments, at the very offsets the old one used
        new.append(batch(b"z%d" % i * 150))
    new_manager.close_all()
    old_manager.close_all()
    reopened = LogManager(tmp_path, SMALL, node_id=3).open_as_leader("t", 0)
    assert values(reopened) == [b"x" * 300] + [b"z%d" % i * 150 for i in range(3)]
    assert any(late_files[1] in line and "deleted the whole segment" in line for line in reopened.recovery_report)
    reopened.close()


def test_a_snapshot_the_cut_off_leader_took_after_the_take_over_is_not_loaded(tmp_path: Path):
    old_manager = LogManager(tmp_path, node_id=1)
    old = old_manager.open_as_leader("t", 0)
    old.append(batch(b"a"))
    new_manager, new = take_over(tmp_path)
    for value in (b"b", b"c", b"d"):
        new.append(batch(value))
    new_manager.close_all()
    # the old leader, resumed, snapshots its view at offset 3 (it thinks 3 batches are there)
    write_snapshot(tmp_path / "t-0", PartitionStateSnapshot(3, (), ()), epoch=0)
    old_manager.close_all()
    reopened = LogManager(tmp_path, node_id=3).open_as_leader("t", 0)
    assert reopened.recovery_stats.snapshot_offset != 3
    assert any("after a later epoch took over at offset 1" in line
               for line in reopened.recovery_stats.discarded_snapshots)
    assert values(reopened) == [b"a", b"b", b"c", b"d"]
    reopened.close()


def test_a_claimant_racing_on_a_stale_listing_loses_and_overwrites_nothing(tmp_path: Path):
    log_dir = tmp_path / "t-0"
    log_dir.mkdir()
    epochs = LeaderEpochs(log_dir)
    first = epochs.claim(1, after=None)
    checked = epochs.latest()
    assert epochs.claim(2, after=checked) == first + 1
    assert epochs.superseded(first) and not epochs.superseded(first + 1)
    # node 3 checked the same claim as node 2 (and decided about node 1, not about node 2): it loses
    with pytest.raises(NotLeaderOrFollowerError, match="epoch 1 of t-0 was just claimed"):
        epochs.claim(3, after=checked)
    assert [(c.epoch, c.node_id) for c in epochs.claims()] == [(0, 1), (1, 2)]
    assert not list(epochs.directory.glob("*.tmp"))


def test_a_claimant_superseded_before_it_records_its_start_can_never_start(tmp_path: Path):
    """Node 2 claims, reads the log end and is paused before recording its start; node 1 (the old
    leader) writes once more; node 3 takes over and acknowledges writes. When node 2 resumes, its
    start is refused: recorded late it would have moved epoch 0's limit below node 3's data."""
    old_manager = LogManager(tmp_path, node_id=1)
    old = old_manager.open_as_leader("t", 0)
    for i in range(3):
        old.append(batch(b"acked-%d" % i))
    epochs = LeaderEpochs(tmp_path / "t-0")
    paused_epoch = epochs.claim(2, after=epochs.latest())  # node 2, paused right after its claim
    with pytest.raises(NotLeaderOrFollowerError):
        old.append(batch(b"late"))  # not acknowledged; node 3's read below adopts it
    new_manager = LogManager(tmp_path, node_id=3)
    new = new_manager.open_as_leader("t", 0, may_cut_off=lambda node: node in (1, 2))
    new.append(batch(b"new-0"))
    new.append(batch(b"new-1"))
    files_before = {path: path.read_bytes() for path in (tmp_path / "t-0").glob("*.log")}
    with pytest.raises(NotLeaderOrFollowerError, match="superseded while it opened"):
        PartitionLog.open(tmp_path / "t-0", "t", 0, leader_epoch=paused_epoch, epochs=epochs)  # node 2 resumes
    assert {path: path.read_bytes() for path in (tmp_path / "t-0").glob("*.log")} == files_before
    new_manager.close_all()
    old_manager.close_all()
    reopened = LogManager(tmp_path, node_id=4).open_as_leader("t", 0)
    assert values(reopened) == [b"acked-0", b"acked-1", b"acked-2", b"late", b"new-0", b"new-1"]
    assert reopened.recovery_report == []
    reopened.close()


def test_a_stale_claimant_never_cuts_the_file_a_newer_leader_is_writing(tmp_path: Path):
    """Node 2 claims and is paused before it reads the log; node 3 takes over and is in the middle
    of writing a batch (half of it on disk) when node 2 resumes and scans: the half batch looks
    like a torn tail, but node 2 may not cut anything, and does not."""
    epochs = LeaderEpochs(tmp_path / "t-0")
    (tmp_path / "t-0").mkdir()
    paused_epoch = epochs.claim(2, after=None)
    new_manager = LogManager(tmp_path, node_id=3)
    new = new_manager.open_as_leader("t", 0, may_cut_off=lambda node: node == 2)
    for i in range(3):
        new.append(batch(b"acked-%d" % i))
    (active,) = (tmp_path / "t-0").glob(f"*-e{new.leader_epoch}.log")
    acked_bytes = active.read_bytes()
    with active.open("ab") as f:  # node 3's next batch, half written
        f.write(batch(b"in-flight")[:30])
    with pytest.raises(NotLeaderOrFollowerError):
        PartitionLog.open(tmp_path / "t-0", "t", 0, leader_epoch=paused_epoch, epochs=epochs)
    assert active.read_bytes()[:len(acked_bytes)] == acked_bytes
    assert len(active.read_bytes()) == len(acked_bytes) + 30
    with active.open("r+b") as f:  # let node 3's write "finish" as nothing, and carry on
        f.truncate(len(acked_bytes))
    new.append(batch(b"acked-3"))
    assert values(new) == [b"acked-%d" % i for i in range(4)]
    new_manager.close_all()


def test_a_woken_leader_refuses_to_answer_reads_from_the_log_it_held_before_the_takeover(tmp_path: Path):
    """A leader paused past its session wakes up still holding an open transaction that the new
    leader has since committed: what it holds would put the LSO below that commit, so a
    read_committed consumer asking it would stop short. Checked after the read, it refuses instead."""
    old_manager = LogManager(tmp_path, node_id=1)
    old = old_manager.open_as_leader("t", 0)
    old.append(records.encode_batch([(1000, None, b"in-txn", ())], producer_id=7, producer_epoch=0,
                                    base_sequence=0, transactional=True), verified_producer_ids=frozenset({7}))
    old.check_still_leader()  # the leader it is: reads are answered
    new_manager, new = take_over(tmp_path)
    new.append_marker(producer_id=7, producer_epoch=1, committed=True, coordinator_epoch=0, timestamp_ms=5000)
    assert new.last_stable_offset == 2
    assert old.last_stable_offset == 0  # the stale view the woken node would have answered from

    with pytest.raises(NotLeaderOrFollowerError, match="superseded"):
        old.check_still_leader()
    with pytest.raises(NotLeaderOrFollowerError):
        old.read(0, 1 << 20, IsolationLevel.READ_COMMITTED)  # and, once it knows, nothing is read at all
    new_manager.close_all()
    old_manager.close_all()


# ------------------------------------------------------------ a claims directory removed or thinned out


def test_a_log_whose_claims_directory_is_gone_is_refused_and_its_leader_fenced(tmp_path: Path, caplog):
    old_manager = LogManager(tmp_path, node_id=1)
    old = old_manager.open_as_leader("t", 0)
    old.append(batch(b"acked"))
    epochs_dir = tmp_path / "t-0" / "epochs"
    for claim in epochs_dir.iterdir():
        claim.unlink()
    epochs_dir.rmdir()  # removed under a running cluster: nothing would fence the old leader any more
    with caplog.at_level("ERROR"), pytest.raises(KafkaStorageError, match="epochs is missing"):
        take_over(tmp_path)
    assert "epochs is missing" in caplog.text
    assert old.fenced  # the directory it claimed in is gone: it acknowledges nothing more
    with pytest.raises(NotLeaderOrFollowerError):
        old.append(batch(b"after"))
    epochs_dir.mkdir()  # what the refusal tells an operator to do once the old leader is stopped
    new_manager = LogManager(tmp_path, node_id=2)
    new = new_manager.open_as_leader("t", 0, may_cut_off=lambda node: node == 1)
    assert new.leader_epoch == 1 and values(new) == [b"acked"]  # above the epoch its files carry
    new_manager.close_all()


def test_epochs_whose_claims_were_deleted_are_claimed_again_above_every_file_and_their_leaders_fenced(
        tmp_path: Path):
    managers = [LogManager(tmp_path, SMALL, node_id=n) for n in (1, 2)]
    first = managers[0].open_as_leader("t", 0)
    first.append(batch(b"epoch-0"))
    managers[0].close_all()
    second = managers[1].open_as_leader("t", 0)  # epoch 1
    second.append(batch(b"epoch-1"))
    epochs = tmp_path / "t-0" / "epochs"
    for name in ("0000000001.claim", "0000000001.start"):
        (epochs / name).unlink()  # the newest claim lost: epoch 1 would be claimed again
    manager, third = take_over(tmp_path, SMALL)
    assert third.leader_epoch == 2  # above the epoch of second's segment file
    assert second.fenced  # epoch 1 was claimed again, never to start, so its leader sees a later claim
    assert values(third) == [b"epoch-0", b"epoch-1"]
    manager.close_all()
    managers[1].close_all()
