"""Producer ids come in blocks, each claimed by creating its own file, so no id is handed out twice.

DATA/producer-ids/blocks/<n> exists once block n (ids n*size .. (n+1)*size-1) belongs to some
node: it is created with O_CREAT|O_EXCL, which exactly one creator wins, and made durable before
any of its ids is used. No lock is held across the claim, so a node paused (SIGSTOP) in the
middle of one blocks nobody; a node that dies holding a block simply wastes it (ids are never
reused, as in Kafka's KIP-730). `next-block` is only a hint of where to start looking, and
`block-size` keeps the size the first node used, so a later change of the setting cannot make
blocks overlap.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from coordinator.layout import write_atomically
from partitions.durable_files import create_exclusively
from partitions.segment import fsync_directory

_LEGACY_COUNTER = "next-block-start"  # the flock-guarded counter of earlier versions


class BlockAllocator:
    """Producer ids one at a time from the block claimed last, or a whole block: what the coordinators call.
    Subclasses say how a block is claimed, durably, so that no id is handed out twice (here, files in the
    shared directory; coordinator/controller/producer_id_blocks.py, the coordination store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # exclusive

    def allocate(self) -> int:
        with self._lock:
            if self._next >= self._end:
                self._next, self._end = self._take_block()
            pid = self._next
            self._next += 1
            return pid

    def reserve_block(self) -> tuple[int, int]:
        """Claim a whole block for a caller that hands its ids out itself (the transaction coordinator's
        core): ids first..end-1, durable before this returns."""
        with self._lock:
            return self._take_block()

    def _take_block(self) -> tuple[int, int]:
        raise NotImplementedError


class ProducerIdAllocator(BlockAllocator):
    def __init__(self, directory: Path, block_size: int = 1000) -> None:
        super().__init__()
        self._directory = directory
        self._blocks = directory / "blocks"
        self._wanted_block_size = block_size
        self._block_size = 0  # read or fixed at the first claim

    def _take_block(self) -> tuple[int, int]:
        self._blocks.mkdir(parents=True, exist_ok=True)
        self._block_size = self._stored_block_size()
        block = self._first_candidate()
        while True:
            try:
                os.close(os.open(self._blocks / str(block), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                break
            except FileExistsError:
                block += 1
        fsync_directory(self._blocks)
        write_atomically(self._directory / "next-block", str(block + 1).encode())
        start = block * self._block_size
        return start, start + self._block_size

    def _stored_block_size(self) -> int:
        path = self._directory / "block-size"
        if not path.exists() and create_exclusively(path, str(self._wanted_block_size)):  # the first size wins
            fsync_directory(self._directory)
        return int(path.read_text())

    def _first_candidate(self) -> int:
        """Where to start probing: the hint, else past every id an earlier version handed out."""
        for name, scale in (("next-block", 1), (_LEGACY_COUNTER, self._block_size)):
            try:
                value = int((self._directory / name).read_text())
            except (FileNotFoundError, ValueError):
                continue
            return -(-value // scale)  # the legacy counter holds an id: round up to a whole block
        return 0
