"""Wiring: the node's objects behind the Kafka port, each API key to its handler, one listener per node."""
from __future__ import annotations

from collections.abc import Callable

from coordinator.cluster_service import ClusterServer
from coordinator.kafka.apis import ApiKey
from coordinator.kafka.cluster_apis import ClusterApis, InitProducerId
from coordinator.kafka.dispatch import Dispatcher
from coordinator.kafka.framing import max_request_bytes
from coordinator.kafka.partition_apis import PartitionApis
from coordinator.kafka.server import KafkaListener
from coordinator.partition_service import PartitionServer


def build_dispatcher(*, cluster: ClusterServer, partitions: PartitionServer, init_producer_id: InitProducerId,
                     kafka_address_of: Callable[[int], str | None]) -> Dispatcher:
    cluster_apis = ClusterApis(cluster=cluster, init_producer_id=init_producer_id, kafka_address_of=kafka_address_of)
    partition_apis = PartitionApis(partitions)
    return Dispatcher({
        ApiKey.API_VERSIONS: cluster_apis.api_versions,
        ApiKey.METADATA: cluster_apis.metadata,
        ApiKey.FIND_COORDINATOR: cluster_apis.find_coordinator,
        ApiKey.INIT_PRODUCER_ID: cluster_apis.init_producer_id,
        ApiKey.PRODUCE: partition_apis.produce,
        ApiKey.FETCH: partition_apis.fetch,
        ApiKey.LIST_OFFSETS: partition_apis.list_offsets,
    })


def open_kafka_listener(address: str, *, message_max_bytes: int, cluster: ClusterServer, partitions: PartitionServer,
                        init_producer_id: InitProducerId, kafka_address_of: Callable[[int], str | None]) -> KafkaListener:
    """A started listener on `address` serving the node's objects; frames above the node's batch limit plus
    the request around it close their connection."""
    dispatcher = build_dispatcher(cluster=cluster, partitions=partitions, init_producer_id=init_producer_id,
                                  kafka_address_of=kafka_address_of)
    listener = KafkaListener(address, dispatcher, max_request_bytes=max_request_bytes(message_max_bytes))
    listener.start()
    return listener
