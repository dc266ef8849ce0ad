"""Fakes shared by the unit tests: only for what a test controls on purpose (the time), never the system
under test. Memory and faulty storage for logs are product code (partitions/memory_storage.py,
partitions/faulty_storage.py), used by the simulator too."""
from __future__ import annotations


class ManualClock:
    """Milliseconds that move only when a test moves them; pass it where code takes `now_ms`."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> int:
        self.ms += ms
        return self.ms
