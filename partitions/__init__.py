"""The durable log of one partition: segments, group-committed fsync, producer state, LSO, recovery.

Imports only proto/ and the standard library; coordinator/ builds on it, clients never see it.
Invariant kept throughout: nothing is acknowledged or read before it is fsynced.
"""
from partitions.log import PartitionLog
from partitions.log_manager import LogManager
from partitions.model import (
    AppendOrigin,
    AppendResult,
    FetchData,
    LogConfig,
    OpenTransaction,
    ProducerSnapshot,
    RecoveryStats,
    ReplicaRole,
)
from partitions.replica_log import ReplicaLog

__all__ = [
    "AppendOrigin",
    "AppendResult",
    "FetchData",
    "LogConfig",
    "LogManager",
    "OpenTransaction",
    "PartitionLog",
    "ProducerSnapshot",
    "RecoveryStats",
    "ReplicaLog",
    "ReplicaRole",
]
