"""txnsim: a Kafka-style transaction coordinator you can run, break and watch.

The public API in one import path (see API.md); the code lives in the design card's packages.
"""
from consumer import Consumer
from producer import Producer
from producer.local_transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionMessage,
    TransactionSendResult,
)
from proto.errors import (  # kafka-python's names, also reachable as txnsim.errors.X
    CommitFailedError,
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NoBrokersAvailable,
    NotCoordinatorError,
    NotLeaderForPartitionError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RecordTooLargeError,
    TransactionAbortableError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
)
from proto.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
    TransactionState,
)
from txnsim import errors
from txnsim.admin import Admin, NewTopic
from txnsim.cluster import LocalCluster

__all__ = [
    "Admin",
    "CommitFailedError",
    "ConcurrentTransactionsError",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "CoordinatorNotAvailableError",
    "IllegalStateError",
    "InvalidProducerEpochError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "KafkaConfigurationError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "LocalCluster",
    "LocalTransactionState",
    "NewTopic",
    "MessageSizeTooLargeError",
    "NoBrokersAvailable",
    "NotCoordinatorError",
    "NotLeaderForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OutOfOrderSequenceError",
    "Producer",
    "ProducerFencedError",
    "RecordMetadata",
    "RecordTooLargeError",
    "TopicPartition",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionListener",
    "TransactionMessage",
    "TransactionSendResult",
    "TransactionState",
    "UnknownTopicOrPartitionError",
    "errors",
]
