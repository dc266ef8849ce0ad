"""The payload of a __transaction_state shard snapshot: the raw log value of every live id.

The files, their naming by offset and their safety against a fenced writer are
coordinator/shard_snapshots.py's (kind "txn"); this module defines only what a file holds: a
TransactionSnapshot message, built from the durable log (state_log.take_snapshot), never from
memory. The single `txn-snapshot` file of earlier versions is converted to a named file the
first time the shard is read, then deleted, so an upgraded node keeps the state it covers.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import PurePath

from google.protobuf.message import DecodeError

from coordinator import shard_snapshots
from coordinator.shard_snapshots import SnapshottedLog
from partitions.storage import FILE_STORAGE, Storage
from proto import txnsim_pb2 as pb

log = logging.getLogger(__name__)
KIND = "txn"
LEGACY_FILE = "txn-snapshot"


@dataclass
class ShardImage:
    """Raw log values of every live id (tid -> TransactionLogValue bytes) as of `next_offset`."""

    next_offset: int = 0
    values: dict[str, bytes] = field(default_factory=dict)


def encode(image: ShardImage) -> bytes:
    return pb.TransactionSnapshot(next_offset=image.next_offset, entries=[
        pb.TransactionSnapshotEntry(transactional_id=tid, value=value)
        for tid, value in sorted(image.values.items())]).SerializeToString()


def decode_values(payload: bytes) -> dict[str, bytes]:
    return {entry.transactional_id: entry.value for entry in pb.TransactionSnapshot.FromString(payload).entries}


def read(shard_log: SnapshottedLog) -> ShardImage | None:
    """The newest usable snapshot of the shard (see shard_snapshots.newest), or None."""
    convert_legacy(shard_log.directory, shard_log.storage)
    found = shard_snapshots.newest(shard_log, KIND, decode_values)
    return None if found is None else ShardImage(*found)


def write(shard_log: SnapshottedLog, image: ShardImage) -> int:
    """Make `image` durable, then drop the segments its fallback covers; returns how many went."""
    return shard_snapshots.commit(shard_log, KIND, image.next_offset, encode(image))


def convert_legacy(directory: PurePath, storage: Storage = FILE_STORAGE) -> None:
    """Rename-by-offset the single snapshot file of earlier versions (a damaged one is dropped)."""
    path = directory / LEGACY_FILE
    if not storage.exists(path):
        return
    payload = shard_snapshots.unframe(path, storage)
    try:
        if payload is not None:
            next_offset = pb.TransactionSnapshot.FromString(payload).next_offset
            shard_snapshots.write(directory, KIND, next_offset, payload, storage)
            log.info("%s: converted %s to %s", directory.name, LEGACY_FILE,
                     shard_snapshots.file_name(KIND, next_offset))
    except DecodeError as error:
        log.warning("dropping %s: it does not decode (%s)", path, error)
    storage.delete(path)
