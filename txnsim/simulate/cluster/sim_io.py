"""The cluster model's nodes' world: the engine's I/O (txnsim/simulate/engine_io.py) with the planted bugs of
acknowledging before the fsync (here, not in the drivers) and the model's invariant recorder told of every
fsync; and the observer that notes what the drivers report in the run's trace.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from coordinator.observers import NoObserver
from coordinator.rocketmq.log_format import HalfRecord
from partitions import PartitionLog
from proto.planted_bugs import PlantedBug
from proto.structs import CONSUMER_OFFSETS_TOPIC, HALF_TOPIC, INTERNAL_TOPICS, TopicPartition
from txnsim.simulate.engine_io import EngineIO

if TYPE_CHECKING:
    from txnsim.simulate.cluster.roles import NodeCluster




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


class SimIO(EngineIO):
    """NodeIO for one node of the cluster model: the engine's, with its planted bugs and its recorder."""

    def __init__(self, name: str, node_id: int, model: NodeCluster) -> None:
        super().__init__(name, node_id, model.network, lambda: model.fsync_ms)
        self._model = model

    def acknowledges_early(self, ends: Mapping[PartitionLog, int]) -> bool:
        return acknowledged_before_fsync(self._model.planted, ends)

    def fsynced(self, plog: PartitionLog) -> None:
        self._model.recorder.appended(self.name, plog, -1, -1)


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
