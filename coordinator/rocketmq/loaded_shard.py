"""A half-message shard this node serves: its core (half_shard.py), its three logs, and the driver's
bookkeeping of work in flight; and the one way the driver writes to those logs (written, then made
durable through the node's I/O, then the callback).

The lock guards the core and the bookkeeping only: it is never held while calling into the I/O, whose
callbacks may run before the call returns (coordinator/runtime/io.py).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.rocketmq import log_format
from coordinator.rocketmq.half_shard import HalfShard
from coordinator.runtime.io import NodeIO, Outcome
from coordinator.runtime.shard_status import ShardStatus
from partitions import AppendOrigin, PartitionLog
from proto.errors import KafkaError
from proto.structs import TopicPartition

#: where a write's outcome goes: the base offset it landed at once durable, or why it could not be made
Written = Callable[[int | KafkaError], None]


@dataclass(eq=False)
class LoadedShard:
    shard: int
    core: HalfShard
    half_log: PartitionLog
    op_log: PartitionLog
    discard_log: PartitionLog
    status: ShardStatus = ShardStatus.LOADING
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: (producer group, message id) -> the answers waiting for the send being made durable now: a retry of it
    #: arriving meanwhile hears that send's outcome instead of storing a second message
    sending: dict[tuple[str, str], list[Callable[[Outcome], None]]] = field(default_factory=dict)
    #: real partitions a copy is being written to (one round at a time per partition)
    copying: set[TopicPartition] = field(default_factory=set)
    #: transactions whose in-place marker is being written
    marking: set[str] = field(default_factory=set)
    #: transaction id -> ends waiting for the effect of their decision before they answer
    waiting: dict[str, list[Callable[[], None]]] = field(default_factory=dict)
    #: let go of (moved away, or the node stops): late callbacks answer NOT_COORDINATOR and do nothing else
    released: bool = False


def write(io: NodeIO, plog: PartitionLog, rows: list[Any], done: Written) -> None:
    """Append `rows` (log_format records) to one of a shard's logs and make them durable; then `done`."""
    try:
        appended = plog.append(log_format.encode(rows), origin=AppendOrigin.COORDINATOR, wait_durable=False)
    except KafkaError as exc:
        done(exc)
        return

    def durable(failures: dict[PartitionLog, KafkaError]) -> None:
        error = failures.get(plog)
        done(appended.base_offset if error is None else error)
    io.durable({plog: appended.last_offset + 1}, durable)

