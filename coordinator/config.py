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
    # the Kafka port (coordinator/kafka/server.py): connections and the requests they may hold
    max_connections: int = 10_000
    max_connections_per_ip: int = 2**31 - 1
    connections_max_idle_ms: int = 600_000
    #: how long the bytes of one request may take to arrive once the first has (a trickle holds nothing open)
    request_arrival_timeout_ms: int = 30_000
    socket_request_max_bytes: int = 104_857_600
    queued_max_request_bytes: int = 512 * 1024 * 1024
    # topics
    #: partitions of a topic created without saying (Kafka's num.partitions), by CreateTopics or auto-creation
    num_partitions: int = 1
    #: whether Metadata naming an unknown topic creates it (Kafka's auto.create.topics.enable; off by default,
    #: as Redpanda's, so a typo is an error, not a topic)
    auto_create_topics_enable: bool = False
    #: how long a data log keeps a sealed segment past its newest record (a topic's retention.ms overrides it)
    log_retention_ms: int = 604_800_000
    #: how often each node deletes what retention lets go (Kafka's log.retention.check.interval.ms)
    log_retention_check_interval_ms: int = 300_000
    # group coordinator
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    #: how long the first rebalance of an empty group waits for more members (Kafka's group.initial.rebalance.delay.ms)
    group_initial_rebalance_delay_ms: int = 3_000
    # RocketMQ-style transactional messages (half messages and check-back), RocketMQ 5's defaults:
    #: shards of RMQ_SYS_TRANS_HALF_TOPIC (a producer group's half messages live in one)
    half_shards: int = 10
    #: how often an undecided half message is checked back (RocketMQ's transactionCheckInterval)
    transaction_check_interval_ms: int = 30_000
    #: checks before an undecided message is discarded to TRANS_CHECK_MAX_TIME_TOPIC (transactionCheckMax)
    transaction_check_max: int = 15
    #: how old an undecided half message must be before its first check (RocketMQ's transactionTimeOut;
    #: a message's own check immunity replaces it)
    half_message_timeout_ms: int = 6_000
    #: how topics without their own choice store undecided messages: "rocketmq" or "kafka"
    half_message_storage: str = "rocketmq"
    # a replicated cluster (nodes on hosts of their own, a controller on ZooKeeper: `txnsim node start`)
    #: how long a node's ZooKeeper session outlives its last heartbeat (Kafka's zookeeper.session.timeout.ms
    #: is 18 s; txnsim's is shorter so a dead leader's partitions move within seconds)
    zookeeper_session_timeout_ms: int = 6_000
    #: acks=all writes of a topic without its own min.insync.replicas need this many in-sync replicas (Kafka: 1)
    min_insync_replicas: int = 1
    #: a follower this far behind its leader leaves the ISR (Kafka's replica.lag.time.max.ms)
    replica_lag_time_max_ms: int = 30_000
    #: copies of each __transaction_state shard, and the ISR its writes need (Kafka's
    #: transaction.state.log.replication.factor and .min.isr); the shards are created once this many brokers live
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    #: copies of each __consumer_offsets shard (Kafka's offsets.topic.replication.factor); the half-message
    #: topics take the same
    offsets_topic_replication_factor: int = 3
    #: let a live replica outside the ISR lead when no ISR member lives (Kafka's
    #: unclean.leader.election.enable, off by default): the partition serves again, and loses what only
    #: the dead ISR members had
    unclean_leader_election_enable: bool = False
    #: the controller hands each partition back to its preferred replica (the first assigned) once that one
    #: is in sync again, every leader_imbalance_check_interval_seconds (Kafka's auto.leader.rebalance.enable,
    #: 300 s)
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300

    def __post_init__(self) -> None:
        if self.half_message_storage not in ("rocketmq", "kafka"):
            raise KafkaConfigurationError(
                f"node setting half_message_storage must be 'rocketmq' or 'kafka', not {self.half_message_storage!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "half_message_storage":
                continue
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise KafkaConfigurationError(f"node setting {f.name} must be true or false, not {value!r}")
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise KafkaConfigurationError(f"node setting {f.name} must be a positive integer, not {value!r}")
        if max(self.txn_shards, self.offsets_shards, self.half_shards) > 10_000:
            raise KafkaConfigurationError("txn_shards, offsets_shards and half_shards must be at most 10000")

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> NodeConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise KafkaConfigurationError(f"unknown node settings: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**settings)

    def as_settings(self) -> dict[str, int | str]:
        return dataclasses.asdict(self)
