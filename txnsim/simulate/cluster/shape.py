"""The simulated cluster's fixed shape: how many `__consumer_offsets` shards it has and the group settings
its nodes run with (short: a run lasts seconds). Kept apart so the actors and the model can name them
without importing the nodes."""
from __future__ import annotations

from proto.hashing import partition_for

OFFSETS_SHARDS = 2
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
