"""The Cluster service: metadata, coordinator discovery, topic creation and deletion, and status, answered by
any node.

Deleting a topic removes it from topics.json first (from then on no node serves or opens it), then has every
live node close its open logs of it, then removes the log directories; a node that could not be told
forgets its logs at their next lookup, since their directories are gone.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from client.transport import Stubs, call
from coordinator.config import NodeConfig
from coordinator.ownership_log import OwnershipLog
from coordinator.rpc import answers_with
from coordinator.topics import TopicCatalog
from partitions import LogManager
from partitions.leader_epochs import LeaderEpochs
from proto import txnsim_pb2 as pb
from proto import txnsim_pb2_grpc as rpc
from proto.errors import CoordinatorNotAvailableError, InvalidRequestError, KafkaError
from proto.hashing import partition_for
from proto.structs import (
    CONSUMER_OFFSETS_TOPIC,
    HALF_MESSAGE_TOPICS,
    HALF_TOPIC,
    INTERNAL_TOPICS,
    TRANSACTION_STATE_TOPIC,
)

log = logging.getLogger(__name__)
#: how long a deletion waits for each peer to close its logs of the topic
DROP_TIMEOUT_S = 5.0

#: how long a partition's leader epoch read from its claims is reused (Metadata may lag a new leader by this)
EPOCH_CACHE_S = 1.0
#: FindCoordinator key types: Kafka's group and transaction, and txnsim's half-message shard of a producer group
GROUP, TRANSACTION, HALF_MESSAGES = 0, 1, 100


#: (leader epoch, replicas, ISR, offline replicas) of a partition
PartitionInfo = Callable[[str, int], tuple[int, list[int], list[int], list[int]]]


class LiveOwnership(Protocol):
    """Who owns each log, and who lives (coordinator/membership.py; coordinator/zk_cluster.py)."""

    @property
    def live(self) -> frozenset[int]: ...

    def owner(self, topic: str, partition: int) -> int: ...


class ClusterServer:
    def __init__(self, *, node_id: int, nodes: Callable[[], dict[int, str]], config: NodeConfig,
                 membership: LiveOwnership, ownership_log: OwnershipLog, topics: TopicCatalog,
                 owned_logs: Callable[[], list[tuple[str, int, int]]],
                 ready: Callable[[], bool], logs: LogManager | None = None,
                 peer_stubs: Callable[[int], Stubs] | None = None,
                 delete_topic_offsets: Callable[[str], int] | None = None,
                 partition_info: PartitionInfo | None = None) -> None:
        """`nodes()`: every node's address; `partition_info`: a replicated cluster's leader epoch, replicas, ISR
        and offline replicas of a partition (a shared directory's come from its logs' epoch claims)."""
        self.node_id = node_id
        self._nodes_of = nodes
        self._config = config
        self._partition_info = partition_info
        #: the group coordinator's removal of a deleted topic's committed offsets from the groups it has loaded
        self._delete_topic_offsets = delete_topic_offsets
        #: this node's open logs, and the stubs of a peer by node id (topic deletion)
        self._logs = logs
        self._peer_stubs = peer_stubs
        self._membership = membership
        self._ownership_log = ownership_log
        self._topics = topics
        self._owned_logs = owned_logs
        self._ready = ready
        #: (topic, partition) -> (until when, the newest claim's epoch) of logs another node leads
        self._epochs_read: dict[tuple[str, int], tuple[float, int]] = {}

    def _nodes(self) -> list[pb.NodeInfo]:
        live = self._membership.live
        return [pb.NodeInfo(node_id=i, address=address, alive=i in live) for i, address in sorted(self._nodes_of().items())]

    def metadata(self, req: pb.MetadataRequest) -> pb.MetadataResponse:
        topics = self._topics.all()
        if req.include_internal:
            topics[TRANSACTION_STATE_TOPIC] = self._config.txn_shards
            topics[CONSUMER_OFFSETS_TOPIC] = self._config.offsets_shards
            for name in HALF_MESSAGE_TOPICS:
                topics[name] = self._config.half_shards
        names = list(req.topics) or sorted(topics)
        out = []
        for name in names:
            count = topics.get(name)
            if count is None:
                out.append(pb.TopicMetadata(name=name, error_code=3,
                                            error_message=f"[UNKNOWN_TOPIC_OR_PARTITION] topic {name!r} does not exist"))
                continue
            out.append(pb.TopicMetadata(name=name, internal=name in INTERNAL_TOPICS, configs=self._topics.configs(name),
                                        partitions=[self._partition(name, p) for p in range(count)]))
        return pb.MetadataResponse(nodes=self._nodes(), topics=out, txn_shards=self._config.txn_shards,
                                   offsets_shards=self._config.offsets_shards)

    def _partition(self, topic: str, partition: int) -> pb.PartitionMetadata:
        leader = self._membership.owner(topic, partition)
        if self._partition_info is None:  # one copy: the owner's, in sync with itself
            copies = [leader] if leader >= 0 else []
            return pb.PartitionMetadata(partition=partition, leader=leader, replicas=copies, isr=copies,
                                        leader_epoch=self._leader_epoch(topic, partition))
        epoch, replicas, isr, offline = self._partition_info(topic, partition)
        return pb.PartitionMetadata(partition=partition, leader=leader, leader_epoch=epoch, replicas=replicas,
                                    isr=isr, offline_replicas=offline)

    def find_coordinator(self, req: pb.FindCoordinatorRequest) -> pb.FindCoordinatorResponse:
        if not req.key:
            raise InvalidRequestError("[INVALID_REQUEST] FindCoordinator needs a key")
        if req.key_type == TRANSACTION:
            topic, shard = TRANSACTION_STATE_TOPIC, partition_for(req.key, self._config.txn_shards)
        elif req.key_type == GROUP:
            topic, shard = CONSUMER_OFFSETS_TOPIC, partition_for(req.key, self._config.offsets_shards)
        elif req.key_type == HALF_MESSAGES:
            topic, shard = HALF_TOPIC, partition_for(req.key, self._config.half_shards)
        else:
            raise InvalidRequestError(f"[INVALID_REQUEST] key_type must be 0 (group), 1 (transaction) or "
                                      f"100 (producer group's half messages), not {req.key_type}")
        owner = self._membership.owner(topic, shard)
        address = self._nodes_of().get(owner) if owner >= 0 else None
        if address is None:
            raise CoordinatorNotAvailableError("[COORDINATOR_NOT_AVAILABLE] no live node can coordinate this key")
        return pb.FindCoordinatorResponse(node_id=owner, address=address, shard=shard)

    def _leader_epoch(self, topic: str, partition: int) -> int:
        """The epoch the partition's leader stamps on its batches (-1 before any leader opened it): the open log's
        here, else its newest claim, read at most once a second per partition."""
        if self._logs is None:
            return -1
        opened = self._logs.get(topic, partition)
        if opened is not None:
            return opened.leader_epoch
        now = time.monotonic()
        cached = self._epochs_read.get((topic, partition))
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            latest = LeaderEpochs(self._logs.log_dir(topic, partition), self._logs.storage).latest()
        except (OSError, KafkaError):
            latest = None
        if latest is None:
            return -1  # not led yet: asked again next time, since its first leader may open it any moment
        self._epochs_read[(topic, partition)] = (now + EPOCH_CACHE_S, latest.epoch)
        return latest.epoch

    def create_topic(self, req: pb.CreateTopicRequest) -> pb.CreateTopicResponse:
        if req.validate_only:
            self._topics.validate(req.name, req.partitions, dict(req.configs), req.replication_factor or -1)
            return pb.CreateTopicResponse(replication_factor=req.replication_factor)
        factor = self._topics.create(req.name, req.partitions, dict(req.configs),
                                     replication_factor=req.replication_factor or -1)
        return pb.CreateTopicResponse(replication_factor=factor)

    def delete_topic(self, req: pb.DeleteTopicRequest) -> pb.DeleteTopicResponse:
        """Delete the topic: gone from metadata at once, its logs closed on every live node, then removed."""
        partitions = self._topics.delete(req.name)
        drop = pb.DropTopicLogsRequest(name=req.name, partitions=partitions)
        for node in sorted(self._membership.live):
            try:
                if node == self.node_id or self._peer_stubs is None:
                    self.drop_topic_logs(drop)
                else:
                    call(self._peer_stubs(node).cluster.DropTopicLogs, drop, DROP_TIMEOUT_S)
            except KafkaError as exc:  # it forgets its logs at their next lookup: their directories are gone
                log.warning("node %d could not close its logs of deleted topic %s: %s", node, req.name, exc)
        if self._logs is not None:
            removed = self._topics.remove_logs_if_deleted(req.name)
            log.info("deleted topic %s (%d partitions, %d log directories)", req.name, partitions, len(removed))
        return pb.DeleteTopicResponse(partitions=partitions)

    def alter_topic(self, req: pb.AlterTopicRequest) -> pb.AlterTopicResponse:
        """Every node sees the new partitions at its next lookup of topics.json, and opens them when asked."""
        partitions, configs = self._topics.alter(req.name, req.partitions, dict(req.set_configs),
                                                 list(req.delete_configs))
        return pb.AlterTopicResponse(partitions=partitions, configs=configs)

    def drop_topic_logs(self, req: pb.DropTopicLogsRequest) -> pb.DropTopicLogsResponse:
        """Close this node's open logs of a deleted topic and remove its committed offsets from the groups loaded
        here (neither if the name was created again meanwhile)."""
        if self._topics.partitions(req.name) is None:
            if self._logs is not None:  # the logs open here, whatever partition count the request claims
                for opened in self._logs.open_logs():
                    if opened.topic == req.name:
                        self._logs.forget(req.name, opened.partition)
            if self._delete_topic_offsets is not None:
                self._delete_topic_offsets(req.name)
        return pb.DropTopicLogsResponse()

    def status(self, req: pb.ClusterStatusRequest) -> pb.ClusterStatusResponse:
        if not self._ready():
            return pb.ClusterStatusResponse(error_code=14, node_id=self.node_id,
                                            error_message="[COORDINATOR_LOAD_IN_PROGRESS] node is loading its shards")
        logs = [pb.LogOwnership(topic=t, partition=p, owner=self.node_id, leader_epoch=e)
                for t, p, e in self._owned_logs()]
        return pb.ClusterStatusResponse(nodes=self._nodes(), logs=logs, node_id=self.node_id,
                                        recent_changes=self._ownership_log.recent())


class ClusterServicer(rpc.ClusterServicer):
    def __init__(self, server: ClusterServer) -> None:
        self._server = server

    @answers_with(pb.MetadataResponse)
    def Metadata(self, request: pb.MetadataRequest, context: Any) -> pb.MetadataResponse:
        return self._server.metadata(request)

    @answers_with(pb.FindCoordinatorResponse)
    def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: Any) -> pb.FindCoordinatorResponse:
        return self._server.find_coordinator(request)

    @answers_with(pb.CreateTopicResponse)
    def CreateTopic(self, request: pb.CreateTopicRequest, context: Any) -> pb.CreateTopicResponse:
        return self._server.create_topic(request)

    @answers_with(pb.ClusterStatusResponse)
    def Status(self, request: pb.ClusterStatusRequest, context: Any) -> pb.ClusterStatusResponse:
        return self._server.status(request)

    @answers_with(pb.DeleteTopicResponse)
    def DeleteTopic(self, request: pb.DeleteTopicRequest, context: Any) -> pb.DeleteTopicResponse:
        return self._server.delete_topic(request)

    @answers_with(pb.AlterTopicResponse)
    def AlterTopic(self, request: pb.AlterTopicRequest, context: Any) -> pb.AlterTopicResponse:
        return self._server.alter_topic(request)

    @answers_with(pb.DropTopicLogsResponse)
    def DropTopicLogs(self, request: pb.DropTopicLogsRequest, context: Any) -> pb.DropTopicLogsResponse:
        return self._server.drop_topic_logs(request)
