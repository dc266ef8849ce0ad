from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransactionResolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOLUTION_UNKNOWN: _ClassVar[TransactionResolution]
    RESOLUTION_COMMIT: _ClassVar[TransactionResolution]
    RESOLUTION_ROLLBACK: _ClassVar[TransactionResolution]

class TransactionSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SOURCE_UNSPECIFIED: _ClassVar[TransactionSource]
    SOURCE_CLIENT: _ClassVar[TransactionSource]
    SOURCE_SERVER_CHECK: _ClassVar[TransactionSource]
RESOLUTION_UNKNOWN: TransactionResolution
RESOLUTION_COMMIT: TransactionResolution
RESOLUTION_ROLLBACK: TransactionResolution
SOURCE_UNSPECIFIED: TransactionSource
SOURCE_CLIENT: TransactionSource
SOURCE_SERVER_CHECK: TransactionSource

class TopicPartitionRef(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class PartitionError(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("topics", "include_internal")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    include_internal: bool
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., include_internal: _Optional[bool] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "address", "alive")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    address: str
    alive: bool
    def __init__(self, node_id: _Optional[int] = ..., address: _Optional[str] = ..., alive: _Optional[bool] = ...) -> None: ...

class PartitionMetadata(_message.Message):
    __slots__ = ("partition", "leader", "leader_epoch", "error_code", "replicas", "isr", "offline_replicas")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    leader: int
    leader_epoch: int
    error_code: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    offline_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., error_code: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., offline_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class TopicMetadata(_message.Message):
    __slots__ = ("name", "error_code", "error_message", "internal", "partitions", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    error_code: int
    error_message: str
    internal: bool
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionMetadata]
    configs: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., internal: _Optional[bool] = ..., partitions: _Optional[_Iterable[_Union[PartitionMetadata, _Mapping]]] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "nodes", "topics", "txn_shards", "offsets_shards")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TXN_SHARDS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_SHARDS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    topics: _containers.RepeatedCompositeFieldContainer[TopicMetadata]
    txn_shards: int
    offsets_shards: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicMetadata, _Mapping]]] = ..., txn_shards: _Optional[int] = ..., offsets_shards: _Optional[int] = ...) -> None: ...

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("key_type", "key")
    KEY_TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    key_type: int
    key: str
    def __init__(self, key_type: _Optional[int] = ..., key: _Optional[str] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "node_id", "address", "shard")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    node_id: int
    address: str
    shard: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., node_id: _Optional[int] = ..., address: _Optional[str] = ..., shard: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "partitions", "configs", "replication_factor", "validate_only")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    configs: _containers.ScalarMap[str, str]
    replication_factor: int
    validate_only: bool
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ..., replication_factor: _Optional[int] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "replication_factor")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    replication_factor: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., replication_factor: _Optional[int] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    partitions: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class AlterTopicRequest(_message.Message):
    __slots__ = ("name", "partitions", "set_configs", "delete_configs")
    class SetConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SET_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DELETE_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    set_configs: _containers.ScalarMap[str, str]
    delete_configs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., set_configs: _Optional[_Mapping[str, str]] = ..., delete_configs: _Optional[_Iterable[str]] = ...) -> None: ...

class AlterTopicResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    partitions: int
    configs: _containers.ScalarMap[str, str]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partitions: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DropTopicLogsRequest(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class DropTopicLogsResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LogOwnership(_message.Message):
    __slots__ = ("topic", "partition", "owner", "leader_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    owner: int
    leader_epoch: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., owner: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class OwnershipChange(_message.Message):
    __slots__ = ("time_ms", "node_id", "action", "topic", "partition", "leader_epoch", "reason")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    node_id: int
    action: str
    topic: str
    partition: int
    leader_epoch: int
    reason: str
    def __init__(self, time_ms: _Optional[int] = ..., node_id: _Optional[int] = ..., action: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "nodes", "logs", "node_id", "recent_changes")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RECENT_CHANGES_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    logs: _containers.RepeatedCompositeFieldContainer[LogOwnership]
    node_id: int
    recent_changes: _containers.RepeatedCompositeFieldContainer[OwnershipChange]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ..., logs: _Optional[_Iterable[_Union[LogOwnership, _Mapping]]] = ..., node_id: _Optional[int] = ..., recent_changes: _Optional[_Iterable[_Union[OwnershipChange, _Mapping]]] = ...) -> None: ...

class PartitionRecords(_message.Message):
    __slots__ = ("topic", "partition", "records")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    records: bytes
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("transactional_id", "acks", "timeout_ms", "partitions", "add_partitions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ADD_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    acks: int
    timeout_ms: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionRecords]
    add_partitions: bool
    def __init__(self, transactional_id: _Optional[str] = ..., acks: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionRecords, _Mapping]]] = ..., add_partitions: _Optional[bool] = ...) -> None: ...

class PartitionProduceResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "base_offset", "log_start_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    base_offset: int
    log_start_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., base_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionProduceResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionProduceResult, _Mapping]]] = ...) -> None: ...

class FetchPartition(_message.Message):
    __slots__ = ("topic", "partition", "fetch_offset", "max_bytes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("isolation_level", "max_wait_ms", "min_bytes", "max_bytes", "partitions")
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    isolation_level: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartition]
    def __init__(self, isolation_level: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., min_bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[FetchPartition, _Mapping]]] = ...) -> None: ...

class AbortedTransaction(_message.Message):
    __slots__ = ("producer_id", "first_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    first_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ...) -> None: ...

class FetchPartitionResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "high_watermark", "last_stable_offset", "log_start_offset", "aborted_transactions", "records")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: _containers.RepeatedCompositeFieldContainer[AbortedTransaction]
    records: bytes
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., high_watermark: _Optional[int] = ..., last_stable_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., aborted_transactions: _Optional[_Iterable[_Union[AbortedTransaction, _Mapping]]] = ..., records: _Optional[bytes] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartitionResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[FetchPartitionResult, _Mapping]]] = ...) -> None: ...

class ReplicaFetchPartition(_message.Message):
    __slots__ = ("topic", "partition", "fetch_offset", "last_fetched_epoch", "current_leader_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ...) -> None: ...

class ReplicaFetchRequest(_message.Message):
    __slots__ = ("replica_id", "max_wait_ms", "max_bytes", "partitions", "session_id", "session_epoch", "forgotten")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    max_wait_ms: int
    max_bytes: int
    partitions: _containers.RepeatedCompositeFieldContainer[ReplicaFetchPartition]
    session_id: int
    session_epoch: int
    forgotten: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    def __init__(self, replica_id: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., max_bytes: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[ReplicaFetchPartition, _Mapping]]] = ..., session_id: _Optional[int] = ..., session_epoch: _Optional[int] = ..., forgotten: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ...) -> None: ...

class ReplicaFetchPartitionData(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "diverging_epoch", "diverging_end_offset", "records", "records_end", "high_watermark", "log_start_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_END_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    diverging_epoch: int
    diverging_end_offset: int
    records: bytes
    records_end: int
    high_watermark: int
    log_start_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., diverging_epoch: _Optional[int] = ..., diverging_end_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., records_end: _Optional[int] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class ReplicaFetchResponse(_message.Message):
    __slots__ = ("partitions", "error_code", "error_message", "session_id")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[ReplicaFetchPartitionData]
    error_code: int
    error_message: str
    session_id: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[ReplicaFetchPartitionData, _Mapping]]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., session_id: _Optional[int] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("partitions", "timestamps", "isolation_level")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    timestamps: _containers.RepeatedScalarFieldContainer[int]
    isolation_level: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., timestamps: _Optional[_Iterable[int]] = ..., isolation_level: _Optional[int] = ...) -> None: ...

