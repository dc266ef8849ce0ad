"""Shared test helpers: waiting on conditions with deadlines (never fixed sleeps)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout_s: float = 10.0, what: str = "condition") -> T:
    """Poll `condition` with a short backoff until it returns something truthy or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    backoff = 0.005
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(backoff)
        backoff = min(backoff * 2, 0.1)


def read_all(bootstrap_servers: str, topic: str, *, partitions: int, isolation_level: str = "read_committed",
             idle_ms: int = 300) -> list:
    """Every record of `topic` from the start, read with a fresh consumer until a poll comes back empty."""
    from txnsim import Consumer, TopicPartition

    with Consumer(bootstrap_servers=bootstrap_servers, isolation_level=isolation_level,
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        out = []
        while True:
            batch = consumer.poll(timeout_ms=idle_ms)
            if not batch:
                return out
            for records in batch.values():
                out.extend(records)
