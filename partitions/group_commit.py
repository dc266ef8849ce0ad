"""Leader-based group commit: concurrent appenders share fsyncs instead of paying one each.

The first waiter whose offset is not yet durable becomes the leader and runs one flush; the
others wait on a Condition and are released when the durable end covers their offset. A waiter
covered by someone else's flush never flushes again. Invariant: `durable_end` only grows, and
only to an end that a completed flush reported.
"""
from __future__ import annotations

import threading
from collections.abc import Callable


class GroupCommitter:
    """Makes offsets durable by calling `flush`, at most one flush at a time.

    `flush()` is called without any lock of this object held; it must make durable everything
    written before it was called and return the end offset it covered.
    """

    def __init__(self, flush: Callable[[], int], durable_end: int) -> None:
        self._flush = flush
        self._cond = threading.Condition()
        self._durable_end = durable_end
        self._flushing = False
        self.flush_count = 0

    @property
    def durable_end(self) -> int:
        with self._cond:
            return self._durable_end

    def wait_until_durable(self, end_offset: int) -> None:
        """Return once every offset below `end_offset` is durable; a failed flush raises to its leader."""
        while True:
            with self._cond:
                while self._flushing and self._durable_end < end_offset:
                    self._cond.wait()
                if self._durable_end >= end_offset:
                    return
                self._flushing = True  # this thread leads the next flush
            covered = None
            try:
                covered = self._flush()
            finally:
                with self._cond:
                    self._flushing = False
                    if covered is not None:
                        self.flush_count += 1
                        self._durable_end = max(self._durable_end, covered)
                    # on failure the waiters wake too, and one of them leads a retry
                    self._cond.notify_all()
