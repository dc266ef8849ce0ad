"""The values a partition log takes and returns: its config, append origins and results, fetches.

Plain frozen dataclasses with no behaviour beyond validation, so the node, the coordinators
and the tests can build and compare them freely. LogConfig is validated once, at construction.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from proto.errors import KafkaConfigurationError
from proto.planted_bugs import PlantedBug


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log (Kafka's names, snake_case, Kafka's defaults)."""

    segment_bytes: int = 64 * 1024 * 1024
    #: a batch larger than this (header included) is refused with RecordTooLargeError
    message_max_bytes: int = 1048588
    #: fsync before acknowledging; tests keep it on, a benchmark may turn it off
    fsync: bool = True
    #: the simulator's planted bugs (`txnsim simulate --bug`) of the log switch off one of its protections;
    #: never set by a real node
    planted_bug: PlantedBug | None = None

    def __post_init__(self) -> None:
        if self.segment_bytes < 1:
            raise KafkaConfigurationError(f"segment_bytes must be positive, not {self.segment_bytes}")
        if self.message_max_bytes < 1:
            raise KafkaConfigurationError(f"message_max_bytes must be positive, not {self.message_max_bytes}")


class AppendOrigin(enum.Enum):
    """Who is writing: clients are checked for sequences and transaction verification."""

    CLIENT = "client"
    #: internal writers (the group coordinator's offset records, the transaction log):
    #: no sequence checks, no verification, but epochs and open transactions are tracked
    COORDINATOR = "coordinator"


class ReplicaRole(enum.Enum):
    """What a replicated log does now (an unreplicated log, one copy, has no role: it always leads)."""

    #: takes client writes, stamped with its leader epoch
    LEADER = "leader"
    #: takes only its leader's batches, as they are, and may be cut back to the leader's history
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed; `duplicate` means it had already been written at these offsets."""

    base_offset: int
    last_offset: int
    duplicate: bool = False
    log_start_offset: int = 0


@dataclass(frozen=True, slots=True)
class FetchData:
    """Whole batches read from the log, and what a read_committed consumer needs to filter them."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: (producer_id, first_offset) of aborted transactions overlapping the returned data
    aborted_transactions: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    """One producer's state on this partition, as DescribeProducers reports it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1 when no transaction is open


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A transaction with data on this partition and no marker yet (find-hanging looks at these)."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    last_timestamp: int


@dataclass(frozen=True, slots=True)
class RecoveryStats:
    """How opening a log rebuilt its state: which segments it scanned, from which snapshot, replaying how much."""

    #: offset of the snapshot loaded, None for a replay of the whole log
    snapshot_offset: int | None
    #: where the replay started and how many batches it applied
    replayed_from: int
    replayed_batches: int
    #: one line per snapshot file that was deleted instead of loaded, and why
    discarded_snapshots: tuple[str, ...] = ()
    #: segments read and CRC-checked batch by batch, and sealed ones loaded from their saved index
    scanned_segments: int = 0
    indexed_segments: int = 0
