"""Snapshots of a __transaction_state shard, so that loading it replays only a short tail.

A snapshot is built from the durable log itself (the previous snapshot plus the records
after it), never from memory, so it is exactly the replay of the log below `next_offset`.
File: DATA/logs/__transaction_state-N/txn-snapshot = CRC-32C (4 bytes, big-endian) + a
TransactionSnapshot message, replaced atomically. Segments below a snapshot are deleted only
after it is durable. A damaged snapshot is ignored and said so (the shard then loads from the
segments that remain).
"""
from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from coordinator.layout import write_atomically
from proto import txnsim_pb2 as pb

log = logging.getLogger(__name__)
SNAPSHOT_FILE = "txn-snapshot"


@dataclass
class ShardImage:
    """Raw log values of every live id (tid -> TransactionLogValue bytes) as of `next_offset`."""

    next_offset: int = 0
    values: dict[str, bytes] = field(default_factory=dict)


def write(log_dir: Path, image: ShardImage) -> None:
    message = pb.TransactionSnapshot(next_offset=image.next_offset, entries=[
        pb.TransactionSnapshotEntry(transactional_id=tid, value=value) for tid, value in sorted(image.values.items())])
    body = message.SerializeToString()
    write_atomically(log_dir / SNAPSHOT_FILE, struct.pack(">I", crc32c.crc32c(body)) + body)


def read(log_dir: Path) -> ShardImage | None:
    path = log_dir / SNAPSHOT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < 4 or struct.unpack(">I", data[:4])[0] != crc32c.crc32c(data[4:]):
        log.warning("ignoring damaged transaction snapshot %s (CRC mismatch); replaying the log", path)
        return None
    message = pb.TransactionSnapshot.FromString(data[4:])
    return ShardImage(message.next_offset, {e.transactional_id: e.value for e in message.entries})
