"""One thread that runs callbacks at their deadlines: how a request that waits (a long-polling fetch, a held
JoinGroup) is woken at its max wait without a thread of its own waiting for it.

A callback runs on the timer's thread and must be quick: hand real work to a pool. Cancelling is a flag, so
a cancelled entry costs nothing until its deadline passes.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Timer:
    """A scheduled callback; cancel() before its deadline and it never runs."""

    __slots__ = ("deadline", "callback", "cancelled")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    """Callbacks at monotonic deadlines, on one daemon thread started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._heap: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + max(0.0, delay_s), callback)
        with self._cond:
            if self._stopped:
                timer.cancel()
                return timer
            heapq.heappush(self._heap, (timer.deadline, next(self._order), timer))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return timer

    def stop(self) -> None:
        """Run nothing more (entries already due may still be running)."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                _, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            try:
                timer.callback()
            except Exception:  # a bug in one callback must not stop every later one
                log.exception("timer callback failed")
