"""Rebuild a partition's producer state and aborted-transaction index on open: snapshot plus tail.

Runs after recovery.py has cut the log back to its good prefix. The newest snapshot that lies
within [log start, log end] on a batch boundary and decodes cleanly is loaded, and only the
batches from its offset on are replayed (Kafka's loadProducerState). Snapshots past the log
end (the tail they covered was cut) are deleted durably before anything new can be written at
those offsets; damaged ones are logged, deleted and skipped. No usable snapshot: replay all.
"""
from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePath

from partitions.leader_epochs import EpochLimits
from partitions.model import RecoveryStats
from partitions.producer_snapshot import CorruptSnapshotError, PartitionStateSnapshot
from partitions.producer_state import ProducerStateTable
from partitions.segment import Segment
from partitions.snapshot_files import (
    SnapshotFile,
    delete_snapshots,
    delete_stray_temporaries,
    list_snapshots,
    read_snapshot,
)
from partitions.storage import FILE_STORAGE, Storage
from partitions.txn_index import AbortedTxnIndex, index_abort
from proto.errors import KafkaStorageError
from proto.records import ControlType, RecordBatch

logger = logging.getLogger(__name__)


@dataclass
class LoadedState:
    state: ProducerStateTable
    aborted: AbortedTxnIndex
    stats: RecoveryStats


def replay_batch(state: ProducerStateTable, aborted: AbortedTxnIndex, batch: RecordBatch) -> None:
    """Apply one batch read back from the log to the producer state and the aborted index."""
    if batch.header.is_control:
        marker = batch.control_record()
        completed = state.replay(batch.header, committed=marker.type is ControlType.COMMIT,
                                 coordinator_epoch=marker.coordinator_epoch)
        index_abort(aborted, completed)
    else:
        state.replay(batch.header)


def load_producer_state(directory: PurePath, segments: list[Segment], name: str,
                        limits: EpochLimits = EpochLimits(),
                        older: Callable[[int | None], bool] = lambda _epoch: True,
                        storage: Storage = FILE_STORAGE) -> LoadedState:
    """The state of the log made of `segments` (recovered, non-empty): newest usable snapshot + tail.

    Snapshots that cannot be loaded are deleted only if an `older` epoch than the caller's took
    them (a newer one's belong to a leader that has superseded the caller)."""
    log_start, log_end = segments[0].base_offset, segments[-1].next_offset
    try:
        delete_stray_temporaries(directory, storage)
        snapshot, discarded = _choose_snapshot(directory, segments, log_start, log_end, limits, older, storage)
    except OSError as error:
        raise KafkaStorageError(f"cannot read or clean the producer snapshots of {name}: {error}") from error
    if snapshot is None:
        state, aborted, start = ProducerStateTable(), AbortedTxnIndex(), log_start
    else:
        state, aborted, start = (ProducerStateTable(snapshot.producers), AbortedTxnIndex(snapshot.aborted),
                                 snapshot.offset)
    replayed = 0
    for batch in _batches_from(segments, start, log_end):
        replay_batch(state, aborted, batch)
        replayed += 1
    source = "no usable snapshot" if snapshot is None else f"snapshot at offset {snapshot.offset}"
    logger.info("%s: producer state from %s, replayed %d batches from offset %d to the log end %d",
                name, source, replayed, start, log_end)
    stats = RecoveryStats(None if snapshot is None else snapshot.offset, start, replayed, tuple(discarded))
    return LoadedState(state, aborted, stats)


def _choose_snapshot(directory: PurePath, segments: list[Segment], log_start: int, log_end: int, limits: EpochLimits,
                     older: Callable[[int | None], bool],
                     storage: Storage) -> tuple[PartitionStateSnapshot | None, list[str]]:
    """The newest loadable snapshot; deletes (durably) those past the end, below the start, damaged,
    or taken by a leader past the offset where a later epoch took over."""
    chosen: PartitionStateSnapshot | None = None
    doomed: list[SnapshotFile] = []
    discarded: list[str] = []

    def discard(file: SnapshotFile, why: str) -> None:
        deleted = older(file.epoch)
        line = f"{file.path.parent.name}/{file.path.name}: not loaded, {'deleted' if deleted else 'kept'}: {why}"
        logger.warning("producer state recovery: %s", line)
        if deleted:
            doomed.append(file)
        discarded.append(line)

    for file in reversed(list_snapshots(directory, storage)):
        limit = limits.limit(file.epoch) if file.epoch is not None else None
        if file.offset > log_end:
            discard(file, f"it covers offsets up to {file.offset}, past the log end {log_end}")
        elif limit is not None and file.offset > limit:
            discard(file, f"epoch {file.epoch} took it at offset {file.offset}, after a later epoch "
                          f"took over at offset {limit}")
        elif chosen is not None:
            continue  # older but usable: kept as the fallback
        elif file.offset < log_start:
            discard(file, f"it is below the log start {log_start}")
        elif file.offset != log_end and not _is_batch_boundary(segments, file.offset):
            discard(file, f"no batch starts at offset {file.offset}")
        else:
            try:
                chosen = read_snapshot(file, storage)
            except (CorruptSnapshotError, OSError) as error:
                discard(file, f"unreadable ({error})")
    delete_snapshots(directory, doomed, storage=storage)
    return chosen, discarded


def _is_batch_boundary(segments: list[Segment], offset: int) -> bool:
    i = bisect_right([segment.base_offset for segment in segments], offset) - 1
    return i >= 0 and segments[i].has_batch_at(offset)


def _batches_from(segments: list[Segment], offset: int, log_end: int) -> Iterator[RecordBatch]:
    """Every batch from the one starting at `offset` to the log end."""
    for segment in segments:
        if segment.next_offset <= offset:
            continue
        start, end, _next = segment.span(offset, log_end, float("inf"), take_one=True)
        yield from segment.iter_batches(start, end)
