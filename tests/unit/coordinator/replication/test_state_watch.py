"""A broker's watch of the partition states in the coordination store (the simulator's ZooKeeper): across a
reconnection it keeps what it knows until it has read everything again, and it still hears of every state
and of a topic deleted while it was away."""
from __future__ import annotations

from collections import deque
from collections.abc import Callable

from coordinator.controller.znodes import TOPICS, PartitionState, encode_assignment, partition_state_path, topic_path
from coordinator.replication.state_watch import PartitionStateWatch
from proto.structs import TopicPartition
from txnsim.simulate.coordination import SimStore, ZnodeTree


class Watched:
    def __init__(self) -> None:
        self.tree, self.queue = ZnodeTree(), deque[Callable[[], None]]()
        self.reachable = True
        self.tree.ensure_path(TOPICS)
        for topic in ("orders", "payments"):
            self.tree.create(0, topic_path(topic), encode_assignment({0: (1, 2)}), ephemeral=False)
            path = partition_state_path(topic, 0)
            self.tree.ensure_path(path.rsplit("/", 1)[0])
            self.tree.create(0, path, PartitionState(1, 3, (1, 2), 1).encode(), ephemeral=False)
        self.store = SimStore(self.tree, timeout_ms=10_000, now_ms=lambda: 0, deliver=self.queue.append,
                              reachable=lambda: self.reachable)
        self.states: list[tuple[TopicPartition, int]] = []
        self.gone: list[str] = []
        self.watch = PartitionStateWatch(1, self.store, lambda work: work(),
                                         on_state=lambda tp, _r, state, _v: self.states.append((tp, state.leader_epoch)),
                                         on_session_expired=lambda: None, on_topic_gone=self.gone.append)
        self.watch.start()
        self.pump()

    def pump(self) -> None:
        while self.queue:
            self.queue.popleft()()


def test_a_reconnection_keeps_every_topic_known_until_it_is_read_again() -> None:
    watched = Watched()
    assert set(watched.watch.assignments) == {"orders", "payments"}
    watched.reachable = False
    watched.store.heartbeat()  # SUSPENDED
    watched.pump()
    watched.tree.delete(partition_state_path("payments", 0), -1)  # payments is deleted meanwhile
    watched.tree.delete(topic_path("payments") + "/partitions/0", -1)
    watched.tree.delete(topic_path("payments") + "/partitions", -1)
    watched.tree.delete(topic_path("payments"), -1)
    watched.reachable = True
    watched.store.heartbeat()  # CONNECTED, in the same session
    generation = watched.watch._generation
    while watched.watch._generation == generation:  # up to the CONNECTED event: the reads it starts wait
        watched.queue.popleft()()
    assert watched.watch.assignments["orders"] == {0: (1, 2)}  # a marker for orders-0 is not taken for deleted
    watched.states.clear()
    watched.pump()
    assert watched.watch.assignments == {"orders": {0: (1, 2)}}
    assert watched.gone == ["payments"]
    assert watched.states == [(TopicPartition("orders", 0), 3)]  # every state handed on again
