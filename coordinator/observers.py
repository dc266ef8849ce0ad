"""What the coordinators' drivers report as they carry out the protocol, for the node's metrics and the
simulator's trace.

The drivers call these methods after the fact (a value is durable, a check was handed over); the
sans-I/O cores never see them. coordinator/metrics.py implements every one with Prometheus metrics;
NO_OBSERVER ignores them, for drivers built without a node (unit tests).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from proto.structs import TopicPartition

if TYPE_CHECKING:
    from coordinator.rocketmq.log_format import HalfRecord


class TransactionObserver(Protocol):
    def transaction_started(self) -> None: ...
    def transaction_completed(self, committed: bool) -> None: ...
    def transaction_timed_out(self) -> None: ...
    def end_txn_answered(self, committed: bool, seconds: float) -> None: ...
    def commit_completed(self, seconds: float) -> None: ...
    def markers_resent(self, count: int) -> None: ...
    def shard_snapshotted(self, topic: str, shard: int, next_offset: int, log_start_offset: int) -> None: ...


class MarkerObserver(Protocol):
    def marker_request_sent(self, producers: int) -> None: ...


class GroupObserver(Protocol):
    def group_rebalanced(self) -> None: ...
    def offsets_committed(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None: ...
    def shard_snapshotted(self, topic: str, shard: int, next_offset: int, log_start_offset: int) -> None: ...


class HalfMessageObserver(Protocol):
    def check_back_sent(self, transaction_id: str, record: HalfRecord, via_peer: bool) -> None: ...
    def check_back_resolved(self, committed: bool) -> None: ...
    def half_message_discarded(self, transaction_id: str) -> None: ...


class OwnershipObserver(Protocol):
    def ownership_changed(self, action: str, topic: str, partition: int, leader_epoch: int) -> None: ...


class NoObserver:
    """Every observer interface, doing nothing."""

    def transaction_started(self) -> None:
        pass

    def transaction_completed(self, committed: bool) -> None:
        pass

    def transaction_timed_out(self) -> None:
        pass

    def end_txn_answered(self, committed: bool, seconds: float) -> None:
        pass

    def commit_completed(self, seconds: float) -> None:
        pass

    def markers_resent(self, count: int) -> None:
        pass

    def shard_snapshotted(self, topic: str, shard: int, next_offset: int, log_start_offset: int) -> None:
        pass

    def marker_request_sent(self, producers: int) -> None:
        pass

    def group_rebalanced(self) -> None:
        pass

    def offsets_committed(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        pass

    def check_back_sent(self, transaction_id: str, record: HalfRecord, via_peer: bool) -> None:
        pass

    def check_back_resolved(self, committed: bool) -> None:
        pass

    def half_message_discarded(self, transaction_id: str) -> None:
        pass

    def ownership_changed(self, action: str, topic: str, partition: int, leader_epoch: int) -> None:
        pass


NO_OBSERVER = NoObserver()
