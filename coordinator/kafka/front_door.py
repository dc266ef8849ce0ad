"""Wiring: the node's objects behind the Kafka port, each API key to its handler, one listener per node.

Every handler module gets the same `KafkaBackends`: the objects the gRPC services also serve from, so
both front doors reach one implementation.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordinator.broker_configs import BrokerConfigStore
from coordinator.cluster_service import ClusterServer
from coordinator.config import NodeConfig
from coordinator.group import GroupCoordinator
from coordinator.kafka.admin_apis import AdminApis
from coordinator.kafka.apis import ApiKey
from coordinator.kafka.cluster_apis import ClusterApis
from coordinator.kafka.config_apis import ConfigApis
from coordinator.kafka.dispatch import Dispatcher
from coordinator.kafka.group_apis import GroupApis
from coordinator.kafka.partition_apis import PartitionApis
from coordinator.kafka.server import KafkaListener, ListenerLimits
from coordinator.kafka.txn_apis import TxnApis
from coordinator.partition_service import PartitionServer
from coordinator.topics import TopicCatalog
from coordinator.txn.coordinator import TransactionCoordinator


@dataclass(frozen=True)
class KafkaBackends:
    node_id: int
    cluster: ClusterServer
    partitions: PartitionServer
    txn: TransactionCoordinator
    groups: GroupCoordinator
    topics: TopicCatalog
    #: node id -> its Kafka listener's host:port (None: that node has none)
    kafka_address_of: Callable[[int], str | None]
    #: the node's settings (broker configs, topic defaults, auto-creation)
    config: NodeConfig
    #: Kafka's dynamic broker settings that txnsim only stores
    broker_configs: BrokerConfigStore


def build_dispatcher(backends: KafkaBackends) -> Dispatcher:
    config = backends.config
    cluster_apis = ClusterApis(cluster=backends.cluster, init_producer_id=backends.txn.init_producer_id,
                               kafka_address_of=backends.kafka_address_of,
                               auto_create_partitions=config.num_partitions if config.auto_create_topics_enable
                               else None)
    partition_apis = PartitionApis(backends.partitions)
    txn_apis = TxnApis(txn=backends.txn, groups=backends.groups)
    group_apis = GroupApis(backends.groups)
    return Dispatcher({
        ApiKey.API_VERSIONS: cluster_apis.api_versions,
        ApiKey.METADATA: cluster_apis.metadata,
        ApiKey.FIND_COORDINATOR: cluster_apis.find_coordinator,
        ApiKey.INIT_PRODUCER_ID: cluster_apis.init_producer_id,
        ApiKey.PRODUCE: partition_apis.produce,
        ApiKey.FETCH: partition_apis.fetch,
        ApiKey.LIST_OFFSETS: partition_apis.list_offsets,
        **txn_apis.handlers(),
        **group_apis.handlers(),
        **AdminApis(cluster=backends.cluster, partitions=backends.partitions, txn=backends.txn,
                    topics=backends.topics, node_id=backends.node_id,
                    default_partitions=config.num_partitions).handlers(),
        **ConfigApis(topics=backends.topics, config=config, node_id=backends.node_id,
                     stored=backends.broker_configs).handlers(),
    }, deferred={ApiKey.FETCH: partition_apis.fetch_later, **group_apis.deferred_handlers()})


def open_kafka_listener(address: str, *, limits: ListenerLimits, backends: KafkaBackends) -> KafkaListener:
    """A started listener on `address` serving the node's objects within `limits`."""
    listener = KafkaListener(address, build_dispatcher(backends), limits=limits)
    listener.start()
    return listener
