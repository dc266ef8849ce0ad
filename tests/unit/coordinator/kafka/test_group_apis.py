"""The group APIs on the Kafka port against a real GroupCoordinator over an in-memory shard: the join
barrier seen through Kafka's messages (test_handlers.py encodes every answer at every served version)."""
from __future__ import annotations

import itertools
import threading

from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

from coordinator.group import GroupCoordinator
from coordinator.kafka.group_apis import GroupApis
from partitions.model import AppendResult
from proto.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from proto.records import iter_batches, set_base_offset
from proto.structs import TopicPartition
from tests.fakes import node_io


class MemoryLog:
    def __init__(self) -> None:
        self.raw: list[bytes] = []
        self.next_offset = 0

    def append(self, records: bytes, *, origin: object = None, wait_durable: bool = True) -> AppendResult:
        base = self.next_offset
        for batch in iter_batches(records):
            self.raw.append(set_base_offset(batch.raw, self.next_offset, 0))
            self.next_offset += batch.header.last_offset_delta + 1
        return AppendResult(base, self.next_offset - 1)

    def make_durable(self, end_offset: int) -> None:  # memory: durable once appended
        pass

    def batches(self):
        for raw in list(self.raw):
            yield from iter_batches(raw)


def coordinator() -> GroupCoordinator:
    ids = itertools.count()
    gc = GroupCoordinator(1, io=node_io(), initial_rebalance_delay_ms=0, partitions_for=lambda t: 4,
                          new_member_id=lambda client, instance: f"{instance or client}-{next(ids)}")
    gc.load_shard(0, MemoryLog())
    return gc


def join(apis: GroupApis, version: int, member_id: str = "", group: str = "g", instance: str | None = None):
    P = JoinGroupRequest.JoinGroupRequestProtocol
    request = JoinGroupRequest(version=version, group_id=group, session_timeout_ms=10000,
                               rebalance_timeout_ms=10000, member_id=member_id, group_instance_id=instance,
                               protocol_type="consumer", protocols=[P(name="range", metadata=encode_subscription(["t"]))])
    request.with_header(correlation_id=1, client_id="c")
    return apis.join_group(request, version)


def test_a_new_member_is_asked_to_rejoin_with_an_id_then_leads_its_group():
    apis = GroupApis(coordinator())
    first = join(apis, 5)
    assert first.error_code == 79 and first.member_id == "c-0"
    joined = join(apis, 5, first.member_id)
    assert (joined.error_code, joined.generation_id, joined.leader, joined.member_id) == (0, 1, "c-0", "c-0")
    assert [m.member_id for m in joined.members] == ["c-0"]
    synced = apis.sync_group(SyncGroupRequest(version=3, group_id="g", generation_id=1, member_id="c-0",
                                              assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                                                  member_id="c-0", assignment=encode_assignment(
                                                      [TopicPartition("t", 0)]))]), 3)
    assert synced.error_code == 0 and decode_assignment(synced.assignment) == [TopicPartition("t", 0)]
    beat = apis.heartbeat(HeartbeatRequest(version=3, group_id="g", generation_id=1, member_id="c-0"), 3)
    assert beat.error_code == 0


def test_a_second_member_holds_the_join_until_the_first_rejoins():
    apis = GroupApis(coordinator())
    leader = join(apis, 5, join(apis, 5).member_id)
    apis.sync_group(SyncGroupRequest(version=3, group_id="g", generation_id=1, member_id=leader.member_id,
                                     assignments=[]), 3)
    second_id = join(apis, 5).member_id
    answers = {}
    waiting = threading.Thread(target=lambda: answers.setdefault("second", join(apis, 5, second_id)))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive(), "the join barrier answered before the first member rejoined"
    beat = apis.heartbeat(HeartbeatRequest(version=3, group_id="g", generation_id=1,
                                           member_id=leader.member_id), 3)
    assert beat.error_code == 27  # REBALANCE_IN_PROGRESS
    again = join(apis, 5, leader.member_id)
    waiting.join(5)
    second = answers["second"]
    assert again.generation_id == second.generation_id == 2
    assert again.leader == leader.member_id and len(again.members) == 2 and second.members == []


def test_offset_commit_then_fetch_of_a_group_without_members():
    apis = GroupApis(coordinator())
    OT = OffsetCommitRequest.OffsetCommitRequestTopic
    FT = OffsetFetchRequest.OffsetFetchRequestTopic
    committed = apis.offset_commit(OffsetCommitRequest(
        version=8, group_id="o", generation_id_or_member_epoch=-1, member_id="", topics=[OT(
            name="t", partitions=[OT.OffsetCommitRequestPartition(partition_index=1, committed_offset=7,
                                                                  committed_metadata="m")])]), 8)
    assert committed.topics[0].partitions[0].error_code == 0
    fetched = apis.offset_fetch(OffsetFetchRequest(version=5, group_id="o",
                                                   topics=[FT(name="t", partition_indexes=[0, 1])]), 5)
    assert [(p.partition_index, p.committed_offset) for p in fetched.topics[0].partitions] == [(0, -1), (1, 7)]
    everything = apis.offset_fetch(OffsetFetchRequest(version=7, group_id="o", topics=None), 7)
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in everything.topics] == [("t", [7])]


def test_describing_an_unknown_group_is_dead_and_from_v6_group_id_not_found():
    from kafka.protocol.admin import DescribeGroupsRequest

    apis = GroupApis(coordinator())
    old = apis.describe_groups(DescribeGroupsRequest(version=5, groups=["nope"]), 5).groups[0]
    new = apis.describe_groups(DescribeGroupsRequest(version=6, groups=["nope"]), 6).groups[0]
    assert (old.error_code, old.group_state) == (0, "Dead")
    assert (new.error_code, new.group_state) == (69, "Dead") and "does not exist" in new.error_message
