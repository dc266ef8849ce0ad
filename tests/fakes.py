"""Fakes shared by the unit tests: only for what a test controls on purpose (the time), never the system
under test. Memory and faulty storage for logs are product code (partitions/memory_storage.py,
partitions/faulty_storage.py), used by the simulator too."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coordinator.runtime.real_io import RealIO


class ManualClock:
    """Milliseconds that move only when a test moves them; pass it where code takes `now_ms`."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> int:
        self.ms += ms
        return self.ms


def node_io(now_ms: Callable[[], int] | None = None) -> RealIO:
    """A node's real I/O for a driver under test on its own (no other nodes): fsyncs inline, `now_ms` as its
    clock (a ManualClock, or the wall clock)."""
    from client.transport import NodeChannels
    from coordinator.runtime.real_io import RealIO, wall_clock_ms

    return RealIO(0, address_of=lambda n: "unused", channels=NodeChannels(), now_ms=now_ms or wall_clock_ms)
