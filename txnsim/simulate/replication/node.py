"""One broker of the replication model: what a replicated node runs, all of it shipping code, wired onto the
engine's I/O (txnsim/simulate/engine_io.py) and the simulator's ZooKeeper (txnsim/simulate/coordination.py):
registration, the controller's driver, the partition-state watch, the ReplicaManager with its ReplicaLogs,
and the partition leader's service that answers produce requests.

A crash loses the node's memory and what its disk had not fsynced (its session with the store is left to
expire); a restart is a new incarnation built from the disk, with a new session. The store is reached over
the link to the "zk" actor, so a partition fault can cut a broker off from it.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import Protocol

from coordinator.controller.controller import Controller
from coordinator.controller.registration import BrokerRegistration
from coordinator.controller.znodes import BrokerInfo, PartitionState
from coordinator.partition_service import PartitionServer
from coordinator.replication.isr_writes import IsrWriter
from coordinator.replication.leader_logs import IsrReplication, Leadership, ReplicatedLeaderLogs
from coordinator.replication.manager import ReplicaManager, ReplicationSettings
from coordinator.replication.state_watch import PartitionStateWatch
from partitions import LogConfig, ReplicaLog
from partitions.memory_storage import MemoryStorage
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, code_of
from proto.planted_bugs import PlantedBug
from proto.structs import TopicPartition
from txnsim.simulate.coordination import SimStore, ZnodeTree
from txnsim.simulate.engine_io import EngineIO
from txnsim.simulate.network import Envelope, Network
from txnsim.simulate.world import World

ZK = "zk"
#: ZooKeeper's answers take this long to reach a broker
ZK_LATENCY_MS = 1
FSYNC_MS = 1
#: how often the controller hands partitions back to their preferred leaders (the nodes'
#: leader_imbalance_check_interval_seconds, scaled to the simulated run)
REBALANCE_MS = 2_000
LOG_CONFIG = LogConfig(segment_bytes=16 * 1024)


class Topics:
    """The model's one topic, as the partition leader's service asks for it."""

    def __init__(self, topic: str, partitions: int) -> None:
        self._topic, self._partitions = topic, partitions

    def partitions(self, topic: str) -> int | None:
        return self._partitions if topic == self._topic else None

    def configs(self, topic: str) -> dict[str, str]:
        return {}

    def configs_view(self, topic: str) -> dict[str, str]:
        return {}


def no_transactions(tid: str, pid: int, epoch: int, tps: list[TopicPartition], add: bool,
                    done: Callable[[dict[TopicPartition, int]], None]) -> None:
    done({tp: 0 for tp in tps})  # the model's producers are idempotent, not transactional


class BrokerWorld(Protocol):
    """What a broker needs of the model that runs it (txnsim/simulate/replication/model.py)."""

    world: World
    network: Network
    tree: ZnodeTree
    disk: MemoryStorage
    topic: str
    partitions: int
    planted: PlantedBug | None
    replication_settings: ReplicationSettings
    session_ms: int

    def saw_state(self, node: ReplicaNode, tp: TopicPartition, state: PartitionState) -> None: ...


class ReplicaNode:
    def __init__(self, model: BrokerWorld, node_id: int) -> None:
        self.model = model
        self.node_id = node_id
        self.name = f"n{node_id}"
        self.root = PurePath(f"/{self.name}")
        self.io = EngineIO(self.name, node_id, model.network, lambda: FSYNC_MS)
        self.logs: dict[TopicPartition, ReplicaLog] = {}
        self._start()

    def _start(self) -> None:
        """A new incarnation: a new session with the store, every driver new, the logs opened from the disk."""
        model, net = self.model, self.model.network
        self.logs = {}
        # the store's clock is the server's (the world's), whatever this broker's says
        life = self._life = object()
        self.store = SimStore(model.tree, timeout_ms=model.session_ms, now_ms=lambda: model.world.now_ms,
                              deliver=lambda work: self._from_store(life, work), reachable=self._reaches_store)
        self.manager = ReplicaManager(self.io, IsrWriter(self.store), model.replication_settings)
        self.server = PartitionServer(
            io=self.io, logs=ReplicatedLeaderLogs(self.manager, LOG_CONFIG), membership=Leadership(self.manager),
            topics=Topics(model.topic, model.partitions), offsets_shards=1, txn_shards=1, verify=no_transactions,
            on_offsets_marker=lambda *_marker: None, replication=IsrReplication(self.manager))
        serial: Callable[[Callable[[], None]], None] = lambda work: work()  # each answer is an event of its own
        self.controller = Controller(self.node_id, self.store, serial, now_ms=lambda: net.now(self.name),
                                     unclean_leader_election=model.planted is PlantedBug.UNCLEAN_ELECTION)
        BrokerRegistration(BrokerInfo(self.node_id, f"{self.name}:9092"), self.store, serial).start()
        PartitionStateWatch(self.node_id, self.store, serial, on_state=self._on_state,
                            on_session_expired=self.manager.resign_all).start()
        self.controller.start()
        self._heartbeat()
        self.io.after(REBALANCE_MS, self._rebalance, "leader rebalance")

    def _from_store(self, life: object, work: Callable[[], None]) -> None:
        """A store answer or watch event reaches this broker a moment later, as its own event; one for a
        session of an earlier life (a crash shorter than the session) reaches nobody."""
        if life is self._life:
            self.model.network.set_timer(self.name, ZK_LATENCY_MS, work, label="zk answer")

    def _reaches_store(self) -> bool:
        """Over the link to the store (a paused broker's connection stays up: its events wait in its queue)."""
        net = self.model.network
        return not net.is_cut(self.name, ZK) and not net.is_cut(ZK, self.name)

    def _rebalance(self) -> None:
        self.controller.rebalance_leaders()
        self.io.after(REBALANCE_MS, self._rebalance, "leader rebalance")

    def _heartbeat(self) -> None:
        self.store.heartbeat()
        self.io.after(self.model.session_ms // 3, self._heartbeat, "zk heartbeat")

    def _on_state(self, tp: TopicPartition, replicas: tuple[int, ...], state: PartitionState, version: int) -> None:
        self.model.saw_state(self, tp, state)
        self.manager.apply(tp, self.log(tp), state, version, replicas)

    def log(self, tp: TopicPartition) -> ReplicaLog:
        if tp not in self.logs:
            self.logs[tp] = ReplicaLog.open(self.root / str(tp), tp.topic, tp.partition,  # type: ignore[arg-type]
                                            leader_epoch=0, config=LOG_CONFIG, storage=self.model.disk)
        return self.logs[tp]

    # ------------------------------------------------------------ requests

    def handle(self, env: Envelope) -> None:
        message, net = env.message, self.model.network
        if isinstance(message, pb.ReplicaFetchRequest):
            self.manager.handle_fetch(message, lambda response: net.reply(env, response))
        elif isinstance(message, pb.ProduceRequest):
            def produced(outcome: object) -> None:
                if isinstance(outcome, KafkaError):
                    outcome = pb.ProduceResponse(error_code=code_of(outcome), error_message=outcome.message)
                net.reply(env, outcome)
            self.server.produce_async(message, produced)

    # ------------------------------------------------------------ faults

    def crash(self) -> None:
        """Memory gone (the engine already dropped this incarnation's timers and calls), unsynced writes lost."""
        self.manager.close()
        self.model.disk.crash(under=[self.root])
        self.logs = {}

    def restart(self) -> None:
        self._start()
