"""The producer-state snapshot files of a partition directory: atomic writes, listing, retention.

Files are named by the offset they cover and the leader epoch that wrote them
(00000000000000012345-e3.snapshot). A file is written to a
temporary name, fsynced, renamed and the directory fsynced, so a name on disk always holds a
whole snapshot; a crash leaves at most a stray .tmp, deleted on the next open. Only the newest
RETAINED_SNAPSHOTS are kept: one to load, one to fall back to if that one is damaged.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from partitions.file_names import log_order
from partitions.producer_snapshot import (CorruptSnapshotError, PartitionStateSnapshot, decode, encode,
                                          parse_snapshot_name, snapshot_name)
from partitions.segment import fsync_directory

logger = logging.getLogger(__name__)

RETAINED_SNAPSHOTS = 2
_TMP_SUFFIX = ".tmp"


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    offset: int
    epoch: int | None
    path: Path


def list_snapshots(directory: Path) -> list[SnapshotFile]:
    """The snapshot files of `directory`, oldest first."""
    found = [SnapshotFile(*parsed, path) for path in directory.iterdir()
             if path.is_file() and (parsed := parse_snapshot_name(path.name)) is not None]
    return sorted(found, key=lambda file: log_order(file.offset, file.epoch))


def read_snapshot(file: SnapshotFile) -> PartitionStateSnapshot:
    """The snapshot in `file`; OSError if unreadable, CorruptSnapshotError if damaged or misnamed."""
    snapshot = decode(file.path.read_bytes())
    if snapshot.offset != file.offset:
        raise CorruptSnapshotError(f"it holds the state at offset {snapshot.offset}, not at {file.offset}")
    return snapshot


def write_snapshot(directory: Path, snapshot: PartitionStateSnapshot, epoch: int, *, fsync: bool = True) -> Path:
    """Write `snapshot` (taken by leader epoch `epoch`) atomically, then prune older ones so that
    RETAINED_SNAPSHOTS of this epoch's line remain; returns its path."""
    path = directory / snapshot_name(snapshot.offset, epoch)
    tmp = path.with_name(path.name + _TMP_SUFFIX)
    data = encode(snapshot)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view, written = memoryview(data), 0
        while written < len(data):
            written += os.write(fd, view[written:])
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    # prune only what is below this one and taken by this epoch or an earlier one, keeping the
    # newest of those as the fallback: a later leader's snapshots are never ours to delete
    below = [file for file in list_snapshots(directory)
             if file.offset < snapshot.offset and (file.epoch is None or file.epoch <= epoch)]
    delete_snapshots(directory, below[:-(RETAINED_SNAPSHOTS - 1)], fsync=False)
    if fsync:
        fsync_directory(directory)
    return path


def delete_snapshots(directory: Path, files: list[SnapshotFile], *, fsync: bool = True) -> None:
    """Delete `files` (missing ones are fine), durably when `fsync`."""
    for file in files:
        file.path.unlink(missing_ok=True)
    if files and fsync:
        fsync_directory(directory)


def delete_stray_temporaries(directory: Path) -> None:
    """Half-written snapshots a crash left behind."""
    strays = [path for path in directory.iterdir()
              if path.name.endswith(_TMP_SUFFIX) and parse_snapshot_name(path.name[:-len(_TMP_SUFFIX)]) is not None]
    for path in strays:
        logger.info("deleting %s, a snapshot a crash left half-written", path)
        path.unlink(missing_ok=True)
