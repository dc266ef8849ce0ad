"""A replica's log: a follower copies its leader's batches as they are and ends up with the same log and the
same producer state, so once it leads it dedupes and fences as the old leader would; a cut to the leader's
history rebuilds that state; the high watermark is replication's; the epoch cache and the mark survive a
restart; damage in the middle is cut and fetched again instead of closing the log."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitions import LogConfig, ReplicaLog, ReplicaRole
from partitions.epoch_checkpoint import FILE_NAME as EPOCH_FILE
from partitions.memory_storage import MemoryStorage
from partitions.storage import Storage
from proto import records
from proto.errors import (
    CorruptMessageError,
    InvalidProducerEpochError,
    InvalidRecordError,
    NotLeaderOrFollowerError,
)
from proto.structs import IsolationLevel

COMMITTED = IsolationLevel.READ_COMMITTED
UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
pytestmark = pytest.mark.parametrize("storage", ["file", "memory"], indirect=True)

OpenReplica = Callable[..., ReplicaLog]


@pytest.fixture
def open_replica(tmp_path: Path, storage: Storage) -> Iterator[OpenReplica]:
    """open_replica(name, leader_epoch=0, **LogConfig fields): a replica's log in tmp_path/name, a follower."""
    opened: list[ReplicaLog] = []

    def _open(name: str, *, leader_epoch: int = 0, **config: object) -> ReplicaLog:
        log = ReplicaLog.open(tmp_path / name, "orders", 0, leader_epoch=leader_epoch,
                                config=LogConfig(**config), storage=storage)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def data(*values: bytes, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return records.encode_batch([(1000, None, v, ()) for v in values],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def marker(log: ReplicaLog, pid: int, *, committed: bool, epoch: int = 0) -> None:
    log.append_marker(producer_id=pid, producer_epoch=epoch, committed=committed, coordinator_epoch=0,
                      timestamp_ms=5000)


def replicate(leader: ReplicaLog, follower: ReplicaLog, max_bytes: int = 1 << 20) -> None:
    """The follower fetches from its log end until it has the leader's, then both take the ISR's mark."""
    while follower.log_end_offset < leader.log_end_offset:
        fetched = leader.read_for_follower(follower.log_end_offset, max_bytes)
        follower.append_as_follower(fetched.records)
    mark = leader.set_high_watermark(follower.log_end_offset)
    follower.set_high_watermark(mark)


def committed_values(log: ReplicaLog) -> list[bytes | None]:
    """What a read_committed consumer is handed: records below the LSO, aborted ones and markers left out."""
    fetched = log.read(0, 1 << 30, COMMITTED)
    aborted = {pid: first for pid, first in fetched.aborted_transactions}
    out = []
    for batch in records.iter_batches(fetched.records):
        header = batch.header
        if header.is_control:  # an abort's marker ends its aborted range
            aborted.pop(header.producer_id, None)
            continue
        if header.is_transactional and aborted.get(header.producer_id, 1 << 62) <= header.base_offset:
            continue
        out.extend(record.value for record in batch.records())
    return out


def busy_leader(log: ReplicaLog) -> None:
    """Plain, idempotent and transactional writes: one committed, one aborted, one left open."""
    log.append(data(b"plain"))
    log.append(data(b"idem-0", b"idem-1", pid=3, epoch=0, seq=0))
    log.append(data(b"paid", pid=7, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({7}))
    log.append(data(b"cancelled", pid=8, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({8}))
    marker(log, 7, committed=True)
    marker(log, 8, committed=False)
    log.append(data(b"open", pid=9, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({9}))


def same_state(a: ReplicaLog, b: ReplicaLog) -> None:
    assert a.read_for_follower(0, 1 << 30).records == b.read_for_follower(0, 1 << 30).records
    assert a.producer_snapshots() == b.producer_snapshots()
    assert a.open_transactions() == b.open_transactions()
    assert a.aborted_transactions() == b.aborted_transactions()
    assert (a.high_watermark, a.last_stable_offset) == (b.high_watermark, b.last_stable_offset)
    assert committed_values(a) == committed_values(b)
    # the epoch of every offset (a leader also knows its own epoch before it has written in it)
    ends = range(a.log_end_offset)
    assert [a.epoch_cache().epoch_at(o) for o in ends] == [b.epoch_cache().epoch_at(o) for o in ends]


def test_a_follower_fed_the_leaders_batches_holds_the_same_log_and_producer_state(open_replica):
    leader, follower = open_replica("a"), open_replica("b")
    leader.become_leader(0)
    busy_leader(leader)
    replicate(leader, follower, max_bytes=100)  # a batch or two per fetch
    same_state(leader, follower)
    assert committed_values(follower) == [b"plain", b"idem-0", b"idem-1", b"paid"]
    assert follower.last_stable_offset == 7  # held at the open transaction, as on the leader


def test_a_follower_that_takes_over_dedupes_and_fences_as_the_old_leader_would(open_replica):
    leader, follower = open_replica("a"), open_replica("b")
    leader.become_leader(0)
    busy_leader(leader)
    replicate(leader, follower)
    leader.become_follower(1)
    follower.become_leader(1)
    retried = follower.append(data(b"idem-0", b"idem-1", pid=3, epoch=0, seq=0))
    assert retried.duplicate and (retried.base_offset, retried.last_offset) == (1, 2)
    follower.append(data(b"t", pid=9, epoch=1, seq=0, txn=True), verified_producer_ids=frozenset({9}))
    with pytest.raises(InvalidProducerEpochError):  # the bump fenced epoch 0, on the new leader too
        follower.append(data(b"zombie", pid=9, epoch=0, seq=1, txn=True), verified_producer_ids=frozenset({9}))
    end = follower.log_end_offset
    assert follower.epoch_cache().entries() == ((0, 0), (1, 8))
    batch = next(records.iter_batches(follower.read_for_follower(end - 1, 1 << 20).records))
    assert batch.header.partition_leader_epoch == 1


def test_a_leader_that_wrote_nothing_in_its_epoch_follows_a_leader_of_an_older_epochs_batches(open_replica):
    """Node b led epoch 3 without writing (cut off at once); the next leader kept writing at epoch 2's end
    before its own epoch began: b must take those batches, not refuse them as an epoch going back (which
    left it out of the ISR for good)."""
    a, b = open_replica("a"), open_replica("b")
    a.become_leader(2)
    a.append(data(b"e2-0"))
    replicate(a, b)
    b.become_leader(3)  # the epoch starts at b's log end
    a.append(data(b"e2-1"))  # a, not yet told of epoch 3, still writes at epoch 2
    b.become_follower(4)
    assert b.epoch_cache().latest_epoch == 2
    replicate(a, b)
    assert [r.value for batch in records.iter_batches(b.read_for_follower(0, 1 << 20).records)
            for r in batch.records()] == [b"e2-0", b"e2-1"]


def test_a_new_epoch_reaches_the_file_with_its_first_batch_and_before_it(open_replica, storage, tmp_path):
    """Becoming leader writes no file (a failover makes a node lead dozens of partitions at once); the first
    batch of the epoch writes the epoch first, so a power loss never leaves a batch whose epoch the file
    lacks, and one before any write loses only an epoch that held nothing."""
    if not isinstance(storage, MemoryStorage):
        pytest.skip("a power loss needs the simulated disk")
    leader = open_replica("a")
    leader.become_leader(2)
    leader.append(data(b"e2"))
    leader.become_leader(5)
    assert storage.read_bytes(tmp_path / "a" / EPOCH_FILE) == b"0\n1\n2 0\n"
    assert leader.end_offset_for_epoch(2).end_offset == 1  # the cache has it all along
    storage.crash()
    again = open_replica("a", leader_epoch=5)
    assert again.epoch_cache().entries() == ((2, 0),)
    assert again.end_offset_for_epoch(2).end_offset == 1  # the same answer the cache gave before the crash
    again.become_leader(5)
    again.append(data(b"e5"), wait_durable=False)  # not fsynced yet: the epoch is
    assert storage.read_bytes(tmp_path / "a" / EPOCH_FILE) == b"0\n2\n2 0\n5 1\n"
    again.append(data(b"e5-more"))
    storage.crash()
    assert open_replica("a", leader_epoch=5).epoch_cache().entries() == ((2, 0), (5, 1))


def test_roles_are_kept_apart(open_replica):
    leader, follower = open_replica("a"), open_replica("b")
    assert follower.role is ReplicaRole.FOLLOWER
    with pytest.raises(NotLeaderOrFollowerError, match="follows"):
        follower.append(data(b"x"))
    with pytest.raises(NotLeaderOrFollowerError, match="follows"):
        marker(follower, 7, committed=True)
    leader.become_leader(2)
    leader.append(data(b"x"))
    with pytest.raises(NotLeaderOrFollowerError, match="does not follow"):
        leader.append_as_follower(leader.read_for_follower(0, 1 << 20).records)
    with pytest.raises(ValueError, match="older"):
        leader.become_follower(1)


def test_batches_that_do_not_continue_the_log_are_refused_and_nothing_is_stored(open_replica):
    leader, follower = open_replica("a"), open_replica("b")
    leader.become_leader(3)
    for value in (b"0", b"1", b"2"):
        leader.append(data(value))
    all_batches = leader.read_for_follower(0, 1 << 20).records
    follower.append_as_follower(leader.read_for_follower(0, 1).records)  # offset 0
    gap = leader.read_for_follower(2, 1 << 20).records
    with pytest.raises(InvalidRecordError, match="goes on at 1"):
        follower.append_as_follower(gap)
    with pytest.raises(InvalidRecordError, match="goes on at 1"):
        follower.append_as_follower(all_batches)  # overlaps offset 0
    damaged = bytearray(leader.read_for_follower(1, 1 << 20).records)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        follower.append_as_follower(bytes(damaged))
    older = records.set_base_offset(leader.read_for_follower(1, 1).records, 1, 2)  # epoch 2 after epoch 3
    with pytest.raises(InvalidRecordError, match="after epoch 3"):
        follower.append_as_follower(older)
    assert follower.log_end_offset == 1
    follower.append_as_follower(leader.read_for_follower(1, 1 << 20).records)
    assert follower.read_for_follower(0, 1 << 20).records == all_batches


def test_the_high_watermark_is_what_replication_sets_never_past_the_fsynced_end(open_replica):
    leader = open_replica("a")
    leader.become_leader(0)
    leader.append(data(b"0", b"1"))
    leader.append(data(b"2"))
    assert (leader.log_end_offset, leader.high_watermark) == (3, 0)  # fsynced, but the ISR has not got it
    assert leader.read(0, 1 << 20, UNCOMMITTED).records == b""  # between the mark and the log end: empty
    assert leader.set_high_watermark(2) == 2
    assert [b.header.base_offset for b in records.iter_batches(leader.read(0, 1 << 20, UNCOMMITTED).records)] == [0]
    assert leader.set_high_watermark(1) == 2  # never back
    assert leader.set_high_watermark(99) == 3  # never past what this replica has
    leader.append(data(b"3"), wait_durable=False)
    assert leader.high_watermark == 3
    leader.make_durable(4)
    assert leader.high_watermark == 4  # the mark set before is reached once the write is fsynced


def test_the_epoch_cache_and_the_high_watermark_survive_a_restart(open_replica, storage, tmp_path):
    leader = open_replica("a")
    leader.become_leader(0)
    leader.append(data(b"0"))
    leader.become_leader(4)
    leader.append(data(b"1"))
    leader.append(data(b"2"))
    leader.set_high_watermark(2)
    leader.close()
    again = open_replica("a", leader_epoch=4)
    assert again.epoch_cache().entries() == ((0, 0), (4, 1))
    assert (again.high_watermark, again.log_end_offset) == (2, 3)
    assert again.role is ReplicaRole.FOLLOWER  # until the controller says otherwise
    again.close()
    storage.delete(tmp_path / "a" / EPOCH_FILE)  # lost: rebuilt from the batches' own epochs
    rebuilt = open_replica("a", leader_epoch=4)
    assert rebuilt.epoch_cache().entries() == ((0, 0), (4, 1))
    assert rebuilt.end_offset_for_epoch(0).end_offset == 1
    rebuilt.close()
    storage.write_file(tmp_path / "a" / EPOCH_FILE, b"0\n2\n0 0\n", fsync=True)  # torn: rebuilt too
    assert open_replica("a", leader_epoch=4).epoch_cache().entries() == ((0, 0), (4, 1))
    assert storage.read_bytes(tmp_path / "a" / EPOCH_FILE) == b"0\n2\n0 0\n4 1\n"  # Kafka's format


def test_a_cut_removes_whole_batches_and_rebuilds_the_producer_state(open_replica, storage, tmp_path):
    leader, follower = open_replica("a"), open_replica("b")
    leader.become_leader(0)
    busy_leader(leader)
    replicate(leader, follower)
    assert len(follower.aborted_transactions()) == 1 and follower.open_transactions()
    # offset 5 is pid 8's abort marker, 4 its data: cut inside the two-record idempotent batch at 1..2
    assert follower.truncate_to(2) == 1
    assert follower.log_end_offset == follower.high_watermark == 1
    assert follower.aborted_transactions() == () and follower.open_transactions() == []
    assert [snapshot.producer_id for snapshot in follower.producer_snapshots()] == []
    # and it copies the leader again, ending where the leader is
    replicate(leader, follower)
    same_state(leader, follower)
    follower.close()
    reopened = open_replica("b")  # the recovery point came down with the cut: nothing looks damaged
    same_state(leader, reopened)


def test_a_cut_across_segments_deletes_the_later_ones(open_replica, storage, tmp_path):
    leader, follower = open_replica("a", segment_bytes=200), open_replica("b", segment_bytes=200)
    leader.become_leader(0)
    for i in range(12):
        leader.append(data(b"value-%d" % i, pid=5, epoch=0, seq=i))
    replicate(leader, follower, max_bytes=1)  # one batch per fetch: segments roll as on the leader
    segments_before = sorted(name for name in storage.list_dir(tmp_path / "b") if name.endswith(".log"))
    assert len(segments_before) >= 4
    assert follower.truncate_to(3) == 3
    segments_after = sorted(name for name in storage.list_dir(tmp_path / "b") if name.endswith(".log"))
    assert len(segments_after) < len(segments_before)
    assert follower.producer_snapshots()[0].last_sequence == 2
    replicate(leader, follower)
    same_state(leader, follower)


def test_a_flipped_byte_in_a_replica_is_cut_and_fetched_again(open_replica, storage, tmp_path, caplog):
    leader, follower = open_replica("a", segment_bytes=300), open_replica("b", segment_bytes=300)
    leader.become_leader(0)
    for i in range(20):
        leader.append(data(b"value-%d" % i, pid=5, epoch=0, seq=i))
    replicate(leader, follower, max_bytes=1)
    follower.close()
    segments = sorted(name for name in storage.list_dir(tmp_path / "b") if name.endswith(".log"))
    middle = tmp_path / "b" / segments[len(segments) // 2]
    damaged = bytearray(storage.read_bytes(middle))
    damaged[len(damaged) // 2] ^= 0x40
    storage.write_file(middle, bytes(damaged), fsync=True)
    with caplog.at_level(logging.ERROR):
        reopened = open_replica("b")
    assert 0 < reopened.log_end_offset < 20
    assert "fetches offsets" in caplog.text
    replicate(leader, reopened)
    same_state(leader, reopened)


ops = st.lists(st.tuples(st.sampled_from(["plain", "idem", "txn", "commit", "abort", "fetch", "cut"]),
                         st.integers(0, 3), st.integers(0, 40)), max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=ops)
def test_whatever_the_cuts_a_follower_that_catches_up_holds_the_leaders_state(steps, storage, tmp_path_factory):
    where = tmp_path_factory.mktemp("replicas")
    leader = ReplicaLog.open(where / "a", "t", 0, leader_epoch=0, config=LogConfig(segment_bytes=400),
                             storage=storage)
    follower = ReplicaLog.open(where / "b", "t", 0, leader_epoch=0, config=LogConfig(segment_bytes=400),
                               storage=storage)
    leader.become_leader(0)
    sequences: dict[int, int] = {}
    open_txns: set[int] = set()
    try:
        for kind, pid, amount in steps:
            if kind == "plain":
                leader.append(data(b"p%d" % amount))
            elif kind == "idem":
                pid += 10
                leader.append(data(b"i", pid=pid, epoch=0, seq=sequences.get(pid, 0)))
                sequences[pid] = sequences.get(pid, 0) + 1
            elif kind == "txn":
                pid += 20
                leader.append(data(b"t", pid=pid, epoch=0, seq=sequences.get(pid, 0), txn=True),
                              verified_producer_ids=frozenset({pid}))
                sequences[pid] = sequences.get(pid, 0) + 1
                open_txns.add(pid)
            elif kind in ("commit", "abort") and pid + 20 in open_txns:
                marker(leader, pid + 20, committed=kind == "commit")
                open_txns.discard(pid + 20)
            elif kind == "fetch" and follower.log_end_offset < leader.log_end_offset:
                follower.append_as_follower(leader.read_for_follower(follower.log_end_offset, 64 + amount * 8).records)
            elif kind == "cut":
                follower.truncate_to(min(amount, follower.log_end_offset))
        replicate(leader, follower)
        same_state(leader, follower)
    finally:
        leader.close()
        follower.close()


def test_a_follower_starting_over_at_its_leaders_log_start_keeps_nothing_and_reopens_there(open_replica):
    leader, follower = open_replica("a"), open_replica("b")
    leader.become_leader(0)
    busy_leader(leader)
    follower.append_as_follower(leader.read_for_follower(0, 1).records)  # offset 0 only
    leader.set_high_watermark(leader.log_end_offset)  # (the ISR is the leader alone here)
    assert leader.delete_records_before(6) == 6
    follower.truncate_fully_and_start_at(6)
    assert (follower.log_start_offset, follower.log_end_offset, follower.high_watermark) == (6, 6, 6)
    assert follower.producer_snapshots() == [] and follower.epoch_cache().entries() == ()
    follower.append_as_follower(leader.read_for_follower(6, 1 << 20).records)
    follower.set_high_watermark(leader.high_watermark)
    assert follower.open_transactions() == leader.open_transactions()  # the open transaction's data is at 6
    follower.close()
    reopened = open_replica("b")
    assert (reopened.log_start_offset, reopened.log_end_offset) == (6, leader.log_end_offset)
