"""The simulated cluster's control plane: which nodes are live, who owns each log, and the cluster-wide
counters a real cluster keeps durably (producer-id blocks, member ids).

Ownership is the real placement (coordinator/placement.py) over a liveness view: a crashed node is declared
dead after a detection delay, a paused one once its pause outlasts the session timeout, as the nodes'
heartbeats would say. A paused node keeps its stale view until it resumes: that is the paused-owner case.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from coordinator.placement import NO_OWNER, Placement
from coordinator.rocketmq.log_format import Storage
from proto.hashing import partition_for
from proto.planted_bugs import PlantedBug
from proto.structs import CONSUMER_OFFSETS_TOPIC, TopicPartition
from txnsim.simulate.actors import ActorState
from txnsim.simulate.cluster.shape import (
    BATCH_TOPIC,
    NODES,
    OFFSETS_SHARDS,
    OUT_TOPIC,
    PARTITIONS,
    RMQ_IN_PLACE_TOPIC,
    RMQ_PARTITIONS,
    RMQ_TOPICS,
    TOPIC,
    TXN_SHARDS,
)

#: how long the cluster takes to declare a crashed node dead (heartbeats stop)
DETECTION_MS = 300
MEMBERSHIP_TICK_MS = 50


class ControlPlane:
    """Where things are and who is live, for every node and client of one run."""

    def __init__(self, planted: PlantedBug | None, session_timeout_ms: int) -> None:
        self.planted = planted
        self.session_timeout_ms = session_timeout_ms
        self.txn_shards = TXN_SHARDS
        self.placement = Placement(tuple(range(NODES)))
        self.data_partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        self.out_partitions = [TopicPartition(OUT_TOPIC, p) for p in range(PARTITIONS)]
        self.batch_partitions = [TopicPartition(BATCH_TOPIC, p) for p in range(PARTITIONS)]
        self.live_view: frozenset[int] = frozenset(range(NODES))
        self._down_since: dict[int, int] = {}
        self._values = 0
        self._pid_blocks = 0
        self._member_ids = 0
        self._half_producer_ids = 0

    @staticmethod
    def nodes() -> Sequence[str]:
        return [f"n{i}" for i in range(NODES)]

    # ------------------------------------------------------------ the shape

    @staticmethod
    def partitions_for(topic: str) -> int | None:
        if topic in (TOPIC, OUT_TOPIC, BATCH_TOPIC):
            return PARTITIONS
        if topic in RMQ_TOPICS:
            return RMQ_PARTITIONS
        return OFFSETS_SHARDS if topic == CONSUMER_OFFSETS_TOPIC else None

    @staticmethod
    def shard_of(transactional_id: str) -> int:
        return partition_for(transactional_id, TXN_SHARDS)

    @staticmethod
    def half_storage(topic: str) -> Storage:
        """How a topic stores its half messages (its `half.message.storage` setting)."""
        return Storage.KAFKA if topic == RMQ_IN_PLACE_TOPIC else Storage.ROCKETMQ

    # ------------------------------------------------------------ ownership and liveness

    def owner_now(self, topic: str, partition: int) -> int:
        """Who a client's fresh metadata names as the owner (any live node if none)."""
        owner = self.placement.owner(topic, partition, self.live_view)
        return owner if owner != NO_OWNER else 0

    def may_cut_off(self, node_id: int) -> bool:
        return node_id not in self.live_view or self.planted is PlantedBug.NO_FENCING

    def went_down(self, node_id: int, now_ms: int) -> None:
        """The node crashed or paused: its heartbeats stop from now."""
        self._down_since[node_id] = now_ms

    def came_back(self, node_id: int) -> None:
        self._down_since.pop(node_id, None)

    def next_view(self, now_ms: int, state_of: Callable[[str], ActorState]) -> frozenset[int] | None:
        """One membership probe: the new live view if it changed, else None."""
        live = set()
        for i, name in enumerate(self.nodes()):
            state = state_of(name)
            since = self._down_since.get(i)
            if state is ActorState.UP or since is None:
                live.add(i)
            elif state is ActorState.PAUSED and now_ms - since <= self.session_timeout_ms:
                live.add(i)
            elif state is ActorState.CRASHED and now_ms - since <= DETECTION_MS:
                live.add(i)
        view = frozenset(live)
        if view == self.live_view:
            return None
        self.live_view = view
        return view

    # ------------------------------------------------------------ the cluster's durable counters

    def next_value(self) -> int:
        self._values += 1
        return self._values

    def reserve_producer_ids(self) -> tuple[int, int]:
        """A block of producer ids for one node (the cluster's durable block counter)."""
        self._pid_blocks += 1
        return self._pid_blocks * 1000, (self._pid_blocks + 1) * 1000

    def new_member_id(self, client_id: str, instance_id: str | None) -> str:
        """Member ids from a counter, not a uuid: the same seed gives the same ids."""
        self._member_ids += 1
        return f"{instance_id or client_id}-{self._member_ids}"

    def half_producer_id(self) -> int:
        """A producer id for a half shard's copies, or for one message stored in place (the cluster's durable
        allocation)."""
        self._half_producer_ids += 1
        return 5_000_000 + self._half_producer_ids
