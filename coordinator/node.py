"""One txnsim node process: serves gRPC on its address from cluster.json until told to stop.

Start-up: take the node lock (a second instance of the same id is refused), start serving,
then reconcile. Reconciling, repeated after every membership probe, makes what this node has
open match what the placement says it owns: it releases logs and shards that moved away
(closing a log waits until its writes are durable, then drops its owner lock), and takes the
ones that moved here once their previous owner released them or died: open with a bumped
leader epoch, replay, then finish transactions left in Prepare*.
Run: python -m coordinator.node --data-dir DIR --node-id N
"""
from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from client.transport import SERVER_OPTIONS, NodeChannels
from coordinator.broker_configs import BrokerConfigStore
from coordinator.cluster_service import ClusterServer, ClusterServicer
from coordinator.config import NodeConfig
from coordinator.controller.store import StoreError
from coordinator.group import GroupCoordinator, GroupService
from coordinator.group.membership import join_request, join_response, sync_response
from coordinator.grpc_server import PEER_USER_AGENT, NodeGrpcServer
from coordinator.kafka.front_door import KafkaBackends, open_kafka_listener
from coordinator.kafka.server import KafkaListener, ListenerLimits
from coordinator.later import then
from coordinator.layout import ClusterLayout
from coordinator.local_calls import serve_locally
from coordinator.metrics import NodeMetrics, NodeState, write_metrics_url
from coordinator.ownership_log import OwnershipLog
from coordinator.partition_service import PartitionServer, PartitionsServicer
from coordinator.reconcile import ShardCounts, ShardReconciler
from coordinator.rocketmq.coordinator import HalfMessageCoordinator
from coordinator.rocketmq.front_door import MessagingFrontDoor
from coordinator.rocketmq.pop_service import PopService
from coordinator.rocketmq.producers import ProducerRegistry
from coordinator.rocketmq.rmq_wire import rmq_service
from coordinator.rocketmq.routing import OwnerRouter
from coordinator.rocketmq.service import HalfMessagesServicer
from coordinator.rpc import answer
from coordinator.runtime.io import as_future
from coordinator.runtime.real_io import RealIO
from coordinator.shared_directory import SharedDirectory
from coordinator.txn.coordinator import TransactionCoordinator
from coordinator.txn.markers import MarkerWriter
from coordinator.txn.service import TransactionServicer
from coordinator.verification import TransactionVerifier
from coordinator.zk_cluster import ZooKeeperCluster
from partitions import LogManager, PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import (
    KafkaConfigurationError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
)
from proto.structs import (
    CONSUMER_OFFSETS_TOPIC,
    HALF_TOPIC,
    TRANSACTION_STATE_TOPIC,
)

log = logging.getLogger("txnsim.node")
#: threads serving RPCs; idle ones cost nothing but a little memory
#: clients' calls running at once, and other nodes' (a call that waits or streams takes no slot)
RPC_SLOTS = 64
PEER_RPC_SLOTS = 32
#: calls in progress at once, waiting ones included (each parks a thread); past it: RESOURCE_EXHAUSTED
MAX_RPC_CALLS = 4096


def now_ms() -> int:
    return int(time.time() * 1000)


