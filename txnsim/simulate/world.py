"""The deterministic engine: one simulated clock and one event queue for the whole cluster.

Time is an integer number of **milliseconds** since the start of the run; it only moves
when the next event is taken. Events are ordered by (time, sequence number), so two events
due at the same millisecond run in the order they were scheduled, on every machine.
Randomness comes only from named `random.Random` streams derived from the seed, so that
turning one fault class on or off does not reshuffle the workload's choices.
"""
from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable
from typing import Any

#: an event: a callback and its arguments, run when its time comes
Handler = Callable[..., object]

#: this many events in a row at one instant is a livelock (a timer due in the past that nothing acts on,
#: re-armed at once): time would never move again, so the run stops with a finding instead of hanging
LIVELOCK_STEPS = 100_000


class Livelock(Exception):
    """The simulated clock stopped moving: every event schedules another at the same instant."""


class Timer:
    """A scheduled event that can be cancelled; cancelling leaves a tombstone the queue skips."""

    __slots__ = ("entry",)

    def __init__(self, entry: list[Any]) -> None:
        self.entry = entry

    @property
    def at_ms(self) -> int:
        return int(self.entry[0])

    @property
    def pending(self) -> bool:
        return self.entry[2] is not None

    def cancel(self) -> None:
        self.entry[2] = None
        self.entry[3] = ()


def derive_seed(seed: int, name: str) -> int:
    """A stream's seed from the run's seed and the stream's name; sha256, so never hash()-dependent."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class World:
    """The clock, the queue and the random streams; knows nothing of nodes or messages.

    `run` takes one event at a time (one step) until the queue is empty, `max_steps` steps
    have run, the next event lies after `until_ms`, or `stop()` says so after a step.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.now_ms = 0
        self.steps = 0
        self._queue: list[list[Any]] = []
        self._sequence = 0
        self._streams: dict[str, random.Random] = {}

    def rng(self, name: str) -> random.Random:
        """The random stream called `name`: the same draws for the same seed, whatever else runs."""
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = random.Random(derive_seed(self.seed, name))
        return stream

    def schedule(self, at_ms: int, handler: Handler, *args: Any) -> Timer:
        """Run `handler(*args)` at `at_ms` (never earlier than now: the past cannot be scheduled)."""
        self._sequence += 1
        entry = [max(at_ms, self.now_ms), self._sequence, handler, args]
        heapq.heappush(self._queue, entry)
        return Timer(entry)

    def after(self, delay_ms: int, handler: Handler, *args: Any) -> Timer:
        return self.schedule(self.now_ms + delay_ms, handler, *args)

    @property
    def pending(self) -> int:
        """Events still queued (cancelled ones included until they are reached)."""
        return len(self._queue)

    def next_at(self) -> int | None:
        while self._queue and self._queue[0][2] is None:
            heapq.heappop(self._queue)
        return self._queue[0][0] if self._queue else None

    def run(self, max_steps: int | None = None, until_ms: int | None = None,
            stop: Callable[[], bool] | None = None) -> int:
        """Handle events until a limit; returns the steps taken by this call.

        The clock ends at the last event handled, or at `until_ms` when the queue ran past it."""
        queue, pop = self._queue, heapq.heappop
        limit = self.steps + max_steps if max_steps is not None else None
        start = self.steps
        same_instant = 0
        while queue:
            if limit is not None and self.steps >= limit:
                break
            entry = queue[0]
            if until_ms is not None and entry[0] > until_ms:
                self.now_ms = max(self.now_ms, until_ms)
                break
            pop(queue)
            handler = entry[2]
            if handler is None:  # cancelled
                continue
            if entry[0] == self.now_ms:
                same_instant += 1
                if same_instant > LIVELOCK_STEPS:
                    raise Livelock(f"{LIVELOCK_STEPS:,} events in a row at {self.now_ms} ms without the clock "
                                   f"moving; the last was {getattr(handler, '__qualname__', handler)}{entry[3]!r:.120}")
            else:
                same_instant = 0
            self.now_ms = entry[0]
            self.steps += 1
            handler(*entry[3])
            if stop is not None and stop():
                break
        else:
            if until_ms is not None:
                self.now_ms = max(self.now_ms, until_ms)
        return self.steps - start
