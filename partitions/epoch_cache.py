"""Which leader epoch wrote which offsets of one replica's log: Kafka's leader-epoch cache (KIP-101, KIP-279).

A replica keeps (epoch, start offset) for every epoch that wrote to its log. A follower that may have
diverged from a new leader asks where its last epoch ends on the leader and truncates there, instead of to
its own high watermark (the old rule, which loses acknowledged writes or keeps diverged ones). Invariant:
epochs and their start offsets both strictly ascend.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

#: Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET: "no such epoch here"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """An OffsetForLeaderEpoch answer: the largest epoch at or below the one asked, and the first offset
    after it (the start of the next epoch, or the log end for the latest)."""

    epoch: int
    end_offset: int

    @property
    def undefined(self) -> bool:
        return self.end_offset == UNDEFINED_OFFSET


UNDEFINED = EpochEnd(UNDEFINED_EPOCH, UNDEFINED_OFFSET)


class EpochCache:
    """(epoch, start offset) pairs of one log, epochs ascending."""

    def __init__(self, entries: tuple[tuple[int, int], ...] = ()) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries:
            self.assign(epoch, start)

    def entries(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self._epochs, self._starts))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Epoch `epoch` wrote its first batch at `start_offset` (a batch appended with a newer epoch than the
        latest). An entry at or past that offset is one a truncation should already have removed: it is
        dropped, as Kafka's cache drops entries a new epoch's start overlaps."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} at offset {start_offset}: both must be >= 0")
        if self._epochs and epoch <= self._epochs[-1]:
            if epoch == self._epochs[-1]:
                return  # the same epoch again: its start stays where it first wrote
            raise ValueError(f"epoch {epoch} after epoch {self._epochs[-1]}: leader epochs only grow")
        while self._starts and self._starts[-1] >= start_offset:
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)

    def epoch_at(self, offset: int) -> int:
        """The epoch that wrote `offset` (UNDEFINED_EPOCH below the first entry)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def start_of(self, epoch: int) -> int | None:
        i = bisect.bisect_left(self._epochs, epoch)
        return self._starts[i] if i < len(self._epochs) and self._epochs[i] == epoch else None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> EpochEnd:
        """Where `epoch` ends in this log, as Kafka's LeaderEpochFileCache.endOffsetFor answers it: the latest
        epoch ends at the log end; an older one at the next epoch's start, answered with the largest epoch at
        or below the one asked (the asker truncates to that epoch's end); an epoch older than every entry ends
        where the first entry starts; one newer than the latest, or UNDEFINED_EPOCH, is UNDEFINED."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED
        if epoch == self._epochs[-1]:
            return EpochEnd(epoch, log_end_offset)
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED
        if higher == 0:
            return EpochEnd(epoch, self._starts[0])
        return EpochEnd(self._epochs[higher - 1], self._starts[higher])

    def truncate_from(self, offset: int) -> None:
        """The log was cut at `offset`: no epoch starts at or past it any more."""
        while self._starts and self._starts[-1] >= offset:
            self._epochs.pop()
            self._starts.pop()

    def truncate_before(self, offset: int) -> None:
        """The log now starts at `offset` (retention): the epoch that wrote it starts there, older ones go."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return
        del self._epochs[:i], self._starts[:i]
        self._starts[0] = offset
