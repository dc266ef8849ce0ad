"""The simulator's ZooKeeper keeps the same contract as a real server (tests/store_contract.py), expires
idle sessions with their ephemeral znodes and watches, and runs the shipping controller: elected, electing
leaders from the ISR as brokers go, and taken over at a higher controller epoch."""
from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest

from coordinator.controller.controller import Controller
from coordinator.controller.elections import assign_replicas
from coordinator.controller.registration import BrokerRegistration
from coordinator.controller.store import CoordinationStore, SessionEvent
from coordinator.controller.znodes import (
    TOPICS,
    BrokerInfo,
    PartitionState,
    encode_assignment,
    partition_state_path,
    topic_path,
)
from coordinator.runtime.io import wait_for
from tests.helpers import Serial
from tests.store_contract import CONTRACT
from txnsim.simulate.coordination import SimStore, ZnodeTree


class Clock:
    def __init__(self) -> None:
        self.now = 0


@pytest.mark.parametrize("case", CONTRACT, ids=lambda case: case.__name__)
def test_the_simulated_zookeeper_keeps_the_store_contract(case: Callable[[CoordinationStore, str], None]) -> None:
    tree, clock = ZnodeTree(), Clock()
    store = SimStore(tree, timeout_ms=1_000, now_ms=lambda: clock.now)
    wait_for(lambda done: store.ensure_path("/case", done))
    case(store, "/case")


def test_an_idle_session_expires_with_its_ephemeral_znodes_and_its_watches() -> None:
    tree, clock = ZnodeTree(), Clock()
    member = SimStore(tree, timeout_ms=1_000, now_ms=lambda: clock.now)
    watcher = SimStore(tree, timeout_ms=1_000, now_ms=lambda: clock.now)
    events: list[SessionEvent] = []
    member.on_session(events.append)
    wait_for(lambda done: member.ensure_path("/brokers/ids", done))
    wait_for(lambda done: member.create("/brokers/ids/1", b"", done, ephemeral=True))
    never: list[str] = []
    wait_for(lambda done: member.children("/brokers", done, watch=lambda: never.append("member's watch")))
    changed: list[str] = []
    wait_for(lambda done: watcher.children("/brokers/ids", done, watch=lambda: changed.append("gone")))
    clock.now = 900
    watcher.heartbeat()
    assert tree.expire_idle(clock.now) == []
    clock.now = 1_001
    watcher.heartbeat()
    assert tree.expire_idle(clock.now) == [member.session_id]
    assert changed == ["gone"] and events == [SessionEvent.EXPIRED]
    assert wait_for(lambda done: watcher.children("/brokers/ids", done)) == []
    member.heartbeat()  # its client reconnects: a new session, told as CONNECTED
    assert events == [SessionEvent.EXPIRED, SessionEvent.CONNECTED]
    wait_for(lambda done: watcher.create("/brokers/x", b"", done))
    assert never == []  # the expired session's watch went with it


def start(broker_id: int, tree: ZnodeTree, clock: Clock) -> tuple[SimStore, Controller]:
    serial = Serial()
    store = SimStore(tree, timeout_ms=1_000, now_ms=lambda: clock.now, deliver=serial)
    controller = Controller(broker_id, store, serial, now_ms=lambda: clock.now)
    BrokerRegistration(BrokerInfo(broker_id, f"10.0.0.{broker_id}:7000"), store, serial).start()
    controller.start()
    return store, controller


def state(store: SimStore, partition: int) -> PartitionState:
    return PartitionState.decode(wait_for(lambda done: store.get(partition_state_path("orders", partition), done)).data)


