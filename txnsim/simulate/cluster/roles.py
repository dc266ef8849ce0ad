"""What each actor of the cluster model sees of it: the simulated clients one surface, the simulated nodes
another. ClusterModel (model.py) provides both; the actors are typed against these, never against the
model, so the package's imports form a tree: model.py imports the actors, the actors import this.

Each surface has three parts, kept apart as TigerBeetle keeps its state and storage checkers apart from
its cluster: the world (network, clock, disk), the cluster's fixed shape and where things live now (the
control plane), and the invariant recorder the actors report what they saw to.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from coordinator.placement import Placement
from coordinator.rocketmq.log_format import HalfRecord, Storage
from partitions import PartitionLog
from partitions.faulty_storage import FaultyStorage
from proto.planted_bugs import PlantedBug
from proto.structs import ConsumerRecord, TopicPartition
from txnsim.chaos.history import History
from txnsim.simulate.network import Envelope, Network
from txnsim.simulate.world import World


class Shape(Protocol):
    """Where things are: the cluster's fixed shape, and which node owns a log now."""

    data_partitions: list[TopicPartition]

    def nodes(self) -> Sequence[str]: ...

    def partitions_for(self, topic: str) -> int | None: ...

    def shard_of(self, transactional_id: str) -> int: ...

    def owner_now(self, topic: str, partition: int) -> int: ...


class ClientCluster(Shape, Protocol):
    """What a simulated client (producer, reader, group member, copier, Spark query, RocketMQ producer) sees."""

    network: Network
    #: the Jepsen-style history of what the clients were told (txnsim chaos's checker reads it)
    history: History
    #: the RocketMQ producers' local database: message id -> its transaction's state (it outlives them)
    rmq_local: dict[str, str]

    def next_value(self) -> int: ...

    # the invariant recorder
    def holding(self, group: str, member: str, generation: int, partitions: list[TopicPartition],
                timeout_ms: int) -> None: ...

    def released(self, group: str, member: str) -> None: ...

    def corrupt_read(self, reader: str, tp: TopicPartition, offset: int, error: Exception) -> None: ...

    def uncommitted_polled(self, reader: str, records: Sequence[ConsumerRecord]) -> None: ...

    def stale_read(self, reader: str, tp: TopicPartition, node: str, told: int, answer: str) -> None: ...

    def rmq_message_sent(self, message_id: str) -> None: ...


class NodeCluster(Protocol):
    """What a simulated node and its I/O see: the world, the control plane, and the recorder."""

    network: Network
    world: World
    disk: FaultyStorage
    #: the planted bug the nodes' code is built with (None: the system as shipped)
    planted: PlantedBug | None
    placement: Placement
    live_view: frozenset[int]
    txn_shards: int
    fsync_ms: int

    def partitions_for(self, topic: str) -> int | None: ...

    def may_cut_off(self, node_id: int) -> bool: ...

    def half_storage(self, topic: str) -> Storage: ...

    def reserve_producer_ids(self) -> tuple[int, int]: ...

    def half_producer_id(self) -> int: ...

    def new_member_id(self, client_id: str, instance_id: str | None) -> str: ...

    def acknowledged_before_fsync(self, ends: dict[PartitionLog, int]) -> bool: ...

    # the invariant recorder
    def assigned(self, group: str, generation: int, assignment: bytes, waiter: Envelope, node: str,
                 now_ms: int) -> None: ...

    def member_heard(self, group: str, member: str, node: str, now_ms: int) -> None: ...

    def appended(self, node: str, log: PartitionLog, first: int, last: int) -> None: ...

    def offset_committed(self, group: str, tp: TopicPartition, offset: int) -> None: ...

    def rmq_check_sent(self, node: str, tid: str, record: HalfRecord, *, via_peer: bool = False) -> None: ...

    def rmq_discarded(self, tid: str) -> None: ...

    def ownership_changed(self, node: str, topic: str, partition: int, epoch: int) -> None: ...

    def note(self, node: str, text: str) -> None: ...
