"""What a node lets go of and takes when ownership changes: one rule for the real node and the simulator.

A log is released when the placement names another owner, and dropped as fenced when a later
leader epoch was claimed for it meanwhile (this node was paused or cut off while another took the
log over, perhaps already handing it back): its in-memory state is stale even if the placement
names this node again, so it is reopened (and reloaded) at a new epoch.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from partitions import PartitionLog
from proto.structs import CHECK_MAX_TOPIC, CONSUMER_OFFSETS_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, TRANSACTION_STATE_TOPIC


class OwnedLog(Protocol):
    topic: str
    partition: int

    @property
    def fenced(self) -> bool: ...


L = TypeVar("L", bound=OwnedLog)


def logs_to_release(open_logs: Iterable[L], owner: Callable[[str, int], int], node_id: int) -> list[tuple[L, str]]:
    """(log, "fenced" or "released") for every open log this node must close, in a stable order."""
    out = []
    for log in sorted(open_logs, key=lambda log: (log.topic, log.partition)):
        fenced = log.fenced
        if owner(log.topic, log.partition) == node_id and not fenced:
            continue
        out.append((log, "fenced" if fenced else "released"))
    return out


class ShardLogs(Protocol):
    """The node's open logs (partitions.LogManager)."""

    def open_logs(self) -> list[PartitionLog]: ...

    def get(self, topic: str, partition: int) -> PartitionLog | None: ...

    def close(self, topic: str, partition: int) -> None: ...


class ShardHolder(Protocol):
    def unload_shard(self, shard: int) -> None: ...


class TxnShards(ShardHolder, Protocol):
    def load_shard(self, shard: int, shard_log: PartitionLog) -> tuple[int, int]: ...


class GroupShards(ShardHolder, Protocol):
    def load_shard(self, shard: int, log: Any) -> object: ...


class HalfShards(ShardHolder, Protocol):
    def load_shard(self, shard: int, half_log: PartitionLog, op_log: PartitionLog,
                   discard_log: PartitionLog) -> None: ...


@dataclass(frozen=True)
class ShardCounts:
    txn: int
    offsets: int
    half: int


#: the logs of each coordinator's shard, by the topic ownership is placed by (a half shard has three)
SHARD_LOGS: dict[str, tuple[str, ...]] = {
    TRANSACTION_STATE_TOPIC: (TRANSACTION_STATE_TOPIC,),
    CONSUMER_OFFSETS_TOPIC: (CONSUMER_OFFSETS_TOPIC,),
    HALF_TOPIC: (HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TOPIC),
}
_KIND_OF = {topic: kind for kind, topics in SHARD_LOGS.items() for topic in topics}


class ShardReconciler:
    """Which coordinator shards a node serves, kept in line with the placement: one driver for the node
    process (coordinator/node.py) and the simulated node.

    A pass lets go of every log that moved away or was fenced (logs_to_release) and of every shard one of
    whose logs is no longer the one it was loaded from (closed meanwhile), unloading its coordinator first;
    then it takes the shards the placement gives this node: opens their logs (`acquire`, None when the
    previous owner still holds one, or its files are damaged) and loads them into their coordinator."""

    def __init__(self, *, node_id: int, logs: ShardLogs, owner_of: Callable[[str, int], int], counts: ShardCounts,
                 txn: TxnShards, groups: GroupShards, half: HalfShards,
                 acquire: Callable[[str, int, str], PartitionLog | None],
                 released: Callable[[PartitionLog, str, str], None],
                 loaded: Callable[[str, int, str, int], None] | None = None,
                 unloaded: Callable[[str, int, int], None] | None = None) -> None:
        """`acquire(topic, partition, reason)` opens a log as its leader; `released(log, "fenced" or "released",
        reason)` hears of each log let go; `loaded(topic, shard, what, leader_epoch)` of each shard loaded, and
        `unloaded(topic, shard, leader_epoch)` of each given up because its log is no longer led here (a
        replicated cluster's leaderships come and go with the controller, not through acquire and release)."""
        self._node_id = node_id
        self._logs = logs
        self._owner_of = owner_of
        self._counts = {TRANSACTION_STATE_TOPIC: counts.txn, CONSUMER_OFFSETS_TOPIC: counts.offsets,
                        HALF_TOPIC: counts.half}
        self._txn, self._groups, self._half = txn, groups, half
        self._acquire = acquire
        self._released = released
        self._loaded = loaded
        self._unloaded = unloaded
        #: (kind, shard) -> the logs it was loaded from
        self._held: dict[tuple[str, int], tuple[PartitionLog, ...]] = {}
        #: the leader epoch of each log when its shard was loaded: a replica's log stays the same object when its
        #: node stops leading it and later leads it again, at a higher epoch, with a history another leader
        #: wrote meanwhile, so the shard is loaded again
        self._epochs: dict[tuple[str, int], tuple[int, ...]] = {}

    def run(self, reason: str) -> int:
        """One pass; returns how many shards this node should serve but could not take yet."""
        for plog, action in logs_to_release(self._logs.open_logs(), self._owner_of, self._node_id):
            kind = _KIND_OF.get(plog.topic)
            if kind is not None and self._held.pop((kind, plog.partition), None) is not None:
                self._holder(kind).unload_shard(plog.partition)
            self._logs.close(plog.topic, plog.partition)
            self._released(plog, action, reason)
        for (kind, shard), held in sorted(self._held.items()):
            if tuple(self._logs.get(topic, shard) for topic in SHARD_LOGS[kind]) != held or any(
                    plog.leader_epoch != epoch for plog, epoch in zip(held, self._epochs[(kind, shard)])):
                del self._held[(kind, shard)]
                self._holder(kind).unload_shard(shard)
                if self._unloaded is not None:
                    self._unloaded(kind, shard, held[0].leader_epoch)
        missing = 0
        for kind, count in self._counts.items():
            for shard in range(count):
                if self._owner_of(kind, shard) != self._node_id or (kind, shard) in self._held:
                    continue
                taken = [self._logs.get(topic, shard) or self._acquire(topic, shard, reason)
                         for topic in SHARD_LOGS[kind]]
                logs = [plog for plog in taken if plog is not None]
                if len(logs) < len(taken):
                    missing += 1
                    continue
                self._held[(kind, shard)] = tuple(logs)
                self._epochs[(kind, shard)] = tuple(plog.leader_epoch for plog in logs)
                if kind == TRANSACTION_STATE_TOPIC:
                    ids, replayed = self._txn.load_shard(shard, logs[0])
                    what = (f"{ids} ids, {replayed} records replayed from offset {logs[0].log_start_offset} or its "
                            "snapshot")
                elif kind == CONSUMER_OFFSETS_TOPIC:
                    what = f"{self._groups.load_shard(shard, logs[0])}"
                else:
                    self._half.load_shard(shard, *logs)
                    what = "its half, OP and discard logs replayed"
                if self._loaded is not None:
                    self._loaded(kind, shard, what, logs[0].leader_epoch)
        return missing

    def held(self, kind: str) -> list[int]:
        """The shards of `kind` (its placement topic) loaded now."""
        return sorted(shard for k, shard in self._held if k == kind)

    def _holder(self, kind: str) -> ShardHolder:
        return self._txn if kind == TRANSACTION_STATE_TOPIC else self._groups if kind == CONSUMER_OFFSETS_TOPIC \
            else self._half
