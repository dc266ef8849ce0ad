"""Small files that several processes may race to create: written whole, fsynced, linked into place.

Text-level helpers over Storage (storage.py has the mechanics: a private temporary file, then
link(), so of racing creators exactly one wins and nobody ever sees a half-written file).
"""
from __future__ import annotations

from pathlib import PurePath

from partitions.storage import FILE_STORAGE, Storage


def create_exclusively(path: PurePath, text: str, storage: Storage = FILE_STORAGE) -> bool:
    """Create `path` holding `text`, complete and durable the moment it appears, unless it exists.
    The caller fsyncs the directory to make the new name durable."""
    return storage.create_exclusively(path, text.encode())


def write_durably(path: PurePath, text: str, storage: Storage = FILE_STORAGE) -> None:
    """Write `path` (created or truncated) and fsync it."""
    storage.write_file(path, text.encode(), fsync=True)
