"""A consumer group's generations on the timeline, from membership records written to a real __consumer_offsets
log (as the group coordinator writes them), and beside the transactions of a copier that commits offsets for it."""
from __future__ import annotations

import json

import pytest

from coordinator.group import log_format
from coordinator.group.classic import GroupRecord, Member
from coordinator.group.metadata import CommittedOffset
from coordinator.layout import read_cluster_spec
from partitions.model import AppendOrigin
from proto import records
from proto.consumer_protocol import encode_assignment
from proto.hashing import partition_for
from proto.structs import CONSUMER_OFFSETS_TOPIC, TopicPartition, TransactionState
from tests.unit.observe.test_timeline import ORDERS, T0, TID, Cluster, begin, txnsim
from txnsim.observe.group_timeline import beside_transactions, last_generations
from txnsim.observe.log_reader import group_timeline_of, read_timeline
from txnsim.observe.timeline import lanes

S = TransactionState
GROUP = "billing"


def member(name: str, *partitions: TopicPartition) -> Member:
    return Member(f"{name}-id", None, name, "/127.0.0.1", 10_000, 30_000, "consumer", (("range", b""),),
                  encode_assignment(partitions))


class Offsets:
    """The group's __consumer_offsets shard, written as the coordinator writes it."""

    def __init__(self, cluster: Cluster) -> None:
        self.shard = partition_for(GROUP, read_cluster_spec(cluster.layout).config.offsets_shards)
        cluster.lead(CONSUMER_OFFSETS_TOPIC, self.shard, node=1, epoch=0, at=T0 - 100)
        self.log = cluster._logs[(CONSUMER_OFFSETS_TOPIC, self.shard)]
        self.tp = TopicPartition(CONSUMER_OFFSETS_TOPIC, self.shard)

    def generation(self, at: int, generation: int, *members: Member) -> None:
        record = GroupRecord(generation, "consumer" if members else None, "range" if members else None,
                             members[0].member_id if members else None, members)
        self.log.append(records.encode_batch([(at, log_format.group_key(GROUP), log_format.encode_group(record), ())]),
                        origin=AppendOrigin.COORDINATOR)

    def deleted(self, at: int) -> None:
        self.log.append(records.encode_batch([(at, log_format.group_key(GROUP), None, ())]),
                        origin=AppendOrigin.COORDINATOR)

    def txn_offset_commit(self, at: int, pid: int, tp: TopicPartition, offset: int) -> None:
        value = log_format.encode_offset(CommittedOffset(offset, "", at, None))
        batch = records.encode_batch([(at, log_format.offset_key(GROUP, tp), value, ())], producer_id=pid,
                                     producer_epoch=0, transactional=True)
        self.log.append(batch, origin=AppendOrigin.COORDINATOR)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def test_each_generation_with_its_members_and_assignment_and_each_rebalance(cluster):
    offsets = Offsets(cluster)
    a0 = member("a", *ORDERS)
    offsets.generation(T0, 1, a0)
    offsets.generation(T0 + 100, 2, member("a", ORDERS[0]), member("b", ORDERS[1]))
    offsets.generation(T0 + 200, 3, member("b", *ORDERS))
    offsets.generation(T0 + 300, 4)
    offsets.deleted(T0 + 400)
    events = group_timeline_of(cluster.layout.root, GROUP)
    assert [(e.time_ms - T0, e.lane, e.kind, e.generation) for e in events] == [
        (0, "group billing", "Rebalance", 1),
        (0, "billing: a-id", "Assignment", 1),
        (100, "group billing", "Rebalance", 2),
        (100, "billing: a-id", "Assignment", 2),
        (100, "billing: b-id", "Assignment", 2),
        (200, "group billing", "Rebalance", 3),
        (200, "billing: b-id", "Assignment", 3),
        (200, "billing: a-id", "MemberLeft", 3),
        (300, "group billing", "Rebalance", 4),
        (300, "billing: b-id", "MemberLeft", 4),
        (400, "group billing", "GroupDeleted", 4),
    ]
    assert events[0].label == "generation 1: 1 member(s), leader a-id" and events[0].node_id == 1
    assert events[1].label == "assigned orders-0, orders-1" and events[1].detail == "client a on /127.0.0.1"
    assert events[3].label == "assigned orders-0" and events[4].label == "assigned orders-1"
    assert events[5].detail.endswith("; was generation 2")
    assert events[8].label == "generation 4: empty"
    assert lanes(events) == ["group billing", "billing: a-id", "billing: b-id"]
    assert [e.generation for e in last_generations(events, 1)] == [4, 4, 4]
    assert last_generations(events, -1) == events
    offsets.generation(T0 + 500, 1, member("c", *ORDERS))  # created again: its generations start over
    again = group_timeline_of(cluster.layout.root, GROUP)
    assert [(e.kind, e.generation) for e in last_generations(again, 2)] == [
        ("Rebalance", 4), ("MemberLeft", 4), ("GroupDeleted", 4), ("Rebalance", 1), ("Assignment", 1)]


