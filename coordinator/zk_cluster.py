"""What one node of a replicated cluster stands on: its own data directory, and a ZooKeeper session through
which it registers, may be elected controller, learns every partition's leader and ISR, claims producer-id
blocks and creates topics. Nothing is shared with other nodes but the network (the shared-directory cluster
is coordinator/shared_directory.py; coordinator/node.py runs either).

Every log here is a replica (partitions/replica_log.py): the ReplicaManager leads it or follows its leader
as the controller's word says, and the node's coordinators serve the shards of __transaction_state,
__consumer_offsets and the half-message topics whose replicas this node leads. A coordinator's write waits
for the ISR as well as for its own fsync (IsrDurableIO), as Kafka's coordinators write with acks=all.

The cluster's settings are the first node's: it writes them to /txnsim/settings, and every later node takes
them from there (shard counts must agree for keys to hash to the same shard everywhere).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from coordinator.config import NodeConfig
from coordinator.controller.cluster_view import ClusterView, LiveChange
from coordinator.controller.controller import Controller
from coordinator.controller.producer_id_blocks import ProducerIdBlocks, StoreProducerIds
from coordinator.controller.registration import BrokerRegistration
from coordinator.controller.store import Create, NodeExistsError, Znode
from coordinator.controller.store_topics import StoreTopics
from coordinator.controller.topic_admin import TopicAdmin
from coordinator.controller.topic_deletion import ReplicaDeletions
from coordinator.controller.znodes import BrokerInfo, PartitionState
from coordinator.controller.zookeeper_store import ZooKeeperStore
from coordinator.layout import ClusterLayout
from coordinator.node_lock import take_node_lock
from coordinator.replication.isr_writes import IsrWriter
from coordinator.replication.leader_logs import IsrReplication, ReplicatedLeaderLogs
from coordinator.replication.manager import ReplicaManager, ReplicationSettings
from coordinator.runtime.io import Cancellable, Failures, NodeIO, Outcome, wait_for
from coordinator.topics import remove_log_dirs
from partitions import LogConfig, PartitionLog, ReplicaLog
from proto import txnsim_pb2 as pb
from proto.errors import (
    InvalidReplicationFactorError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaError,
    NotLeaderOrFollowerError,
    TopicAlreadyExistsError,
)
from proto.structs import (
    CONSUMER_OFFSETS_TOPIC,
    HALF_MESSAGE_TOPICS,
    HALF_TOPIC,
    INTERNAL_TOPICS,
    TRANSACTION_STATE_TOPIC,
    TopicPartition,
)

log = logging.getLogger(__name__)

TXNSIM_ROOT = "/txnsim"
SETTINGS = f"{TXNSIM_ROOT}/settings"
#: how often a node looks again for shards it leads but has not loaded
RETRY_S = 0.2


def cluster_settings(store: ZooKeeperStore, proposed: NodeConfig) -> tuple[NodeConfig, bool]:
    """The cluster's settings: `proposed` if this node is the first (it writes them), else the stored ones;
    and whether they were this node's."""
    wait_for(lambda done: store.ensure_path(TXNSIM_ROOT, done))
    data = json.dumps(proposed.as_settings(), sort_keys=True).encode()
    outcome = _outcome(lambda done: store.commit([Create(SETTINGS, data)], done))
    if not isinstance(outcome, NodeExistsError | list):
        raise KafkaConfigurationError(f"cannot write the cluster's settings to ZooKeeper: {outcome}")
    if isinstance(outcome, list):
        return proposed, True
    stored = _outcome(lambda done: store.get(SETTINGS, done))
    if not isinstance(stored, Znode):
        raise KafkaConfigurationError(f"cannot read the cluster's settings from ZooKeeper: {stored}")
    known = set(proposed.as_settings())
    settings = {k: v for k, v in json.loads(stored.data).items() if k in known}
    return NodeConfig.from_settings(settings), False


def _outcome(start: Callable[[Callable[[object], None]], None]) -> object:
    """A store call's outcome, errors returned rather than raised."""
    try:
        return wait_for(start)
    except Exception as exc:  # the store's errors are values here; the caller says what failed
        return exc