class Node:
    def __init__(self, cluster: SharedDirectory | ZooKeeperCluster, layout: ClusterLayout,
                 metrics_port: int = 0, metrics_host: str = "127.0.0.1") -> None:
        """`cluster`: what the node stands on (one shared data directory, or its own and ZooKeeper);
        `layout`: where its own files go (metrics URL, ownership history, broker settings); `metrics_host`:
        the address /metrics is served on (a node on a host of its own serves it where it listens)."""
        self.cluster = cluster
        self.layout = layout
        self.node_id = node_id = cluster.node_id
        #: where /metrics is served (port 0: a free one, chosen at start)
        self.metrics_host, self.metrics_port = metrics_host, metrics_port
        self.metrics = NodeMetrics()
        self.metrics_url: str | None = None
        self.config = cluster.config
        self.address = cluster.address
        layout.make_dirs()
        self.membership = cluster.ownership
        self.ownership_log = OwnershipLog(layout.metadata)
        self._reconcile_lock = threading.Lock()
        self.topics = cluster.topics
        self.channels = NodeChannels(user_agent=PEER_USER_AGENT)
        #: the node's world: clock, timers, pool, fsync, calls to peers (the simulator has its own)
        self.io = RealIO(node_id, address_of=cluster.address_of, channels=self.channels)
        self.io.serve_locally(self._serve_locally)
        cluster.attach(self.io)
        self.logs = cluster.leader_logs
        #: the coordinators' I/O: on a replicated cluster their writes wait for the ISR too
        coordinator_io = cluster.coordinator_io
        self.stopped = threading.Event()
        self._ready = threading.Event()
        #: KIP-890's first-write check, asked of the transaction's coordinator (or a half shard's owner)
        self.verifier = TransactionVerifier(io=self.io, owner_of=self.membership.owner, txn_shards=self.config.txn_shards)
        self.partitions = PartitionServer(
            io=self.io, logs=self.logs, membership=self.membership, topics=self.topics,
            offsets_shards=self.config.offsets_shards, txn_shards=self.config.txn_shards,
            half_shards=self.config.half_shards,
            verify=self.verifier.verify, on_offsets_marker=self._on_offsets_marker, observer=self.metrics,
            replication=cluster.replication)
        self.markers = MarkerWriter(io=self.io, owner_of=lambda tp: self.membership.owner(tp.topic, tp.partition),
                                    observer=self.metrics)
        #: runs a call on the owner of a log, in process or over gRPC (the half shards and the RocketMQ front door)
        self.router = OwnerRouter(node_id=node_id, membership=self.membership, channels=self.channels,
                                  address_of=cluster.address_of)
        self.allocator = cluster.allocator
        self.producers = ProducerRegistry()
        self.half = HalfMessageCoordinator(
            io=coordinator_io, half_shards=self.config.half_shards,
            check_interval_ms=self.config.transaction_check_interval_ms,
            check_max=self.config.transaction_check_max, half_message_timeout_ms=self.config.half_message_timeout_ms,
            default_storage=self.config.half_message_storage, allocate_producer_id=self.allocator.allocate,
            topics=self.topics, owner_of=self.membership.owner, markers=self.markers, producers=self.producers,
            peers=lambda: sorted(self.membership.live), message_max_bytes=self.config.message_max_bytes,
            observer=self.metrics)
        self.txn = TransactionCoordinator(
            io=coordinator_io, txn_shards=self.config.txn_shards, offsets_shards=self.config.offsets_shards,
            transaction_max_timeout_ms=self.config.transaction_max_timeout_ms,
            transactional_id_expiration_ms=self.config.transactional_id_expiration_ms,
            allocator=self.allocator,
            markers=self.markers, partitions_for=self.partitions.partition_count,
            snapshot_interval_records=self.config.transaction_state_snapshot_interval_records,
            assigned_here=lambda shard: self.membership.owner(TRANSACTION_STATE_TOPIC, shard) == node_id,
            observer=self.metrics)
        self.groups = GroupCoordinator(
            self.config.offsets_shards, io=coordinator_io,
            min_session_timeout_ms=self.config.group_min_session_timeout_ms,
            max_session_timeout_ms=self.config.group_max_session_timeout_ms,
            partitions_for=self.partitions.partition_count,
            snapshot_interval_records=self.config.offsets_snapshot_interval_records,
            initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms, observer=self.metrics,
            add_to_transaction=self.verifier.verify)
        if isinstance(cluster, ZooKeeperCluster):  # a deleted topic's committed offsets go with it, where led here
            # (off the store's thread: the tombstones wait for the ISR, whose changes are answered there)
            def forget_offsets(topic: str) -> None:
                def forget() -> None:
                    self.groups.delete_topic_offsets(topic)
                self.io.soon(forget, f"offsets of deleted topic {topic}")
            cluster.view.on_topic_gone(forget_offsets)
        self.metrics.watch(NodeState(open_transactions=self.txn.open_transactions, open_logs=self.logs.open_logs,
                                     undecided_half_messages=self.half.undecided_count,
                                     follower_lags=self.cluster.follower_lags,
                                     replica_log_ends=self.cluster.replica_log_ends))
        #: which coordinator shards this node serves, kept in line with the placement
        replicated = isinstance(cluster, ZooKeeperCluster)
        self.shards = ShardReconciler(
            node_id=node_id, logs=self.logs, owner_of=self.membership.owner,
            counts=ShardCounts(self.config.txn_shards, self.config.offsets_shards, self.config.half_shards),
            txn=self.txn, groups=self.groups, half=self.half, acquire=self._acquire, released=self._released,
            loaded=self._led_shard_loaded if replicated else None,
            unloaded=self._led_shard_unloaded if replicated else None)
        self._server: NodeGrpcServer | None = None
        self._kafka: KafkaListener | None = None

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        # metrics first: the URL is on disk before the node answers, so whoever waited for it finds it
        self.metrics_url = self.metrics.serve(self.metrics_host, self.metrics_port)
        write_metrics_url(self.layout.nodes, self.node_id, self.metrics_url)
        # running calls take worker slots (other nodes' their own); waiting calls and streams hold none
        # (coordinator/grpc_server.py)
        server = NodeGrpcServer(f"node{self.node_id}", client_slots=RPC_SLOTS, peer_slots=PEER_RPC_SLOTS,
                                max_calls=MAX_RPC_CALLS, options=SERVER_OPTIONS)
        cluster = ClusterServer(
            node_id=self.node_id, nodes=self.cluster.node_addresses, config=self.config, membership=self.membership,
            ownership_log=self.ownership_log, topics=self.topics, owned_logs=self._owned_logs,
            ready=self._ready.is_set, logs=self.logs if isinstance(self.logs, LogManager) else None,
            peer_stubs=lambda n: self.channels.stubs(self.cluster.address_of(n)),
            delete_topic_offsets=self.groups.delete_topic_offsets, partition_info=self.cluster.partition_info)
        services = pb.DESCRIPTOR.services_by_name
        server.add(services["Cluster"], ClusterServicer(cluster))
        slots = server.slots
        partitions, groups = self.partitions, self.groups
        replica_fetch = self.cluster.replica_fetch
        waiting = {"Fetch": lambda request, context: answer(
            lambda req: slots.wait_outside(context, lambda: partitions.fetch_future(req)), request, pb.FetchResponse)}
        if replica_fetch is not None:  # a follower's fetch waits up to its max wait for news, holding no slot
            waiting["ReplicaFetch"] = lambda request, context: answer(
                lambda req: slots.wait_outside(context, lambda: as_future(lambda done: replica_fetch(req, done))),
                request, pb.ReplicaFetchResponse)
        server.add(services["Partitions"], PartitionsServicer(self.partitions, replica_fetch=replica_fetch),
                   waiting=waiting)
        server.add(services["TransactionCoordinator"], TransactionServicer(self.txn, self.node_id))
        server.add(services["GroupCoordinator"], GroupService(self.groups),
                   waiting={"JoinGroup": lambda request, context: answer(
                                lambda req: slots.wait_outside(context, lambda: then(
                                    groups.join_future(req.group_id, join_request(req)), join_response)),
                                request, pb.JoinGroupResponse),
                            "SyncGroup": lambda request, context: answer(
                                lambda req: slots.wait_outside(context, lambda: then(
                                    groups.sync_future(req.group_id, req.member_id, req.group_instance_id or None,
                                                       req.generation_id, req.protocol_type or None,
                                                       req.protocol_name or None,
                                                       {a.member_id: a.assignment for a in req.assignments}),
                                    lambda outcome: sync_response(req.group_id, outcome))),
                                request, pb.SyncGroupResponse)})
        server.add(services["HalfMessages"], HalfMessagesServicer(self.half, self.producers, self.stopped),
                   streams=frozenset({"CheckBack"}))
        # RocketMQ 5's front door, on the same port: the official clients reach the same logic
        pop = PopService(partitions=self.partitions, groups=self.groups, router=self.router,
                         offsets_shards=self.config.offsets_shards, now_ms=now_ms, stopped=self.stopped)
        server.add(rmq_service.DESCRIPTOR.services_by_name["MessagingService"], MessagingFrontDoor(
            node_id=self.node_id, address_of=self.cluster.address_of, membership=self.membership,
            topics=self.topics, partitions=self.partitions, half=self.half, producers=self.producers,
            router=self.router, half_shards=self.config.half_shards,
            message_max_bytes=self.config.message_max_bytes, stopped=self.stopped, now_ms=now_ms, pop=pop),
            streams=frozenset({"Telemetry", "ReceiveMessage"}))
        self._server = server
        if server.start(self.address) == 0:
            raise KafkaConfigurationError(f"node {self.node_id} cannot listen on {self.address}")
        kafka_address = self.cluster.kafka_address
        if kafka_address is not None:  # Kafka's wire protocol, a second front door to the same objects
            try:
                limits = ListenerLimits(
                    max_connections=self.config.max_connections,
                    max_connections_per_ip=self.config.max_connections_per_ip,
                    connections_max_idle_ms=self.config.connections_max_idle_ms,
                    request_arrival_timeout_ms=self.config.request_arrival_timeout_ms,
                    socket_request_max_bytes=self.config.socket_request_max_bytes,
                    queued_max_request_bytes=self.config.queued_max_request_bytes)
                self._kafka = open_kafka_listener(kafka_address, limits=limits, backends=KafkaBackends(
                        node_id=self.node_id, cluster=cluster, partitions=self.partitions, txn=self.txn,
                        groups=self.groups, topics=self.topics, kafka_address_of=self.cluster.kafka_address_of,
                        config=self.config, broker_configs=BrokerConfigStore(self.layout.metadata)))
            except OSError as exc:
                raise KafkaConfigurationError(
                    f"node {self.node_id} cannot listen for Kafka clients on {kafka_address}: {exc.strerror}") from None
        self.membership.on_change(lambda old, new: self.reconcile(f"live nodes {sorted(old)} -> {sorted(new)}"))
        self.reconcile("start-up")
        self.cluster.start(self._tick)
        threading.Thread(target=self._retention_loop, name="retention", daemon=True).start()
        threading.Thread(target=self._run_timers, name="timers", daemon=True).start()
        log.info("node %d serving on %s (Kafka: %s, metrics: %s)", self.node_id, self.address,
                 kafka_address or "no listener", self.metrics_url)

    # ------------------------------------------------------------ ownership

    def _tick(self) -> None:
        """After every probe: drop logs a later leader fenced us out of or that moved away (a data
        partition opened by a request that raced a membership change), and retry taking what we
        own but could not open yet (its leader was still letting go)."""
        if isinstance(self.cluster, ZooKeeperCluster):  # leaderships come and go with the controller's word
            self.reconcile("leaders changed")
            return
        open_logs = self.logs.open_logs()
        if any(shard_log.fenced for shard_log in open_logs):
            self.reconcile("fenced by a later leader")
        elif any(self.membership.owner(shard_log.topic, shard_log.partition) != self.node_id for shard_log in open_logs):
            self.reconcile("opened while it moved away")
        elif not self._ready.is_set():
            self.reconcile("retry")

    def reconcile(self, reason: str) -> None:
        """Release what moved away, then take what moved here; ready once everything owned is loaded."""
        with self._reconcile_lock:
            if self.stopped.is_set():
                return
            missing = self.shards.run(reason)
            if missing == 0 and not self._ready.is_set() and self.cluster.ready():
                self._ready.set()
                log.info("node %d owns %d transaction shards, %d group shards and %d half-message shards",
                         self.node_id, len(self.shards.held(TRANSACTION_STATE_TOPIC)),
                         len(self.shards.held(CONSUMER_OFFSETS_TOPIC)), len(self.shards.held(HALF_TOPIC)))
            elif missing:
                self._ready.clear()

    def _released(self, shard_log: PartitionLog, action: str, reason: str) -> None:
        topic, partition = shard_log.topic, shard_log.partition
        self.ownership_log.record(self.node_id, action, topic, partition, shard_log.leader_epoch, reason)
        self.metrics.ownership_changed(action, topic, partition, shard_log.leader_epoch)
        log.log(logging.WARNING if action == "fenced" else logging.INFO, "%s %s-%d (%s)", action, topic, partition,
                reason)

    def _led_shard_loaded(self, topic: str, shard: int, what: str, leader_epoch: int) -> None:
        """A replicated cluster's shard loaded here because this node leads its log (the history
        `txnsim cluster status` shows, as acquire records it on one data directory)."""
        self.ownership_log.record(self.node_id, "acquired", topic, shard, leader_epoch, f"leads it: {what}")
        self.metrics.ownership_changed("acquired", topic, shard, leader_epoch)

    def _led_shard_unloaded(self, topic: str, shard: int, leader_epoch: int) -> None:
        self.ownership_log.record(self.node_id, "released", topic, shard, leader_epoch, "no longer leads it")
        self.metrics.ownership_changed("released", topic, shard, leader_epoch)

    def _acquire(self, topic: str, partition: int, reason: str) -> PartitionLog | None:
        try:
            shard_log = self.logs.open_as_leader(topic, partition, self.membership.may_cut_off)
        except NotLeaderOrFollowerError:
            return None  # the previous owner is still closing it; the next tick retries
        except KafkaStorageError:
            return None  # its files are damaged (logged once, at error level); it stays unloaded
        self.ownership_log.record(self.node_id, "acquired", topic, partition, shard_log.leader_epoch, reason)
        self.metrics.ownership_changed("acquired", topic, partition, shard_log.leader_epoch)
        return shard_log

    def _retention_loop(self) -> None:
        """Every log.retention.check.interval.ms: delete the sealed segments retention lets go (retention.ms,
        retention.bytes) of the data logs this node leads."""
        interval_s = self.config.log_retention_check_interval_ms / 1000
        while not self.stopped.wait(interval_s):
            try:
                for topic, partition, deleted in self.partitions.apply_retention(now_ms(), self.config.log_retention_ms):
                    log.info("retention deleted %d segments of %s-%d", deleted, topic, partition)
            except Exception:  # a bug must not stop retention for good; the next pass tries again
                log.exception("retention pass failed")

    def stop(self) -> None:
        self.stopped.set()
        self.cluster.stop_watching()
        # before the servers stop, so the answers still reach their clients: long-polling fetches, calls held
        # for the previous markers and JoinGroups held at a barrier answer now instead of holding up the exit
        self.partitions.close()
        self.txn.close()
        self.groups.close()
        if self._kafka is not None:
            self._kafka.stop()
        if self._server is not None:
            self._server.stop(0.5)
        self.markers.close()
        self.half.close()
        self.io.close()
        self.cluster.stop()
        self.channels.close()
        self.metrics.stop()

    def _owned_logs(self) -> list[tuple[str, int, int]]:
        return [(log_.topic, log_.partition, log_.leader_epoch) for log_ in self.logs.open_logs()]

    # ------------------------------------------------------------ cross-component calls

    def _serve_locally(self, request: Any, done: Callable[[Any], None]) -> None:
        serve_locally(request, done, node_id=self.node_id, partitions=self.partitions, txn=self.txn, half=self.half)

    def _on_offsets_marker(self, shard: int, producer_id: int, committed: bool, marker_offset: int) -> None:
        self.groups.complete_transaction(shard, producer_id, committed, marker_offset=marker_offset)

    def _run_timers(self) -> None:
        """Periodic work: timed-out transactions, expired ids, expired group members."""
        tasks = [
            (self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms, self.txn.abort_timed_out_transactions),
            (self.config.transaction_remove_expired_transaction_cleanup_interval_ms, self.txn.expire_transactional_ids),
            (min(1000, self.config.group_min_session_timeout_ms // 2 or 1), self.groups.expire_members),
        ]
        due = [time.monotonic() + interval / 1000 for interval, _ in tasks]
        while not self.stopped.is_set():
            now = time.monotonic()
            for i, (interval, task) in enumerate(tasks):
                if now >= due[i]:
                    try:
                        task()
                    except Exception:
                        log.exception("periodic task %s failed", getattr(task, "__name__", task))
                    due[i] = time.monotonic() + interval / 1000
            self.stopped.wait(max(0.0, min(due) - time.monotonic()))


def _watch_stdin(stop: threading.Event) -> None:
    """The parent holds our stdin open; EOF means it is gone, and so must we be."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """NAME=VALUE pairs as NodeConfig takes them: integers, true/false, or text."""
    settings: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise KafkaConfigurationError(f"--setting takes NAME=VALUE, not {pair!r}")
        settings[name.strip()] = (int(value) if value.lstrip("-").isdigit()
                                  else value == "true" if value in ("true", "false") else value)
    return settings


def _cluster_of(args: argparse.Namespace) -> tuple[SharedDirectory | ZooKeeperCluster, ClusterLayout]:
    layout = ClusterLayout(args.data_dir)
    if args.zookeeper is None:
        return SharedDirectory(layout, args.node_id), layout
    if not args.listen:
        raise KafkaConfigurationError("--zookeeper needs --listen HOST:PORT, the address other nodes reach this one at")
    proposed = NodeConfig.from_settings(parse_settings(args.setting))
    return ZooKeeperCluster(node_id=args.node_id, address=args.listen, kafka_address=args.kafka_listen,
                            data_dir=args.data_dir, zookeeper=args.zookeeper, proposed=proposed), layout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coordinator.node", description=__doc__)
    parser.add_argument("--data-dir", required=True, type=Path,
                        help="the cluster's shared directory (cluster.json), or with --zookeeper this node's own")
    parser.add_argument("--node-id", required=True, type=int)
    parser.add_argument("--zookeeper", metavar="HOST:PORT[,HOST:PORT][/CHROOT]",
                        help="run as a node of a replicated cluster whose controller keeps its state in this ZooKeeper")
    parser.add_argument("--listen", metavar="HOST:PORT", help="with --zookeeper: this node's gRPC address")
    parser.add_argument("--kafka-listen", metavar="HOST:PORT",
                        help="with --zookeeper: where this node serves Kafka's wire protocol (none if not given)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="with --zookeeper: a node setting (NodeConfig's names); the first node's become the "
                             "cluster's")
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="stop when standard input closes (used by LocalCluster: nodes die with their parent)")
    parser.add_argument("--log-level", default=os.environ.get("TXNSIM_LOG_LEVEL", "INFO"))
    parser.add_argument("--metrics-port", type=int, default=0,
                        help="serve Prometheus metrics on PORT/metrics, at 127.0.0.1 or the host of --listen "
                             "(default 0: a free port; DATA/nodes/ID.metrics records the URL)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s node{args.node_id} %(levelname)s %(name)s: %(message)s")
    try:
        metrics_host = args.listen.rsplit(":", 1)[0] if args.zookeeper and args.listen else "127.0.0.1"
        node = Node(*_cluster_of(args), metrics_port=args.metrics_port, metrics_host=metrics_host)
        node.start()
    except (KafkaError, StoreError) as exc:
        log.error("%s", exc)
        return 2
    # `kill -USR1 <pid>`: every thread's stack into the node's log, for a node that seems stuck
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGTERM, lambda *_: node.stopped.set())
    signal.signal(signal.SIGINT, lambda *_: node.stopped.set())
    if args.exit_on_stdin_eof:
        threading.Thread(target=_watch_stdin, args=(node.stopped,), name="stdin-watch", daemon=True).start()
    node.stopped.wait()
    log.info("node %d stopping", args.node_id)
    node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
