"""Snapshot files of a coordinator shard (__transaction_state, __consumer_offsets), one per offset.

DIR/<next_offset:020d>.<kind>-snapshot = CRC-32C + a payload the coordinator defines (its state as
a replay of the log below next_offset builds it), written whole and never replaced. A writer
deletes only files below its own, so a fenced writer waking up with an older snapshot cannot hide
a newer owner's (and its snapshot, bounded by its high watermark, never covers records the new
owner lacks). Segments go only below the retained fallback, so a damaged newest snapshot costs a
longer replay, not state. The `txn-snapshot` file of earlier versions: see txn/snapshots.py.
"""
from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Protocol, TypeVar, runtime_checkable

import crc32c
from google.protobuf.message import DecodeError

from coordinator.layout import write_atomically
from partitions.storage import FILE_STORAGE, Storage
from proto.records import RecordBatch

logger = logging.getLogger(__name__)
T = TypeVar("T")
_CRC = struct.Struct(">I")


@runtime_checkable
class SnapshottedLog(Protocol):
    """What a shard snapshot needs of its log (partitions.PartitionLog has it all)."""

    @property
    def directory(self) -> Path: ...

    @property
    def storage(self) -> Storage: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def batches(self, start_offset: int = 0, *, to_log_end: bool = False) -> Iterator[RecordBatch]: ...

    def delete_segments_before(self, offset: int) -> int: ...


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    next_offset: int
    path: PurePath


def file_name(kind: str, next_offset: int) -> str:
    return f"{next_offset:020d}.{kind}-snapshot"


def _parse(kind: str, name: str) -> int | None:
    """The offset in a snapshot file name of `kind`, or None if `name` is not one."""
    stem, _, suffix = name.partition(".")
    if len(stem) == 20 and stem.isdigit() and suffix == f"{kind}-snapshot":
        return int(stem)
    return None


def _parse_temporary(kind: str, name: str) -> int | None:
    """The offset of a half-written `kind` snapshot (write_atomically's `<name>.<pid>.tmp`), or None."""
    if not name.endswith(".tmp"):
        return None
    return _parse(kind, name[:-len(".tmp")].rpartition(".")[0])


def list_files(directory: PurePath, kind: str, storage: Storage = FILE_STORAGE) -> list[SnapshotFile]:
    """The `kind` snapshot files of `directory`, oldest first."""
    found = [SnapshotFile(offset, directory / name) for name in storage.list_dir(directory)
             if (offset := _parse(kind, name)) is not None]
    return sorted(found, key=lambda file: file.next_offset)


def frame(payload: bytes) -> bytes:
    return _CRC.pack(crc32c.crc32c(payload)) + payload


def unframe(path: PurePath, storage: Storage = FILE_STORAGE) -> bytes | None:
    """The payload of the file at `path`, or None (said in the log) if it is unreadable or damaged."""
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        logger.warning("ignoring unreadable shard snapshot %s: %s", path, error)
        return None
    if len(data) < _CRC.size or _CRC.unpack_from(data)[0] != crc32c.crc32c(data[_CRC.size:]):
        logger.warning("ignoring damaged shard snapshot %s (CRC mismatch)", path)
        return None
    return data[_CRC.size:]


def newest(shard_log: SnapshottedLog, kind: str, decode: Callable[[bytes], T]) -> tuple[int, T] | None:
    """(next_offset, decoded payload) of the highest good snapshot the log can continue, or None.

    Files past the durable end of the log (it lost records the snapshot holds) or damaged are
    skipped. One below the log start is still used, with a warning: the records in between are
    gone, and what exists is the best that can be loaded.
    """
    start, end = shard_log.log_start_offset, shard_log.high_watermark
    for file in reversed(list_files(shard_log.directory, kind, shard_log.storage)):
        if file.next_offset > end:
            logger.warning("ignoring shard snapshot %s: it goes past the log end %d", file.path, end)
            continue
        image = _decode(file, decode, shard_log.storage)
        if image is None:
            continue
        if file.next_offset < start:
            logger.warning("%s: the newest usable snapshot ends at %d but the log starts at %d; what was "
                           "written in between is lost", shard_log.directory.name, file.next_offset, start)
        return file.next_offset, image
    if start > 0:
        logger.warning("%s: no usable snapshot, and the log starts at %d; what was written below it is lost",
                       shard_log.directory.name, start)
    return None


def _decode(file: SnapshotFile, decode: Callable[[bytes], T], storage: Storage) -> T | None:
    payload = unframe(file.path, storage)
    if payload is None:
        return None
    try:
        return decode(payload)
    except (ValueError, DecodeError) as error:
        logger.warning("ignoring shard snapshot %s: its payload does not decode (%s)", file.path, error)
        return None


def write(directory: PurePath, kind: str, next_offset: int, payload: bytes,
          storage: Storage = FILE_STORAGE) -> int | None:
    """Make the snapshot at `next_offset` durable, then prune older files; returns the fallback's offset.

    An existing good file at the same offset is kept as it is (never replaced). Pruning keeps
    every file above `next_offset` (a newer owner's) and the newest good one below it (the
    fallback, whose offset is returned, None if there is none); the rest below go, with any
    half-written temporaries below `next_offset` a crash or a fenced writer left.
    """
    path = directory / file_name(kind, next_offset)
    if unframe(path, storage) is None:
        _write_durably(storage, path, frame(payload))
    older = [file for file in list_files(directory, kind, storage) if file.next_offset < next_offset]
    fallback = next((file for file in reversed(older) if unframe(file.path, storage) is not None), None)
    doomed = [file.path for file in older if file is not fallback]
    doomed += [directory / name for name in storage.list_dir(directory)
               if (offset := _parse_temporary(kind, name)) is not None and offset < next_offset]
    for doomed_path in doomed:
        storage.delete(doomed_path)
    if doomed:
        storage.fsync_directory(directory)
    return None if fallback is None else fallback.next_offset


def _write_durably(storage: Storage, path: PurePath, data: bytes) -> None:
    """Temp file, fsync, rename, directory fsync. On the real disk the temp file is named by process, since a
    fenced writer and the shard's new owner may write the snapshot of one offset at the same moment."""
    if storage is FILE_STORAGE:
        write_atomically(Path(path), data)
    else:
        storage.replace_atomically(path, data, fsync=True)
        storage.fsync_directory(path.parent)


def commit(shard_log: SnapshottedLog, kind: str, next_offset: int, payload: bytes) -> int:
    """Write the snapshot, then delete the segments below its fallback; returns how many went.

    Below the fallback rather than below the new snapshot: if the new one is ever damaged, the
    fallback plus the log after it still rebuild everything.
    """
    fallback = write(shard_log.directory, kind, next_offset, payload, shard_log.storage)
    return 0 if fallback is None else shard_log.delete_segments_before(fallback)