class PartitionOffsets(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "log_start_offset", "high_watermark", "last_stable_offset", "offset_for_timestamp", "timestamp")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FOR_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    offset_for_timestamp: int
    timestamp: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., log_start_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., last_stable_offset: _Optional[int] = ..., offset_for_timestamp: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionOffsets]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionOffsets, _Mapping]]] = ...) -> None: ...

class TxnMarker(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "committed", "coordinator_epoch", "partitions", "transaction_version", "admin_abort_start_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_VERSION_FIELD_NUMBER: _ClassVar[int]
    ADMIN_ABORT_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    transaction_version: int
    admin_abort_start_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., committed: _Optional[bool] = ..., coordinator_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., transaction_version: _Optional[int] = ..., admin_abort_start_offset: _Optional[int] = ...) -> None: ...

class WriteTxnMarkersRequest(_message.Message):
    __slots__ = ("markers",)
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    markers: _containers.RepeatedCompositeFieldContainer[TxnMarker]
    def __init__(self, markers: _Optional[_Iterable[_Union[TxnMarker, _Mapping]]] = ...) -> None: ...

class TxnMarkerResult(_message.Message):
    __slots__ = ("producer_id", "partitions")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionError]
    def __init__(self, producer_id: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionError, _Mapping]]] = ...) -> None: ...

class WriteTxnMarkersResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "markers")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    markers: _containers.RepeatedCompositeFieldContainer[TxnMarkerResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., markers: _Optional[_Iterable[_Union[TxnMarkerResult, _Mapping]]] = ...) -> None: ...

class DescribeProducersRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    def __init__(self, partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ...) -> None: ...

class ProducerStateInfo(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "last_sequence", "last_timestamp", "coordinator_epoch", "current_txn_start_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TXN_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., last_sequence: _Optional[int] = ..., last_timestamp: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., current_txn_start_offset: _Optional[int] = ...) -> None: ...

class PartitionProducers(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "active_producers")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    active_producers: _containers.RepeatedCompositeFieldContainer[ProducerStateInfo]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., active_producers: _Optional[_Iterable[_Union[ProducerStateInfo, _Mapping]]] = ...) -> None: ...

class DescribeProducersResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionProducers]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionProducers, _Mapping]]] = ...) -> None: ...

class InitProducerIdRequest(_message.Message):
    __slots__ = ("transactional_id", "transaction_timeout_ms", "producer_id", "producer_epoch")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int
    producer_epoch: int
    def __init__(self, transactional_id: _Optional[str] = ..., transaction_timeout_ms: _Optional[int] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "producer_id", "producer_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    producer_id: int
    producer_epoch: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class AddPartitionsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "partitions", "verify_only")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_ONLY_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    verify_only: bool
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., verify_only: _Optional[bool] = ...) -> None: ...

class AddPartitionsToTxnResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[PartitionError]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[PartitionError, _Mapping]]] = ...) -> None: ...

class AddOffsetsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "group_id")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., group_id: _Optional[str] = ...) -> None: ...

class AddOffsetsToTxnResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class EndTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "committed")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., committed: _Optional[bool] = ...) -> None: ...

class EndTxnResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "producer_id", "producer_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    producer_id: int
    producer_epoch: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class ListTransactionsRequest(_message.Message):
    __slots__ = ("state_filters", "producer_id_filters")
    STATE_FILTERS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FILTERS_FIELD_NUMBER: _ClassVar[int]
    state_filters: _containers.RepeatedScalarFieldContainer[str]
    producer_id_filters: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, state_filters: _Optional[_Iterable[str]] = ..., producer_id_filters: _Optional[_Iterable[int]] = ...) -> None: ...

class TransactionListing(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "state")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    state: str
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class ListTransactionsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "transactions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    transactions: _containers.RepeatedCompositeFieldContainer[TransactionListing]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., transactions: _Optional[_Iterable[_Union[TransactionListing, _Mapping]]] = ...) -> None: ...

