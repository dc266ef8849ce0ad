"""Rebuilding a half-message shard from its three logs, when a node (or a simulated one) takes it over,
and when the simulator's final read checks what the nodes left.

Order matters: the half log first (every message and its newest count), then the OP log (decisions
and DONE records), then the discard log (a message discarded before its OP record is decided too).
"""
from __future__ import annotations

from coordinator.rocketmq import log_format
from coordinator.rocketmq.half_shard import HalfShard
from partitions import PartitionLog


def load_half_shard(shard: int, check_interval_ms: int, check_max: int, half_log: PartitionLog,
                    op_log: PartitionLog, discard_log: PartitionLog, *, to_log_end: bool = False) -> HalfShard:
    """The shard from its logs up to their high watermarks, or with `to_log_end` all they have fsynced (a
    shard taken over: see PartitionLog.batches)."""
    core = HalfShard(shard, check_interval_ms, check_max)
    for batch in half_log.batches(half_log.log_start_offset, to_log_end=to_log_end):
        for record in batch.records():
            core.replay_half(record.offset, log_format.decode_half(record))
    for batch in op_log.batches(op_log.log_start_offset, to_log_end=to_log_end):
        for record in batch.records():
            core.replay_op(log_format.decode_op(record))
    for batch in discard_log.batches(discard_log.log_start_offset, to_log_end=to_log_end):
        for record in batch.records():
            core.replay_discard(record.offset, log_format.decode_half(record))
    return core
