"""Node settings: Kafka's (and RocketMQ's) names in snake_case, Kafka's defaults, validated once."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from proto.errors import KafkaConfigurationError


@dataclass(frozen=True, slots=True)
class NodeConfig:
    # __transaction_state and __consumer_offsets shard counts (stored with the data)
    txn_shards: int = 50
    offsets_shards: int = 50
    # transaction coordinator
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    producer_id_block_size: int = 1000
    #: a __transaction_state shard is snapshotted after this many writes, so loading stays short
    transaction_state_snapshot_interval_records: int = 1000
    # liveness: a node whose heartbeat stands still this long is counted out (its logs are taken
    # over and it is fenced); a dead node is noticed at once through its node lock
    broker_session_timeout_ms: int = 2000
    broker_heartbeat_interval_ms: int = 100
    #: a __consumer_offsets shard is snapshotted after this many writes, so loading stays short
    offsets_snapshot_interval_records: int = 1000
    # log
    log_segment_bytes: int = 64 * 1024 * 1024
    #: internal shards roll small segments, so snapshots can delete the history they cover
    internal_log_segment_bytes: int = 1024 * 1024
    message_max_bytes: int = 1_048_588
    # group coordinator
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    # RocketMQ-style check-back (planned; accepted now so cluster files stay valid)
    transaction_check_interval_ms: int = 60_000
    transaction_check_max: int = 15

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise KafkaConfigurationError(f"node setting {f.name} must be a positive integer, not {value!r}")
        if self.txn_shards > 10_000 or self.offsets_shards > 10_000:
            raise KafkaConfigurationError("txn_shards and offsets_shards must be at most 10000")

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> NodeConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise KafkaConfigurationError(f"unknown node settings: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**settings)

    def as_settings(self) -> dict[str, int]:
        return dataclasses.asdict(self)
