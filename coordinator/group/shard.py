"""One __consumer_offsets shard as the group coordinator holds it: its log, load status and groups."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.group.metadata import GroupMetadata
from coordinator.runtime.io import Cancellable
from coordinator.runtime.shard_status import ShardStatus


@dataclass(frozen=True, slots=True)
class ShardLoad:
    """How a shard was loaded: from which snapshot, and how many log records were replayed after it."""

    snapshot_offset: int | None
    replayed: int


@dataclass(eq=False)
class Shard:
    number: int
    #: partitions.PartitionLog: append(records, origin=...) and what shard_snapshots.SnapshottedLog lists
    #: (or, for a log that keeps no files, batches(): replayed whole and never snapshotted)
    log: Any
    status: ShardStatus = ShardStatus.LOADING
    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    #: producer id -> groups that may hold its pending offsets
    txn_groups: dict[int, set[str]] = field(default_factory=dict)
    #: markers that arrived while the shard was loading: (producer_id, committed, marker_offset)
    deferred: list[tuple[int, bool, int | None]] = field(default_factory=list)
    snapshotted: bool = False
    writes_since_snapshot: int = 0
    #: group -> the deadline its timer is armed for, and the timer
    timers: dict[str, tuple[int, Cancellable]] = field(default_factory=dict)