def test_the_shipping_controller_runs_on_the_simulated_zookeeper() -> None:
    tree, clock = ZnodeTree(), Clock()
    brokers = {i: start(i, tree, clock) for i in range(3)}
    assert [c.active for _s, c in brokers.values()] == [True, False, False]
    store0, controller0 = brokers[0]
    assignment = assign_replicas(3, 3, [0, 1, 2])
    wait_for(lambda done: store0.ensure_path(TOPICS, done))
    wait_for(lambda done: store0.create(topic_path("orders"), encode_assignment(assignment), done))
    assert [state(store0, p) for p in range(3)] == [PartitionState(r[0], 0, r, 1) for r in assignment.values()]

    clock.now = 2_000  # broker 0, the controller, stops heartbeating; 1 and 2 go on
    for i in (1, 2):
        brokers[i][0].heartbeat()
    tree.expire_idle(clock.now)
    assert not controller0.active
    new = next(c for _s, c in brokers.values() if c.active)
    assert new.broker_id == 1 and new.epoch == 2
    store1 = brokers[1][0]
    for p, replicas in assignment.items():
        survivors = tuple(r for r in replicas if r != 0)
        assert state(store1, p) == PartitionState(survivors[0], 1, survivors, 2)

    store0, _ = brokers[0]
    store0.heartbeat()  # broker 0's client reconnects in a new session: it registers again, and follows
    assert wait_for(lambda done: store1.children("/brokers/ids", done)) == ["0", "1", "2"]
    assert not controller0.active and controller0.controller_id == 1


class Stepped:
    """Broker 0 as the controller, every store answer and watch event queued in `inbox` until `pump`, brokers
    1 and 2 registered in sessions of their own, and topic "orders" of one partition placed as `assignment`."""

    def __init__(self, assignment: dict[int, tuple[int, ...]]) -> None:
        self.tree, self.clock = ZnodeTree(), Clock()
        self.cut_off = False
        self.inbox: deque[Callable[[], None]] = deque()  # what reaches the controller, delivered one at a time
        self.serial = Serial()
        self.store = SimStore(self.tree, timeout_ms=1_000, now_ms=self.now, deliver=self.inbox.append,
                              reachable=lambda: not self.cut_off)
        self.controller = Controller(0, self.store, self.serial, now_ms=self.now)
        BrokerRegistration(BrokerInfo(0, "10.0.0.0:7000"), self.store, self.serial).start()
        self.controller.start()
        self.pump()
        self.others = {i: self.session() for i in (1, 2)}
        for i, other in self.others.items():
            BrokerRegistration(BrokerInfo(i, f"10.0.0.{i}:7000"), other, Serial()).start()
        self.pump()
        self.admin = self.session()
        wait_for(lambda done: self.admin.create(topic_path("orders"), encode_assignment(assignment), done))
        self.pump()

    def now(self) -> int:
        return self.clock.now

    def session(self) -> SimStore:
        return SimStore(self.tree, timeout_ms=1_000, now_ms=self.now)

    def pump(self, events: int | None = None) -> None:
        while self.inbox and (events is None or events > 0):
            self.serial(self.inbox.popleft())
            events = None if events is None else events - 1


def test_a_controller_cut_off_before_its_write_makes_it_once_back_within_its_session() -> None:
    world = Stepped(assign_replicas(1, 3, [0, 1, 2]))
    admin, others, pump, controller, store = world.admin, world.others, world.pump, world.controller, world.store
    assert state(admin, 0) == PartitionState(0, 0, (0, 1, 2), 1)

    others[2].close()  # broker 2 goes
    pump(1)  # the controller's watch fires: it reads the brokers (the read is answered below)
    world.cut_off = True  # ... and is cut off before it writes the new ISR
    pump()
    assert state(admin, 0) == PartitionState(0, 0, (0, 1, 2), 1)  # the write did not reach ZooKeeper
    world.clock.now = 500
    world.cut_off = False
    store.heartbeat()  # back within its session
    pump()
    assert controller.active and state(admin, 0) == PartitionState(0, 1, (0, 1), 1)


def test_a_broker_that_restarts_between_two_looks_still_leaves_every_isr() -> None:
    world = Stepped(assign_replicas(1, 3, [0, 1, 2], start_index=1))
    assert state(world.admin, 0) == PartitionState(1, 0, (1, 2, 0), 1)

    # broker 1, the leader, restarts: its old registration goes and its new one is made before the controller
    # reads the brokers again, so the list it reads is the same [0, 1, 2], under a new session for broker 1
    world.others[1].close()
    BrokerRegistration(BrokerInfo(1, "10.0.0.1:7000"), world.session(), Serial()).start()
    world.pump()
    assert state(world.admin, 0) == PartitionState(2, 1, (2, 0), 1)  # led by an ISR member that did not restart
