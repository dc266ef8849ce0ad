"""What one node of a cluster on one shared data directory stands on (the replicated cluster's counterpart
is coordinator/zk_cluster.py; coordinator/node.py runs either).

cluster.json names every node and the cluster's settings; a live node holds a flock on DATA/nodes/<id>.lock
and beats DATA/nodes/<id>.heartbeat; the placement says who owns each log among the live nodes; each log
exists once, opened by its owner with a newly claimed leader epoch; topics are DATA/metadata/topics.json and
producer ids come in blocks from DATA/producer-ids/.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from coordinator.layout import ClusterLayout, check_shard_counts, read_cluster_spec
from coordinator.membership import Heartbeat, Membership
from coordinator.node_lock import take_node_lock
from coordinator.partition_service import NO_REPLICATION, Replication
from coordinator.producer_ids import ProducerIdAllocator
from coordinator.runtime.io import NodeIO
from coordinator.topics import TopicStore
from partitions import LogConfig, LogManager
from proto.errors import KafkaConfigurationError
from proto.structs import TopicPartition

log = logging.getLogger(__name__)


class SharedDirectory:
    def __init__(self, layout: ClusterLayout, node_id: int) -> None:
        self.layout = layout
        self.node_id = node_id
        self.spec = read_cluster_spec(layout)
        if node_id not in self.spec.nodes:
            raise KafkaConfigurationError(f"node {node_id} is not in {layout.cluster_file} "
                                          f"(nodes: {self.spec.node_ids})")
        self.config = self.spec.config
        self.address = self.spec.nodes[node_id]
        self.kafka_address = self.spec.kafka_nodes.get(node_id)
        layout.make_dirs()
        check_shard_counts(layout, self.config)
        self._lock_fd = take_node_lock(layout.node_lock(node_id),
                                       f"node {node_id} is already running on {layout.root}")
        self.heartbeat = Heartbeat(layout, node_id, self.config.broker_heartbeat_interval_ms / 1000)
        self.ownership = Membership(layout, self.spec.node_ids, node_id,
                                    session_timeout_s=self.config.broker_session_timeout_ms / 1000)
        self.topics = TopicStore(layout.metadata, layout.logs)
        self.leader_logs = LogManager(
            layout.logs,
            LogConfig(segment_bytes=self.config.log_segment_bytes, message_max_bytes=self.config.message_max_bytes),
            internal_config=LogConfig(segment_bytes=self.config.internal_log_segment_bytes,
                                      message_max_bytes=self.config.message_max_bytes),
            node_id=node_id)
        earlier = self.leader_logs.release_earlier_lives()
        if earlier:
            log.info("released %d logs this node led before it stopped: %s", len(earlier), ", ".join(earlier))
        self.allocator = ProducerIdAllocator(layout.producer_ids, self.config.producer_id_block_size)
        self.replication: Replication = NO_REPLICATION
        self.replica_fetch = None
        self.partition_info = None

    def follower_lags(self) -> list[tuple[TopicPartition, int, int]]:
        """No followers: every log exists once."""
        return []

    def replica_log_ends(self) -> list[tuple[TopicPartition, int]]:
        """No replicas: the logs' ends are their high watermarks, in txnsim_partition_high_watermark."""
        return []

    def address_of(self, node_id: int) -> str:
        return self.spec.nodes[node_id]

    def kafka_address_of(self, node_id: int) -> str | None:
        return self.spec.kafka_nodes.get(node_id)

    def node_addresses(self) -> dict[int, str]:
        return dict(self.spec.nodes)

    def ready(self) -> bool:
        return True  # the internal logs exist once the placement names their owners

    def attach(self, io: NodeIO) -> None:
        self.coordinator_io = io

    def start(self, tick: Callable[[], None]) -> None:
        """Beat the heartbeat and probe the others; `tick` after every probe."""
        threading.Thread(target=self.heartbeat.run, name="heartbeat", daemon=True).start()
        threading.Thread(target=self.ownership.run, args=(tick,), name="membership", daemon=True).start()

    def stop_watching(self) -> None:
        self.ownership.stop()
        self.heartbeat.stop()

    def stop(self) -> None:
        self.leader_logs.close_all()
        os.close(self._lock_fd)
