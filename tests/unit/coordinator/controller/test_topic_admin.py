"""Creating and describing topics in the coordination store (the simulator's ZooKeeper, with the shipping
controller electing): a topic's assignment spreads leaders over the live brokers, the controller gives each
partition its leader and ISR, describe says what kafka-topics --describe says (offline replicas included),
and every refusal is Kafka's error."""
from __future__ import annotations

import pytest

from coordinator.controller.controller import Controller
from coordinator.controller.registration import BrokerRegistration
from coordinator.controller.topic_admin import TopicAdmin, TopicDescription
from coordinator.controller.znodes import BrokerInfo
from coordinator.runtime.io import wait_for
from proto.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tests.helpers import Serial
from txnsim.simulate.coordination import SimStore, ZnodeTree


class Cluster:
    def __init__(self, brokers: int) -> None:
        self.tree, self.now = ZnodeTree(), [0]
        self.stores: dict[int, SimStore] = {}
        self.reachable = True
        for broker in range(1, brokers + 1):
            serial = Serial()
            store = SimStore(self.tree, timeout_ms=1_000, now_ms=lambda: self.now[0], deliver=serial)
            BrokerRegistration(BrokerInfo(broker, f"10.0.0.{broker}:9092"), store, serial).start()
            Controller(broker, store, serial, now_ms=lambda: self.now[0]).start()
            self.stores[broker] = store
        self.client = SimStore(self.tree, timeout_ms=1_000, now_ms=lambda: self.now[0],
                               reachable=lambda: self.reachable)
        self.admin = TopicAdmin(self.client)

    def create(self, name: str, partitions: int, replication_factor: int = -1,
               configs: dict[str, str] | None = None) -> dict[int, tuple[int, ...]]:
        created: dict[int, tuple[int, ...]] = wait_for(
            lambda done: self.admin.create(name, partitions, replication_factor, configs, done))
        return created

    def describe(self, name: str) -> TopicDescription:
        described: TopicDescription = wait_for(lambda done: self.admin.describe(name, done))
        return described


def test_a_topic_is_spread_over_the_brokers_and_the_controller_gives_every_partition_a_leader() -> None:
    cluster = Cluster(3)
    assignment = cluster.create("orders", 6, 3, {"retention.ms": "60000"})
    assert all(len(replicas) == 3 == len(set(replicas)) for replicas in assignment.values())
    assert sorted(replicas[0] for replicas in assignment.values()) == [1, 1, 2, 2, 3, 3]  # leaders spread
    described = cluster.describe("orders")
    assert described.replication_factor == 3 and described.configs == {"retention.ms": "60000"}
    for partition in described.partitions:
        assert partition.leader == assignment[partition.partition][0] and partition.leader_epoch == 0
        assert partition.isr == partition.replicas == assignment[partition.partition] and partition.offline == ()
    assert wait_for(lambda done: cluster.admin.list_topics(done)) == ["orders"]


def test_the_default_replication_factor_is_three_or_every_broker_there_is() -> None:
    small = Cluster(2)
    small.create("two", 1)
    assert small.describe("two").replication_factor == 2
    large = Cluster(4)
    large.create("four", 1)
    assert large.describe("four").replication_factor == 3


def test_a_broker_gone_shows_as_an_offline_replica_and_leaves_the_isr() -> None:
    cluster = Cluster(3)
    cluster.create("orders", 3, 3)
    cluster.now[0] = 2_000  # broker 3 stops heartbeating; the others and the client go on
    for broker in (1, 2):
        cluster.stores[broker].heartbeat()
    cluster.client.heartbeat()
    cluster.tree.expire_idle(cluster.now[0])
    for partition in cluster.describe("orders").partitions:
        assert partition.offline == (3,) and 3 not in partition.isr and partition.leader in (1, 2)


def test_refusals_are_kafkas_errors() -> None:
    cluster = Cluster(3)
    cluster.create("orders", 1, 3)
    with pytest.raises(TopicAlreadyExistsError):
        cluster.create("orders", 1, 3)
    with pytest.raises(InvalidReplicationFactorError, match="3 live broker"):
        cluster.create("wide", 1, 4)
    with pytest.raises(InvalidTopicError):
        cluster.create("__mine", 1, 1)
    with pytest.raises(InvalidConfigError):
        cluster.create("configured", 1, 1, {"no.such.setting": "1"})
    with pytest.raises(UnknownTopicOrPartitionError):
        cluster.describe("missing")
    assert [t for t in wait_for(lambda done: cluster.admin.list_topics(done))] == ["orders"]  # nothing half-made
    cluster.reachable = False
    with pytest.raises(RequestTimedOutError, match="cannot be reached"):
        cluster.create("later", 1, 1)


def test_a_topics_settings_change_in_the_store_and_a_concurrent_change_is_not_lost() -> None:
    cluster = Cluster(3)
    cluster.create("orders", 1, 3, {"retention.ms": "60000"})
    changed = wait_for(lambda done: cluster.admin.change_configs(
        "orders", lambda current: {**current, "min.insync.replicas": "3"}, done))
    assert changed == {"retention.ms": "60000", "min.insync.replicas": "3"}
    assert cluster.describe("orders").configs == changed
    # another admin changes the settings between this change's read and its write: the write is refused
    # (the znode's version moved) and the change is applied again to what the other wrote
    other = TopicAdmin(cluster.stores[2])

    def meanwhile(current: dict[str, str]) -> dict[str, str]:
        if not raced:
            raced.append(True)
            wait_for(lambda done: other.change_configs("orders", lambda c: {**c, "retention.ms": "1000"}, done))
        return {k: v for k, v in current.items() if k != "min.insync.replicas"}
    raced: list[bool] = []
    assert wait_for(lambda done: cluster.admin.change_configs("orders", meanwhile, done)) == {"retention.ms": "1000"}
    with pytest.raises(UnknownTopicOrPartitionError):
        wait_for(lambda done: cluster.admin.change_configs("missing", dict, done))


def test_added_partitions_continue_the_spread_and_the_controller_gives_each_its_first_leader() -> None:
    cluster = Cluster(3)
    before = cluster.create("orders", 2, 3)
    grown: dict[int, tuple[int, ...]] = wait_for(lambda done: cluster.admin.add_partitions("orders", 5, done))
    assert {p: grown[p] for p in before} == before  # existing partitions keep their replicas
    assert sorted(grown) == [0, 1, 2, 3, 4] and all(len(set(grown[p])) == 3 for p in grown)
    assert all(grown[p + 1][0] % 3 == (grown[p][0] + 1) % 3 for p in range(4))  # leaders go round, continued
    described = cluster.describe("orders")
    assert [(p.partition, p.leader, p.isr) for p in described.partitions][2:] == [
        (p, grown[p][0], grown[p]) for p in (2, 3, 4)]
    for total in (5, 3):
        with pytest.raises(InvalidPartitionsError):
            wait_for(lambda done, total=total: cluster.admin.add_partitions("orders", total, done))
    with pytest.raises(UnknownTopicOrPartitionError):
        wait_for(lambda done: cluster.admin.add_partitions("nowhere", 4, done))
