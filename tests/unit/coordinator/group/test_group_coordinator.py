"""GroupCoordinator without gRPC: membership through the classic protocol, durable and transactional offsets.

Every test runs twice: over a real partitions.PartitionLog in tmp_path (reloads reopen it
from disk) and over an in-memory log with the same methods. The clock is a plain counter,
so nothing here sleeps.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from coordinator.group import GroupCoordinator, GroupService
from partitions import PartitionLog
from partitions.model import AppendOrigin, AppendResult
from proto import txnsim_pb2 as pb
from proto.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from proto.errors import (
    CoordinatorLoadInProgressError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidProducerEpochError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    KafkaError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
    raise_for,
)
from proto.hashing import partition_for
from proto.records import (
    ControlType,
    encode_batch,
    encode_control_batch,
    iter_batches,
    set_base_offset,
)
from proto.structs import TopicPartition
from tests.fakes import ManualClock, node_io

SHARDS = 4
GROUP = "orders-app"
SHARD = partition_for(GROUP, SHARDS)
PID, EPOCH = 4000, 0


class MemoryLog:
    """The two methods the coordinator uses, plus marker appends as the node performs them."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []
        self.next_offset = 0
        self.fail_with: Exception | None = None

    def append(self, records: bytes, *, origin: object = None, wait_durable: bool = True) -> AppendResult:
        if self.fail_with is not None:
            raise self.fail_with
        base = self.next_offset
        for batch in iter_batches(records):
            self.raw.append(set_base_offset(batch.raw, self.next_offset, 0))
            self.next_offset += batch.header.last_offset_delta + 1
        return AppendResult(base, self.next_offset - 1)

    def append_marker(self, producer_id: int, committed: bool) -> int:
        offset = self.next_offset
        self.raw.append(encode_control_batch(
            producer_id=producer_id, producer_epoch=EPOCH, coordinator_epoch=0, timestamp=0, base_offset=offset,
            control_type=ControlType.COMMIT if committed else ControlType.ABORT))
        self.next_offset += 1
        return offset

    def make_durable(self, end_offset: int) -> None:  # memory: durable once appended
        pass

    def batches(self):
        for raw in list(self.raw):
            yield from iter_batches(raw)

    def reopened(self) -> MemoryLog:
        return self