class DescribeTransactionsRequest(_message.Message):
    __slots__ = ("transactional_ids",)
    TRANSACTIONAL_IDS_FIELD_NUMBER: _ClassVar[int]
    transactional_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, transactional_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class TransactionDescription(_message.Message):
    __slots__ = ("error_code", "error_message", "transactional_id", "state", "producer_id", "producer_epoch", "timeout_ms", "start_time_ms", "partitions", "last_update_time_ms", "coordinator_id")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    last_update_time_ms: int
    coordinator_id: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., transactional_id: _Optional[str] = ..., state: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., start_time_ms: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., last_update_time_ms: _Optional[int] = ..., coordinator_id: _Optional[int] = ...) -> None: ...

class DescribeTransactionsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "transactions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    transactions: _containers.RepeatedCompositeFieldContainer[TransactionDescription]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., transactions: _Optional[_Iterable[_Union[TransactionDescription, _Mapping]]] = ...) -> None: ...

class TransactionLogValue(_message.Message):
    __slots__ = ("producer_id", "previous_producer_id", "next_producer_id", "producer_epoch", "timeout_ms", "state", "partitions", "last_update_time_ms", "start_time_ms", "ended_by_fence", "batch", "transaction_version")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_BY_FENCE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_VERSION_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    last_update_time_ms: int
    start_time_ms: int
    ended_by_fence: bool
    batch: BatchTransactionValue
    transaction_version: int
    def __init__(self, producer_id: _Optional[int] = ..., previous_producer_id: _Optional[int] = ..., next_producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., state: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., last_update_time_ms: _Optional[int] = ..., start_time_ms: _Optional[int] = ..., ended_by_fence: _Optional[bool] = ..., batch: _Optional[_Union[BatchTransactionValue, _Mapping]] = ..., transaction_version: _Optional[int] = ...) -> None: ...

class BatchParticipant(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "task", "attempt", "partitions")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    task: int
    attempt: int
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., task: _Optional[int] = ..., attempt: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ...) -> None: ...

class BatchTransactionValue(_message.Message):
    __slots__ = ("batch_id", "last_committed_batch", "participants", "winners", "state", "timeout_ms", "start_time_ms", "last_update_time_ms")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMITTED_BATCH_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    WINNERS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    last_committed_batch: int
    participants: _containers.RepeatedCompositeFieldContainer[BatchParticipant]
    winners: _containers.RepeatedScalarFieldContainer[int]
    state: int
    timeout_ms: int
    start_time_ms: int
    last_update_time_ms: int
    def __init__(self, batch_id: _Optional[int] = ..., last_committed_batch: _Optional[int] = ..., participants: _Optional[_Iterable[_Union[BatchParticipant, _Mapping]]] = ..., winners: _Optional[_Iterable[int]] = ..., state: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., start_time_ms: _Optional[int] = ..., last_update_time_ms: _Optional[int] = ...) -> None: ...

class JoinBatchTxnRequest(_message.Message):
    __slots__ = ("batch_txn_id", "batch_id", "task", "attempt", "transaction_timeout_ms")
    BATCH_TXN_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    batch_txn_id: str
    batch_id: int
    task: int
    attempt: int
    transaction_timeout_ms: int
    def __init__(self, batch_txn_id: _Optional[str] = ..., batch_id: _Optional[int] = ..., task: _Optional[int] = ..., attempt: _Optional[int] = ..., transaction_timeout_ms: _Optional[int] = ...) -> None: ...

class JoinBatchTxnResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "producer_id", "producer_epoch", "already_committed")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ALREADY_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    producer_id: int
    producer_epoch: int
    already_committed: bool
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., already_committed: _Optional[bool] = ...) -> None: ...

class EndBatchTxnRequest(_message.Message):
    __slots__ = ("batch_txn_id", "batch_id", "committed", "winners", "wait_ms")
    BATCH_TXN_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    WINNERS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    batch_txn_id: str
    batch_id: int
    committed: bool
    winners: _containers.RepeatedScalarFieldContainer[int]
    wait_ms: int
    def __init__(self, batch_txn_id: _Optional[str] = ..., batch_id: _Optional[int] = ..., committed: _Optional[bool] = ..., winners: _Optional[_Iterable[int]] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class EndBatchTxnResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "repeated_commit", "completed")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPEATED_COMMIT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    repeated_commit: bool
    completed: bool
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., repeated_commit: _Optional[bool] = ..., completed: _Optional[bool] = ...) -> None: ...