class ReplicaLogs:
    """This node's replica logs, one directory each under DATA/logs, opened once and kept open."""

    def __init__(self, logs_dir: Path, config: LogConfig, internal_config: LogConfig) -> None:
        self._dir = logs_dir
        #: a data partition's log settings (the internal topics' roll smaller segments)
        self.config = config
        self._internal_config = internal_config
        self._lock = threading.Lock()
        self._logs: dict[TopicPartition, ReplicaLog] = {}

    def log(self, tp: TopicPartition) -> ReplicaLog:
        with self._lock:
            opened = self._logs.get(tp)
            if opened is None:
                config = self._internal_config if tp.topic in INTERNAL_TOPICS else self.config
                opened = self._logs[tp] = ReplicaLog.open(self._dir / f"{tp.topic}-{tp.partition}", tp.topic,
                                                          tp.partition, leader_epoch=0, config=config)
            return opened

    def log_ends(self) -> list[tuple[TopicPartition, int]]:
        """Each replica's log end (leading or following), for the metrics."""
        with self._lock:
            logs = list(self._logs.items())
        return [(tp, replica_log.log_end_offset) for tp, replica_log in logs]

    def delete_topic(self, topic: str) -> list[str]:
        """Close this node's logs of `topic` and remove their directories, those never opened in this life
        too; returns the directories removed."""
        with self._lock:
            doomed = [tp for tp in self._logs if tp.topic == topic]
            closing = [self._logs.pop(tp) for tp in doomed]
        for replica_log in closing:
            replica_log.close()
        return remove_log_dirs(self._dir, topic)

    def close_all(self) -> None:
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
        for replica_log in logs:
            replica_log.close()


class ShardLeaderLogs(ReplicatedLeaderLogs):
    """The logs this node leads, as the coordinators' ShardReconciler asks for them: a leadership ends when the
    controller says so, not when the reconciler lets a shard go, so closing is the manager's business."""

    def close(self, topic: str, partition: int) -> None:
        return None


class StoreOwnership:
    """Who leads each partition, and who lives, as the ClusterView says."""

    def __init__(self, view: ClusterView) -> None:
        self._view = view
        self.placement = self

    @property
    def live(self) -> frozenset[int]:
        return self._view.live

    def owner(self, topic: str, partition: int) -> int:
        return self._view.owner(topic, partition)

    def may_cut_off(self, node_id: int) -> bool:
        return False  # a replica never takes a log over from a shared directory

    def on_change(self, listener: LiveChange) -> None:
        self._view.on_live_change(listener)


class IsrDurableIO:
    """The node's I/O as its coordinators see it: a durable write of a log this node leads is durable once
    every ISR member has it (acks=all), and fails with NOT_LEADER_OR_FOLLOWER once the leadership it was
    written under has ended."""

    def __init__(self, io: NodeIO, manager: ReplicaManager, replication: IsrReplication) -> None:
        self._io = io
        self._manager = manager
        self._replication = replication
        self.node_id = io.node_id

    def now_ms(self) -> int:
        return self._io.now_ms()

    def after(self, delay_ms: int, work: Callable[[], None], label: str) -> Cancellable:
        return self._io.after(delay_ms, work, label)

    def soon(self, work: Callable[[], None], label: str) -> None:
        self._io.soon(work, label)

    def call(self, node_id: int, request: Any, timeout_ms: int, done: Callable[[Outcome], None]) -> None:
        self._io.call(node_id, request, timeout_ms, done)

    def durable(self, ends: Mapping[PartitionLog, int], done: Callable[[Failures], None]) -> None:
        leaderships = {plog: self._manager.leader(TopicPartition(plog.topic, plog.partition)) for plog in ends}

        def synced(failures: Failures) -> None:
            writes = {plog: (end, -1, leaderships[plog]) for plog, end in ends.items() if plog not in failures}
            if not writes:
                done(failures)
                return
            self._replication.replicated(writes, lambda replicated: done({**failures, **replicated}))
        self._io.durable(ends, synced)


class InternalTopics:
    """Creates the cluster's own topics once enough brokers live for their replication factor: every node
    tries, the first creation wins, the others find them there."""

    def __init__(self, config: NodeConfig, admin: TopicAdmin, view: ClusterView, serial: Callable[..., None]) -> None:
        self._admin = admin
        self._view = view
        self._serial = serial
        txn_rf, offsets_rf = config.transaction_state_log_replication_factor, config.offsets_topic_replication_factor
        self._wanted: dict[str, tuple[int, int, dict[str, str]]] = {
            TRANSACTION_STATE_TOPIC: (config.txn_shards, txn_rf,
                                      {"min.insync.replicas": str(min(config.transaction_state_log_min_isr, txn_rf))}),
            CONSUMER_OFFSETS_TOPIC: (config.offsets_shards, offsets_rf, {}),
            **{name: (config.half_shards, offsets_rf,
                      {"min.insync.replicas": str(min(config.transaction_state_log_min_isr, offsets_rf))})
               for name in sorted(HALF_MESSAGE_TOPICS)},
        }
        self._creating: set[str] = set()
        self.names = tuple(self._wanted)
        view.on_live_change(lambda _old, _new: serial(self.create_missing))

    def create_missing(self) -> None:
        live = len(self._view.live)
        for name, (partitions, factor, configs) in self._wanted.items():
            if self._view.partitions(name) is not None or name in self._creating or live < factor:
                continue
            self._creating.add(name)
            self._admin.create(name, partitions, factor, configs, functools.partial(self._answered, name),
                               internal=True, placed_as=HALF_TOPIC if name in HALF_MESSAGE_TOPICS else None)

    def _answered(self, name: str, outcome: object) -> None:
        self._serial(lambda: self._created(name, outcome))

    def _created(self, name: str, outcome: object) -> None:
        self._creating.discard(name)
        if isinstance(outcome, KafkaError) and not isinstance(outcome, TopicAlreadyExistsError | InvalidReplicationFactorError):
            log.warning("could not create %s yet (%s); trying again when the brokers change", name, outcome)
        elif not isinstance(outcome, KafkaError):
            log.info("created %s: %d partitions, %d replicas each", name, len(outcome) if isinstance(outcome, dict) else 0,
                     self._wanted[name][1])


