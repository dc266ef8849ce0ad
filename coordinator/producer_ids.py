"""Producer ids come in blocks taken from one shared counter, so no id is ever handed out twice.

The counter file is read, advanced and fsynced under an exclusive flock; a node that dies
holding a block simply wastes it (ids are never reused, as in Kafka's KIP-730).
"""
from __future__ import annotations

import fcntl
import threading
from pathlib import Path

from coordinator.layout import write_atomically


class ProducerIdAllocator:
    def __init__(self, directory: Path, block_size: int = 1000) -> None:
        self._directory = directory
        self._block_size = block_size
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

    def _take_block(self) -> tuple[int, int]:
        self._directory.mkdir(parents=True, exist_ok=True)
        counter = self._directory / "next-block-start"
        with open(self._directory / "allocator.lock", "a+") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                start = int(counter.read_text()) if counter.exists() else 0
                end = start + self._block_size
                write_atomically(counter, str(end).encode())
                return start, end
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
