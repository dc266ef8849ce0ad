"""Where a follower's log parts from its leader's, and where the follower cuts it (KIP-279, KIP-595's
diverging epoch in Fetch).

A follower's fetch carries the offset it wants next and the epoch of its last batch. The leader answers
with the end of that epoch in its own log when the follower holds offsets the leader's history does not;
the follower cuts its log there (or, if it never had that epoch, where its own nearest epoch ends, and asks
again). Nothing at or below the leader's high watermark is ever cut from an ISR member this way: the leader
held those offsets in that epoch when it advanced the mark.
"""
from __future__ import annotations

from dataclasses import dataclass

from partitions.epoch_cache import UNDEFINED_EPOCH, EpochCache, EpochEnd


def diverging_epoch(leader: EpochCache, log_end_offset: int, fetch_offset: int,
                    last_fetched_epoch: int) -> EpochEnd | None:
    """The leader's side (Kafka's Partition.validateFetchOffsetAndMaybeGetDivergingEpoch): None when the
    follower's log is a prefix of the leader's up to `fetch_offset`, else where `last_fetched_epoch` (or the
    largest epoch below it the leader has) ends here."""
    if last_fetched_epoch == UNDEFINED_EPOCH:
        return None
    end = leader.end_offset_for(last_fetched_epoch, log_end_offset)
    if end.undefined:
        return None
    if end.epoch < last_fetched_epoch or end.end_offset < fetch_offset:
        return end
    return None


@dataclass(frozen=True, slots=True)
class Truncation:
    """Where the follower cuts its log; `complete` False means it must ask the leader again, from the
    epoch its log then ends with (it never had the epoch the leader answered with)."""

    offset: int
    complete: bool


def truncation_point(diverging: EpochEnd, own: EpochCache, log_end_offset: int, high_watermark: int) -> Truncation:
    """The follower's side (Kafka's AbstractFetcherThread.getOffsetTruncationState)."""
    if diverging.undefined:  # the leader knows no such epoch: the old rule, the high watermark
        return Truncation(min(high_watermark, log_end_offset), True)
    if diverging.epoch == UNDEFINED_EPOCH:
        return Truncation(min(diverging.end_offset, log_end_offset), True)
    mine = own.end_offset_for(diverging.epoch, log_end_offset)
    if mine.undefined:
        return Truncation(min(diverging.end_offset, log_end_offset), True)
    if mine.epoch != diverging.epoch:  # this replica never had the leader's epoch: cut to its own, ask again
        return Truncation(min(mine.end_offset, log_end_offset), False)
    return Truncation(min(diverging.end_offset, mine.end_offset, log_end_offset), True)