def test_a_copiers_transactions_show_beside_the_rebalances_of_the_group_they_commit_for(cluster):
    offsets = Offsets(cluster)
    offsets.generation(T0 - 50, 1, member("a", *ORDERS))              # before the transaction: left out
    offsets.generation(T0 - 10, 2, member("a", ORDERS[0]), member("b", ORDERS[1]))  # in force when it begins
    ongoing = begin(cluster)
    with_offsets = ongoing.transit(S.ONGOING, T0 + 30, partitions=frozenset([*ORDERS, offsets.tp]))
    cluster.state(with_offsets, T0 + 30)
    offsets.txn_offset_commit(T0 + 35, 5, ORDERS[0], 7)
    offsets.generation(T0 + 40, 3, member("b", *ORDERS))               # a rebalance mid-transaction
    picture = read_timeline(cluster.layout.root, TID)
    assert list(picture.groups) == [GROUP]
    assert offsets.tp in picture.partitions
    shown = beside_transactions(picture.events, picture.groups)
    rebalances = [(e.time_ms - T0, e.generation) for e in shown if e.kind == "Rebalance"]
    assert rebalances == [(-10, 2), (40, 3)]
    assert lanes(shown)[-3:] == ["group billing", "billing: a-id", "billing: b-id"]
    assert [e for e in shown if not e.generation] == picture.events, "the transaction's own steps all kept"
    assert any(e.kind == "Produce" and e.lane == f"{CONSUMER_OFFSETS_TOPIC}-{offsets.shard}" for e in shown)


@pytest.mark.slow
def test_the_group_timeline_command_prints_json_and_names_an_unknown_group(cluster):
    offsets = Offsets(cluster)
    offsets.generation(T0, 1, member("a", *ORDERS))
    offsets.generation(T0 + 100, 2, member("a", ORDERS[0]), member("b", ORDERS[1]))
    data_dir = str(cluster.layout.root)
    as_json = txnsim("consumer-groups", "timeline", GROUP, "--data-dir", data_dir, "--json")
    assert as_json.returncode == 0, as_json.stderr
    events = json.loads(as_json.stdout)
    assert [(e["kind"], e["generation"]) for e in events if e["kind"] == "Rebalance"] == [("Rebalance", 1),
                                                                                         ("Rebalance", 2)]
    assert {e["lane"]: e["label"] for e in events if e["generation"] == 2 and e["kind"] == "Assignment"} == {
        "billing: a-id": "assigned orders-0", "billing: b-id": "assigned orders-1"}
    last = json.loads(txnsim("consumer-groups", "timeline", GROUP, "--data-dir", data_dir, "--json", "--last", "1")
                      .stdout)
    assert {e["generation"] for e in last} == {2}
    table = txnsim("consumer-groups", "timeline", GROUP, "--data-dir", data_dir)
    assert table.returncode == 0 and "generation 2: 2 member(s), leader a-id" in table.stdout
    unknown = txnsim("consumer-groups", "timeline", "nobody", "--data-dir", data_dir)
    assert unknown.returncode == 1 and unknown.stderr.strip().splitlines() == [
        f"error: GroupIdNotFoundError: [GROUP_ID_NOT_FOUND] no durable membership record of group 'nobody' in "
        f"{data_dir} (a group that only commits offsets has no generations)"]


@pytest.mark.slow
def test_the_transaction_timeline_command_shows_the_groups_rebalances_beside_the_copiers_steps(cluster):
    offsets = Offsets(cluster)
    offsets.generation(T0 - 10, 1, member("a", *ORDERS))
    ongoing = begin(cluster)
    cluster.state(ongoing.transit(S.ONGOING, T0 + 30, partitions=frozenset([*ORDERS, offsets.tp])), T0 + 30)
    offsets.txn_offset_commit(T0 + 35, 5, ORDERS[0], 7)
    offsets.generation(T0 + 40, 2, member("a", ORDERS[0]), member("b", ORDERS[1]))
    data_dir = str(cluster.layout.root)
    as_json = txnsim("transactions", "timeline", TID, "--data-dir", data_dir, "--json")
    assert as_json.returncode == 0, as_json.stderr
    events = json.loads(as_json.stdout)
    assert [e["generation"] for e in events if e["kind"] == "Rebalance"] == [1, 2]
    assert events[0]["kind"] == "Rebalance" and events[1]["lane"] == "billing: a-id"
    assert any(e["kind"] == "AddPartitions" and e["transaction"] == 1 for e in events)
    table = txnsim("transactions", "timeline", TID, "--data-dir", data_dir)
    assert table.returncode == 0 and f"timeline of {TID} with group billing" in table.stdout
    assert "gen 2" in table.stdout and "generation 2: 2 member(s)" in table.stdout
    # --group adds a group the id does not commit for; a group with no records adds nothing
    other = txnsim("transactions", "timeline", TID, "--data-dir", data_dir, "--json", "--group", "nobody")
    assert json.loads(other.stdout) == events
