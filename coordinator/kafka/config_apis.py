"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on the Kafka port: topics' settings (every one of
Kafka's, coordinator/topic_configs.py, and txnsim's own) and the brokers': a node's own settings are fixed in
cluster.json when the cluster is made, and Kafka's dynamic broker settings that txnsim has no use for are
stored and described back (coordinator/broker_configs.py).

A topic setting's value is the topic's own when it has one (source TOPIC_CONFIG), else the node's setting it
comes from (STATIC_BROKER_CONFIG, e.g. max.message.bytes from message.max.bytes), else Kafka's default
(DEFAULT_CONFIG), as Kafka's ConfigHelper describes them.
"""
from __future__ import annotations

import enum
from collections import Counter
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from coordinator.broker_configs import CLUSTER_DEFAULT, BrokerConfigStore, is_stored
from coordinator.config import NodeConfig
from coordinator.kafka.apis import ApiKey
from coordinator.kafka.dispatch import Handler
from coordinator.topic_configs import TOPIC_CONFIGS, ConfigType, TopicConfig
from coordinator.topics import TopicCatalog
from proto.errors import InvalidConfigError, InvalidRequestError, KafkaError, UnknownTopicOrPartitionError, code_of
from proto.structs import INTERNAL_TOPICS, validate_topic_name

#: the stored broker settings that are comma-separated lists (IncrementalAlterConfigs APPEND and SUBTRACT)
LIST_SETTINGS = frozenset({"metric.reporters", "ssl.enabled.protocols", "ssl.cipher.suites",
                           "sasl.enabled.mechanisms"})


class ResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigs config_source (v1+)."""

    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class AlterOp(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def broker_configs(config: NodeConfig, node_id: int) -> dict[str, tuple[str, ConfigType]]:
    """A node's settings under Kafka's broker names, where Kafka has one."""
    return {
        "broker.id": (str(node_id), ConfigType.INT),
        "node.id": (str(node_id), ConfigType.INT),
        "message.max.bytes": (str(config.message_max_bytes), ConfigType.INT),
        "log.segment.bytes": (str(config.log_segment_bytes), ConfigType.INT),
        "log.retention.ms": (str(config.log_retention_ms), ConfigType.LONG),
        "log.retention.check.interval.ms": (str(config.log_retention_check_interval_ms), ConfigType.LONG),
        "num.partitions": (str(config.num_partitions), ConfigType.INT),
        "default.replication.factor": ("1", ConfigType.SHORT),
        "min.insync.replicas": ("1", ConfigType.INT),
        "auto.create.topics.enable": (str(config.auto_create_topics_enable).lower(), ConfigType.BOOLEAN),
        "offsets.topic.num.partitions": (str(config.offsets_shards), ConfigType.INT),
        "transaction.state.log.num.partitions": (str(config.txn_shards), ConfigType.INT),
        "transaction.max.timeout.ms": (str(config.transaction_max_timeout_ms), ConfigType.INT),
        "transactional.id.expiration.ms": (str(config.transactional_id_expiration_ms), ConfigType.INT),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
            str(config.transaction_abort_timed_out_transaction_cleanup_interval_ms), ConfigType.INT),
        "group.min.session.timeout.ms": (str(config.group_min_session_timeout_ms), ConfigType.INT),
        "group.max.session.timeout.ms": (str(config.group_max_session_timeout_ms), ConfigType.INT),
        "group.initial.rebalance.delay.ms": (str(config.group_initial_rebalance_delay_ms), ConfigType.INT),
        "connections.max.idle.ms": (str(config.connections_max_idle_ms), ConfigType.LONG),
        "max.connections": (str(config.max_connections), ConfigType.INT),
        "max.connections.per.ip": (str(config.max_connections_per_ip), ConfigType.INT),
        "socket.request.max.bytes": (str(config.socket_request_max_bytes), ConfigType.INT),
        "queued.max.request.bytes": (str(config.queued_max_request_bytes), ConfigType.LONG),
        "fetch.max.bytes": (str(55 * 1024 * 1024), ConfigType.INT),
        "broker.session.timeout.ms": (str(config.broker_session_timeout_ms), ConfigType.INT),
        "broker.heartbeat.interval.ms": (str(config.broker_heartbeat_interval_ms), ConfigType.INT),
    }


