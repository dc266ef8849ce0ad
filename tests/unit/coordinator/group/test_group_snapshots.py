"""__consumer_offsets shard snapshots: a reload rebuilds exactly what was served while replaying only
the tail, and neither a fenced writer's older snapshot nor a damaged one loses anything.

Real PartitionLogs in tmp_path with small segments, so snapshots really delete history; one shard
holds every group (offsets_shards=1). The clock is a counter and requests come from a seeded
random generator: nothing sleeps, every run is the same.
"""
from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from coordinator import shard_snapshots
from coordinator.group import GroupCoordinator, snapshots
from coordinator.group.coordinator import ShardLoad
from partitions import LogConfig, PartitionLog
from proto import txnsim_pb2 as pb
from proto.structs import TopicPartition
from tests.fakes import ManualClock, node_io
from tests.unit.coordinator.group.test_group_coordinator import (
    TOPICS,
    commit,
    fetch,
    rebalance,
    txn_commit,
)

SHARD = 0
INTERVAL = 100
SMALL = LogConfig(segment_bytes=8192)
GROUPS = [f"app-{i}" for i in range(6)]
PARTITIONS = [TopicPartition(topic, p) for topic, count in TOPICS.items() for p in range(count)]
T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


class ShardFiles:
    """The shard's log on disk as the node handles it: each owner opens it at a new epoch, and a
    marker is appended durably before the coordinator hears of it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.epoch = 0
        self.log = PartitionLog.open(directory, "__consumer_offsets", SHARD, leader_epoch=0, config=SMALL)

    def reopen(self) -> PartitionLog:
        self.log.close()
        self.epoch += 1
        self.log = PartitionLog.open(self.directory, "__consumer_offsets", SHARD, leader_epoch=self.epoch,
                                     config=SMALL)
        return self.log

    def marker(self, gc: GroupCoordinator, producer_id: int, committed: bool) -> None:
        offset = self.log.append_marker(producer_id=producer_id, producer_epoch=0, committed=committed,
                                        coordinator_epoch=0).base_offset
        gc.complete_transaction(SHARD, producer_id, committed, marker_offset=offset)

    def snapshot_offsets(self) -> list[int]:
        return [file.next_offset for file in shard_snapshots.list_files(self.directory, snapshots.KIND)]

    def damage(self, next_offset: int) -> None:
        (self.directory / shard_snapshots.file_name(snapshots.KIND, next_offset)).write_bytes(b"\x00rot")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def shard(tmp_path: Path):
    files = ShardFiles(tmp_path / "__consumer_offsets-0")
    yield files
    files.log.close()


def load(clock: ManualClock, shard_log: PartitionLog, interval: int = INTERVAL) -> tuple[GroupCoordinator, ShardLoad]:
    gc = GroupCoordinator(1, io=node_io(clock), min_session_timeout_ms=100, partitions_for=TOPICS.get,
                          snapshot_interval_records=interval, initial_rebalance_delay_ms=0, run_timers=False)
    return gc, gc.load_shard(SHARD, shard_log)


def served(gc: GroupCoordinator) -> tuple[dict, dict]:
    """Everything a replay rebuilds, as the coordinator serves it (its private state: that is what
    must survive a reload exactly)."""
    state = gc._shards[SHARD]
    groups = {name: (g.classic.state, g.classic.generation, g.classic.protocol_type, g.classic.protocol_name,
                     g.classic.leader_id, [(m.member_id, m.group_instance_id, m.protocols, m.assignment)
                                           for m in g.classic.members.values()], dict(g.offsets),
                     {pid: dict(offsets) for pid, offsets in g.pending.items()})
              for name, g in state.groups.items()}
    return groups, {pid: set(names) for pid, names in state.txn_groups.items()}


def fetched(gc: GroupCoordinator) -> dict[str, tuple[dict, dict]]:
    """What a client reads of every group, with and without require_stable."""
    return {group: (fetch(gc, PARTITIONS, group_id=group), fetch(gc, PARTITIONS, False, group_id=group))
            for group in GROUPS}


class Workload:
    """Plain and transactional offset commits, joins, leaves and markers over several groups."""

    PRODUCERS = range(5000, 5012)

    def __init__(self, gc: GroupCoordinator, shard: ShardFiles, clock: ManualClock, seed: int) -> None:
        self.gc, self.shard, self.clock = gc, shard, clock
        self.rng = random.Random(seed)
        self.members: dict[str, list[str]] = {group: [] for group in GROUPS}
        self.generation = {group: -1 for group in GROUPS}
        self.open_producers: set[int] = set()

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.clock.ms += 1
            group, roll = self.rng.choice(GROUPS), self.rng.random()
            if roll < 0.04:
                self.join(group)
            elif roll < 0.06 and self.members[group]:
                self.leave(group)
            elif roll < 0.35:
                self.txn_commit(group)
            elif roll < 0.5 and self.open_producers:
                self.marker()
            else:
                commit(self.gc, self.offsets(), **self.member_of(group))

    def join(self, group: str) -> None:
        joined = rebalance(self.gc, ["orders"], self.members[group], new_members=1, group_id=group)
        self.members[group] = [j.member_id for j in joined]
        self.generation[group] = joined[0].generation_id

    def leave(self, group: str) -> None:
        member = self.members[group].pop(self.rng.randrange(len(self.members[group])))
        self.gc.leave_group(pb.LeaveGroupRequest(group_id=group, member_id=member))
        self.generation[group] += 1
        if self.members[group]:
            joined = rebalance(self.gc, ["orders"], self.members[group], group_id=group)
            self.generation[group] = joined[0].generation_id

    def txn_commit(self, group: str) -> None:
        producer_id = self.rng.choice(self.PRODUCERS)
        txn_commit(self.gc, self.offsets(), producer_id=producer_id, **self.member_of(group))
        self.open_producers.add(producer_id)

    def marker(self) -> None:
        producer_id = self.rng.choice(sorted(self.open_producers))
        self.open_producers.discard(producer_id)
        self.shard.marker(self.gc, producer_id, committed=self.rng.random() < 0.7)

    def offsets(self) -> dict[TopicPartition, int]:
        return {tp: self.rng.randrange(10**6) for tp in self.rng.sample(PARTITIONS, self.rng.randint(1, 3))}

    def member_of(self, group: str) -> dict:
        if not self.members[group]:
            return {"group_id": group}
        return {"group_id": group, "generation_id": self.generation[group],
                "member_id": self.rng.choice(self.members[group])}


def test_a_reloaded_shard_serves_exactly_what_it_served_and_replays_only_the_tail(shard: ShardFiles,
                                                                                   clock: ManualClock) -> None:
    gc, _ = load(clock, shard.log)
    workload = Workload(gc, shard, clock, seed=7)
    workload.run(3000)
    before_fetched = fetched(gc)  # a closed coordinator serves nothing
    assert gc._io.wait_idle(10)  # the snapshots already due are written
    gc.close()
    before = served(gc)
    assert shard.log.high_watermark > 30 * INTERVAL and workload.open_producers

    fresh, loaded = load(clock, shard.reopen())
    assert loaded.snapshot_offset is not None and loaded.replayed < INTERVAL
    assert shard.log.log_start_offset > 0  # history below the fallback snapshot is gone
    assert len(shard.snapshot_offsets()) == 2
    assert served(fresh) == before
    assert fetched(fresh) == before_fetched
    groups, _txn_groups = before
    assert any(value.log_offset < loaded.snapshot_offset  # transactions open across the snapshot point
               for *_, pending in groups.values() for offsets in pending.values() for value in offsets.values())

    for producer_id in sorted(workload.open_producers):  # markers after the reload complete them
        shard.marker(fresh, producer_id, committed=True)
    assert not any(pending for *_, pending in served(fresh)[0].values())


def test_txn_offsets_pending_at_the_snapshot_follow_the_markers_written_after_it(shard: ShardFiles,
                                                                                 clock: ManualClock) -> None:
    gc, _ = load(clock, shard.log)
    commit(gc, {T0: 1, T1: 1})
    txn_commit(gc, {T0: 50}, producer_id=7001)
    txn_commit(gc, {T1: 60}, producer_id=7002)
    txn_commit(gc, {TopicPartition("payments", 0): 70}, producer_id=7003)
    snapshot = snapshots.take_snapshot(shard.log, SHARD)
    shard.marker(gc, 7001, committed=True)
    shard.marker(gc, 7002, committed=False)

    fresh, loaded = load(clock, shard.reopen())
    assert (loaded.snapshot_offset, loaded.replayed) == (snapshot.next_offset, 2)
    assert fetch(fresh, [T0, T1]) == {T0: 50, T1: 1}
    assert fetch(fresh, [TopicPartition("payments", 0)]) == {TopicPartition("payments", 0): "UNSTABLE_OFFSET_COMMIT"}
    shard.marker(fresh, 7003, committed=True)
    assert fetch(fresh, [TopicPartition("payments", 0)]) == {TopicPartition("payments", 0): 70}


def commit_many(gc: GroupCoordinator, count: int) -> None:
    for i in range(count):
        commit(gc, {PARTITIONS[i % len(PARTITIONS)]: i})


@pytest.fixture
def history(shard: ShardFiles, clock: ManualClock) -> tuple[GroupCoordinator, bytes, int]:
    """Three snapshots (about 100, 200, 300) with commits after each; returns the coordinator, the
    first snapshot's payload and offset (what a node fenced since then would write again)."""
    gc, _ = load(clock, shard.log, interval=10**6)
    commit_many(gc, 100)
    old = snapshots.take_snapshot(shard.log, SHARD)
    for _ in range(2):
        commit_many(gc, 100)
        snapshots.take_snapshot(shard.log, SHARD)
    commit_many(gc, 10)
    return gc, snapshots.encode(old), old.next_offset


