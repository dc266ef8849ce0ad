"""One partition this node leads: its replica log, its view of the followers, and the acks=all writes waiting
for the ISR (Kafka's Partition on the leader, with DelayedProduce's waiting).

A follower's fetch tells the leader how far the follower has fsynced; the core (partitions/leader_replicas.py)
decides the high watermark, divergence and ISR changes, and this driver carries them out: it serves the
batches, moves the log's high watermark, writes ISR changes to the coordination store conditionally on the
state's version, answers the acks=all writes the new high watermark covers, and checks every half
`replica.lag.time.max.ms` for followers that fell behind. Thread-safe: fetch handlers, produce paths and the
timer may run at once; no lock is held while calling into the I/O or a waiter's callback.

Two high watermarks meet here: the core's is the ISR's lowest log end, the leader's own written end among
them (what followers may have read); the log's is the lower of that and the leader's fsynced end, and is the
one readers see and acks=all waits for.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.controller.znodes import PartitionState
from coordinator.replication.isr_writes import IsrOutcome, IsrWriter, IsrWritten
from coordinator.runtime.io import Cancellable, NodeIO
from partitions.epoch_cache import UNDEFINED_EPOCH
from partitions.leader_replicas import REPLICA_LAG_TIME_MAX_MS, FetchDiverged, LeaderReplicas
from partitions.replica_log import ReplicaLog
from proto import records as codec
from proto import txnsim_pb2 as pb
from proto.errors import (
    FencedLeaderEpochError,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
    code_of,
)
from proto.planted_bugs import PlantedBug
from proto.structs import TopicPartition

log = logging.getLogger(__name__)

#: what an acks=all waiter is told: None once the ISR has its write, else the error
AckDone = Callable[[KafkaError | None], None]


class _Waiting:
    """An acks=all write the high watermark has not reached yet."""


WAITING = _Waiting()


@dataclass(eq=False)
class _AckWaiter:
    required_offset: int
    done: AckDone
    timer: Cancellable | None = None


def partition_error(tp: TopicPartition, error: KafkaError, *, log_start_offset: int = -1,
                    high_watermark: int = -1) -> pb.ReplicaFetchPartitionData:
    return pb.ReplicaFetchPartitionData(topic=tp.topic, partition=tp.partition, error_code=code_of(error),
                                        error_message=error.message, diverging_epoch=UNDEFINED_EPOCH,
                                        diverging_end_offset=-1, log_start_offset=log_start_offset,
                                        high_watermark=high_watermark)


class LeaderPartition:
    def __init__(self, tp: TopicPartition, replica_log: ReplicaLog, *, io: NodeIO, state: PartitionState,
                 version: int, replicas: tuple[int, ...], isr_writer: IsrWriter,
                 min_insync_replicas: int | Callable[[], int],
                 max_lag_ms: int = REPLICA_LAG_TIME_MAX_MS, planted_bug: PlantedBug | None = None) -> None:
        if state.leader != io.node_id:
            raise ValueError(f"{tp}: node {io.node_id} cannot lead at epoch {state.leader_epoch}: "
                             f"node {state.leader} does")
        self.tp = tp
        self.log = replica_log
        self._io = io
        self._isr_writer = isr_writer
        #: min.insync.replicas, or what reads the topic's setting as it is at each write
        self._min_insync = min_insync_replicas if callable(min_insync_replicas) else lambda: min_insync_replicas
        self._lock = threading.Lock()
        replica_log.become_leader(state.leader_epoch)
        self.state = state
        #: the state znode's version the next ISR write is conditional on
        self._version = version
        self._core = LeaderReplicas(leader_id=io.node_id, leader_epoch=state.leader_epoch, replicas=replicas,
                                    isr=frozenset(state.isr), log_end_offset=replica_log.log_end_offset,
                                    high_watermark=replica_log.high_watermark, now_ms=io.now_ms(),
                                    max_lag_ms=max_lag_ms, planted_bug=planted_bug)
        #: the simulator's planted bug acks-before-isr; never set by a real node
        self._acks_before_isr = planted_bug is PlantedBug.ACKS_BEFORE_ISR
        self._waiters: list[_AckWaiter] = []
        self._resigned = False
        #: the store refused an ISR change at a stale version: the controller has moved on, and this leader
        #: proposes nothing more until it hears the new state (Kafka's "cached zkVersion" skip)
        self._stale = False
        self._check_every_ms = max(1, max_lag_ms // 2)
        self._timer: Cancellable | None = io.after(self._check_every_ms, self._check_isr, f"{tp} ISR check")
        # a leader alone in its ISR has every write it makes in sync
        self._after(self._advance_locked())

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def min_insync_replicas(self) -> int:
        return self._min_insync()

    def follower_lags(self) -> dict[int, int]:
        """Records each follower has yet to fetch: this log's end minus the end its last fetch asked from (the
        whole log for one that has not fetched since this replica began leading)."""
        with self._lock:
            end = self._core.log_end_offset
            return {replica: end - max(progress.log_end_offset, 0)
                    for replica, progress in self._core.followers.items()}

    @property
    def resigned(self) -> bool:
        return self._resigned

    @property
    def isr(self) -> frozenset[int]:
        with self._lock:
            return self._core.isr

    def update(self, state: PartitionState, version: int) -> None:
        """A newer word from the store with this node still the leader: a new leader epoch (the controller
        changed the ISR) is taken up in place, so waiting writes go on waiting, as Kafka's makeLeader keeps
        them when the leader stays; at the same epoch the store's ISR and version are adopted (the answer to
        a write of this leader's that timed out may have been lost), and ISR changes may be proposed again."""
        if state.leader != self._io.node_id:
            raise ValueError(f"{self.tp}: node {self._io.node_id} cannot take a state led by node {state.leader}")
        with self._lock:
            if self._resigned or (state.leader_epoch, version) <= (self.state.leader_epoch, self._version):
                return
            now = self._io.now_ms()
            if state.leader_epoch > self.state.leader_epoch:
                self.log.become_leader(state.leader_epoch)
                self._core.new_epoch(state.leader_epoch, frozenset(state.isr), self.log.log_end_offset, now)
            else:
                self._core.isr_written(frozenset(state.isr), now)
            self.state, self._version, self._stale = state, version, False
            settled = self._advance_locked()
        self._after(settled)

    # ------------------------------------------------------------ followers

    def fetch(self, replica_id: int, asked: pb.ReplicaFetchPartition, max_bytes: int) -> pb.ReplicaFetchPartitionData:
        """A follower's fetch of this partition: the batches from its offset, the high watermark, or where its
        log parts from this leader's, or the error that sends it back to the controller."""
        epoch = self.leader_epoch
        if asked.current_leader_epoch != epoch:
            error: KafkaError = (
                FencedLeaderEpochError(f"[FENCED_LEADER_EPOCH] {self.tp} is led at epoch {epoch}; node {replica_id} "
                                       f"follows epoch {asked.current_leader_epoch}")
                if asked.current_leader_epoch < epoch else
                UnknownLeaderEpochError(f"[UNKNOWN_LEADER_EPOCH] {self.tp}: node {self._io.node_id} leads at epoch "
                                        f"{epoch} and has not heard of epoch {asked.current_leader_epoch}"))
            return partition_error(self.tp, error)
        now = self._io.now_ms()
        log_start = self.log.log_start_offset
        if asked.fetch_offset < log_start:  # before any divergence check: the follower starts over from here
            return partition_error(self.tp, OffsetOutOfRangeError(
                f"[OFFSET_OUT_OF_RANGE] node {replica_id} asks {self.tp} for offset {asked.fetch_offset}; the "
                f"leader's log starts at {log_start}"), log_start_offset=log_start,
                high_watermark=self.log.high_watermark)
        with self._lock:
            if self._resigned:
                return partition_error(self.tp, NotLeaderOrFollowerError(
                    f"[NOT_LEADER_OR_FOLLOWER] node {self._io.node_id} no longer leads {self.tp}"))
            if replica_id not in self._core.followers:
                return partition_error(self.tp, NotLeaderOrFollowerError(
                    f"[NOT_LEADER_OR_FOLLOWER] node {replica_id} is not a replica of {self.tp} "
                    f"(replicas {list(self._core.replicas)})"))
            self._core.appended(self.log.log_end_offset, now)
            answer = self._core.follower_fetch(replica_id, asked.fetch_offset, asked.last_fetched_epoch,
                                               self.log.epoch_cache(), now)
            if isinstance(answer, FetchDiverged):
                return pb.ReplicaFetchPartitionData(
                    topic=self.tp.topic, partition=self.tp.partition, diverging_epoch=answer.diverging.epoch,
                    diverging_end_offset=answer.diverging.end_offset, high_watermark=self.log.high_watermark,
                    log_start_offset=self.log.log_start_offset)
            settled = self._advance_locked()
            proposal = self._proposal(answer.propose_isr)
        self._after(settled, proposal)
        try:
            data = self.log.read_for_follower(asked.fetch_offset, max_bytes)
        except KafkaError as error:
            return partition_error(self.tp, error)
        end = self._records_end(data.records, asked.fetch_offset)
        return pb.ReplicaFetchPartitionData(topic=self.tp.topic, partition=self.tp.partition, records=data.records,
                                            records_end=end, high_watermark=data.high_watermark,
                                            log_start_offset=data.log_start_offset, diverging_epoch=UNDEFINED_EPOCH,
                                            diverging_end_offset=-1)

    @staticmethod
    def _records_end(records: bytes, fetch_offset: int) -> int:
        """The offset after the last batch of `records` (read from its header; no batch: `fetch_offset`)."""
        if not records:
            return fetch_offset
        end = fetch_offset
        for batch in codec.iter_batches(records, verify_crc=False):
            end = batch.header.last_offset + 1
        return end

    def has_news_for(self, asked: pb.ReplicaFetchPartition) -> bool:
        """Whether a fetch of `asked` would bring the follower anything now (batches, or a word to act on): a
        fetch with nothing for any of its partitions waits at the leader instead of spinning."""
        return (asked.current_leader_epoch != self.leader_epoch or self._resigned
                or self.log.log_end_offset > asked.fetch_offset)

    def settled_for(self, replica_id: int, asked: pb.ReplicaFetchPartition) -> bool:
        """Whether a fetch of `asked` by `replica_id` would neither bring it anything nor change anything here:
        this leader at the epoch it follows, and it in the ISR with this whole log. A fetch session skips
        such partitions (the core counts a follower at the log end as caught up until the next append)."""
        return (not self._resigned and asked.current_leader_epoch == self.state.leader_epoch
                and asked.fetch_offset == self.log.log_end_offset and replica_id in self._core.isr)

    # ------------------------------------------------------------ writes

    def check_enough_replicas(self) -> None:
        """Before an acks=all append: NOT_ENOUGH_REPLICAS while the ISR is smaller than min.insync.replicas."""
        with self._lock:
            self._core.check_enough_replicas(self.min_insync_replicas, str(self.tp))

    def appended(self) -> None:
        """The leader's own write is durable: with an ISR of one that is all the high watermark waits for."""
        with self._lock:
            self._core.appended(self.log.log_end_offset, self._io.now_ms())
            settled = self._advance_locked()
        self._after(settled)

    def wait_for_isr(self, required_offset: int, timeout_ms: int, done: AckDone) -> None:
        """acks=all: `done(None)` once every ISR member has fsynced the offsets below `required_offset`;
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas first; REQUEST_TIMED_OUT
        after `timeout_ms`; NOT_LEADER_OR_FOLLOWER if this replica stops leading."""
        waiter = _AckWaiter(required_offset, done)
        with self._lock:
            if self._resigned:
                outcome: KafkaError | None | _Waiting = NotLeaderOrFollowerError(
                    f"[NOT_LEADER_OR_FOLLOWER] node {self._io.node_id} no longer leads {self.tp}")
            else:
                outcome = self._outcome(required_offset)
                if outcome is WAITING:
                    self._waiters.append(waiter)
        if isinstance(outcome, _Waiting):
            waiter.timer = self._io.after(timeout_ms, lambda: self._time_out(waiter, timeout_ms),
                                          f"{self.tp} acks=all timeout")
            return
        done(outcome)

    def _time_out(self, waiter: _AckWaiter, timeout_ms: int) -> None:
        with self._lock:
            if waiter not in self._waiters:
                return
            self._waiters.remove(waiter)
        waiter.done(RequestTimedOutError(
            f"[REQUEST_TIMED_OUT] {self.tp}: the ISR did not reach offset {waiter.required_offset - 1} within "
            f"{timeout_ms} ms; the write may still be replicated"))

    # ------------------------------------------------------------ leadership

    def resign(self) -> None:
        """This replica stops leading (the controller moved leadership, or the node stops): waiting writes are
        told NOT_LEADER_OR_FOLLOWER, as Kafka's delayed produce is on a leader change."""
        with self._lock:
            self._resigned = True
            waiters, self._waiters = self._waiters, []
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        for waiter in waiters:
            if waiter.timer is not None:
                waiter.timer.cancel()
            waiter.done(NotLeaderOrFollowerError(
                f"[NOT_LEADER_OR_FOLLOWER] node {self._io.node_id} stopped leading {self.tp} before the ISR had "
                f"offset {waiter.required_offset - 1}; the write may or may not survive"))

    def _check_isr(self) -> None:
        with self._lock:
            if self._resigned:
                return
            now = self._io.now_ms()
            self._core.appended(self.log.log_end_offset, now)
            proposal = self._proposal(self._core.out_of_sync(now))
            settled = self._advance_locked()
            self._timer = self._io.after(self._check_every_ms, self._check_isr, f"{self.tp} ISR check")
        self._after(settled, proposal)

    def _proposal(self, isr: frozenset[int] | None) -> PartitionState | None:
        if isr is None:
            return None
        if self._stale:
            self._core.isr_refused()
            return None
        log.info("%s: leader %d proposes the ISR %s (was %s)", self.tp, self._io.node_id, sorted(isr),
                 sorted(self._core.isr))
        return PartitionState(self.state.leader, self.state.leader_epoch, tuple(sorted(isr)),
                              self.state.controller_epoch)

    def _isr_answered(self, outcome: IsrOutcome) -> None:
        with self._lock:
            if self._resigned:
                return
            if isinstance(outcome, IsrWritten):
                self.state, self._version = outcome.state, outcome.version
                self._core.isr_written(frozenset(outcome.state.isr), self._io.now_ms())
            else:
                self._core.isr_refused()
                self._stale = outcome.stale
                log.warning("%s: the ISR change was not written (%s)%s", self.tp, outcome.reason,
                            "; waiting for the controller's word" if outcome.stale else "; trying again later")
            settled = self._advance_locked()
        self._after(settled)

    # ------------------------------------------------------------ helpers

    def _advance_locked(self) -> list[tuple[_AckWaiter, KafkaError | None]]:
        """Move the log's high watermark to the core's and take the waiters it settles (lock held)."""
        self.log.set_high_watermark(self._core.high_watermark)
        settled: list[tuple[_AckWaiter, KafkaError | None]] = []
        for waiter in list(self._waiters):
            outcome = self._outcome(waiter.required_offset)
            if not isinstance(outcome, _Waiting):
                self._waiters.remove(waiter)
                settled.append((waiter, outcome))
        return settled

    def _outcome(self, required_offset: int) -> KafkaError | None | _Waiting:
        """WAITING while the log's high watermark (never past this replica's fsynced end) is below the offset;
        then None, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas."""
        if self._acks_before_isr:
            return None
        if self.log.high_watermark < required_offset:
            return WAITING
        outcome = self._core.acks_all_outcome(required_offset, self.min_insync_replicas, str(self.tp))
        return None if outcome is True else outcome if isinstance(outcome, KafkaError) else WAITING

    def _after(self, settled: list[tuple[_AckWaiter, KafkaError | None]],
               proposal: PartitionState | None = None) -> None:
        """What a locked step decided, carried out unlocked: waiters answered, an ISR change written."""
        for waiter, error in settled:
            if waiter.timer is not None:
                waiter.timer.cancel()
            waiter.done(error)
        if proposal is not None:
            self._isr_writer.write(self.tp, proposal, self._version, self._isr_answered)