class ConfigApis:
    def __init__(self, *, topics: TopicCatalog, config: NodeConfig, node_id: int, stored: BrokerConfigStore) -> None:
        self._topics = topics
        self._stored = stored
        self._config = config
        self._node_id = node_id
        broker = broker_configs(config, node_id)
        #: topic settings whose default is a node setting: the broker name and its value
        self._node_defaults = {t.name: (t.broker_synonym, broker[t.broker_synonym][0]) for t in TOPIC_CONFIGS.values()
                               if t.broker_synonym is not None and t.broker_synonym in broker}
        self._node_defaults["half.message.storage"] = ("half_message_storage", config.half_message_storage)

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.DESCRIBE_CONFIGS: self.describe_configs, ApiKey.ALTER_CONFIGS: self.alter_configs,
                ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs}

    # ------------------------------------------------------------ DescribeConfigs (32)

    def describe_configs(self, request: DescribeConfigsRequest, version: int) -> DescribeConfigsResponse:
        synonyms = bool(request.include_synonyms) if version >= 1 else False
        results = []
        for resource in request.resources:
            name = resource.resource_name or ""
            keys = set(resource.configuration_keys or ())
            try:
                if resource.resource_type == ResourceType.TOPIC:
                    entries = self._describe_topic(name, keys, synonyms, version)
                elif resource.resource_type == ResourceType.BROKER:
                    entries = self._describe_broker(name, keys, synonyms, version)
                else:
                    raise _invalid_request(f"resource type {resource.resource_type} is not supported; describe "
                                           f"topics ({ResourceType.TOPIC}) or brokers ({ResourceType.BROKER})")
                code, message = 0, None
            except KafkaError as exc:
                entries, code, message = [], code_of(exc), str(exc)
            results.append(DescribeConfigsResponse.DescribeConfigsResult(
                error_code=code, error_message=message, resource_type=resource.resource_type, resource_name=name,
                configs=entries))
        return DescribeConfigsResponse(version=version, throttle_time_ms=0, results=results)

    def _describe_topic(self, name: str, keys: set[str], synonyms: bool, version: int) -> list[Any]:
        validate_topic_name(name)
        if name not in INTERNAL_TOPICS and self._topics.partitions(name) is None:
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {name!r} does not exist")
        own = self._topics.configs(name)
        return [self._topic_entry(definition, own.get(definition.name), synonyms, version)
                for definition in TOPIC_CONFIGS.values() if not keys or definition.name in keys]

    def _topic_entry(self, definition: TopicConfig, own: str | None, synonyms: bool, version: int) -> Any:
        Entry = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
        chain: list[tuple[str, str, ConfigSource]] = []
        if own is not None:
            chain.append((definition.name, own, ConfigSource.TOPIC_CONFIG))
        node = self._node_defaults.get(definition.name)
        if node is not None:
            chain.append((node[0], node[1], ConfigSource.STATIC_BROKER_CONFIG))
        chain.append((definition.name, definition.default, ConfigSource.DEFAULT_CONFIG))
        _, value, source = chain[0]
        return Entry(name=definition.name, value=value, read_only=False, config_source=int(source),
                     is_default=own is None, is_sensitive=False,
                     synonyms=[Entry.DescribeConfigsSynonym(name=n, value=v, source=int(s)) for n, v, s in chain]
                     if synonyms else [],
                     config_type=int(definition.type), documentation=None)

    def _describe_broker(self, name: str, keys: set[str], synonyms: bool, version: int) -> list[Any]:
        """A node: its own settings (read-only), then the dynamic ones stored for it or as the cluster default;
        the cluster default ("") alone: what is stored for it, as Kafka describes the default resource."""
        self._check_broker(name)
        Entry = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
        stored = self._stored.read()
        default = stored.get(CLUSTER_DEFAULT, {})
        own = stored.get(name, {}) if name else {}
        chains: dict[str, tuple[list[tuple[str, ConfigSource]], ConfigType, bool]] = {}
        if name:
            for key, (value, kind) in broker_configs(self._config, self._node_id).items():
                chains[key] = ([(value, ConfigSource.STATIC_BROKER_CONFIG)], kind, True)
        for key in sorted(set(own) | set(default)):
            if key in chains:
                continue  # never stored (AlterConfigs refuses a node's own settings)
            chain = [(own[key], ConfigSource.DYNAMIC_BROKER_CONFIG)] if key in own else []
            if key in default:
                chain.append((default[key], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
            chains[key] = (chain, ConfigType.STRING, False)
        return [Entry(name=key, value=chain[0][0], read_only=read_only, config_source=int(chain[0][1]),
                      is_default=False, is_sensitive=key.endswith((".password", ".jaas.config")),
                      synonyms=[Entry.DescribeConfigsSynonym(name=key, value=value, source=int(source))
                                for value, source in chain] if synonyms else [],
                      config_type=int(kind), documentation=None)
                for key, (chain, kind, read_only) in chains.items() if not keys or key in keys]

    def _alter_broker(self, resource: Any, incremental: bool, validate_only: bool) -> None:
        """Kafka's dynamic settings txnsim only stores are set (legacy AlterConfigs: the set becomes exactly those
        given); any other name, a node's own setting included, is INVALID_REQUEST as Kafka answers a read-only one."""
        name = resource.resource_name or ""
        self._check_broker(name)
        fixed = sorted(c.name for c in resource.configs if not is_stored(c.name or ""))
        if fixed:
            raise _invalid_request(f"Cannot update these configs dynamically: {fixed} (a node's own settings are "
                                   "fixed in cluster.json; only Kafka's dynamic settings txnsim does not act on can "
                                   "be stored)")
        current = self._stored.settings(name) if incremental else {}
        for config in resource.configs:
            op = AlterOp(config.config_operation) if incremental and \
                config.config_operation in AlterOp._value2member_map_ else AlterOp.SET
            if incremental and config.config_operation not in AlterOp._value2member_map_:
                raise InvalidConfigError(f"[INVALID_CONFIG] unknown operation on broker setting {config.name}")
            if op is AlterOp.DELETE:
                current.pop(config.name, None)
                continue
            if config.value is None:
                raise InvalidConfigError(f"[INVALID_CONFIG] broker setting {config.name} needs a value (null given)")
            if op is AlterOp.SET:
                current[config.name] = config.value
                continue
            if config.name not in LIST_SETTINGS:
                raise InvalidConfigError(f"[INVALID_CONFIG] cannot {op.name.lower()} to broker setting "
                                         f"{config.name} because its type is not LIST")
            items = [item for item in current.get(config.name, "").split(",") if item]
            change = [item.strip() for item in config.value.split(",") if item.strip()]
            items = items + [i for i in change if i not in items] if op is AlterOp.APPEND else \
                [i for i in items if i not in change]
            current[config.name] = ",".join(items)
        if not validate_only:
            self._stored.replace(name, current)

    def _check_broker(self, name: str) -> None:
        if name not in ("", str(self._node_id)):
            raise _invalid_request(f"Unexpected broker id, expected {self._node_id} or empty string, but received "
                                   f"{name}")

    # ------------------------------------------------------------ AlterConfigs (33), IncrementalAlterConfigs (44)

    def alter_configs(self, request: AlterConfigsRequest, version: int) -> AlterConfigsResponse:
        """The legacy form: a topic's settings become exactly those given (Kafka's AlterConfigs replaces the set)."""
        def change(resource: Any) -> None:
            wanted = {}
            for config in resource.configs:
                if config.value is None:
                    raise InvalidConfigError(f"[INVALID_CONFIG] topic setting {config.name} needs a value (null given)")
                wanted[config.name] = config.value
            self._topics.replace_configs(resource.resource_name, wanted, validate_only=bool(request.validate_only))
        return AlterConfigsResponse(version=version, throttle_time_ms=0, responses=[
            AlterConfigsResponse.AlterConfigsResourceResponse(error_code=code, error_message=message,
                                                              resource_type=resource.resource_type,
                                                              resource_name=resource.resource_name)
            for resource, code, message in self._alter_each(
                request.resources, change,
                lambda r: self._alter_broker(r, incremental=False, validate_only=bool(request.validate_only)))])

    def incremental_alter_configs(self, request: IncrementalAlterConfigsRequest,
                                  version: int) -> IncrementalAlterConfigsResponse:
        def change(resource: Any) -> None:
            current = self._topics.configs(resource.resource_name)
            for config in resource.configs:
                self._apply(current, config.name, AlterOp(config.config_operation)
                            if config.config_operation in AlterOp._value2member_map_ else None, config.value)
            self._topics.replace_configs(resource.resource_name, current, validate_only=bool(request.validate_only))
        return IncrementalAlterConfigsResponse(version=version, throttle_time_ms=0, responses=[
            IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=resource.resource_type,
                resource_name=resource.resource_name)
            for resource, code, message in self._alter_each(
                request.resources, change,
                lambda r: self._alter_broker(r, incremental=True, validate_only=bool(request.validate_only)))])

    def _apply(self, current: dict[str, str], name: str, op: AlterOp | None, value: str | None) -> None:
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise InvalidConfigError(f"[INVALID_CONFIG] unknown topic config name: {name}")
        if op is None:
            raise InvalidConfigError(f"[INVALID_CONFIG] unknown operation on topic setting {name}")
        if op is AlterOp.DELETE:
            current.pop(name, None)
            return
        if value is None:
            raise InvalidConfigError(f"[INVALID_CONFIG] topic setting {name} needs a value (null given)")
        if op is AlterOp.SET:
            current[name] = value
            return
        if definition.type is not ConfigType.LIST:
            raise InvalidConfigError(f"[INVALID_CONFIG] cannot {op.name.lower()} to topic setting {name} because its "
                                     "type is not LIST")
        items = [item for item in current.get(name, definition.default).split(",") if item]
        change = [item.strip() for item in value.split(",") if item.strip()]
        if op is AlterOp.APPEND:
            items += [item for item in change if item not in items]
        else:
            items = [item for item in items if item not in change]
        current[name] = ",".join(items)

    def _alter_each(self, resources: list[Any], change: Any, change_broker: Any) -> list[tuple[Any, int, str | None]]:
        seen = Counter((r.resource_type, r.resource_name) for r in resources)
        out: list[tuple[Any, int, str | None]] = []
        for resource in resources:
            try:
                if seen[(resource.resource_type, resource.resource_name)] > 1:
                    raise _invalid_request("Duplicate resource.")
                if resource.resource_type == ResourceType.BROKER:
                    change_broker(resource)
                    out.append((resource, 0, None))
                    continue
                if resource.resource_type != ResourceType.TOPIC:
                    raise _invalid_request(f"resource type {resource.resource_type} cannot be altered here")
                if not resource.resource_name:
                    raise _invalid_request("the default topic resource (\"\") cannot be altered")
                change(resource)
                out.append((resource, 0, None))
            except KafkaError as exc:
                out.append((resource, code_of(exc), str(exc)))
        return out


def _invalid_request(message: str) -> KafkaError:
    return InvalidRequestError(f"[INVALID_REQUEST] {message}")
