"""The controller on a real ZooKeeper: one of the brokers is elected, a new topic's partitions get their
first leaders and ISRs, a broker that goes takes its leaderships and ISR places with it, and when the
controller itself goes another broker takes over at a higher controller epoch and carries on."""
from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from coordinator.controller.controller import Controller
from coordinator.controller.elections import assign_replicas
from coordinator.controller.producer_id_blocks import ProducerIdBlocks, StoreProducerIds
from coordinator.controller.registration import BrokerRegistration
from coordinator.controller.store import NoNodeError
from coordinator.controller.topic_admin import TopicAdmin, TopicDescription
from coordinator.controller.znodes import (
    TOPICS,
    BrokerInfo,
    PartitionState,
    encode_assignment,
    partition_state_path,
    topic_path,
)
from coordinator.controller.zookeeper_store import ZooKeeperStore
from coordinator.runtime.io import wait_for
from proto.errors import TopicAlreadyExistsError
from tests.helpers import wait_until
from txnsim.zookeeper import ZooKeeperServer, zookeeper_available

_MISSING = zookeeper_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=f"ZooKeeper cannot run here: {_MISSING}")


@dataclass
class Broker:
    broker_id: int
    store: ZooKeeperStore
    events: ThreadPoolExecutor
    controller: Controller
    registration: BrokerRegistration

    def stop(self) -> None:
        self.store.close()
        self.events.shutdown(wait=True)


def start_broker(broker_id: int, address: str) -> Broker:
    store = ZooKeeperStore(address, session_timeout_ms=2_000)
    events = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"controller-{broker_id}")

    def serial(work: object) -> None:
        assert callable(work)
        events.submit(work)
    controller = Controller(broker_id, store, serial, now_ms=lambda: 0)
    registration = BrokerRegistration(BrokerInfo(broker_id, f"127.0.0.1:{7000 + broker_id}"), store, serial)
    registration.start()
    controller.start()
    return Broker(broker_id, store, events, controller, registration)


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[dict[int, Broker]]:
    with ZooKeeperServer(tmp_path / "zk") as server:
        started = {i: start_broker(i, server.address) for i in range(3)}
        try:
            yield started
        finally:
            for broker in started.values():
                broker.stop()


def the_controller(brokers: dict[int, Broker]) -> Broker:
    def one_active() -> Broker | None:
        active = [b for b in brokers.values() if b.controller.active]
        return active[0] if len(active) == 1 else None
    return wait_until(one_active, 15, "exactly one broker to be the controller")


def state_of(broker: Broker, topic: str, partition: int) -> PartitionState | None:
    try:
        return PartitionState.decode(wait_for(lambda done: broker.store.get(partition_state_path(topic, partition),
                                                                            done)).data)
    except NoNodeError:
        return None


def test_the_controller_elects_leaders_from_the_isr_as_brokers_go(brokers: dict[int, Broker]) -> None:
    controller = the_controller(brokers)
    first_epoch = controller.controller.epoch
    assert first_epoch >= 1
    wait_until(lambda: all(b.registration.registered for b in brokers.values()), 10, "every broker registered")
    assignment = assign_replicas(3, 3, sorted(brokers))
    admin = controller.store
    wait_for(lambda done: admin.ensure_path(TOPICS, done))
    wait_for(lambda done: admin.create(topic_path("orders"), encode_assignment(assignment), done))

    for partition, replicas in assignment.items():
        state = wait_until(lambda p=partition: state_of(controller, "orders", p), 10, f"orders-{partition}'s state")
        assert state == PartitionState(replicas[0], 0, replicas, first_epoch)

    # a broker that is not the controller goes: it leaves every ISR, and what it led moves to the next replica
    gone = next(b for b in brokers.values() if b is not controller)
    gone.stop()
    for partition, replicas in assignment.items():
        survivors = tuple(r for r in replicas if r != gone.broker_id)

        def moved(p: int = partition) -> PartitionState | None:
            state = state_of(controller, "orders", p)
            return state if state is not None and gone.broker_id not in state.isr else None
        state = wait_until(moved, 10, f"orders-{partition} without broker {gone.broker_id}")
        assert state.isr == survivors and state.leader == survivors[0] and state.leader_epoch == 1

    # the controller itself goes: the last broker takes over at a higher epoch and leads everything
    last = next(b for b in brokers.values() if b is not controller and b is not gone)
    controller.stop()
    wait_until(lambda: last.controller.active, 15, f"broker {last.broker_id} to take over as controller")
    assert last.controller.epoch == first_epoch + 1
    for partition in assignment:
        def led_by_last(p: int = partition) -> PartitionState | None:
            state = state_of(last, "orders", p)
            return state if state is not None and state.leader == last.broker_id else None
        state = wait_until(led_by_last, 10, f"orders-{partition} led by broker {last.broker_id}")
        assert state.isr == (last.broker_id,) and state.controller_epoch == first_epoch + 1


def test_topics_created_in_zookeeper_get_their_leaders_and_describe_as_kafka_topics_does(
        brokers: dict[int, Broker]) -> None:
    controller = the_controller(brokers)
    wait_until(lambda: all(b.registration.registered for b in brokers.values()), 10, "every broker registered")
    admin = TopicAdmin(controller.store)
    assignment = wait_for(lambda done: admin.create("payments", 3, -1, {"min.insync.replicas": "2"}, done))
    assert all(len(replicas) == 3 for replicas in assignment.values())  # the default, with three brokers

    def described() -> TopicDescription | None:
        found: TopicDescription = wait_for(lambda done: admin.describe("payments", done))
        return found if all(p.leader >= 0 for p in found.partitions) else None
    topic = wait_until(described, 10, "every partition of payments to have a leader")
    assert topic.configs == {"min.insync.replicas": "2"}
    assert [(p.leader, p.isr) for p in topic.partitions] == [(r[0], r) for _p, r in sorted(assignment.items())]
    with pytest.raises(TopicAlreadyExistsError):
        wait_for(lambda done: admin.create("payments", 1, 1, None, done))


def test_brokers_racing_for_producer_id_blocks_on_zookeeper_never_share_an_id(brokers: dict[int, Broker]) -> None:
    allocators = [StoreProducerIds(ProducerIdBlocks(b.store, b.broker_id, block_size=7)) for b in brokers.values()]
    with ThreadPoolExecutor(max_workers=len(allocators)) as pool:
        handed = list(pool.map(lambda ids: [ids.allocate() for _ in range(50)], allocators))
    every = [pid for ids in handed for pid in ids]
    assert len(every) == len(set(every)) == 150
    assert all(ids == sorted(ids) for ids in handed)  # each broker's ids ascend
