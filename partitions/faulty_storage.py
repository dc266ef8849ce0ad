"""A simulated disk that also misbehaves: torn writes at a crash and flipped bits, from a seed.

Every fault is drawn from the `random.Random` passed in (never the global one), so a seed
replays the same faults for the same operations. What was damaged is logged in `faults`, so
a simulator can tell a loss the log should have prevented (acknowledged data gone after a
plain crash) from one it could not (a bit flipped in acknowledged bytes).
"""
from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import PurePath

from partitions.memory_storage import Inode, MemoryStorage


class FaultyStorage(MemoryStorage):
    """MemoryStorage plus faults.

    `torn_writes`: a crash keeps a random prefix (possibly empty, possibly all) of each file's
    unsynced tail, as a write cut off mid-way by power loss, instead of dropping it all.
    `bit_flip_probability`: each write is stored with one random bit flipped with this chance.
    """

    def __init__(self, rng: random.Random, *, torn_writes: bool = True, bit_flip_probability: float = 0.0,
                 on_fsync: Callable[[str], None] | None = None) -> None:
        super().__init__(on_fsync)
        if not 0.0 <= bit_flip_probability <= 1.0:
            raise ValueError(f"bit_flip_probability must be in [0, 1], not {bit_flip_probability}")
        self.rng = rng
        self.torn_writes = torn_writes
        self.bit_flip_probability = bit_flip_probability
        #: one line per fault injected (torn tails, flipped bits), in order
        self.faults: list[str] = []

    def written(self, inode: Inode, path: str, data: bytes) -> None:
        start = len(inode.data)
        super().written(inode, path, data)
        if data and self.bit_flip_probability and self.rng.random() < self.bit_flip_probability:
            self._flip(inode, path, start + self.rng.randrange(len(data)), self.rng.randrange(8))

    def unsynced_bytes_kept(self, path: str, unsynced: int) -> int:
        if not self.torn_writes:
            return 0
        kept = self.rng.randint(0, unsynced)
        if 0 < kept < unsynced:
            self.faults.append(f"{path}: torn write, {kept} of {unsynced} unsynced bytes kept")
        return kept

    def flip_bit(self, path: PurePath, position: int | None = None, bit: int | None = None) -> int:
        """Flip one bit of the stored file (synced bytes included: it is damage at rest); a random
        byte and bit unless given. Returns the byte position."""
        with self.lock:
            inode = self._inode(path)
            if not inode.data:
                raise ValueError(f"{path} is empty: no bit to flip")
            position = self.rng.randrange(len(inode.data)) if position is None else position
            self._flip(inode, str(path), position, self.rng.randrange(8) if bit is None else bit)
            return position

    def _flip(self, inode: Inode, path: str, position: int, bit: int) -> None:
        inode.data[position] ^= 1 << bit
        if inode.synced is not None and position < len(inode.synced):
            synced = bytearray(inode.synced)
            synced[position] ^= 1 << bit
            inode.synced = bytes(synced)
        self.faults.append(f"{path}: bit {bit} of byte {position} flipped")
