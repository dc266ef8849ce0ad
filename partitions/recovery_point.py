"""The recovery point of a log: an offset below which everything was fsynced, and so may have been acknowledged.

Recovery may cut a torn tail (bytes written after the last fsync, never acknowledged), but damage below
this point is damage to data a client was told is safe: the log must refuse to open rather than cut it
and hand its offsets out again. Kafka keeps the same offset per log in `recovery-point-offset-checkpoint`.

The file `recovery-point` in the log directory is appended a 16-byte record (end offset, leader epoch,
CRC-32C) after each group-commit fsync: one write of 16 bytes, never fsynced itself. A kill -9 keeps it
(the page cache survives the process); a power loss may lose its last records, which only makes the
point older, so recovery is less strict, never wrong. Torn or damaged records are skipped when read.

An operator who would rather lose the damaged offsets than keep the log closed writes the offset to give
up from into `accept-loss-from`; the next open cuts there, starts the recovery point again and removes
the file.
"""
from __future__ import annotations

import struct
from pathlib import PurePath

import crc32c

from partitions.storage import FILE_STORAGE, Storage, StorageFile

FILE_NAME = "recovery-point"
#: a replica's high watermark, kept the same way (Kafka's replication-offset-checkpoint): a restarted replica
#: must not serve offsets its ISR may never have had, and an older mark is only slower to serve, never wrong
HIGH_WATERMARK_FILE = "high-watermark"
ACCEPT_LOSS_FILE = "accept-loss-from"
_RECORD = struct.Struct(">qiI")  # end offset, leader epoch, CRC-32C of the first 12 bytes
#: the file starts over (one truncate) once it holds this many bytes
_ROTATE_AT = 64 * 1024


def read_recovery_point(directory: PurePath, storage: Storage = FILE_STORAGE, name: str = FILE_NAME) -> int:
    """The largest end offset a valid record of `directory`'s file holds (0 without one)."""
    path = directory / name
    if not storage.exists(path):
        return 0
    data = storage.read_bytes(path)
    best = 0
    for start in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
        end, epoch, crc = _RECORD.unpack_from(data, start)
        if crc == crc32c.crc32c(data[start:start + 12]) and end > best:
            best = end
    return best


def accepted_loss(directory: PurePath, storage: Storage = FILE_STORAGE) -> int | None:
    """The offset from which an operator gave the log's damaged offsets up, or None."""
    path = directory / ACCEPT_LOSS_FILE
    if not storage.exists(path):
        return None
    try:
        return int(storage.read_bytes(path).decode().strip())
    except ValueError:
        return None


def forget_accepted_loss(directory: PurePath, storage: Storage = FILE_STORAGE) -> None:
    """Once a loss was accepted: the old recovery points no longer hold, and the permission is used up."""
    for name in (FILE_NAME, ACCEPT_LOSS_FILE):
        if storage.exists(directory / name):
            storage.delete(directory / name)
    storage.fsync_directory(directory)


class RecoveryPointWriter:
    """Appends the recovery point of one log after each fsync (called with the log's lock held)."""

    def __init__(self, directory: PurePath, epoch: int, storage: Storage = FILE_STORAGE,
                 name: str = FILE_NAME) -> None:
        self._path = directory / name
        self._epoch = epoch
        self._storage = storage
        self._file: StorageFile | None = None
        self._size = 0
        self._last = -1

    @classmethod
    def open(cls, directory: PurePath, epoch: int, storage: Storage = FILE_STORAGE,
             name: str = FILE_NAME) -> RecoveryPointWriter:
        """The writer of `directory`'s file, which is created (and its name made durable) if missing."""
        writer = cls(directory, epoch, storage, name)
        if storage.exists(writer._path):
            writer._file = storage.open_file(writer._path)
        else:
            writer._file = storage.create_file(writer._path)
            storage.fsync_directory(directory)
        writer._size = writer._file.size()
        return writer

    def record(self, end_offset: int) -> None:
        """Say that everything below `end_offset` is durable. OSError is the caller's to report."""
        if end_offset <= self._last:
            return
        if self._file is None:
            self._file = (self._storage.open_file(self._path) if self._storage.exists(self._path)
                          else self._storage.create_file(self._path))
            self._size = self._file.size()
        record = _RECORD.pack(end_offset, self._epoch, 0)
        record = record[:12] + struct.pack(">I", crc32c.crc32c(record[:12]))
        if self._size + len(record) > _ROTATE_AT:
            self._file.truncate(0)
            self._size = 0
        self._file.append(record)
        self._size += len(record)
        self._last = end_offset

    def restart_at(self, end_offset: int, epoch: int) -> None:
        """The log was cut back to `end_offset`: the file starts over from it, fsynced, before anything is cut
        (a crash in between leaves a point below the log end, which only makes recovery less strict)."""
        if self._file is None:
            self._file = (self._storage.open_file(self._path) if self._storage.exists(self._path)
                          else self._storage.create_file(self._path))
        self._file.truncate(0)
        self._size, self._last, self._epoch = 0, -1, epoch
        self.record(end_offset)
        self._file.fsync()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
