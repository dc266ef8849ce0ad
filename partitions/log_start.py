"""The log start offset a DeleteRecords moved into the middle of a segment, kept across restarts.

Whole segments below the log start are deleted; the records before it in the segment that holds it stay on
disk, unreadable. `log-start-offset` in the log directory holds the offset (Kafka keeps the same in its
log-start-offset-checkpoint), replaced atomically and fsynced before the new start is answered.
"""
from __future__ import annotations

from pathlib import PurePath

from partitions.storage import FILE_STORAGE, Storage

FILE_NAME = "log-start-offset"


def read_log_start(directory: PurePath, storage: Storage = FILE_STORAGE) -> int:
    """The recorded log start offset (0 when none was recorded, or the file cannot be read)."""
    path = directory / FILE_NAME
    if not storage.exists(path):
        return 0
    try:
        return max(0, int(storage.read_bytes(path).decode().strip()))
    except (ValueError, OSError):
        return 0


def write_log_start(directory: PurePath, offset: int, storage: Storage = FILE_STORAGE, *, fsync: bool = True) -> None:
    storage.replace_atomically(directory / FILE_NAME, f"{offset}\n".encode(), fsync=fsync)
    if fsync:  # the new name too: an unsynced rename reverts on a power loss, and deleted records come back
        storage.fsync_directory(directory)
