"""A simulated node's world: the I/O interface the shipping drivers run over (coordinator/runtime/io.py),
carried out on the simulator's clock, network and disk.

Timers are the node's simulated timers (a crash cancels them, a pause holds them); `soon` is a timer of no
delay; a make-durable is the node's fsync time later, then the real PartitionLog.make_durable on the
simulated disk (a power loss before it loses the write, unacknowledged); a call to another node is a
simulated message with its latency and faults, and one to this node runs its handler at once, as a node
process does. The planted bugs of acknowledging before the fsync live here, not in the drivers.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from coordinator.observers import NoObserver
from coordinator.rocketmq.log_format import HalfRecord
from coordinator.runtime.io import Cancellable, Failures, Outcome
from partitions import PartitionLog
from proto.errors import KafkaError, KafkaTimeoutError
from proto.planted_bugs import PlantedBug
from proto.structs import CONSUMER_OFFSETS_TOPIC, HALF_TOPIC, INTERNAL_TOPICS, TopicPartition
from txnsim.simulate.network import TIMED_OUT

if TYPE_CHECKING:
    from txnsim.simulate.cluster.roles import NodeCluster

#: a local call's handler: the request, and where its outcome goes
LocalHandler = Callable[[Any, Callable[[Outcome], None]], None]


def acknowledged_before_fsync(planted: PlantedBug | None, ends: Mapping[PartitionLog, int]) -> bool:
    """Whether a planted bug acknowledges these writes before their fsync: with ack-before-fsync, every write
    to a data partition; with ack-group-before-fsync, every write of a group coordinator (its membership
    records and offsets); with half-ack-before-fsync, every write of a half message (stored, or counted for a
    check)."""
    if planted is PlantedBug.ACK_BEFORE_FSYNC:
        return any(plog.topic not in INTERNAL_TOPICS for plog in ends)
    if planted is PlantedBug.ACK_GROUP_BEFORE_FSYNC:
        return any(plog.topic == CONSUMER_OFFSETS_TOPIC for plog in ends)
    if planted is PlantedBug.HALF_ACK_BEFORE_FSYNC:
        return any(plog.topic == HALF_TOPIC for plog in ends)
    return False


class SimIO:
    """NodeIO for one simulated node."""

    def __init__(self, name: str, node_id: int, model: NodeCluster) -> None:
        self.name = name
        self.node_id = node_id
        self._model = model
        self._net = model.network
        self.extra_fsync_ms = 0
        self._local: LocalHandler | None = None

    def serve_locally(self, handler: LocalHandler) -> None:
        self._local = handler

    @property
    def fsync_ms(self) -> int:
        return self._model.fsync_ms + self.extra_fsync_ms

    # ------------------------------------------------------------ NodeIO

    def now_ms(self) -> int:
        return self._net.now(self.name)

    def after(self, delay_ms: int, work: Callable[[], None], label: str) -> Cancellable:
        return self._net.set_timer(self.name, max(0, delay_ms), work, label=label)

    def soon(self, work: Callable[[], None], label: str) -> None:
        self._net.set_timer(self.name, 0, work, label=label)

    def durable(self, ends: Mapping[PartitionLog, int], done: Callable[[Failures], None]) -> None:
        """The fsync's time passes, then it happens (a power loss in between loses the writes), then `done`."""
        ends = dict(ends)
        early = acknowledged_before_fsync(self._model.planted, ends)
        if early:  # a planted bug: acknowledged before the fsync
            done({})

        def fsync() -> None:
            failures: Failures = {}
            for plog, end in ends.items():
                try:
                    plog.make_durable(end)
                except KafkaError as exc:
                    failures[plog] = exc
                    continue
                self._model.recorder.appended(self.name, plog, -1, -1)
            if not early:
                done(failures)
        self._net.set_timer(self.name, self.fsync_ms, fsync, label="fsync")

    def call(self, node_id: int, request: Any, timeout_ms: int, done: Callable[[Outcome], None]) -> None:
        if node_id == self.node_id and self._local is not None:
            self._local(request, done)
            return

        def answered(response: object) -> None:
            done(KafkaTimeoutError(f"node n{node_id} did not answer {type(request).__name__} within {timeout_ms} ms")
                 if response is TIMED_OUT else response)
        self._net.call(self.name, f"n{node_id}", request, timeout_ms, answered)


class TraceObserver(NoObserver):
    """What the drivers report (coordinator/observers.py), as notes in the run's trace."""

    def __init__(self, name: str, model: NodeCluster) -> None:
        self._name = name
        self._model = model

    def shard_snapshotted(self, topic: str, shard: int, next_offset: int, log_start_offset: int) -> None:
        self._model.recorder.note(self._name, f"snapshot of {topic}-{shard} up to offset {next_offset}, log from "
                                     f"{log_start_offset}")

    def ownership_changed(self, action: str, topic: str, partition: int, leader_epoch: int) -> None:
        self._model.recorder.ownership_changed(self._name, topic, partition, leader_epoch)

    def check_back_sent(self, transaction_id: str, record: HalfRecord, via_peer: bool) -> None:
        self._model.recorder.rmq_check_sent(self._name, transaction_id, record, via_peer=via_peer)

    def half_message_discarded(self, transaction_id: str) -> None:
        self._model.recorder.rmq_discarded(transaction_id)

    def offsets_committed(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            self._model.recorder.offset_committed(group_id, tp, offset)
