"""Leader-based group commit: concurrent appenders share fsyncs instead of paying one each.

The first waiter whose offset is not yet durable becomes the leader and runs one flush; the
others wait on a Condition and are released when the durable end covers their offset. A waiter
covered by someone else's flush never flushes again. Invariant: `durable_end` only grows, and
only to an end that a completed flush reported, except when the log is cut back (a replica
truncating to its leader's history): then whoever waits for an offset the cut removed is told
NOT_LEADER_OR_FOLLOWER, even once new writes reach that offset again, since those are not its own.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from proto.errors import NotLeaderOrFollowerError


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
        #: the offsets the log was cut back to, in order (rare: a replica's truncations)
        self._cuts: list[int] = []

    @property
    def durable_end(self) -> int:
        with self._cond:
            return self._durable_end

    def wait_until_durable(self, end_offset: int) -> None:
        """Return once every offset below `end_offset` is durable; a failed flush raises to its leader."""
        with self._cond:
            cuts_seen = len(self._cuts)
        while True:
            with self._cond:
                while self._flushing and self._durable_end < end_offset and not self._cut_below(end_offset, cuts_seen):
                    self._cond.wait()
                if self._cut_below(end_offset, cuts_seen):
                    raise NotLeaderOrFollowerError(
                        f"[NOT_LEADER_OR_FOLLOWER] the log was cut back to offset {min(self._cuts[cuts_seen:])} "
                        f"before offset {end_offset - 1} became durable: that write is gone")
                if self._durable_end >= end_offset:
                    return
                self._flushing = True  # this thread leads the next flush
                cuts_at_flush = len(self._cuts)
            covered = None
            try:
                covered = self._flush()
            finally:
                with self._cond:
                    self._flushing = False
                    counted = covered is not None and len(self._cuts) == cuts_at_flush  # a cut during it voids it
                    if counted and covered is not None:
                        self.flush_count += 1
                        self._durable_end = max(self._durable_end, covered)
                    # on failure the waiters wake too, and one of them leads a retry
                    self._cond.notify_all()
            if counted and covered is not None and covered < end_offset:
                # this thread's own flush, begun after its write, ends before it: the log was cut back before
                # the wait began, and the offset is not there to wait for
                raise NotLeaderOrFollowerError(
                    f"[NOT_LEADER_OR_FOLLOWER] offset {end_offset - 1} is not in the log (it ends at {covered}): it "
                    "was cut back before that write became durable")

    def cut_back(self, end_offset: int) -> None:
        """The log now ends at `end_offset` (lower than before): waiters for offsets past it fail."""
        with self._cond:
            self._cuts.append(end_offset)
            self._durable_end = min(self._durable_end, end_offset)
            self._cond.notify_all()

    def start_over(self, end_offset: int) -> None:
        """The log was thrown away and starts again, empty, at `end_offset`: every waiter so far fails."""
        with self._cond:
            self._cuts.append(-1)
            self._durable_end = end_offset
            self._cond.notify_all()

    def _cut_below(self, end_offset: int, cuts_seen: int) -> bool:
        """Whether a cut since a waiter began removed an offset below `end_offset` (lock held)."""
        return any(cut < end_offset for cut in self._cuts[cuts_seen:])
