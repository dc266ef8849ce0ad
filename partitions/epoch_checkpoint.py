"""The leader-epoch cache of a replica's log on disk: the file `leader-epoch-checkpoint` in its directory.

Kafka's format (LeaderEpochCheckpointFile): a version line (0), a count line, then one "epoch start-offset"
line per entry. The file is replaced atomically and fsynced whenever the cache changes, which is rare (a new
leader epoch, a truncation), and always before the batches that made the change are written, so after a
crash the file never lacks an epoch the log holds; entries past the recovered log end are dropped on open.
A missing or damaged file is rebuilt from the batches' own partition leader epochs.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import PurePath

from partitions.epoch_cache import EpochCache
from partitions.storage import FILE_STORAGE, Storage
from proto.records import RecordBatch

logger = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
_VERSION = 0


def encode(cache: EpochCache) -> bytes:
    entries = cache.entries()
    lines = [str(_VERSION), str(len(entries))] + [f"{epoch} {start}" for epoch, start in entries]
    return ("\n".join(lines) + "\n").encode()


def decode(data: bytes) -> EpochCache:
    """The cache the file holds; ValueError for anything that is not a whole, ordered checkpoint."""
    lines = data.decode("ascii").split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) < 2 or int(lines[0]) != _VERSION:
        raise ValueError(f"no version {_VERSION} checkpoint header")
    count = int(lines[1])
    if count != len(lines) - 2:
        raise ValueError(f"it says {count} entries and holds {len(lines) - 2}")
    entries = []
    for line in lines[2:]:
        epoch, start = line.split(" ")
        entries.append((int(epoch), int(start)))
    if any(a[0] >= b[0] or a[1] >= b[1] for a, b in zip(entries, entries[1:])):
        raise ValueError("its epochs and start offsets do not both ascend")
    return EpochCache(tuple(entries))


def write(directory: PurePath, cache: EpochCache, storage: Storage = FILE_STORAGE) -> None:
    """Replace the file, durably: its bytes and its new name (a rename not yet fsynced in its directory reverts
    on a power loss, and a cache that lost an epoch makes a restarted follower cut below its high watermark)."""
    storage.replace_atomically(directory / FILE_NAME, encode(cache), fsync=True)
    storage.fsync_directory(directory)


def truncate_from(directory: PurePath, cache: EpochCache, end_offset: int, storage: Storage = FILE_STORAGE) -> None:
    """The log was cut at `end_offset`: no epoch starts at or past it, in the cache and, if that changed it,
    in the file."""
    before = cache.entries()
    cache.truncate_from(end_offset)
    if cache.entries() != before:
        write(directory, cache, storage)


def rebuild(batches: Iterable[RecordBatch]) -> EpochCache:
    """The cache of a log from its batches: each one's partition leader epoch, where it first appears."""
    cache = EpochCache()
    for batch in batches:
        epoch = batch.header.partition_leader_epoch
        if epoch > cache.latest_epoch:
            cache.assign(epoch, batch.header.base_offset)
    return cache


def load(directory: PurePath, name: str, log_end_offset: int, batches: Iterable[RecordBatch],
         storage: Storage = FILE_STORAGE) -> EpochCache:
    """The cache of the log in `directory`, ending at `log_end_offset`: from its file, or rebuilt from
    `batches` (and written) when the file is missing or damaged."""
    path = directory / FILE_NAME
    cache = None
    if storage.exists(path):
        try:
            cache = decode(storage.read_bytes(path))
        except (ValueError, UnicodeDecodeError) as error:
            logger.warning("%s: %s is damaged (%s); rebuilding it from the log's batches", name, path, error)
    if cache is None:
        cache = rebuild(batches)
        write(directory, cache, storage)
        return cache
    truncate_from(directory, cache, log_end_offset, storage)
    return cache
