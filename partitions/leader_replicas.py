"""A partition leader's view of its followers: how far each has fetched, who is in sync, the high watermark.

Kafka's Partition and Replica state, as a plain object fed follower fetches, the leader's own appends and
the time, and returning what to do (propose an ISR change to the controller's store; wake what waits on the
high watermark). Invariants: the high watermark never goes back and never passes the log end of any ISR
member, counting a proposed ISR change as both old and new ISR until the store has it (the maximal ISR, as
Kafka's PendingExpandIsr / PendingShrinkIsr), so no change in flight lets it run ahead of a replica that may
yet lead.
"""
from __future__ import annotations

from dataclasses import dataclass

from partitions.divergence import diverging_epoch
from partitions.epoch_cache import EpochCache, EpochEnd
from proto.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError
from proto.planted_bugs import PlantedBug

#: Kafka's replica.lag.time.max.ms (30 s since 2.5, KIP-537)
REPLICA_LAG_TIME_MAX_MS = 30_000
#: a follower that has not fetched since this replica started leading
UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower (Kafka's ReplicaState)."""

    log_end_offset: int = UNKNOWN_OFFSET
    #: the last time the follower had everything the leader had (at that fetch, or at its previous one)
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    #: the leader's log end at the follower's previous fetch
    last_fetch_leader_end: int = UNKNOWN_OFFSET

    def fetched(self, fetch_offset: int, leader_end: int, now_ms: int) -> None:
        """Kafka's Replica.updateFetchState: a fetch from the leader's end means caught up now; a fetch reaching
        where the leader's end stood at the previous fetch means caught up as of that one."""
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_end = leader_end
        self.last_fetch_ms = now_ms

    def caught_up(self, leader_end: int, now_ms: int, max_lag_ms: int) -> bool:
        return self.log_end_offset == leader_end or now_ms - self.last_caught_up_ms <= max_lag_ms


@dataclass(frozen=True, slots=True)
class FetchAccepted:
    """A follower's fetch fits the leader's log: read from its offset; `high_watermark` to tell it; an ISR
    change to propose if this fetch brought it back in sync."""

    high_watermark: int
    propose_isr: frozenset[int] | None = None
    high_watermark_advanced: bool = False


@dataclass(frozen=True, slots=True)
class FetchDiverged:
    """The follower holds offsets this leader's history does not: it must cut its log (KIP-595)."""

    diverging: EpochEnd


class LeaderReplicas:
    """One partition's replicas as its leader sees them, for one leader epoch."""

    def __init__(self, *, leader_id: int, leader_epoch: int, replicas: tuple[int, ...], isr: frozenset[int],
                 log_end_offset: int, high_watermark: int, now_ms: int,
                 max_lag_ms: int = REPLICA_LAG_TIME_MAX_MS, planted_bug: PlantedBug | None = None) -> None:
        if leader_id not in replicas or leader_id not in isr:
            raise ValueError(f"leader {leader_id} must be a replica {replicas} and in the ISR {sorted(isr)}")
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        #: an ISR change sent to the store and not yet answered
        self.pending_isr: frozenset[int] | None = None
        self.max_lag_ms = max_lag_ms
        #: the simulator's planted bug hw-from-leader-alone; never set by a real node
        self._hw_from_leader_alone = planted_bug is PlantedBug.HW_FROM_LEADER_ALONE
        self.log_end_offset = log_end_offset
        #: where this epoch's writes start: a follower rejoins only once it has everything before it
        self.epoch_start_offset = log_end_offset
        self.high_watermark = min(high_watermark, log_end_offset)
        # followers in the ISR count as caught up now, so a new leader does not drop them before they fetch
        self.followers = {replica: FollowerProgress(last_caught_up_ms=now_ms if replica in isr else 0)
                          for replica in replicas if replica != leader_id}

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr | self.pending_isr if self.pending_isr is not None else self.isr

    def new_epoch(self, leader_epoch: int, isr: frozenset[int], log_end_offset: int, now_ms: int) -> None:
        """The controller bumped the leader epoch and kept this leader (it changed the ISR): the epoch starts
        at the log end, and the ISR members count as caught up now, as Kafka's makeLeader resets them."""
        self.leader_epoch = leader_epoch
        self.isr, self.pending_isr = isr, None
        self.log_end_offset = self.epoch_start_offset = log_end_offset
        for replica, progress in self.followers.items():
            if replica in isr:
                progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)

    # ------------------------------------------------------------ inputs

    def appended(self, log_end_offset: int, now_ms: int) -> bool:
        """The leader's log now ends at `log_end_offset`; True if the high watermark moved (an ISR of one). A
        follower that had the whole log was caught up until now: a fetch session does not fetch an idle
        partition again, so this is the last time it is seen caught up before it fetches the new offsets."""
        if log_end_offset > self.log_end_offset:
            for progress in self.followers.values():
                if progress.log_end_offset == self.log_end_offset:
                    progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        self.log_end_offset = log_end_offset
        return self._advance_high_watermark(now_ms)

    def follower_fetch(self, replica: int, fetch_offset: int, last_fetched_epoch: int, epochs: EpochCache,
                       now_ms: int) -> FetchAccepted | FetchDiverged:
        """A follower asks for `fetch_offset`, its last batch of epoch `last_fetched_epoch`."""
        progress = self.followers.get(replica)
        if progress is None:
            raise ValueError(f"node {replica} is not a follower of this partition (replicas {self.replicas})")
        diverging = diverging_epoch(epochs, self.log_end_offset, fetch_offset, last_fetched_epoch)
        if diverging is not None:
            return FetchDiverged(diverging)
        progress.fetched(min(fetch_offset, self.log_end_offset), self.log_end_offset, now_ms)
        if replica in self.isr and fetch_offset < self.high_watermark and self.pending_isr is None:
            # an ISR member had every offset below the high watermark: asking from below it, it has lost fsynced
            # data (a damaged log cut when it opened). It leaves the ISR at once, so that it cannot be elected
            # before it has them back, and rejoins once it has (the maximal ISR holds the mark meanwhile).
            self.pending_isr = self.isr - {replica}
            return FetchAccepted(self.high_watermark, self.pending_isr, False)
        advanced = self._advance_high_watermark(now_ms)
        return FetchAccepted(self.high_watermark, self._maybe_expand(replica), advanced)

    def out_of_sync(self, now_ms: int) -> frozenset[int] | None:
        """The ISR without the followers that have not caught up within replica.lag.time.max.ms (Kafka's
        maybeShrinkIsr), or None if all have, or a change is already in flight."""
        if self.pending_isr is not None:
            return None
        lagging = {replica for replica in self.isr if replica != self.leader_id
                   and not self.followers[replica].caught_up(self.log_end_offset, now_ms, self.max_lag_ms)}
        if not lagging:
            return None
        self.pending_isr = self.isr - lagging
        return self.pending_isr

    def isr_written(self, isr: frozenset[int], now_ms: int) -> bool:
        """The store took the proposed ISR (or answered with the one it holds); True if the high watermark
        moved (a shrink lets it pass the replicas that were dropped)."""
        self.isr = isr
        self.pending_isr = None
        return self._advance_high_watermark(now_ms)

    def isr_refused(self) -> None:
        """The store refused the change (a newer leader or controller wrote first): keep the ISR known."""
        self.pending_isr = None

    # ------------------------------------------------------------ acks

    def check_enough_replicas(self, min_insync_replicas: int, where: str) -> None:
        """Before an acks=all append: refuse it while the ISR is smaller than min.insync.replicas."""
        if len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"[NOT_ENOUGH_REPLICAS] {where} has {len(self.isr)} in-sync replica(s) {sorted(self.isr)}, "
                f"fewer than min.insync.replicas={min_insync_replicas}; nothing was written")

    def acks_all_outcome(self, required_offset: int, min_insync_replicas: int,
                         where: str) -> NotEnoughReplicasAfterAppendError | bool:
        """An acks=all write ending before `required_offset`: False while the high watermark is below it,
        True once every ISR member has it, or the error Kafka answers when the ISR shrank below
        min.insync.replicas meanwhile (Partition.checkEnoughReplicasReachOffset)."""
        if self.high_watermark < required_offset:
            return False
        if len(self.maximal_isr) >= min_insync_replicas:  # Kafka counts an ISR change in flight as done here
            return True
        return NotEnoughReplicasAfterAppendError(
            f"[NOT_ENOUGH_REPLICAS_AFTER_APPEND] {where} was written, but the ISR {sorted(self.isr)} shrank "
            f"below min.insync.replicas={min_insync_replicas} before every member had it")

    # ------------------------------------------------------------ helpers

    def _maybe_expand(self, replica: int) -> frozenset[int] | None:
        """Kafka's maybeExpandIsr: a follower out of the ISR rejoins once it has the high watermark and
        everything written before this epoch began."""
        if replica in self.isr or self.pending_isr is not None:
            return None
        end = self.followers[replica].log_end_offset
        if end < self.high_watermark or end < self.epoch_start_offset:
            return None
        self.pending_isr = self.isr | {replica}
        return self.pending_isr

    def _advance_high_watermark(self, now_ms: int) -> bool:
        """The smallest log end among the maximal ISR, and among followers caught up within the lag (one about
        to rejoin), as Kafka's maybeIncrementLeaderHW; never backwards."""
        mark = self.log_end_offset
        maximal = self.maximal_isr
        for replica, progress in ([] if self._hw_from_leader_alone else self.followers.items()):
            counts = replica in maximal or (progress.log_end_offset >= 0
                                            and progress.caught_up(self.log_end_offset, now_ms, self.max_lag_ms))
            if counts:
                mark = min(mark, progress.log_end_offset) if progress.log_end_offset >= 0 else -1
        if mark > self.high_watermark:
            self.high_watermark = mark
            return True
        return False
