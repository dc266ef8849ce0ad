"""txnsim: a Kafka-style transaction coordinator you can run, break and watch.

The public API in one import path (see API.md); the code lives in the design card's packages.

Names are imported on first use (PEP 562), so that a command of the console script, which lives under this
package, pays only for the modules it uses and not for the whole client.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: each public name, by the module it comes from
_SOURCES: dict[str, tuple[str, ...]] = {
    "consumer": ("Consumer",),
    "producer": ("Producer",),
    "producer.local_transaction": ("LocalTransactionState", "TransactionListener", "TransactionMessage",
                                   "TransactionSendResult"),
    "proto.errors": ("CommitFailedError", "ConcurrentTransactionsError", "CoordinatorNotAvailableError",
                     "IllegalStateError", "InvalidProducerEpochError", "InvalidTransactionTimeoutError",
                     "InvalidTxnStateError", "KafkaConfigurationError", "KafkaConnectionError", "KafkaError",
                     "KafkaTimeoutError", "MessageSizeTooLargeError", "NoBrokersAvailable", "NotCoordinatorError",
                     "NotLeaderForPartitionError", "OutOfOrderSequenceError", "ProducerFencedError",
                     "RecordTooLargeError", "TransactionAbortableError", "TransactionAbortedError",
                     "UnknownTopicOrPartitionError"),
    "proto.structs": ("ConsumerGroupMetadata", "ConsumerRecord", "OffsetAndMetadata", "OffsetAndTimestamp",
                      "RecordMetadata", "TopicPartition", "TransactionState"),
    "txnsim.admin": ("Admin", "NewTopic"),
    "txnsim.cluster": ("LocalCluster",),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}
#: submodules an eager import used to bind on the package as a side effect
_SUBMODULES = ("admin", "cluster", "errors")

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


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:  # `txnsim.errors.X`, as kafka.errors.X; `txnsim.cluster.LocalCluster`
        return importlib.import_module(f"txnsim.{name}")
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'txnsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
