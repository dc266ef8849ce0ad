"""Interleaving: runs of the variants being compared alternate round by round, so slow drift of
a shared machine (other processes, thermal, page cache) falls on all of them alike."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def rotated(items: Sequence[T], by: int) -> list[T]:
    """`items` starting at index `by` (mod len): the order of round `by`, so no variant always runs first."""
    if not items:
        return []
    shift = by % len(items)
    return list(items[shift:]) + list(items[:shift])


def interleaved(counts: Sequence[tuple[T, int]]) -> list[T]:
    """(item, count) pairs as one list that alternates the items: a, b, c, a, b, c, a, c, ..."""
    rounds = max((count for _item, count in counts), default=0)
    return [item for r in range(rounds) for item, count in counts if r < count]
