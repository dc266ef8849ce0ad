"""A follower's side of replicating one partition, without I/O: what to fetch next from the leader, and
what each answer means for the local log (Kafka's AbstractFetcherThread and ReplicaFetcherThread).

The driver sends `next_fetch()`, hands each answer to `answered()` and carries out the effects it returns
in order: cut the log, append the leader's batches as they are, move the high watermark, back off. The
follower never appends past a point where its log may differ from the leader's: after a leader change it
first fetches with the epoch of its last batch, and a diverging answer cuts the log before anything is
appended (KIP-595's diverging epoch, the successor of KIP-279's OffsetForLeaderEpoch round).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from partitions.divergence import truncation_point
from partitions.epoch_cache import EpochCache, EpochEnd
from proto.planted_bugs import PlantedBug


class FetchState(enum.Enum):
    #: fetching from the log end, appending what comes
    FETCHING = "fetching"
    #: the log was cut but may still differ from the leader's: the next answer may cut it again
    TRUNCATING = "truncating"
    #: the leader refused this follower (a newer leader epoch, or not the leader any more): wait for the
    #: controller's next word
    WAITING = "waiting"


@dataclass(frozen=True, slots=True)
class FetchRequest:
    fetch_offset: int
    #: the epoch of the batch before fetch_offset, for the leader's divergence check
    last_fetched_epoch: int
    #: the leader epoch this follower believes in (KIP-320): a leader at another epoch refuses
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """What the leader answered, reduced to what the follower acts on."""

    error: str | None = None
    diverging: EpochEnd | None = None
    records: bytes = b""
    #: the last offset + 1 of `records` (the driver parses the batches it appends)
    records_end: int = 0
    high_watermark: int = 0
    log_start_offset: int = 0


@dataclass(frozen=True, slots=True)
class Truncate:
    offset: int


@dataclass(frozen=True, slots=True)
class StartAt:
    """Throw the log away and start it, empty, at `offset`: the leader's log starts past its end."""

    offset: int


@dataclass(frozen=True, slots=True)
class Append:
    records: bytes


@dataclass(frozen=True, slots=True)
class SetHighWatermark:
    high_watermark: int


@dataclass(frozen=True, slots=True)
class Backoff:
    reason: str


Effect = Truncate | StartAt | Append | SetHighWatermark | Backoff

#: errors after which the follower waits for the controller's next word instead of fetching again (Kafka's
#: onPartitionFenced); others (NOT_LEADER_OR_FOLLOWER from a leader that has not heard it leads yet,
#: UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION) are fetched again after a backoff
_WAIT_FOR_CONTROLLER = frozenset({"FENCED_LEADER_EPOCH"})


class FollowerFetcher:
    """One partition this node follows, at one leader epoch."""

    def __init__(self, *, leader_epoch: int, log_end_offset: int, high_watermark: int, epochs: EpochCache,
                 planted_bug: PlantedBug | None = None) -> None:
        self.leader_epoch = leader_epoch
        #: the simulator's planted bug no-follower-truncation; never set by a real node
        self._no_truncation = planted_bug is PlantedBug.NO_FOLLOWER_TRUNCATION
        #: with it, a follower told it diverged stops saying which epoch it holds, so the leader checks no more
        self._ignore_divergence = False
        self.log_end_offset = log_end_offset
        self.high_watermark = high_watermark
        self.epochs = epochs
        self.state = FetchState.FETCHING

    def next_fetch(self) -> FetchRequest | None:
        if self.state is FetchState.WAITING:
            return None
        last_epoch = self.epochs.epoch_at(self.log_end_offset - 1) if self.log_end_offset > 0 else -1
        if self._ignore_divergence:
            last_epoch = -1
        return FetchRequest(self.log_end_offset, last_epoch, self.leader_epoch)

    def answered(self, asked: FetchRequest, answer: FetchAnswer) -> list[Effect]:
        """The effects of the leader's answer to `asked`, in the order the driver must carry them out."""
        if asked.fetch_offset != self.log_end_offset or asked.current_leader_epoch != self.leader_epoch:
            return []  # an answer to a fetch from before a cut or a leader change: stale
        if answer.error == "OFFSET_OUT_OF_RANGE" and answer.log_start_offset > self.log_end_offset:
            # the leader deleted everything this follower has and more (retention, DeleteRecords): start over
            # there (Kafka's handleOutOfRangeError)
            self.log_end_offset = self.high_watermark = answer.log_start_offset
            self.epochs = EpochCache()
            return [StartAt(answer.log_start_offset)]
        if answer.error is not None:
            if answer.error in _WAIT_FOR_CONTROLLER:
                self.state = FetchState.WAITING
            return [Backoff(answer.error)]
        if answer.diverging is not None and self._no_truncation:
            self._ignore_divergence = True
            return [Backoff("diverged, not truncated")]
        if answer.diverging is not None:
            cut = truncation_point(answer.diverging, self.epochs, self.log_end_offset, self.high_watermark)
            self._cut(cut.offset)
            self.state = FetchState.FETCHING if cut.complete else FetchState.TRUNCATING
            return [Truncate(cut.offset)]
        effects: list[Effect] = []
        self.state = FetchState.FETCHING
        if answer.records:
            effects.append(Append(answer.records))
            self.log_end_offset = answer.records_end
        mark = min(answer.high_watermark, self.log_end_offset)
        if mark > self.high_watermark:
            self.high_watermark = mark
            effects.append(SetHighWatermark(mark))
        return effects

    def appended_epoch(self, epoch: int, base_offset: int) -> None:
        """The driver appended a batch of `epoch` at `base_offset`: the follower's cache learns the epoch, as
        Kafka's follower assigns its cache from the batches it appends."""
        if epoch > self.epochs.latest_epoch:
            self.epochs.assign(epoch, base_offset)

    def leader_changed(self, leader_epoch: int) -> None:
        """A LeaderAndIsr names a new leader epoch (this node still follows): fetch again, with the divergence
        check first."""
        self.leader_epoch = leader_epoch
        self.state = FetchState.FETCHING

    def _cut(self, offset: int) -> None:
        self.log_end_offset = min(self.log_end_offset, offset)
        self.high_watermark = min(self.high_watermark, offset)
        self.epochs.truncate_from(offset)
