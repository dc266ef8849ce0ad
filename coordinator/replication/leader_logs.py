"""The partition leader's service (coordinator/partition_service.py) over replicated partitions: which logs this
node leads and who leads the others, as the controller's word to the ReplicaManager says, and what a durable
write waits for besides its fsync (the ISR, for acks=all and for markers).
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping

from coordinator.replication.leader import LeaderPartition
from coordinator.replication.manager import ReplicaManager
from partitions import LogConfig, PartitionLog
from proto.errors import KafkaError, NotLeaderOrFollowerError
from proto.structs import TopicPartition

#: how long an acks=all write waits for its ISR (Kafka's produce request timeout, 30 s by default)
REPLICATION_TIMEOUT_MS = 30_000


class ReplicatedLeaderLogs:
    """The LeaderLogs of a replicated node: the log of each partition it leads now. The manager opens and
    closes the logs; the partition service only serves them."""

    def __init__(self, manager: ReplicaManager, config: LogConfig) -> None:
        self._manager = manager
        self.config = config

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        leader = self._manager.leader(TopicPartition(topic, partition))
        return leader.log if leader is not None else None

    def open_as_leader(self, topic: str, partition: int, may_cut_off: Callable[[int], bool]) -> PartitionLog:
        opened = self.get(topic, partition)
        if opened is None:  # the controller named this node leader, and the manager has not taken it up yet
            raise NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] node {self._manager.node_id} is not yet "
                                           f"leading {topic}-{partition}")
        return opened

    def forget(self, topic: str, partition: int) -> None:
        return None

    def open_logs(self) -> list[PartitionLog]:
        return [leader.log for leader in self._manager.leaders()]

    def on_close(self, listener: Callable[[str, int], None]) -> None:
        self._manager.on_leadership_lost(listener)


class Leadership:
    """The Ownership of a replicated node: a partition's owner is its leader."""

    def __init__(self, manager: ReplicaManager) -> None:
        self._manager = manager

    def owner(self, topic: str, partition: int) -> int:
        return self._manager.leader_id_of(TopicPartition(topic, partition))

    def may_cut_off(self, node_id: int) -> bool:
        return False  # replicas never take a log over from a shared directory


class IsrReplication:
    """The Replication of a replicated node: acks=all (and markers) wait for every ISR member's fsync."""

    def __init__(self, manager: ReplicaManager, timeout_ms: int = REPLICATION_TIMEOUT_MS) -> None:
        self._manager = manager
        self._timeout_ms = timeout_ms

    def check_acks(self, partition_log: PartitionLog, acks: int) -> object:
        leader = self._manager.leader(TopicPartition(partition_log.topic, partition_log.partition))
        if leader is None:
            raise NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] node {self._manager.node_id} no longer leads "
                                           f"{partition_log.topic}-{partition_log.partition}")
        if acks == -1:
            leader.check_enough_replicas()
        return leader

    def replicated(self, writes: Mapping[PartitionLog, tuple[int, int, object]],
                   done: Callable[[dict[PartitionLog, KafkaError]], None]) -> None:
        failures: dict[PartitionLog, KafkaError] = {}
        waiting: list[tuple[PartitionLog, LeaderPartition]] = []
        for plog, (_end, acks, leadership) in writes.items():
            leader = self._manager.leader(TopicPartition(plog.topic, plog.partition))
            if leader is None or leader is not leadership or leader.resigned:
                failures[plog] = NotLeaderOrFollowerError(
                    f"[NOT_LEADER_OR_FOLLOWER] node {self._manager.node_id} stopped leading {plog.topic}-"
                    f"{plog.partition} before the write was answered; it may or may not survive")
                continue
            self._manager.appended(TopicPartition(plog.topic, plog.partition))
            if acks == -1:
                waiting.append((plog, leader))
        if not waiting:
            done(failures)
            return
        lock = threading.Lock()
        remaining = [len(waiting)]

        def answered(plog: PartitionLog, error: KafkaError | None) -> None:
            with lock:
                if error is not None:
                    failures[plog] = error
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                done(failures)
        for plog, leader in waiting:
            leader.wait_for_isr(writes[plog][0], self._timeout_ms, functools.partial(answered, plog))
