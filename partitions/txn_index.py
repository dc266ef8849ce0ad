"""The aborted-transaction index of one partition (Kafka's .txnindex, kept in memory).

One entry per ABORT marker that closed an open transaction, in marker-offset order, so a
read_committed fetch finds the aborts overlapping its data with one bisect. On open it is
restored from the producer-state snapshot and the replay of the log after it (see
producer_snapshot.py for why it lives there); a marker that closed nothing adds no entry.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

from partitions.producer_state import CompletedTxn


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """Kafka's AbortedTxn: version-0 .txnindex entry."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int  # the LSO right after the abort


class AbortedTxnIndex:
    """Aborted transactions ordered by marker offset (markers are appended in offset order)."""

    def __init__(self, entries: Iterable[AbortedTxn] = ()) -> None:
        self._entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []
        for entry in entries:
            self.add(entry)

    def add(self, entry: AbortedTxn) -> None:
        if self._last_offsets and entry.last_offset <= self._last_offsets[-1]:
            raise ValueError(f"abort marker at offset {entry.last_offset} is not after the last indexed "
                             f"one at {self._last_offsets[-1]}")
        self._entries.append(entry)
        self._last_offsets.append(entry.last_offset)

    def drop_before(self, offset: int) -> None:
        """Forget aborts whose marker is below `offset` (their segments are gone; no fetch can reach them)."""
        keep = bisect_left(self._last_offsets, offset)
        del self._entries[:keep], self._last_offsets[:keep]

    def collect(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of aborts with last_offset >= fetch_offset and first_offset < upper_bound."""
        found = []
        for i in range(bisect_left(self._last_offsets, fetch_offset), len(self._entries)):
            entry = self._entries[i]
            if entry.first_offset < upper_bound:
                found.append((entry.producer_id, entry.first_offset))
            if entry.last_stable_offset >= upper_bound:
                # every later transaction started at or after this LSO: none can overlap (Kafka stops here too)
                break
        return found

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        return tuple(self._entries)


def index_abort(index: AbortedTxnIndex, completed: CompletedTxn | None) -> None:
    """Index `completed` if it was an abort (on append and on replay alike)."""
    if completed is not None and not completed.committed:
        index.add(AbortedTxn(completed.producer_id, completed.first_offset, completed.marker_offset,
                             completed.last_stable_offset))
