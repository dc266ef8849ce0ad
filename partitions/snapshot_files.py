"""The producer-state snapshot files of a partition directory: atomic writes, listing, retention.

Files are named by the offset they cover and the leader epoch that wrote them
(00000000000000012345-e3.snapshot). A file is written to a
temporary name, fsynced, renamed and the directory fsynced, so a name on disk always holds a
whole snapshot; a crash leaves at most a stray .tmp, deleted on the next open. Only the newest
RETAINED_SNAPSHOTS are kept: one to load, one to fall back to if that one is damaged.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import PurePath

from partitions.file_names import log_order
from partitions.producer_snapshot import (
    CorruptSnapshotError,
    PartitionStateSnapshot,
    decode,
    encode,
    parse_snapshot_name,
    snapshot_name,
)
from partitions.storage import FILE_STORAGE, TMP_SUFFIX, Storage

logger = logging.getLogger(__name__)

RETAINED_SNAPSHOTS = 2


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    offset: int
    epoch: int | None
    path: PurePath


def list_snapshots(directory: PurePath, storage: Storage = FILE_STORAGE) -> list[SnapshotFile]:
    """The snapshot files of `directory`, oldest first."""
    found = [SnapshotFile(*parsed, directory / name) for name in storage.list_dir(directory)
             if (parsed := parse_snapshot_name(name)) is not None and not storage.is_dir(directory / name)]
    return sorted(found, key=lambda file: log_order(file.offset, file.epoch))


def read_snapshot(file: SnapshotFile, storage: Storage = FILE_STORAGE) -> PartitionStateSnapshot:
    """The snapshot in `file`; OSError if unreadable, CorruptSnapshotError if damaged or misnamed."""
    snapshot = decode(storage.read_bytes(file.path))
    if snapshot.offset != file.offset:
        raise CorruptSnapshotError(f"it holds the state at offset {snapshot.offset}, not at {file.offset}")
    return snapshot


def write_snapshot(directory: PurePath, snapshot: PartitionStateSnapshot, epoch: int, *, fsync: bool = True,
                   storage: Storage = FILE_STORAGE) -> PurePath:
    """Write `snapshot` (taken by leader epoch `epoch`) atomically, then prune older ones so that
    RETAINED_SNAPSHOTS of this epoch's line remain; returns its path."""
    path = directory / snapshot_name(snapshot.offset, epoch)
    storage.replace_atomically(path, encode(snapshot), fsync=fsync)
    # prune only what is below this one and taken by this epoch or an earlier one, keeping the
    # newest of those as the fallback: a later leader's snapshots are never ours to delete
    below = [file for file in list_snapshots(directory, storage)
             if file.offset < snapshot.offset and (file.epoch is None or file.epoch <= epoch)]
    delete_snapshots(directory, below[:-(RETAINED_SNAPSHOTS - 1)], fsync=False, storage=storage)
    if fsync:
        storage.fsync_directory(directory)
    return path


def delete_snapshots(directory: PurePath, files: list[SnapshotFile], *, fsync: bool = True,
                     storage: Storage = FILE_STORAGE) -> None:
    """Delete `files` (missing ones are fine), durably when `fsync`."""
    for file in files:
        storage.delete(file.path)
    if files and fsync:
        storage.fsync_directory(directory)


def delete_stray_temporaries(directory: PurePath, storage: Storage = FILE_STORAGE) -> None:
    """Half-written snapshots a crash left behind."""
    strays = [directory / name for name in storage.list_dir(directory)
              if name.endswith(TMP_SUFFIX) and parse_snapshot_name(name[:-len(TMP_SUFFIX)]) is not None]
    for path in strays:
        logger.info("deleting %s, a snapshot a crash left half-written", path)
        storage.delete(path)