class TransactionSnapshot(_message.Message):
    __slots__ = ("next_offset", "entries")
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    next_offset: int
    entries: _containers.RepeatedCompositeFieldContainer[TransactionSnapshotEntry]
    def __init__(self, next_offset: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[TransactionSnapshotEntry, _Mapping]]] = ...) -> None: ...

class TransactionSnapshotEntry(_message.Message):
    __slots__ = ("transactional_id", "value")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    value: bytes
    def __init__(self, transactional_id: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "session_timeout_ms", "rebalance_timeout_ms", "topics", "group_instance_id", "protocol_type", "protocols", "client_id", "require_known_member_id", "reason")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_KNOWN_MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: _containers.RepeatedScalarFieldContainer[str]
    group_instance_id: str
    protocol_type: str
    protocols: _containers.RepeatedCompositeFieldContainer[GroupProtocol]
    client_id: str
    require_known_member_id: bool
    reason: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., topics: _Optional[_Iterable[str]] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocols: _Optional[_Iterable[_Union[GroupProtocol, _Mapping]]] = ..., client_id: _Optional[str] = ..., require_known_member_id: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class GroupProtocol(_message.Message):
    __slots__ = ("name", "metadata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    metadata: bytes
    def __init__(self, name: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "metadata")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    metadata: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "generation_id", "member_id", "leader_id", "members", "protocol_type", "protocol_name", "member_list", "skip_assignment")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBER_LIST_FIELD_NUMBER: _ClassVar[int]
    SKIP_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    generation_id: int
    member_id: str
    leader_id: str
    members: _containers.RepeatedScalarFieldContainer[str]
    protocol_type: str
    protocol_name: str
    member_list: _containers.RepeatedCompositeFieldContainer[JoinGroupMember]
    skip_assignment: bool
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., leader_id: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., member_list: _Optional[_Iterable[_Union[JoinGroupMember, _Mapping]]] = ..., skip_assignment: _Optional[bool] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "protocol_type", "protocol_name", "assignments")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocol_name: str
    assignments: _containers.RepeatedCompositeFieldContainer[SyncGroupAssignment]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[SyncGroupAssignment, _Mapping]]] = ...) -> None: ...

class SyncGroupAssignment(_message.Message):
    __slots__ = ("member_id", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "assignment", "assignment_bytes", "protocol_type", "protocol_name")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    assignment_bytes: bytes
    protocol_type: str
    protocol_name: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., assignment_bytes: _Optional[bytes] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMemberIdentity]
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMemberIdentity, _Mapping]]] = ...) -> None: ...

class GroupMemberIdentity(_message.Message):
    __slots__ = ("member_id", "group_instance_id")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class LeaveGroupResult(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "error_code", "error_message")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    error_code: int
    error_message: str
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "members")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    members: _containers.RepeatedCompositeFieldContainer[LeaveGroupResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., members: _Optional[_Iterable[_Union[LeaveGroupResult, _Mapping]]] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribedGroupMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "metadata", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., metadata: _Optional[bytes] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class DescribedGroup(_message.Message):
    __slots__ = ("group_id", "error_code", "error_message", "state", "protocol_type", "protocol", "members", "generation_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: int
    error_message: str
    state: str
    protocol_type: str
    protocol: str
    members: _containers.RepeatedCompositeFieldContainer[DescribedGroupMember]
    generation_id: int
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., state: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol: _Optional[str] = ..., members: _Optional[_Iterable[_Union[DescribedGroupMember, _Mapping]]] = ..., generation_id: _Optional[int] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "groups")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    groups: _containers.RepeatedCompositeFieldContainer[DescribedGroup]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[DescribedGroup, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("states_filter", "types_filter")
    STATES_FILTER_FIELD_NUMBER: _ClassVar[int]
    TYPES_FILTER_FIELD_NUMBER: _ClassVar[int]
    states_filter: _containers.RepeatedScalarFieldContainer[str]
    types_filter: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, states_filter: _Optional[_Iterable[str]] = ..., types_filter: _Optional[_Iterable[str]] = ...) -> None: ...

class ListedGroup(_message.Message):
    __slots__ = ("group_id", "protocol_type", "state")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    protocol_type: str
    state: str
    def __init__(self, group_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "groups")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    groups: _containers.RepeatedCompositeFieldContainer[ListedGroup]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[ListedGroup, _Mapping]]] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupResult(_message.Message):
    __slots__ = ("group_id", "error_code", "error_message")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: int
    error_message: str
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[DeleteGroupResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[DeleteGroupResult, _Mapping]]] = ...) -> None: ...