class ZooKeeperCluster:
    """A node's part of a replicated cluster. Built in two steps: the store and the cluster's settings first
    (the node's I/O is made from them), then `attach(io)` the replication that runs on that I/O."""

    def __init__(self, *, node_id: int, address: str, kafka_address: str | None, data_dir: Path, zookeeper: str,
                 proposed: NodeConfig) -> None:
        self.node_id = node_id
        self.address = address
        self.kafka_address = kafka_address
        self.data_dir = data_dir
        own = ClusterLayout(data_dir)
        own.nodes.mkdir(parents=True, exist_ok=True)
        # where a shared-directory node keeps its lock, so `node_is_alive` reads both alike
        self._lock_fd = take_node_lock(own.node_lock(node_id), f"a node already runs on {data_dir}")
        self.store = ZooKeeperStore(zookeeper, session_timeout_ms=proposed.zookeeper_session_timeout_ms)
        self.config, first = cluster_settings(self.store, proposed)
        if not first and self.config != proposed:
            log.info("this node takes the cluster's settings from %s (the first node's), not its own", SETTINGS)
        self._events = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"node{node_id}-zookeeper")
        self.view = ClusterView(node_id, self.store, self._serial, on_state=self._on_state,
                                on_session_expired=self._session_expired)
        self.ownership = StoreOwnership(self.view)
        self.admin = TopicAdmin(self.store)
        self.topics = StoreTopics(self.view, self.admin)
        self.allocator = StoreProducerIds(ProducerIdBlocks(self.store, node_id, self.config.producer_id_block_size))
        self.replicas = ReplicaLogs(
            data_dir / "logs",
            LogConfig(segment_bytes=self.config.log_segment_bytes, message_max_bytes=self.config.message_max_bytes),
            LogConfig(segment_bytes=self.config.internal_log_segment_bytes,
                      message_max_bytes=self.config.message_max_bytes))
        self.manager: ReplicaManager | None = None
        self._internal = InternalTopics(self.config, self.admin, self.view, self._serial)
        self.deletions = ReplicaDeletions(node_id, self.store, self._serial, delete=self._delete_replicas)
        #: states that came before attach(), applied by it
        self._early: list[tuple[TopicPartition, tuple[int, ...], PartitionState, int]] = []
        self._state_listeners: list[Callable[[TopicPartition], None]] = []
        self._stopped = threading.Event()
        self._tick: Callable[[], None] = lambda: None

    def _serial(self, work: Callable[[], None]) -> None:
        try:
            self._events.submit(self._run, work)
        except RuntimeError:
            pass  # stopping: the store's late answers reach nobody

    @staticmethod
    def _run(work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:  # one bad answer must not stop every later one
            log.exception("handling a ZooKeeper answer failed")

    # ------------------------------------------------------------ addresses

    def address_of(self, node_id: int) -> str:
        if node_id == self.node_id:
            return self.address
        try:
            return self.view.address_of(node_id)
        except KeyError:
            raise KafkaConnectionError(f"node {node_id} is not registered in ZooKeeper") from None

    def kafka_address_of(self, node_id: int) -> str | None:
        return self.kafka_address if node_id == self.node_id else self.view.kafka_address_of(node_id)

    def node_addresses(self) -> dict[int, str]:
        return {**{b: info.address for b, info in self.view.brokers().items()}, self.node_id: self.address}

    # ------------------------------------------------------------ replication

    def attach(self, io: NodeIO) -> None:
        self.manager = ReplicaManager(io, IsrWriter(self.store), ReplicationSettings(
            min_insync_replicas=self.config.min_insync_replicas, max_lag_ms=self.config.replica_lag_time_max_ms))
        self.leader_logs = ShardLeaderLogs(self.manager, self.replicas.config)
        self.replication = IsrReplication(self.manager)
        self.coordinator_io = IsrDurableIO(io, self.manager, self.replication)

    def on_state(self, listener: Callable[[TopicPartition], None]) -> None:
        """Told each partition whose controller's word this node has applied."""
        self._state_listeners.append(listener)

    def start(self, tick: Callable[[], None]) -> None:
        """Register, stand for controller, read and watch the cluster; `tick` every RETRY_S (a shard whose
        leadership came before its log could be loaded is taken then); as the controller, hand partitions
        back to their preferred leaders every leader_imbalance_check_interval_seconds."""
        self._tick = tick
        BrokerRegistration(BrokerInfo(self.node_id, self.address, self.kafka_address or ""), self.store,
                           self._serial).start()
        self.controller = Controller(self.node_id, self.store, self._serial, now_ms=lambda: 0,
                                     unclean_leader_election=self.config.unclean_leader_election_enable)
        self.controller.start()
        threading.Thread(target=self._ticks, name="reconcile-retry", daemon=True).start()
        self.view.start()
        self.deletions.start()
        self._serial(self._internal.create_missing)

    def _ticks(self) -> None:
        rebalance_every_s = self.config.leader_imbalance_check_interval_seconds
        next_rebalance = time.monotonic() + rebalance_every_s
        while not self._stopped.wait(RETRY_S):
            self._tick()
            if self.config.auto_leader_rebalance_enable and time.monotonic() >= next_rebalance:
                next_rebalance = time.monotonic() + rebalance_every_s
                self._serial(self.controller.rebalance_leaders)

    def stop_watching(self) -> None:
        self._stopped.set()

    def _on_state(self, tp: TopicPartition, replicas: tuple[int, ...], state: PartitionState, version: int) -> None:
        manager = self.manager
        assert manager is not None, "the view starts after attach()"
        if tp.topic in self.deletions.marked:
            return  # being deleted: its replica here is gone or about to go, and must not come back
        default, view = self.config.min_insync_replicas, self.view

        def required() -> int:  # the topic's setting as it is now: a change applies to writes after it
            return int(view.configs(tp.topic).get("min.insync.replicas", default))
        manager.apply(tp, self.replicas.log(tp), state, version, replicas, min_insync_replicas=required)
        for listener in self._state_listeners:
            listener(tp)

    def _delete_replicas(self, topic: str) -> None:
        """Topic deletion, this node's part: stop every replica of `topic` here and remove its logs."""
        manager = self.manager
        assert manager is not None, "deletions start after attach()"
        for tp, _end in self.replicas.log_ends():
            if tp.topic == topic:
                manager.stop(tp)
        removed = self.replicas.delete_topic(topic)
        log.info("node %d: deleted its replicas of topic %s (%s)", self.node_id, topic, ", ".join(removed) or "none")

    def _session_expired(self) -> None:
        if self.manager is not None:
            self.manager.resign_all()

    def ready(self) -> bool:
        """Whether the cluster's own topics exist and every partition of them has a leader (till then no
        coordinator can be found)."""
        view = self.view
        return all((count := view.partitions(name)) is not None and all(view.owner(name, p) >= 0 for p in range(count))
                   for name in self._internal.names)

    def replica_fetch(self, request: pb.ReplicaFetchRequest, done: Callable[[Outcome], None]) -> None:
        manager = self.manager
        if manager is None:
            done(NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] node {self.node_id} is starting"))
            return
        manager.handle_fetch(request, done)

    def replica_log_ends(self) -> list[tuple[TopicPartition, int]]:
        """(partition, log end) of every replica this node holds."""
        return self.replicas.log_ends()

    def follower_lags(self) -> list[tuple[TopicPartition, int, int]]:
        """(partition, follower, records it has yet to fetch) for every follower of a partition this node leads."""
        if self.manager is None:
            return []
        return [(leader.tp, follower, lag) for leader in self.manager.leaders()
                for follower, lag in sorted(leader.follower_lags().items())]

    def partition_info(self, topic: str, partition: int) -> tuple[int, list[int], list[int], list[int]]:
        """(leader epoch, replicas, ISR, offline replicas) as Metadata answers them."""
        state = self.view.state(topic, partition)
        replicas = list(self.view.replicas(topic, partition))
        live = self.view.live
        return (state.leader_epoch if state is not None else -1, replicas,
                list(state.isr) if state is not None else [], [r for r in replicas if r not in live])

    def stop(self) -> None:
        if self.manager is not None:
            self.manager.close()
        self.store.close()
        self._events.shutdown(wait=True, cancel_futures=True)
        self.replicas.close_all()
        os.close(self._lock_fd)
