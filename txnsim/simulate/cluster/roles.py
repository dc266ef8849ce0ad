"""What each actor of the cluster model sees of it: the simulated clients one surface, the simulated nodes
another. ClusterModel (model.py) provides both; the actors are typed against these, never against the
model, so the package's imports form a tree: model.py imports the actors, the actors import this.

Each surface has three parts, kept apart as TigerBeetle keeps its state and storage checkers apart from
its cluster: the world (network, clock, disk), the control plane (control_plane.py: the cluster's shape,
who is live and owns what), and the invariant recorder (invariants.py) the actors report what they saw to.
"""
from __future__ import annotations

from typing import Protocol

from partitions.faulty_storage import FaultyStorage
from proto.planted_bugs import PlantedBug
from txnsim.chaos.history import History
from txnsim.simulate.cluster.control_plane import ControlPlane
from txnsim.simulate.cluster.invariants import InvariantRecorder
from txnsim.simulate.network import Network
from txnsim.simulate.world import World


class ClientCluster(Protocol):
    """What a simulated client (producer, reader, group member, copier, Spark query, RocketMQ producer) sees."""

    network: Network
    control: ControlPlane
    recorder: InvariantRecorder
    #: the Jepsen-style history of what the clients were told (txnsim chaos's checker reads it)
    history: History
    #: the RocketMQ producers' local database: message id -> its transaction's state (it outlives them)
    rmq_local: dict[str, str]


class NodeCluster(Protocol):
    """What a simulated node and its I/O see."""

    network: Network
    world: World
    disk: FaultyStorage
    control: ControlPlane
    recorder: InvariantRecorder
    #: the planted bug the nodes' code is built with (None: the system as shipped)
    planted: PlantedBug | None
    fsync_ms: int
