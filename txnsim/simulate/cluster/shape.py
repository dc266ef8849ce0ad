"""The simulated cluster's configuration: its size, its topics and shards, and the group and half-message
settings its nodes run with (short: a run lasts seconds). Kept apart so the actors, the control plane and
the model can name them without importing one another."""
from __future__ import annotations

from proto.hashing import partition_for

NODES = 3
#: the transactional producers' topic, the copiers' output topic and the Spark-style batch's topic
TOPIC = "sim"
OUT_TOPIC = "sim-out"
BATCH_TOPIC = "sim-batch"
PARTITIONS = 4
TXN_SHARDS = 4
OFFSETS_SHARDS = 2
#: the RocketMQ producers' topics: one storing half messages RocketMQ's way, one in place (Kafka's way)
RMQ_TOPIC = "sim-rmq"
RMQ_IN_PLACE_TOPIC = "sim-rmq-in-place"
RMQ_TOPICS = (RMQ_TOPIC, RMQ_IN_PLACE_TOPIC)
RMQ_PARTITIONS = 2
#: a short initial delay: the simulated members start together
GROUP_INITIAL_REBALANCE_DELAY_MS = 100
GROUP_MIN_SESSION_TIMEOUT_MS = 100
GROUP_MAX_SESSION_TIMEOUT_MS = 60_000


def shard_of_group(group_id: str) -> int:
    return partition_for(group_id, OFFSETS_SHARDS)

#: RocketMQ half-message shards, with short intervals, so that a run sees checks, failovers between them,
#: and discards
HALF_SHARDS = 2
CHECK_INTERVAL_MS = 500
CHECK_IMMUNITY_MS = 300
CHECK_MAX = 5


def shard_of_producer_group(group: str) -> int:
    return partition_for(group, HALF_SHARDS)
