"""The web view's live sections are computed once for every page open at the same time (txnsim/ui/shared.py):
the view's load on the cluster does not grow with the number of tabs."""
from __future__ import annotations

import asyncio
import threading

import pytest

from txnsim.ui.shared import Answer, SharedSections


class Section:
    """A section that takes a while, counts its computations and can be told to fail."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.fail = False

    def __call__(self) -> Answer:
        self.calls += 1
        self.release.wait(5)
        if self.fail:
            raise RuntimeError("the admin call broke")
        return 200, {"n": self.calls}


def test_ten_pages_asking_at_once_share_one_computation_and_a_fresh_answer_is_reused():
    section, now = Section(), [0.0]
    shared = SharedSections({"groups": section}, max_age_s=0.5, clock=lambda: now[0])

    async def scenario() -> None:
        pages = [asyncio.ensure_future(shared.get("groups")) for _ in range(10)]
        await asyncio.sleep(0.05)
        section.release.set()
        assert await asyncio.gather(*pages) == [(200, {"n": 1})] * 10
        now[0] = 0.4  # still fresh: the same answer
        assert await shared.get("groups") == (200, {"n": 1})
        now[0] = 0.6  # older than half an interval: asked again
        assert await shared.get("groups") == (200, {"n": 2})

    asyncio.run(scenario())
    assert section.calls == 2 and shared.computed == {"groups": 2}


def test_a_page_that_goes_away_does_not_cancel_the_answer_the_others_wait_for_and_failures_reach_all():
    section = Section()
    shared = SharedSections({"groups": section}, max_age_s=0.5)

    async def scenario() -> None:
        leaving, staying = asyncio.ensure_future(shared.get("groups")), asyncio.ensure_future(shared.get("groups"))
        await asyncio.sleep(0.05)
        leaving.cancel()
        section.release.set()
        assert await staying == (200, {"n": 1})
        section.fail, section.release = True, threading.Event()
        section.release.set()
        await asyncio.sleep(0.6)  # the answer ages out
        failing = [asyncio.ensure_future(shared.get("groups")) for _ in range(3)]
        for page in failing:
            with pytest.raises(RuntimeError, match="admin call broke"):
                await page
        section.fail = False
        assert await shared.get("groups") == (200, {"n": 3})  # a failure is not cached

    asyncio.run(scenario())
