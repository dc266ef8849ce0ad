"""How the controller writes partition states: every partition a broker change moves in one multi-op, the
states a leader changed meanwhile read again, and an election while an earlier write is unanswered deciding
from that write. The store is the simulator's ZooKeeper, its answers delivered when the test pumps them."""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from coordinator.controller.controller import Controller
from coordinator.controller.store import Done, Op, SetData
from coordinator.controller.znodes import (
    BROKER_IDS,
    TOPICS,
    BrokerInfo,
    PartitionState,
    broker_path,
    encode_assignment,
    partition_state_path,
    topic_path,
)
from txnsim.simulate.coordination import SimStore, ZnodeTree

SESSION_MS = 6_000


class HeldStore(SimStore):
    """The simulated ZooKeeper, with every commit recorded and its answer held back while `holding`."""

    def __init__(self, tree: ZnodeTree, deliver: Callable[[Callable[[], None]], None]) -> None:
        super().__init__(tree, timeout_ms=SESSION_MS, now_ms=lambda: 0, deliver=deliver)
        self.commits: list[list[Op]] = []
        self.holding = False
        self.held: list[Callable[[], None]] = []

    def commit(self, ops: Sequence[Op], done: Done) -> None:
        self.commits.append(list(ops))
        if self.holding:
            super().commit(ops, lambda outcome: self.held.append(lambda: done(outcome)))
        else:
            super().commit(ops, done)


class Setup:
    def __init__(self, states: dict[int, PartitionState], replicas: tuple[int, ...], brokers: Sequence[int]) -> None:
        self.tree, self.queue = ZnodeTree(), deque[Callable[[], None]]()
        self.tree.ensure_path(BROKER_IDS)
        self.tree.ensure_path(TOPICS)
        self.sessions: dict[int, int] = {}
        for broker in brokers:
            self.register(broker)
        self.tree.create(0, topic_path("orders"), encode_assignment({p: replicas for p in states}), ephemeral=False)
        for partition, state in states.items():
            path = partition_state_path("orders", partition)
            self.tree.ensure_path(path.rsplit("/", 1)[0])
            self.tree.create(0, path, state.encode(), ephemeral=False)
        self.store = HeldStore(self.tree, self.queue.append)
        self.controller = Controller(1, self.store, lambda work: work(), now_ms=lambda: 0)
        self.controller.start()
        self.pump()
        assert self.controller.active
        self.store.commits.clear()

    def register(self, broker: int) -> None:
        self.sessions[broker] = self.tree.open_session(SESSION_MS, 0)
        self.tree.create(self.sessions[broker], broker_path(broker), BrokerInfo(broker, f"10.0.0.{broker}:9092").encode(),
                         ephemeral=True)

    def kill(self, broker: int) -> None:
        self.tree.expire(self.sessions.pop(broker))

    def pump(self) -> None:
        while self.queue:
            self.queue.popleft()()

    def release(self) -> None:
        self.store.holding = False
        held, self.store.held = self.store.held, []
        for answer in held:
            answer()
        self.pump()

    def state(self, partition: int) -> PartitionState:
        return PartitionState.decode(self.tree.get(partition_state_path("orders", partition), None).data)


def state_writes(commit: list[Op]) -> int:
    return sum(isinstance(op, SetData) for op in commit)


def test_a_failover_moves_every_partition_of_the_dead_leader_in_one_multi_op() -> None:
    setup = Setup({p: PartitionState(3, 0, (3, 1, 2), 1) for p in range(6)}, (3, 1, 2), brokers=(1, 2, 3))
    setup.kill(3)
    setup.pump()
    assert [state_writes(commit) for commit in setup.store.commits] == [6]
    assert all(setup.state(p) == PartitionState(1, 1, (1, 2), 1) for p in range(6))


def test_states_a_leader_changed_since_are_read_again_and_written_together() -> None:
    setup = Setup({p: PartitionState(3, 0, (3, 1, 2), 1) for p in range(6)}, (3, 1, 2), brokers=(1, 2, 3))
    for p in (1, 4):  # leader 3 shrank these ISRs itself: the controller's versions of them are old
        setup.tree.set(partition_state_path("orders", p), PartitionState(3, 0, (3, 1), 1).encode(), 0)
    setup.kill(3)
    setup.pump()
    assert [state_writes(commit) for commit in setup.store.commits] == [6, 6]  # refused whole, then again
    assert all(setup.state(p) == PartitionState(1, 1, (1, 2), 1) for p in (0, 2, 3, 5))
    assert all(setup.state(p) == PartitionState(1, 1, (1,), 1) for p in (1, 4))


def test_an_election_while_an_earlier_write_is_unanswered_decides_from_that_write() -> None:
    """Broker 3, the only in-sync replica, restarts: the controller makes the partition leaderless until it
    has caught up. Broker 2 registers before that write is answered: the election it starts must see the
    leaderless state and elect 3 again (the only ISR member, live), not find the old state needing nothing
    and leave the partition leaderless for good."""
    setup = Setup({0: PartitionState(3, 5, (3,), 1)}, (3, 2, 1), brokers=(1, 3))
    setup.store.holding = True
    setup.kill(3)
    setup.register(3)  # back within one watch's round trip: only its session tells
    setup.pump()
    assert setup.state(0) == PartitionState(-1, 6, (3,), 1)
    setup.register(2)
    setup.pump()
    setup.release()
    assert setup.state(0) == PartitionState(3, 7, (3,), 1)


def test_an_election_never_builds_on_a_write_the_store_may_still_refuse() -> None:
    """Leader 2 shrank its ISR to itself behind the controller's back; the controller, not knowing, writes
    broker 3's removal from the old state, a write ZooKeeper will refuse. Broker 2 dies before that answer:
    deciding from the refused write's state (ISR 2 and 1) would elect broker 1, out of sync, at the version
    the leader's own write left; the controller must wait for the answer and decide from the real state,
    which leaves the partition leaderless (its only in-sync replica is dead), not unclean."""
    setup = Setup({0: PartitionState(2, 4, (2, 3, 1), 1)}, (2, 3, 1), brokers=(1, 2, 3))
    setup.tree.set(partition_state_path("orders", 0), PartitionState(2, 4, (2,), 1).encode(), 0)
    setup.store.holding = True
    setup.kill(3)
    setup.pump()
    setup.kill(2)
    setup.pump()
    setup.release()
    assert setup.state(0) == PartitionState(-1, 5, (2,), 1)