class DiskLog:
    """A real PartitionLog with the test's conveniences; `reopened()` recovers it from its files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.log = PartitionLog.open(directory, "__consumer_offsets", SHARD, leader_epoch=0)
        self.fail_with: Exception | None = None

    @property
    def next_offset(self) -> int:
        return self.log.log_end_offset

    def append(self, records: bytes, *, origin: AppendOrigin = AppendOrigin.COORDINATOR,
               wait_durable: bool = True) -> AppendResult:
        if self.fail_with is not None:
            raise self.fail_with
        return self.log.append(records, origin=origin, wait_durable=wait_durable)

    def make_durable(self, end_offset: int) -> None:
        self.log.make_durable(end_offset)

    def append_marker(self, producer_id: int, committed: bool) -> int:
        return self.log.append_marker(producer_id=producer_id, producer_epoch=EPOCH, committed=committed,
                                      coordinator_epoch=0).base_offset

    def batches(self):
        return self.log.batches()

    def reopened(self) -> DiskLog:
        self.log.close()
        self.log = PartitionLog.open(self.directory, "__consumer_offsets", SHARD, leader_epoch=0)
        return self


TOPICS = {"orders": 5, "payments": 2}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["disk", "memory"])
def shard_log(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "memory":
        yield MemoryLog()
        return
    disk = DiskLog(tmp_path / "offsets")
    yield disk
    disk.log.close()


def make_coordinator(clock: ManualClock, shard_log: MemoryLog, topics: dict[str, int] = TOPICS,
                     add_to_transaction: Any = None) -> GroupCoordinator:
    ids = itertools.count()
    coordinator = GroupCoordinator(SHARDS, io=node_io(clock), min_session_timeout_ms=100, partitions_for=topics.get,
                                   initial_rebalance_delay_ms=0, run_timers=False, add_to_transaction=add_to_transaction,
                                   new_member_id=lambda client, instance: f"{instance or 'member'}-{next(ids)}")
    coordinator.load_shard(SHARD, shard_log)
    return coordinator


@pytest.fixture
def gc(clock: ManualClock, shard_log: MemoryLog) -> GroupCoordinator:
    return make_coordinator(clock, shard_log)


def join(gc: GroupCoordinator, topics: list[str], member_id: str = "", session_ms: int = 1000,
         rebalance_ms: int = 5000, group_id: str = GROUP, instance_id: str = "") -> pb.JoinGroupResponse:
    """A JoinGroup as txnsim's consumer sends it; raises the answer's error."""
    response = gc.join_group(pb.JoinGroupRequest(
        group_id=group_id, member_id=member_id, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
        topics=topics, protocol_type="consumer", group_instance_id=instance_id,
        protocols=[pb.GroupProtocol(name="range", metadata=encode_subscription(topics))]))
    raise_for(response.error_code, response.error_message)
    return response


def join_in_background(gc: GroupCoordinator, topics: list[str], member_id: str = "", **kwargs) -> Future:
    """A JoinGroup that the join barrier may hold: its answer (or error) arrives in the future."""
    answer: Future = Future()

    def run() -> None:
        try:
            answer.set_result(join(gc, topics, member_id, **kwargs))
        except KafkaError as exc:
            answer.set_exception(exc)
    threading.Thread(target=run, daemon=True).start()
    return answer


def range_assign(joined: pb.JoinGroupResponse) -> dict[str, bytes]:
    """What a leader running the range assignor sends back."""
    members = {m.member_id: decode_subscription(m.metadata) for m in joined.member_list}
    assigned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in sorted({t for topics in members.values() for t in topics}):
        subscribers = sorted(m for m, topics in members.items() if topic in topics)
        per, extra = divmod(TOPICS.get(topic, 0), len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            length = per + (1 if i < extra else 0)
            assigned[member_id] += [TopicPartition(topic, p) for p in range(start, start + length)]
            start += length
    return {m: encode_assignment(tps) for m, tps in assigned.items()}


def sync(gc: GroupCoordinator, joined: pb.JoinGroupResponse) -> list[TopicPartition]:
    assignments = range_assign(joined) if joined.leader_id == joined.member_id else {}
    response = gc.sync_group(pb.SyncGroupRequest(
        group_id=GROUP, generation_id=joined.generation_id, member_id=joined.member_id,
        assignments=[pb.SyncGroupAssignment(member_id=m, assignment=a) for m, a in assignments.items()]))
    raise_for(response.error_code, response.error_message)
    return decode_assignment(response.assignment_bytes)


def rebalance(gc: GroupCoordinator, topics: list[str], members: list[str], new_members: int = 0,
              group_id: str = GROUP) -> list[pb.JoinGroupResponse]:
    """Every one of `members` rejoins and `new_members` join, then all sync: a whole eager rebalance.

    New members go first and the others rejoin once the group is rebalancing (a follower's rejoin to a
    Stable group is answered at once with the current generation, as Kafka does)."""
    pending = [join_in_background(gc, topics, group_id=group_id) for _ in range(new_members)]
    if new_members and members:
        wait_for(lambda: describe(gc, group_id).state == "PreparingRebalance")
    pending += [join_in_background(gc, topics, m, group_id=group_id) for m in members]
    joined = [p.result(timeout=5) for p in pending]
    synced = []
    for j in joined:
        assignments = range_assign(j) if j.leader_id == j.member_id else {}
        request = pb.SyncGroupRequest(group_id=group_id, generation_id=j.generation_id, member_id=j.member_id,
                                      assignments=[pb.SyncGroupAssignment(member_id=m, assignment=a)
                                                   for m, a in assignments.items()])
        answer: Future = Future()
        threading.Thread(target=lambda r=request, f=answer: f.set_result(gc.sync_group(r)), daemon=True).start()
        synced.append(answer)
    for answer in synced:
        assert answer.result(timeout=5).error_code == 0
    return joined


def describe(gc: GroupCoordinator, group_id: str = GROUP) -> pb.DescribedGroup:
    return gc.describe_groups(pb.DescribeGroupsRequest(group_ids=[group_id])).groups[0]


def wait_for(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def heartbeat(gc: GroupCoordinator, member_id: str, generation_id: int) -> None:
    gc.heartbeat(pb.HeartbeatRequest(group_id=GROUP, member_id=member_id, generation_id=generation_id))


def commit(gc: GroupCoordinator, offsets: dict[TopicPartition, int], generation_id: int = -1,
           member_id: str = "", group_id: str = GROUP) -> pb.OffsetCommitResponse:
    return gc.offset_commit(pb.OffsetCommitRequest(
        group_id=group_id, generation_id=generation_id, member_id=member_id,
        offsets=[pb.OffsetEntry(topic=tp.topic, partition=tp.partition, offset=o) for tp, o in offsets.items()]))


def txn_commit(gc: GroupCoordinator, offsets: dict[TopicPartition, int], generation_id: int = -1,
               member_id: str = "", producer_id: int = PID, group_id: str = GROUP) -> pb.TxnOffsetCommitResponse:
    return gc.txn_offset_commit(pb.TxnOffsetCommitRequest(
        transactional_id="tx-1", group_id=group_id, producer_id=producer_id, producer_epoch=EPOCH,
        generation_id=generation_id, member_id=member_id,
        offsets=[pb.OffsetEntry(topic=tp.topic, partition=tp.partition, offset=o) for tp, o in offsets.items()]))


def fetch(gc: GroupCoordinator, tps: list[TopicPartition], require_stable: bool = True, group_id: str = GROUP
          ) -> dict[TopicPartition, int | str]:
    """offset per partition, or the error name when the partition has one."""
    response = gc.offset_fetch(pb.OffsetFetchRequest(
        group_id=group_id, require_stable=require_stable,
        partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in tps]))
    out: dict[TopicPartition, int | str] = {}
    for r in response.results:
        tp = TopicPartition(r.topic, r.partition)
        out[tp] = "UNSTABLE_OFFSET_COMMIT" if r.error_code == UnstableOffsetCommitError.errno else r.offset
    return out


def complete(gc: GroupCoordinator, shard_log: MemoryLog, committed: bool, producer_id: int = PID) -> None:
    """What the node does: append the marker durably, then tell the coordinator."""
    offset = shard_log.append_marker(producer_id, committed)
    gc.complete_transaction(SHARD, producer_id, committed, marker_offset=offset)


T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


# ---------------------------------------------------------------- membership

def test_a_lone_member_leads_and_assigns_itself_everything(gc: GroupCoordinator) -> None:
    a = join(gc, ["orders"])
    assert (a.generation_id, a.leader_id, list(a.members)) == (1, a.member_id, [a.member_id])
    assert sync(gc, a) == [TopicPartition("orders", p) for p in range(5)]
    heartbeat(gc, a.member_id, 1)


def test_a_new_member_waits_at_the_barrier_until_the_leader_rejoins(gc: GroupCoordinator) -> None:
    a = join(gc, ["orders"])
    sync(gc, a)
    pending = join_in_background(gc, ["orders", "payments"])
    with pytest.raises(RebalanceInProgressError):  # how the leader learns of the rebalance
        heartbeat(gc, a.member_id, 1)
    assert not pending.done()
    a2 = join(gc, ["orders"], member_id=a.member_id)
    b = pending.result(timeout=5)
    assert a2.generation_id == b.generation_id == 2
    assert sorted(a2.members) == sorted([a.member_id, b.member_id]) and list(b.members) == []
    b_sync = threading.Thread(target=lambda: pending_sync.set_result(sync(gc, b)))
    pending_sync: Future = Future()
    b_sync.start()
    mine = sync(gc, a2)
    theirs = pending_sync.result(timeout=5)
    assert sorted(mine + theirs) == sorted([TopicPartition("orders", p) for p in range(5)] +
                                           [TopicPartition("payments", 0), TopicPartition("payments", 1)])
    assert not set(mine) & set(theirs)


def test_a_join_held_at_the_barrier_hears_not_coordinator_when_the_coordinator_closes(gc: GroupCoordinator) -> None:
    """A stopping node answers the JoinGroup it holds (for up to the members' rebalance timeout, five minutes
    for Kafka's default max.poll.interval.ms) instead of holding up its exit: the client finds the next owner."""
    a = join(gc, ["orders"], rebalance_ms=300_000)
    sync(gc, a)
    pending = join_in_background(gc, ["orders", "payments"], rebalance_ms=300_000)
    with pytest.raises(RebalanceInProgressError):  # the barrier is up: the new member waits for the leader
        heartbeat(gc, a.member_id, 1)
    assert not pending.done()
    gc.close()
    with pytest.raises(NotCoordinatorError):
        pending.result(timeout=5)
    with pytest.raises(NotCoordinatorError):  # and nothing new is taken
        join(gc, ["orders"], member_id=a.member_id)


def test_sync_with_an_old_generation_is_illegal_generation(gc: GroupCoordinator) -> None:
    a = join(gc, ["orders"])
    sync(gc, a)
    with pytest.raises(IllegalGenerationError):
        sync(gc, pb.JoinGroupResponse(generation_id=7, member_id=a.member_id))


def test_unknown_member_is_told_so(gc: GroupCoordinator) -> None:
    join(gc, ["orders"])
    with pytest.raises(UnknownMemberIdError):
        heartbeat(gc, "ghost", 1)
    with pytest.raises(UnknownMemberIdError):
        join(gc, ["orders"], member_id="ghost")


def test_leave_group_rebalances_the_rest(gc: GroupCoordinator) -> None:
    a = join(gc, ["orders"])
    sync(gc, a)
    pending = join_in_background(gc, ["orders"])
    a = join(gc, ["orders"], member_id=a.member_id)
    b = pending.result(timeout=5)
    gc.leave_group(pb.LeaveGroupRequest(group_id=GROUP, member_id=a.member_id))
    b2 = join(gc, ["orders"], member_id=b.member_id)
    assert (b2.generation_id, b2.leader_id) == (3, b.member_id)
    assert len(sync(gc, b2)) == 5


def test_expired_session_removes_member_and_rebalances(gc: GroupCoordinator, clock: ManualClock) -> None:
    a = join(gc, ["orders"], session_ms=1000)
    sync(gc, a)
    clock.ms += 1001
    gc.expire_members()
    with pytest.raises(UnknownMemberIdError):
        heartbeat(gc, a.member_id, 1)
    b = join(gc, ["orders"])
    assert b.generation_id == 3  # 2 was the empty group after a's expiry


def test_member_that_never_rejoins_is_removed_after_rebalance_timeout(gc: GroupCoordinator, clock: ManualClock) -> None:
    a = join(gc, ["orders"], session_ms=10_000, rebalance_ms=2000)
    sync(gc, a)
    pending = join_in_background(gc, ["orders"], session_ms=10_000, rebalance_ms=2000)
    clock.ms += 1500
    with pytest.raises(RebalanceInProgressError):
        heartbeat(gc, a.member_id, 1)  # alive, but not rejoining
    assert not pending.done()
    clock.ms += 1000
    gc.expire_members()
    b = pending.result(timeout=5)
    assert (b.generation_id, b.leader_id, list(b.members)) == (2, b.member_id, [b.member_id])
    with pytest.raises(UnknownMemberIdError):
        heartbeat(gc, a.member_id, 1)


def test_session_timeout_outside_bounds_is_rejected(gc: GroupCoordinator) -> None:
    with pytest.raises(InvalidSessionTimeoutError):
        join(gc, ["orders"], session_ms=10)


def test_describe_list_and_delete_groups(gc: GroupCoordinator) -> None:
    a = join(gc, ["orders"])
    sync(gc, a)
    commit(gc, {T0: 1}, group_id="offsets-only")
    (described,) = gc.describe_groups(pb.DescribeGroupsRequest(group_ids=[GROUP])).groups
    assert (described.state, described.protocol_type, described.protocol) == ("Stable", "consumer", "range")
    (member,) = described.members
    assert decode_subscription(member.metadata) == ["orders"] and len(decode_assignment(member.assignment)) == 5
    listed = {g.group_id: (g.state, g.protocol_type) for g in gc.list_groups(pb.ListGroupsRequest()).groups}
    assert listed == {GROUP: ("Stable", "consumer"), "offsets-only": ("Empty", "")}
    nope = next(g for g in (f"nope-{i}" for i in range(100)) if partition_for(g, SHARDS) == SHARD)
    deleted = gc.delete_groups(pb.DeleteGroupsRequest(group_ids=[GROUP, "offsets-only", nope])).results
    assert [r.error_code for r in deleted] == [NonEmptyGroupError.errno, 0, GroupIdNotFoundError.errno]
    assert fetch(gc, [T0], group_id="offsets-only") == {T0: -1}


# ---------------------------------------------------------------- offsets

def test_offsets_survive_a_reload_into_a_fresh_coordinator(gc: GroupCoordinator, clock: ManualClock,
                                                           shard_log: MemoryLog) -> None:
    commit(gc, {T0: 10, T1: 20})
    commit(gc, {T0: 11})
    fresh = make_coordinator(clock, shard_log.reopened())
    assert fetch(fresh, [T0, T1, TopicPartition("orders", 2)]) == {T0: 11, T1: 20, TopicPartition("orders", 2): -1}


def test_generation_survives_reload_so_a_stale_member_is_fenced(gc: GroupCoordinator, clock: ManualClock,
                                                                shard_log: MemoryLog) -> None:
    a = join(gc, ["orders"])
    assert len(sync(gc, a)) == 5
    fresh = make_coordinator(clock, shard_log.reopened())
    with pytest.raises(IllegalGenerationError):
        commit(fresh, {T0: 5}, generation_id=0, member_id=a.member_id)
    (described,) = fresh.describe_groups(pb.DescribeGroupsRequest(group_ids=[GROUP])).groups
    assert described.state == "Stable" and len(decode_assignment(described.members[0].assignment)) == 5
    assert sync(fresh, a) == [TopicPartition("orders", p) for p in range(5)]  # Stable: its assignment again
    commit(fresh, {T0: 5}, generation_id=1, member_id=a.member_id)
    assert fetch(fresh, [T0]) == {T0: 5}


def test_commit_without_membership_needs_an_empty_group(gc: GroupCoordinator) -> None:
    commit(gc, {T0: 3})  # assign()-style: generation -1, no member id
    join(gc, ["orders"])
    with pytest.raises(UnknownMemberIdError):
        commit(gc, {T0: 4})
    assert fetch(gc, [T0]) == {T0: 3}


def test_invalid_offsets_are_rejected_per_partition_and_never_stored(gc: GroupCoordinator) -> None:
    response = commit(gc, {T0: -2, T1: 7, TopicPartition("nope", 0): 1, TopicPartition("orders", 9): 1})
    codes = {(r.topic, r.partition): r.error_code for r in response.results}
    assert codes == {("orders", 0): InvalidRequestError.errno, ("orders", 1): 0, ("nope", 0): 3, ("orders", 9): 3}
    assert fetch(gc, [T0, T1]) == {T0: -1, T1: 7}


@pytest.mark.parametrize("group_id", ["", "g" * 250, "a\x00b"])
def test_bad_group_ids_are_invalid_group_ids(gc: GroupCoordinator, group_id: str) -> None:
    with pytest.raises(InvalidGroupIdError):
        gc.offset_commit(pb.OffsetCommitRequest(group_id=group_id, generation_id=-1))


def test_failed_log_write_changes_nothing(gc: GroupCoordinator, shard_log: MemoryLog) -> None:
    commit(gc, {T0: 1})
    shard_log.fail_with = NotLeaderOrFollowerError("[NOT_LEADER_OR_FOLLOWER] gone")
    with pytest.raises(NotCoordinatorError):
        commit(gc, {T0: 2})
    a = join(gc, ["orders"])  # joining writes nothing; the leader's assignment is written before it is handed out
    with pytest.raises(NotCoordinatorError):
        sync(gc, a)
    shard_log.fail_with = None
    assert fetch(gc, [T0]) == {T0: 1}
    a = join(gc, ["orders"], member_id=a.member_id)
    assert a.generation_id == 2 and len(sync(gc, a)) == 5


# ---------------------------------------------------------------- transactional offsets

def test_txn_offsets_stay_pending_until_commit_marker(gc: GroupCoordinator, shard_log: MemoryLog) -> None:
    commit(gc, {T0: 5})
    txn_commit(gc, {T0: 9, T1: 4})
    assert fetch(gc, [T0, T1]) == {T0: "UNSTABLE_OFFSET_COMMIT", T1: "UNSTABLE_OFFSET_COMMIT"}
    assert fetch(gc, [T0, T1], require_stable=False) == {T0: 5, T1: -1}
    complete(gc, shard_log, committed=True)
    assert fetch(gc, [T0, T1]) == {T0: 9, T1: 4}


def test_a_v2_txn_offset_commit_adds_the_offsets_partition_before_it_writes(clock: ManualClock,
                                                                           shard_log: MemoryLog) -> None:
    """Transactions V2 (Kafka's TxnOffsetCommit v5): the group coordinator asks the transaction's coordinator
    to add the group's offsets partition; a refusal writes nothing and answers with the leader's mapping."""
    asked: list[tuple[str, int, int, list[TopicPartition], bool]] = []
    answers = [90, 0]  # PRODUCER_FENCED, then added

    def add(tid: str, pid: int, epoch: int, tps: list[TopicPartition], add: bool,
            done: Callable[[dict[TopicPartition, int]], None]) -> None:
        asked.append((tid, pid, epoch, tps, add))
        done(dict.fromkeys(tps, answers.pop(0)))

    gc = make_coordinator(clock, shard_log, add_to_transaction=add)
    request = pb.TxnOffsetCommitRequest(transactional_id="tx-1", group_id=GROUP, producer_id=PID, producer_epoch=EPOCH,
                                        generation_id=-1, add_partitions=True,
                                        offsets=[pb.OffsetEntry(topic=T0.topic, partition=T0.partition, offset=9)])
    written = shard_log.next_offset
    with pytest.raises(InvalidProducerEpochError):
        gc.txn_offset_commit(request)
    assert shard_log.next_offset == written, "a refused add wrote the offsets anyway"
    gc.txn_offset_commit(request)
    assert asked == [("tx-1", PID, EPOCH, [TopicPartition("__consumer_offsets", SHARD)], True)] * 2
    assert fetch(gc, [T0]) == {T0: "UNSTABLE_OFFSET_COMMIT"}
    complete(gc, shard_log, committed=True)
    assert fetch(gc, [T0]) == {T0: 9}


def test_txn_offsets_vanish_on_abort_marker(gc: GroupCoordinator, shard_log: MemoryLog) -> None:
    commit(gc, {T0: 5})
    txn_commit(gc, {T0: 9})
    complete(gc, shard_log, committed=False)
    assert fetch(gc, [T0]) == {T0: 5}


@pytest.mark.parametrize("committed", [True, False])
def test_reload_replays_markers_to_the_same_outcome(gc: GroupCoordinator, clock: ManualClock, shard_log: MemoryLog,
                                                    committed: bool) -> None:
    commit(gc, {T0: 5})
    txn_commit(gc, {T0: 9})
    complete(gc, shard_log, committed=committed)
    txn_commit(gc, {T1: 3}, producer_id=PID + 1)  # still open at the reload
    before = fetch(gc, [T0, T1])
    assert before == {T0: 9 if committed else 5, T1: "UNSTABLE_OFFSET_COMMIT"}

    fresh = make_coordinator(clock, shard_log.reopened())
    assert fetch(fresh, [T0, T1]) == before
    complete(fresh, shard_log, committed=True, producer_id=PID + 1)
    assert fetch(fresh, [T1]) == {T1: 3}


def test_plain_commit_after_the_txn_write_wins_over_the_txn(gc: GroupCoordinator, clock: ManualClock,
                                                           shard_log: MemoryLog) -> None:
    txn_commit(gc, {T0: 9})
    commit(gc, {T0: 12})  # written after the transactional record
    complete(gc, shard_log, committed=True)
    assert fetch(gc, [T0]) == {T0: 12}
    assert fetch(make_coordinator(clock, shard_log.reopened()), [T0]) == {T0: 12}


def test_txn_write_after_a_marker_waits_for_the_next_marker(gc: GroupCoordinator, clock: ManualClock,
                                                            shard_log: MemoryLog) -> None:
    marker = shard_log.append_marker(PID, True)  # the node wrote a marker; the callback is late
    txn_commit(gc, {T0: 9})
    gc.complete_transaction(SHARD, PID, True, marker_offset=marker)
    assert fetch(gc, [T0]) == {T0: "UNSTABLE_OFFSET_COMMIT"}
    assert fetch(make_coordinator(clock, shard_log.reopened()), [T0]) == {T0: "UNSTABLE_OFFSET_COMMIT"}


def test_stale_member_txn_offset_commit_is_fenced(gc: GroupCoordinator, shard_log: MemoryLog) -> None:
    a = join(gc, ["orders"])
    sync(gc, a)
    pending = join_in_background(gc, ["orders"])
    a2 = join(gc, ["orders"], member_id=a.member_id)
    b = pending.result(timeout=5)
    assert a2.generation_id == b.generation_id == 2
    written = shard_log.next_offset
    with pytest.raises(IllegalGenerationError):
        txn_commit(gc, {T0: 50}, generation_id=a.generation_id, member_id=a.member_id)
    with pytest.raises(UnknownMemberIdError):
        txn_commit(gc, {T0: 50}, generation_id=b.generation_id, member_id="ghost")
    assert shard_log.next_offset == written
    assert fetch(gc, [T0]) == {T0: -1}
    txn_commit(gc, {T0: 50}, generation_id=b.generation_id, member_id=b.member_id)
    assert fetch(gc, [T0]) == {T0: "UNSTABLE_OFFSET_COMMIT"}


def test_txn_commit_with_a_bare_group_id_is_accepted_like_kafka(gc: GroupCoordinator, shard_log: MemoryLog) -> None:
    join(gc, ["orders"])
    txn_commit(gc, {T0: 8})
    complete(gc, shard_log, committed=True)
    assert fetch(gc, [T0]) == {T0: 8}


# ---------------------------------------------------------------- shards

def test_unowned_shard_is_not_coordinator(clock: ManualClock) -> None:
    gc = GroupCoordinator(SHARDS, io=node_io(clock))
    assert not gc.owns_group(GROUP)
    with pytest.raises(NotCoordinatorError):
        fetch(gc, [T0])


def test_requests_during_load_get_load_in_progress_and_markers_are_kept(clock: ManualClock, shard_log: MemoryLog) -> None:
    gc = make_coordinator(clock, shard_log)
    txn_commit(gc, {T0: 9})
    seen: list[Exception] = []
    fresh = GroupCoordinator(SHARDS, io=node_io(clock), min_session_timeout_ms=100, partitions_for=TOPICS.get)

    class SlowLog:
        def append(self, records: bytes, *, origin: object = None, wait_durable: bool = True) -> AppendResult:
            return shard_log.append(records, origin=origin)

        def make_durable(self, end_offset: int) -> None:  # memory: durable once appended
            pass

        def batches(self):
            yield from shard_log.batches()
            with pytest.raises(CoordinatorLoadInProgressError) as info:  # the replay has not finished
                fetch(fresh, [T0])
            seen.append(info.value)
            offset = shard_log.append_marker(PID, True)  # a marker lands after the replay read the log
            fresh.complete_transaction(SHARD, PID, True, marker_offset=offset)

    fresh.load_shard(SHARD, SlowLog())
    assert fresh.owns_group(GROUP) and seen
    assert fetch(fresh, [T0]) == {T0: 9}


def test_unload_makes_the_group_not_coordinator(gc: GroupCoordinator) -> None:
    gc.unload_shard(SHARD)
    with pytest.raises(NotCoordinatorError):
        join(gc, ["orders"])


def test_service_answers_errors_in_the_response(gc: GroupCoordinator) -> None:
    service = GroupService(gc)
    response = service.JoinGroup(pb.JoinGroupRequest(group_id="", session_timeout_ms=1000), None)
    assert response.error_code == InvalidGroupIdError.errno and "empty" in response.error_message
    response = service.Heartbeat(pb.HeartbeatRequest(group_id=GROUP, member_id="ghost"), None)
    assert response.error_code == UnknownMemberIdError.errno
    no_protocol = service.JoinGroup(pb.JoinGroupRequest(group_id=GROUP, session_timeout_ms=1000), None)
    assert no_protocol.error_code == InconsistentGroupProtocolError.errno
    ok = service.JoinGroup(pb.JoinGroupRequest(group_id=GROUP, session_timeout_ms=1000, protocol_type="consumer",
                                               protocols=[pb.GroupProtocol(name="range")]), None)
    assert ok.error_code == 0 and ok.generation_id == 1


def test_a_membership_record_from_before_the_classic_protocol_loads_as_an_empty_group(clock: ManualClock,
                                                                                       shard_log: MemoryLog) -> None:
    old = (b'{"version":0,"generation":7,"members":[{"member_id":"consumer-1","group_instance_id":null,'
           b'"session_timeout_ms":1000,"rebalance_timeout_ms":5000,"topics":["orders"]}]}')
    shard_log.append(encode_batch([(clock.ms, f"{GROUP}\x00__generation__".encode(), old, ())]))
    gc = make_coordinator(clock, shard_log)
    (described,) = gc.describe_groups(pb.DescribeGroupsRequest(group_ids=[GROUP])).groups
    assert (described.state, described.generation_id, list(described.members)) == ("Empty", 7, [])
    with pytest.raises(UnknownMemberIdError):
        heartbeat(gc, "consumer-1", 7)
    assert join(gc, ["orders"]).generation_id == 8


def test_a_commit_with_a_generation_to_a_group_that_does_not_exist_is_illegal_generation(gc: GroupCoordinator
                                                                                         ) -> None:
    with pytest.raises(IllegalGenerationError):
        commit(gc, {T0: 1}, generation_id=3, member_id="m")
    assert fetch(gc, [T0]) == {T0: -1}
    assert gc.list_groups(pb.ListGroupsRequest()).groups == []  # and it created none


def test_a_coordinator_whose_shard_was_taken_over_answers_no_read_from_its_memory(tmp_path: Path, clock: ManualClock):
    """A node woken from a pause still holds the group as it was when another node took the shard's log
    over: its OffsetFetch, Heartbeat and DescribeGroups are refused (NOT_COORDINATOR, find the
    coordinator again) instead of answered from there, once a later leader epoch is claimed."""
    from partitions import LogManager
    old_logs = LogManager(tmp_path, node_id=1)
    gc = make_coordinator(clock, old_logs.open_as_leader("__consumer_offsets", SHARD))
    joined = join(gc, ["orders"])
    sync(gc, joined)
    commit(gc, {TopicPartition("orders", 0): 7}, joined.generation_id, joined.member_id)
    heartbeat(gc, joined.member_id, joined.generation_id)  # the owner it is: answered
    fetch = pb.OffsetFetchRequest(group_id=GROUP, partitions=[pb.TopicPartitionRef(topic="orders", partition=0)])
    assert gc.offset_fetch(fetch).results[0].offset == 7

    new_logs = LogManager(tmp_path, node_id=2)
    new_logs.open_as_leader("__consumer_offsets", SHARD, may_cut_off=lambda node: node == 1)
    with pytest.raises(NotCoordinatorError, match="taken over"):
        gc.offset_fetch(fetch)
    with pytest.raises(NotCoordinatorError):
        heartbeat(gc, joined.member_id, joined.generation_id)
    (described,) = gc.describe_groups(pb.DescribeGroupsRequest(group_ids=[GROUP])).groups
    assert described.error_code == NotCoordinatorError.errno and not described.members
    gc.close()
    new_logs.close_all()
    old_logs.close_all()
