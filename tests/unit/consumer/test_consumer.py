"""The Consumer facade against an in-process fake node: positions, resets, read_committed polls,
commits, committed() waiting out a transaction, and group membership with a real GroupCoordinator.

The fake answers Fetch/ListOffsets from in-memory partitions (with an LSO and an aborted-
transaction index) and the group RPCs through GroupService; no gRPC, no processes, no sleeps.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

import consumer.consumer as consumer_module
from consumer import Consumer
from coordinator.group import GroupCoordinator, GroupService
from partitions.model import AppendResult
from proto import txnsim_pb2 as pb
from proto.errors import (
    IllegalStateError,
    KafkaTimeoutError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from proto.records import (
    ControlType,
    encode_batch,
    encode_control_batch,
    iter_batches,
    set_base_offset,
)
from proto.structs import OffsetAndMetadata, TopicPartition
from tests.fakes import node_io
from tests.helpers import wait_until

TOPIC = "orders"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
GROUP = "app"


class DoneFuture:
    def __init__(self, value: Any) -> None:
        self._value = value

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        return self._value

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        callback(self)

    def cancel(self) -> bool:
        return False


class Unary:
    """A stub method: callable like a gRPC unary method, with .future() too."""

    def __init__(self, handler: Callable[[Any], Any]) -> None:
        self._handler = handler

    def __call__(self, request: Any, timeout: float | None = None) -> Any:
        return self._handler(request)

    def future(self, request: Any, timeout: float | None = None) -> DoneFuture:
        return DoneFuture(self._handler(request))


class MemoryLog:
    def __init__(self) -> None:
        self.raw: list[tuple[int, int, bytes]] = []
        self.next_offset = 0

    def append(self, records: bytes, *, origin: object = None, wait_durable: bool = True) -> AppendResult:
        base = self.next_offset
        for batch in iter_batches(records):
            count = batch.header.last_offset_delta + 1
            self.raw.append((self.next_offset, self.next_offset + count - 1,
                             set_base_offset(batch.raw, self.next_offset, 0)))
            self.next_offset += count
        return AppendResult(base, self.next_offset - 1)

    def make_durable(self, end_offset: int) -> None:  # memory: durable once appended
        pass

    def batches(self):
        for _, _, raw in list(self.raw):
            yield from iter_batches(raw)


class FakePartition(MemoryLog):
    def __init__(self) -> None:
        super().__init__()
        self.open_txns: dict[int, int] = {}
        self.aborted: list[tuple[int, int, int]] = []

    def produce(self, *values: bytes, pid: int | None = None) -> None:
        records = [(1000, None, v, ()) for v in values]
        if pid is None:
            self.append(encode_batch(records))
        else:
            self.open_txns.setdefault(pid, self.next_offset)
            self.append(encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True))

    def end(self, pid: int, commit: bool) -> int:
        marker = self.next_offset
        self.append(encode_control_batch(producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=1000,
                                         control_type=ControlType.COMMIT if commit else ControlType.ABORT))
        first = self.open_txns.pop(pid, None)
        if not commit and first is not None:
            self.aborted.append((pid, first, marker))
        return marker

    @property
    def lso(self) -> int:
        return min(self.open_txns.values(), default=self.next_offset)


class FakeNode:
    def __init__(self, partitions: int = 2) -> None:
        self.clock_ms = 1_000_000
        self.topics = {TOPIC: partitions}
        self.partitions = {TopicPartition(TOPIC, p): FakePartition() for p in range(partitions)}
        self.fetch_errors: dict[TopicPartition, int] = {}  # one-shot error code per partition
        self.offset_fetch_hook: Callable[[int], None] | None = None
        self.offset_fetches = 0
        self.before: dict[str, Callable[[], None]] = {}
        self.group_log = MemoryLog()
        self.groups = GroupCoordinator(1, io=node_io(lambda: self.clock_ms), min_session_timeout_ms=100,
                                       partitions_for=self.topics.get, initial_rebalance_delay_ms=0)
        self.groups.load_shard(0, self.group_log)
        service = GroupService(self.groups)
        rpcs = ["JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "TxnOffsetCommit"]
        group_stubs = {name: Unary(lambda r, n=name: self._group_rpc(service, n, r)) for name in rpcs}
        group_stubs["OffsetFetch"] = Unary(lambda r: self._offset_fetch(service, r))
        self.stubs = SimpleNamespace(
            partitions=SimpleNamespace(Fetch=Unary(self._fetch), ListOffsets=Unary(self._list_offsets)),
            groups=SimpleNamespace(**group_stubs))

    def _group_rpc(self, service: GroupService, name: str, request: Any) -> Any:
        hook = self.before.pop(name, None)  # one-shot: runs just before the coordinator sees the request
        if hook is not None:
            hook()
        return getattr(service, name)(request, None)

    def _offset_fetch(self, service: GroupService, request: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
        self.offset_fetches += 1
        if self.offset_fetch_hook is not None:
            self.offset_fetch_hook(self.offset_fetches)
        return service.OffsetFetch(request, None)

    def _fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        response = pb.FetchResponse()
        for part in request.partitions:
            tp = TopicPartition(part.topic, part.partition)
            log = self.partitions[tp]
            result = response.partitions.add(topic=tp.topic, partition=tp.partition, high_watermark=log.next_offset,
                                             last_stable_offset=log.lso, log_start_offset=0)
            if tp in self.fetch_errors:
                result.error_code = self.fetch_errors.pop(tp)
                continue
            if not 0 <= part.fetch_offset <= log.next_offset:
                result.error_code = OffsetOutOfRangeError.errno
                continue
            upper = log.lso if request.isolation_level == 1 else log.next_offset
            chosen = [(b, last, raw) for b, last, raw in log.raw if last >= part.fetch_offset and b < upper]
            result.records = b"".join(raw for _, _, raw in chosen)
            if request.isolation_level == 1 and chosen:
                for pid, first, marker in log.aborted:
                    if marker >= part.fetch_offset and first <= chosen[-1][1]:
                        result.aborted_transactions.add(producer_id=pid, first_offset=first)
        return response

    def _list_offsets(self, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        response = pb.ListOffsetsResponse()
        for ref in request.partitions:
            log = self.partitions[TopicPartition(ref.topic, ref.partition)]
            response.partitions.add(topic=ref.topic, partition=ref.partition, log_start_offset=0,
                                    high_watermark=log.next_offset, last_stable_offset=log.lso)
        return response

    def txn_offset_commit(self, tp: TopicPartition, offset: int, pid: int = 77) -> None:
        response = self.groups.txn_offset_commit(pb.TxnOffsetCommitRequest(
            transactional_id="tx", group_id=GROUP, producer_id=pid, producer_epoch=0, generation_id=-1,
            offsets=[pb.OffsetEntry(topic=tp.topic, partition=tp.partition, offset=offset)]))
        assert not any(r.error_code for r in response.results)

    def end_offsets_txn(self, pid: int, commit: bool) -> None:
        marker = self.group_log.next_offset
        self.group_log.append(encode_control_batch(producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                                   timestamp=1000,
                                                   control_type=ControlType.COMMIT if commit else ControlType.ABORT))
        self.groups.complete_transaction(0, pid, commit, marker_offset=marker)


class FakeClusterClient:
    def __init__(self, node: FakeNode) -> None:
        self.node = node
        self.invalidations = 0

    def leader_address(self, tp: TopicPartition, deadline: Any = None) -> str:
        if tp not in self.node.partitions:
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] {tp}")
        return "node-0"

    def stubs(self, address: str) -> Any:
        return self.node.stubs

    def invalidate(self, tp: TopicPartition | None = None) -> None:
        self.invalidations += 1

    def coordinator_address(self, key_type: int, key: str, deadline: Any = None) -> str:
        return "node-0"

    def invalidate_coordinator(self, key_type: int, key: str) -> None:
        pass

    def partitions_for(self, topic: str, deadline: Any = None) -> int:
        return self.node.topics[topic]

    def refresh_metadata(self, topics: Any = (), deadline: Any = None) -> pb.MetadataResponse:
        return pb.MetadataResponse(topics=[
            pb.TopicMetadata(name=name, internal=name.startswith("__"),
                             partitions=[pb.PartitionMetadata(partition=p) for p in range(count)])
            for name, count in {**self.node.topics, "__consumer_offsets": 1, "other": 1}.items()])

    def close(self) -> None:
        pass


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    fake = FakeNode()
    monkeypatch.setattr(consumer_module, "ClusterClient", lambda *a, **k: FakeClusterClient(fake))
    return fake


def make(**overrides: Any) -> Consumer:
    settings = dict(bootstrap_servers="node-0:1", group_id=GROUP, isolation_level="read_committed",
                    auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=10,
                    request_timeout_ms=2000)
    settings.update(overrides)
    return Consumer(**settings)


def values(records: dict[TopicPartition, list]) -> dict[TopicPartition, list[bytes]]:
    return {tp: [r.value for r in rs] for tp, rs in records.items()}


def poll_until(consumer: Consumer, want: int, timeout_s: float = 5.0) -> dict[TopicPartition, list[bytes]]:
    got: dict[TopicPartition, list[bytes]] = {}
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got.values())) < want and time.monotonic() < deadline:
        for tp, vs in values(consumer.poll(timeout_ms=100)).items():
            got.setdefault(tp, []).extend(vs)
    return got


# ---------------------------------------------------------------- assign, read_committed

def test_read_committed_poll_returns_committed_records_only(node: FakeNode) -> None:
    p0 = node.partitions[TP0]
    p0.produce(b"a")
    p0.produce(b"b", pid=1)
    p0.produce(b"c", pid=2)
    p0.end(2, commit=False)
    with make() as c:
        c.assign([TP0])
        assert poll_until(c, 1) == {TP0: [b"a"]}
        assert c.poll(timeout_ms=50) == {}  # b's transaction is still open
        assert c.position(TP0) == 1
        p0.end(1, commit=True)
        assert poll_until(c, 1) == {TP0: [b"b"]}
        assert c.position(TP0) == p0.next_offset  # past c (aborted) and both markers


def test_read_uncommitted_sees_open_and_aborted_records(node: FakeNode) -> None:
    p0 = node.partitions[TP0]
    p0.produce(b"x", pid=1)
    p0.end(1, commit=False)
    p0.produce(b"y", pid=2)
    with make(isolation_level="read_uncommitted") as c:
        c.assign([TP0])
        assert poll_until(c, 2) == {TP0: [b"x", b"y"]}


def test_max_records_limits_a_poll_and_positions_follow(node: FakeNode) -> None:
    node.partitions[TP0].produce(*[b"%d" % i for i in range(7)])
    with make() as c:
        c.assign([TP0])
        seen: list[bytes] = []
        deadline = time.monotonic() + 5
        while len(seen) < 7 and time.monotonic() < deadline:
            batch = c.poll(timeout_ms=100, max_records=3).get(TP0, [])
            assert len(batch) <= 3
            seen += [r.value for r in batch]
            if batch:
                assert c.position(TP0) == batch[-1].offset + 1
        assert seen == [b"%d" % i for i in range(7)]


@pytest.mark.parametrize("isolation, expected", [("read_committed", 1), ("read_uncommitted", 2)])
def test_latest_is_the_lso_for_read_committed_and_the_high_watermark_otherwise(
        node: FakeNode, isolation: str, expected: int) -> None:
    p0 = node.partitions[TP0]
    p0.produce(b"done")
    p0.produce(b"open", pid=9)
    with make(group_id=None, isolation_level=isolation, auto_offset_reset="latest") as c:
        c.assign([TP0])
        assert c.position(TP0) == expected
        assert c.end_offsets([TP0]) == {TP0: expected}
        assert c.beginning_offsets([TP0]) == {TP0: 0}


def test_out_of_range_position_is_reset_per_policy(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a", b"b")
    with make() as c:
        c.assign([TP0])
        c.seek(TP0, 100)
        assert poll_until(c, 2) == {TP0: [b"a", b"b"]}
    with make(auto_offset_reset="none") as c:
        c.assign([TP0])
        c.seek(TP0, 100)
        with pytest.raises(OffsetOutOfRangeError):
            poll_until(c, 1)


def test_no_committed_offset_and_reset_none_is_an_error(node: FakeNode) -> None:
    with make(auto_offset_reset="none") as c:
        c.assign([TP0])
        with pytest.raises(OffsetOutOfRangeError, match="auto_offset_reset"):
            c.position(TP0)


def test_retriable_fetch_errors_never_escape_poll(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a")
    node.fetch_errors[TP0] = NotLeaderOrFollowerError.errno
    with make() as c:
        c.assign([TP0, TopicPartition("missing", 0)])
        assert poll_until(c, 1) == {TP0: [b"a"]}
        assert c._cluster.invalidations >= 1


def test_poll_returns_empty_when_nothing_arrives_within_the_timeout(node: FakeNode) -> None:
    with make() as c:
        c.assign([TP0])
        started = time.monotonic()
        assert c.poll(timeout_ms=200) == {}
        assert time.monotonic() - started < 0.2 + 0.5


def test_seek_to_beginning_and_end(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a", b"b", b"c")
    with make() as c:
        c.assign([TP0])
        c.seek_to_end(TP0)
        assert c.position(TP0) == 3
        c.seek_to_beginning()
        assert c.position(TP0) == 0


def test_paused_partitions_are_not_returned_until_resumed(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a")
    with make() as c:
        c.assign([TP0])
        c.pause(TP0)
        assert c.poll(timeout_ms=50) == {}
        c.resume(TP0)
        assert poll_until(c, 1) == {TP0: [b"a"]}


# ---------------------------------------------------------------- commits

def test_commit_then_a_new_consumer_starts_at_the_committed_offset(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a", b"b", b"c")
    with make() as c:
        c.assign([TP0])
        c.seek(TP0, 2)
        c.commit()
        assert c.committed(TP0) == 2
        assert c.committed(TP1) is None
        c.commit({TP1: OffsetAndMetadata(0, "meta")})
        assert c.committed(TP1, metadata=True) == OffsetAndMetadata(0, "meta")
    with make() as c2:
        c2.assign([TP0])
        assert poll_until(c2, 1) == {TP0: [b"c"]}


def test_committed_waits_for_the_transaction_decision(node: FakeNode) -> None:
    node.txn_offset_commit(TP0, 9)
    node.offset_fetch_hook = lambda n: node.end_offsets_txn(77, commit=True) if n == 3 else None
    with make() as c:
        assert c.committed(TP0) == 9
        assert node.offset_fetches >= 3


def test_committed_gives_up_after_request_timeout(node: FakeNode) -> None:
    node.txn_offset_commit(TP0, 9)
    with make(request_timeout_ms=300) as c:
        with pytest.raises(KafkaTimeoutError, match="pending a transaction decision"):
            c.committed(TP0)


def test_read_committed_start_position_waits_for_a_stable_offset(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a", b"b", b"c")
    node.txn_offset_commit(TP0, 2)
    with make() as c:
        c.assign([TP0])
        assert c.poll(timeout_ms=50) == {}
        node.end_offsets_txn(77, commit=True)
        assert poll_until(c, 1) == {TP0: [b"c"]}


def test_assign_only_commit_is_refused_once_the_group_has_members(node: FakeNode) -> None:
    with make() as member, make() as outsider:
        member.subscribe([TOPIC])
        member.poll(timeout_ms=50)
        outsider.assign([TP0])
        outsider.seek(TP0, 0)
        with pytest.raises(UnknownMemberIdError):
            outsider.commit()


# ---------------------------------------------------------------- groups

def test_two_subscribers_split_the_partitions_and_rebalance(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a0")
    node.partitions[TP1].produce(b"b0")
    c1, c2 = make(enable_auto_commit=True), make(enable_auto_commit=True)
    try:
        c1.subscribe([TOPIC])
        got = poll_until(c1, 2)
        assert c1.assignment() == {TP0, TP1} and got == {TP0: [b"a0"], TP1: [b"b0"]}
        assert c1.group_metadata().generation_id == 1

        c2.subscribe([TOPIC])
        joining = threading.Thread(target=lambda: c2.poll(timeout_ms=50))
        joining.start()  # its JoinGroup waits at the barrier until c1 rejoins
        wait_until(lambda: node.groups.describe_groups(pb.DescribeGroupsRequest(group_ids=[GROUP])).groups[0].state
                   == "PreparingRebalance", 5, "the group rebalancing")
        c1._membership.heartbeat_once()  # the coordinator answers REBALANCE_IN_PROGRESS
        c1.poll(timeout_ms=50)  # revokes and commits both, rejoins, leads, assigns
        joining.join(10)
        assert c1.group_metadata().generation_id == c2.group_metadata().generation_id == 2
        assert c1.assignment() | c2.assignment() == {TP0, TP1}
        assert not c1.assignment() & c2.assignment()
        lost = (c1.assignment() ^ {TP0, TP1}).pop()
        assert c1.committed(lost) == 1  # auto commit before the partition moved away

        c2.close()  # LeaveGroup
        c1._membership.heartbeat_once()
        c1.poll(timeout_ms=50)
        assert c1.assignment() == {TP0, TP1}
    finally:
        c1.close()
        c2.close()


def test_a_member_whose_session_expired_rejoins_with_a_new_id(node: FakeNode) -> None:
    with make() as c:
        c.subscribe([TOPIC])
        c.poll(timeout_ms=50)
        old = c.group_metadata()
        node.clock_ms += 60_000
        node.groups.expire_members()
        c._membership.heartbeat_once()  # UNKNOWN_MEMBER_ID
        assert c.group_metadata().member_id == ""
        c.poll(timeout_ms=50)
        new = c.group_metadata()
        assert new.member_id not in ("", old.member_id) and new.generation_id > old.generation_id
        assert c.assignment() == {TP0, TP1}


def test_an_eager_rejoin_commits_and_revokes_everything_before_its_join_group(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a")
    events: list[str] = []

    class Listener:
        def on_partitions_revoked(self, revoked: set) -> None:
            events.append(f"revoked {sorted(tp.partition for tp in revoked)}")

        def on_partitions_assigned(self, assigned: set) -> None:
            events.append(f"assigned {sorted(tp.partition for tp in assigned)}")
    with make(enable_auto_commit=True) as c:
        c.subscribe([TOPIC], listener=Listener())
        assert poll_until(c, 1) == {TP0: [b"a"]}
        c._membership.request_rejoin("test")
        node.before["OffsetCommit"] = lambda: events.append("commit")
        node.before["JoinGroup"] = lambda: events.append("join")
        c.poll(timeout_ms=200)
        assert events == ["assigned [0, 1]", "commit", "revoked [0, 1]", "join", "assigned [0, 1]"]
        assert c.committed(TP0) == 1


def test_subscribe_takes_topics_or_a_pattern(node: FakeNode) -> None:
    with make() as c:
        with pytest.raises(IllegalStateError):
            c.subscribe()
        with pytest.raises(IllegalStateError):
            c.subscribe([TOPIC], pattern="x.*")
        c.subscribe(pattern=TOPIC[:2] + ".*")
        c.poll(timeout_ms=100)
        assert c.subscription() == {TOPIC} and c.assignment() == {TP0, TP1}


def test_the_leader_rebalances_when_a_subscribed_topic_gains_partitions(node: FakeNode) -> None:
    with make(metadata_max_age_ms=1) as c:
        c.subscribe([TOPIC])
        c.poll(timeout_ms=50)
        assert c.assignment() == {TP0, TP1}
        tp2 = TopicPartition(TOPIC, 2)
        node.partitions[tp2] = FakePartition()
        node.topics[TOPIC] = 3
        wait_until(lambda: c.poll(timeout_ms=20) is not None and c.assignment() == {TP0, TP1, tp2}, 5,
                   "the new partition assigned")
        assert c.group_metadata().generation_id == 2


def test_a_static_member_closed_and_restarted_gets_its_partitions_back_in_the_same_generation(node: FakeNode) -> None:
    with make(group_instance_id="worker-1") as first:
        first.subscribe([TOPIC])
        first.poll(timeout_ms=50)
        assert first.assignment() == {TP0, TP1}
        before = first.group_metadata()
    # closing sent no LeaveGroup (KIP-345): the member stays until its session expires
    (group,) = node.groups.describe_groups(pb.DescribeGroupsRequest(group_ids=[GROUP])).groups
    assert group.state == "Stable" and [m.group_instance_id for m in group.members] == ["worker-1"]
    with make(group_instance_id="worker-1") as second:
        second.subscribe([TOPIC])
        second.poll(timeout_ms=50)
        after = second.group_metadata()
        assert second.assignment() == {TP0, TP1}
        assert after.generation_id == before.generation_id and after.member_id != before.member_id


def test_a_static_member_fenced_by_a_newer_instance_stops_with_fenced_instance_id(node: FakeNode) -> None:
    """Two processes configured with one group.instance.id: the newer takes the place, the older must stop
    (Kafka's consumer makes FENCED_INSTANCE_ID fatal) rather than go on reading the same partitions."""
    from proto.errors import FencedInstanceIdError
    with make(group_instance_id="worker-1", heartbeat_interval_ms=20) as older, \
            make(group_instance_id="worker-1", heartbeat_interval_ms=20) as newer:
        older.subscribe([TOPIC])
        older.poll(timeout_ms=50)
        assert older.assignment() == {TP0, TP1}
        newer.subscribe([TOPIC])
        newer.poll(timeout_ms=50)
        assert newer.assignment() == {TP0, TP1}

        def older_fails() -> bool:
            try:
                older.poll(timeout_ms=10)
            except FencedInstanceIdError:
                return True
            return False
        wait_until(older_fails, 5, "the older instance's poll() to raise FencedInstanceIdError")
        with pytest.raises(FencedInstanceIdError):
            older.poll(timeout_ms=10)  # and every poll() after
