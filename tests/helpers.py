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