def test_a_fenced_writers_older_snapshot_neither_wins_nor_deletes_the_newer_ones(
        shard: ShardFiles, clock: ManualClock, history: tuple[GroupCoordinator, bytes, int]) -> None:
    gc, stale_payload, stale_offset = history
    newer = shard.snapshot_offsets()
    assert shard.log.log_start_offset > stale_offset  # the new owner already deleted what lies below
    before = served(gc)

    shard_snapshots.commit(shard.log, snapshots.KIND, stale_offset, stale_payload)  # the fenced node wakes up
    assert shard.snapshot_offsets() == [stale_offset, *newer]
    fresh, loaded = load(clock, shard.reopen())
    assert loaded == ShardLoad(max(newer), 10)
    assert served(fresh) == before


def test_a_damaged_newest_snapshot_falls_back_to_the_previous_one_and_loses_nothing(
        shard: ShardFiles, clock: ManualClock, history: tuple[GroupCoordinator, bytes, int]) -> None:
    gc, _, _ = history
    fallback, newest = shard.snapshot_offsets()
    assert shard.log.log_start_offset <= fallback
    before = served(gc)
    shard.damage(newest)
    fresh, loaded = load(clock, shard.reopen())
    assert loaded == ShardLoad(fallback, newest - fallback + 10)
    assert served(fresh) == before


def test_a_fallback_below_the_log_start_is_not_used_silently(
        shard: ShardFiles, clock: ManualClock, history: tuple[GroupCoordinator, bytes, int],
        caplog: pytest.LogCaptureFixture) -> None:
    _, stale_payload, stale_offset = history
    shard_snapshots.write(shard.directory, snapshots.KIND, stale_offset, stale_payload)
    for offset in shard.snapshot_offsets()[1:]:
        shard.damage(offset)
    with caplog.at_level(logging.WARNING):
        fresh, loaded = load(clock, shard.reopen())
    assert f"ends at {stale_offset} but the log starts at {shard.log.log_start_offset}" in caplog.text
    assert loaded == ShardLoad(stale_offset, shard.log.high_watermark - shard.log.log_start_offset)
    assert fetch(fresh, PARTITIONS[:1]) != {PARTITIONS[0]: -1}  # what the log still holds is served
