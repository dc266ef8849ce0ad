"""The live sections computed once per interval, however many pages are open.

Each section is a few admin calls to the nodes (describe the transactions, the groups, the half
messages). Computed per open page, ten tabs would put ten times that load on the cluster the view
is there to watch. Here every page's stream (and every poll) asking within one interval gets the
same answer: the computation in flight if there is one, else the last answer while it is fresh.
"""
from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

#: a section's HTTP status and JSON body
Answer = tuple[int, dict[str, Any]]


class SharedSections:
    """Answers of named sections shared between callers on one event loop (not thread-safe: the loop's)."""

    def __init__(self, sections: dict[str, Callable[[], Answer]], max_age_s: float,
                 clock: Callable[[], float] | None = None) -> None:
        self._sections = sections
        self._max_age = max_age_s
        self._clock = clock
        self._answers: dict[str, tuple[float, Answer]] = {}
        self._running: dict[str, asyncio.Future[Answer]] = {}
        #: how many times each section was computed (the view's own load on the cluster)
        self.computed: dict[str, int] = dict.fromkeys(sections, 0)

    def __contains__(self, name: object) -> bool:
        return name in self._sections

    def names(self) -> list[str]:
        return list(self._sections)

    async def get(self, name: str) -> Answer:
        """The section's answer: fresh from the cache, the one being computed, or a new computation.
        An exception of the computation reaches every caller waiting on it."""
        now = self._now()
        cached = self._answers.get(name)
        if cached is not None and now - cached[0] < self._max_age:
            return cached[1]
        running = self._running.get(name)
        if running is None:
            self.computed[name] += 1
            running = self._running[name] = asyncio.ensure_future(run_in_threadpool(self._sections[name]))
            running.add_done_callback(functools.partial(self._finished, name, now))
        return await asyncio.shield(running)  # a caller that goes away does not cancel the others' answer

    def _finished(self, name: str, started: float, done: asyncio.Future[Answer]) -> None:
        self._running.pop(name, None)
        if not done.cancelled() and done.exception() is None:
            self._answers[name] = (started, done.result())

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()