class OffsetEntry(_message.Message):
    __slots__ = ("topic", "partition", "offset", "metadata", "leader_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    metadata: str
    leader_epoch: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "offsets", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetEntry]
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[OffsetEntry, _Mapping]]] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class OffsetCommitResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[PartitionError]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[PartitionError, _Mapping]]] = ...) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group_id", "partitions", "require_stable")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_STABLE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    require_stable: bool
    def __init__(self, group_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., require_stable: _Optional[bool] = ...) -> None: ...

class OffsetFetchResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "offset", "metadata", "leader_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    offset: int
    metadata: str
    leader_epoch: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[OffsetFetchResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[OffsetFetchResult, _Mapping]]] = ...) -> None: ...

class TxnOffsetCommitRequest(_message.Message):
    __slots__ = ("transactional_id", "group_id", "producer_id", "producer_epoch", "generation_id", "member_id", "group_instance_id", "offsets", "add_partitions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ADD_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetEntry]
    add_partitions: bool
    def __init__(self, transactional_id: _Optional[str] = ..., group_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[OffsetEntry, _Mapping]]] = ..., add_partitions: _Optional[bool] = ...) -> None: ...

class TxnOffsetCommitResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[PartitionError]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[PartitionError, _Mapping]]] = ...) -> None: ...

class OffsetLogValue(_message.Message):
    __slots__ = ("offset", "metadata", "commit_time_ms", "leader_epoch")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    metadata: str
    commit_time_ms: int
    leader_epoch: int
    def __init__(self, offset: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_time_ms: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class OffsetsSnapshot(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[OffsetsSnapshotRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[OffsetsSnapshotRecord, _Mapping]]] = ...) -> None: ...

class OffsetsSnapshotRecord(_message.Message):
    __slots__ = ("offset", "key", "value", "producer_id")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    offset: int
    key: bytes
    value: bytes
    producer_id: int
    def __init__(self, offset: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., producer_id: _Optional[int] = ...) -> None: ...

class MessageHeader(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class HalfMessage(_message.Message):
    __slots__ = ("topic", "partition", "key", "value", "headers", "message_id", "tag", "keys", "check_immunity_ms", "born_timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    CHECK_IMMUNITY_MS_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[MessageHeader]
    message_id: str
    tag: str
    keys: str
    check_immunity_ms: int
    born_timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[MessageHeader, _Mapping]]] = ..., message_id: _Optional[str] = ..., tag: _Optional[str] = ..., keys: _Optional[str] = ..., check_immunity_ms: _Optional[int] = ..., born_timestamp_ms: _Optional[int] = ...) -> None: ...

class SendHalfMessageRequest(_message.Message):
    __slots__ = ("producer_group", "message")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    message: HalfMessage
    def __init__(self, producer_group: _Optional[str] = ..., message: _Optional[_Union[HalfMessage, _Mapping]] = ...) -> None: ...

class SendHalfMessageResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "transaction_id", "message_id", "half_offset", "shard", "storage")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    HALF_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    transaction_id: str
    message_id: str
    half_offset: int
    shard: int
    storage: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., transaction_id: _Optional[str] = ..., message_id: _Optional[str] = ..., half_offset: _Optional[int] = ..., shard: _Optional[int] = ..., storage: _Optional[str] = ...) -> None: ...

class EndHalfTransactionRequest(_message.Message):
    __slots__ = ("transaction_id", "producer_group", "message_id", "resolution", "source")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    producer_group: str
    message_id: str
    resolution: TransactionResolution
    source: TransactionSource
    def __init__(self, transaction_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., message_id: _Optional[str] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ..., source: _Optional[_Union[TransactionSource, str]] = ...) -> None: ...

class EndHalfTransactionResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "already_decided")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ALREADY_DECIDED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    already_decided: bool
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., already_decided: _Optional[bool] = ...) -> None: ...

class CheckBackRequest(_message.Message):
    __slots__ = ("producer_group", "client_id")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    client_id: str
    def __init__(self, producer_group: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class TransactionCheck(_message.Message):
    __slots__ = ("transaction_id", "producer_group", "message", "check_times", "shard", "half_offset")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHECK_TIMES_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    HALF_OFFSET_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    producer_group: str
    message: HalfMessage
    check_times: int
    shard: int
    half_offset: int
    def __init__(self, transaction_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., message: _Optional[_Union[HalfMessage, _Mapping]] = ..., check_times: _Optional[int] = ..., shard: _Optional[int] = ..., half_offset: _Optional[int] = ...) -> None: ...

class DeliverCheckRequest(_message.Message):
    __slots__ = ("check", "probe_only")
    CHECK_FIELD_NUMBER: _ClassVar[int]
    PROBE_ONLY_FIELD_NUMBER: _ClassVar[int]
    check: TransactionCheck
    probe_only: bool
    def __init__(self, check: _Optional[_Union[TransactionCheck, _Mapping]] = ..., probe_only: _Optional[bool] = ...) -> None: ...

class DeliverCheckResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "delivered")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    delivered: bool
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., delivered: _Optional[bool] = ...) -> None: ...

class VerifyHalfWriteRequest(_message.Message):
    __slots__ = ("shard", "producer_id", "topic", "partition")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    shard: int
    producer_id: int
    topic: str
    partition: int
    def __init__(self, shard: _Optional[int] = ..., producer_id: _Optional[int] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class VerifyHalfWriteResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ListHalfMessagesRequest(_message.Message):
    __slots__ = ("producer_group",)
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    def __init__(self, producer_group: _Optional[str] = ...) -> None: ...

class HalfMessageListing(_message.Message):
    __slots__ = ("transaction_id", "producer_group", "topic", "partition", "message_id", "store_time_ms", "check_times", "last_check_ms", "shard", "half_offset", "storage", "unanswered_checks", "node_id", "next_check_ms")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    CHECK_TIMES_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECK_MS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    HALF_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    UNANSWERED_CHECKS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_CHECK_MS_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    producer_group: str
    topic: str
    partition: int
    message_id: str
    store_time_ms: int
    check_times: int
    last_check_ms: int
    shard: int
    half_offset: int
    storage: str
    unanswered_checks: int
    node_id: int
    next_check_ms: int
    def __init__(self, transaction_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., message_id: _Optional[str] = ..., store_time_ms: _Optional[int] = ..., check_times: _Optional[int] = ..., last_check_ms: _Optional[int] = ..., shard: _Optional[int] = ..., half_offset: _Optional[int] = ..., storage: _Optional[str] = ..., unanswered_checks: _Optional[int] = ..., node_id: _Optional[int] = ..., next_check_ms: _Optional[int] = ...) -> None: ...

class ListHalfMessagesResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "messages")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    messages: _containers.RepeatedCompositeFieldContainer[HalfMessageListing]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[HalfMessageListing, _Mapping]]] = ...) -> None: ...
