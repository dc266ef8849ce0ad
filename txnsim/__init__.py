"""txnsim: a Kafka-style transaction coordinator you can run, break and watch.

The public API in one import path (see API.md); the code lives in the design card's packages.
"""
from proto import errors
from proto.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
    TransactionState,
)
from txnsim.admin import Admin
from txnsim.cluster import LocalCluster
from producer.local_transaction import (LocalTransactionState, TransactionListener, TransactionMessage,
                                        TransactionSendResult)

try:  # the clients land package by package; the facade must import while one is missing
    from producer import Producer
except ImportError:  # pragma: no cover
    Producer = None  # type: ignore[assignment,misc]
try:
    from consumer import Consumer
except ImportError:  # pragma: no cover
    Consumer = None  # type: ignore[assignment,misc]

__all__ = [
    "Admin", "Consumer", "ConsumerGroupMetadata", "ConsumerRecord", "LocalCluster", "LocalTransactionState",
    "OffsetAndMetadata", "Producer", "RecordMetadata", "TopicPartition", "TransactionListener",
    "TransactionMessage", "TransactionSendResult", "TransactionState", "errors",
]
