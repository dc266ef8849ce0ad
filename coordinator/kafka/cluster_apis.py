"""ApiVersions, Metadata, FindCoordinator and InitProducerId on the Kafka port, answered by ClusterServer and
the transaction coordinator, the objects behind the gRPC Cluster and TransactionCoordinator services.

Brokers are the live nodes at their Kafka addresses; a partition's leader is its owner by placement.
Topics are never created by Metadata. InitProducerId serves idempotent and transactional producers alike.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from coordinator.cluster_service import GROUP, TRANSACTION, ClusterServer
from coordinator.kafka.apis import WireError, api_versions_response
from proto import txnsim_pb2 as pb
from proto.errors import CoordinatorNotAvailableError, KafkaError, TopicAlreadyExistsError, code_of

log = logging.getLogger(__name__)
#: Metadata's error for a topic that does not exist
UNKNOWN_TOPIC_OR_PARTITION = 3
#: what Metadata v2+ answers as the cluster id (txnsim has one cluster per data directory, no id of its own)
CLUSTER_ID = "txnsim"

InitProducerId = Callable[[pb.InitProducerIdRequest], pb.InitProducerIdResponse]


def split_address(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


class ClusterApis:
    def __init__(self, *, cluster: ClusterServer, init_producer_id: InitProducerId,
                 kafka_address_of: Callable[[int], str | None], auto_create_partitions: int | None = None) -> None:
        self._cluster = cluster
        self._init_producer_id = init_producer_id
        self._kafka_address_of = kafka_address_of
        #: with auto.create.topics.enable, how many partitions an unknown topic named in Metadata is created with
        self._auto_create_partitions = auto_create_partitions

    # ------------------------------------------------------------ ApiVersions (18)

    def api_versions(self, request: ApiVersionsRequest, version: int) -> ApiVersionsResponse:
        return api_versions_response(version)

    # ------------------------------------------------------------ Metadata (3)

    def metadata(self, request: MetadataRequest, version: int) -> MetadataResponse:
        # v0: an empty list means every topic; v1+: null means every topic and an empty list none
        every_topic = request.topics is None or (version == 0 and not request.topics)
        names = [] if every_topic else [t.name or "" for t in request.topics]
        # named topics may be internal ones; the full listing leaves them out, as txnsim's own Metadata does
        answer = self._cluster.metadata(pb.MetadataRequest(topics=names, include_internal=bool(names)))
        allowed = request.allow_auto_topic_creation if version >= 4 else True  # v0-3 always ask to create
        if self._auto_create_partitions is not None and allowed and names and self._auto_create(answer):
            answer = self._cluster.metadata(pb.MetadataRequest(topics=names, include_internal=True))
        brokers = {}
        for node in answer.nodes:
            address = self._kafka_address_of(node.node_id)
            if node.alive and address is not None:
                host, port = split_address(address)
                brokers[node.node_id] = MetadataResponse.MetadataResponseBroker(
                    node_id=node.node_id, host=host, port=port, rack=None)
        topics = [] if not every_topic and not names else [self._topic(t, brokers) for t in answer.topics]
        return MetadataResponse(
            version=version, throttle_time_ms=0, brokers=list(brokers.values()), cluster_id=CLUSTER_ID,
            controller_id=min(brokers, default=-1), topics=topics)

    def _auto_create(self, answer: pb.MetadataResponse) -> bool:
        """Create the unknown topics of a Metadata answer (auto.create.topics.enable); whether any was. A name that
        cannot be a topic stays unknown (Kafka answers INVALID_TOPIC_EXCEPTION for it: so does a re-read)."""
        assert self._auto_create_partitions is not None
        created = False
        for topic in answer.topics:
            if topic.error_code != UNKNOWN_TOPIC_OR_PARTITION:
                continue
            try:
                self._cluster.create_topic(pb.CreateTopicRequest(name=topic.name,
                                                                 partitions=self._auto_create_partitions))
                created = True
                log.info("auto-created topic %s (%d partitions) for a Metadata request", topic.name,
                         self._auto_create_partitions)
            except TopicAlreadyExistsError:
                created = True  # another node (or request) created it first
            except KafkaError as exc:
                topic.error_code, topic.error_message = code_of(exc), str(exc)
        return created

    @staticmethod
    def _topic(topic: pb.TopicMetadata, brokers: dict[int, MetadataResponse.MetadataResponseBroker]) -> MetadataResponse.MetadataResponseTopic:
        partitions = []
        for p in topic.partitions:
            leader = p.leader if p.leader in brokers else -1
            # every replica, the ISR, and those on brokers that are down (a shared directory's one copy: its owner's)
            replicas, isr, offline = list(p.replicas), list(p.isr), list(p.offline_replicas)
            partitions.append(MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
                error_code=WireError.LEADER_NOT_AVAILABLE if leader < 0 else 0, partition_index=p.partition,
                leader_id=leader, leader_epoch=p.leader_epoch, replica_nodes=replicas, isr_nodes=isr,
                offline_replicas=offline))
        return MetadataResponse.MetadataResponseTopic(
            error_code=topic.error_code, name=topic.name, is_internal=topic.internal, partitions=partitions)

    # ------------------------------------------------------------ FindCoordinator (10)

    def find_coordinator(self, request: FindCoordinatorRequest, version: int) -> FindCoordinatorResponse:
        key_type = request.key_type if version >= 1 else GROUP
        if version < 4:
            code, message, node_id, host, port = self._coordinator(key_type, request.key)
            return FindCoordinatorResponse(version=version, throttle_time_ms=0, error_code=code,
                                           error_message=message, node_id=node_id, host=host, port=port)
        coordinators = []
        for key in request.coordinator_keys:
            code, message, node_id, host, port = self._coordinator(key_type, key)
            coordinators.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=node_id, host=host, port=port, error_code=code, error_message=message))
        return FindCoordinatorResponse(version=version, throttle_time_ms=0, coordinators=coordinators)

    def _coordinator(self, key_type: int, key: str | None) -> tuple[int, str | None, int, str, int]:
        """(error code, message, node id, host, port) of the coordinator of `key`."""
        if key_type not in (GROUP, TRANSACTION):  # txnsim's own half-message key type stays on gRPC
            return WireError.INVALID_REQUEST, f"key type {key_type} is not served (0 group, 1 transaction)", -1, "", -1
        try:
            found = self._cluster.find_coordinator(pb.FindCoordinatorRequest(key_type=key_type, key=key or ""))
            address = self._kafka_address_of(found.node_id)
            if address is None:
                raise CoordinatorNotAvailableError(
                    f"[COORDINATOR_NOT_AVAILABLE] node {found.node_id} has no Kafka listener")
        except KafkaError as exc:
            return code_of(exc), str(exc), -1, "", -1
        host, port = split_address(address)
        return 0, None, found.node_id, host, port

    # ------------------------------------------------------------ InitProducerId (22)

    def init_producer_id(self, request: InitProducerIdRequest, version: int) -> InitProducerIdResponse:
        def answer(code: int, producer_id: int = -1, producer_epoch: int = -1) -> InitProducerIdResponse:
            return InitProducerIdResponse(version=version, throttle_time_ms=0, error_code=code,
                                          producer_id=producer_id, producer_epoch=producer_epoch)
        try:
            ask = pb.InitProducerIdRequest(
                transaction_timeout_ms=request.transaction_timeout_ms,
                producer_id=request.producer_id if version >= 3 else -1,
                producer_epoch=request.producer_epoch if version >= 3 else -1)
            if request.transactional_id is not None:
                ask.transactional_id = request.transactional_id
            granted = self._init_producer_id(ask)
        except KafkaError as exc:
            return answer(code_of(exc))
        if granted.error_code:
            return answer(granted.error_code)
        return answer(0, granted.producer_id, granted.producer_epoch)
