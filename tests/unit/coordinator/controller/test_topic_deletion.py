"""Deleting a topic of a replicated cluster in the simulator's ZooKeeper, with the shipping controller and each
broker's ReplicaDeletions: every broker deletes its replicas and says so, then the controller removes the
topic's znodes and the marker; a broker that is down holds the deletion up until it is back, and the name
cannot be taken again meanwhile."""
from __future__ import annotations

import pytest

from coordinator.controller.controller import Controller
from coordinator.controller.registration import BrokerRegistration
from coordinator.controller.store import NoNodeError
from coordinator.controller.topic_admin import TopicAdmin, config_path
from coordinator.controller.topic_deletion import ReplicaDeletions
from coordinator.controller.znodes import BrokerInfo, deletion_path, partition_state_path, topic_path
from coordinator.runtime.io import wait_for
from proto.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from tests.helpers import Serial
from txnsim.simulate.coordination import SimStore, ZnodeTree


class Cluster:
    def __init__(self) -> None:
        self.tree = ZnodeTree()
        self.deleted: dict[int, list[str]] = {1: [], 2: [], 3: []}
        self.client = SimStore(self.tree, timeout_ms=1_000, now_ms=lambda: 0)
        self.admin = TopicAdmin(self.client)
        self.stores: dict[int, SimStore] = {}
        for broker in (1, 2, 3):
            self.start(broker)

    def start(self, broker: int) -> None:
        serial = Serial()
        store = self.stores[broker] = SimStore(self.tree, timeout_ms=1_000, now_ms=lambda: 0, deliver=serial)
        BrokerRegistration(BrokerInfo(broker, f"10.0.0.{broker}:9092"), store, serial).start()
        Controller(broker, store, serial, now_ms=lambda: 0).start()
        ReplicaDeletions(broker, store, serial, delete=self.deleted[broker].append).start()

    def kill(self, broker: int) -> None:
        self.tree.expire(self.stores.pop(broker).session_id)

    def exists(self, path: str) -> bool:
        try:
            self.tree.get(path, None)
        except NoNodeError:
            return False
        return True


def test_every_broker_deletes_its_replicas_then_the_controller_removes_the_topic() -> None:
    cluster = Cluster()
    wait_for(lambda done: cluster.admin.create("orders", 3, 3, None, done))
    assert cluster.exists(partition_state_path("orders", 2))
    wait_for(lambda done: cluster.admin.delete("orders", done))
    assert cluster.deleted == {1: ["orders"], 2: ["orders"], 3: ["orders"]}
    for path in (topic_path("orders"), config_path("orders"), partition_state_path("orders", 0),
                 deletion_path("orders")):
        assert not cluster.exists(path), path
    with pytest.raises(UnknownTopicOrPartitionError):
        wait_for(lambda done: cluster.admin.delete("orders", done))
    wait_for(lambda done: cluster.admin.create("orders", 1, 3, None, done))  # the name is free again
    assert cluster.exists(partition_state_path("orders", 0)) and not cluster.exists(partition_state_path("orders", 2))


def test_a_broker_that_is_down_holds_the_deletion_up_until_it_is_back() -> None:
    cluster = Cluster()
    wait_for(lambda done: cluster.admin.create("orders", 3, 3, None, done))
    cluster.kill(3)
    wait_for(lambda done: cluster.admin.delete("orders", done))
    assert cluster.deleted[1] == cluster.deleted[2] == ["orders"] and cluster.deleted[3] == []
    assert cluster.exists(topic_path("orders")) and cluster.exists(deletion_path("orders"))
    with pytest.raises(TopicAlreadyExistsError):
        wait_for(lambda done: cluster.admin.create("orders", 3, 2, None, done))
    cluster.start(3)  # back: it reads the markers and deletes its replicas too
    assert cluster.deleted[3] == ["orders"]
    assert not cluster.exists(topic_path("orders")) and not cluster.exists(deletion_path("orders"))
