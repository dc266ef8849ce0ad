"""This node's fetches from one leader: every partition it follows there, in one request at a time (Kafka's
ReplicaFetcherThread, one per leader).

Each round asks for every followed partition from its fsynced log end, with the epoch of its last batch and
the leader epoch it follows; the leader answers at once when it has anything, else holds the fetch up to
`max_wait_ms`. Each partition's answer goes to its core (partitions/follower_fetch.py), whose effects are
carried out in order on the partition's ReplicaLog: cut it, append the leader's batches as they are, move
the high watermark. The appended batches are fsynced, all partitions at once, before the next round, so the
offset a follower asks for next is one it has made durable: the leader counts it toward acks=all.

The rounds run in a fetch session (KIP-227, Kafka's FetchSessionHandler): the first request lists every
partition, each later one only those whose fetch state changed since the last request the leader answered,
and those no longer fetched (unfollowed, or backing off); the leader remembers the rest and answers only
partitions with news. Any failed round starts the session over with a full request.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from coordinator.replication.served_sessions import NEW_SESSION_EPOCH
from coordinator.runtime.io import Failures, NodeIO, Outcome
from partitions.epoch_cache import EpochEnd
from partitions.follower_fetch import (
    Append,
    Backoff,
    FetchAnswer,
    FetchRequest,
    FetchState,
    FollowerFetcher,
    SetHighWatermark,
    StartAt,
    Truncate,
)
from partitions.log import PartitionLog
from partitions.replica_log import ReplicaLog
from proto import txnsim_pb2 as pb
from proto.errors import NONE, FetchSessionIdNotFoundError, InvalidFetchSessionEpochError, KafkaError, name_of
from proto.planted_bugs import PlantedBug
from proto.structs import TopicPartition

log = logging.getLogger(__name__)

#: Kafka's replica.fetch.wait.max.ms and replica.fetch.max.bytes, and its replica.fetch.backoff.ms
REPLICA_FETCH_WAIT_MAX_MS = 500
REPLICA_FETCH_MAX_BYTES = 1024 * 1024
REPLICA_FETCH_BACKOFF_MS = 1000
_SESSION_ERRORS = frozenset({FetchSessionIdNotFoundError.errno, InvalidFetchSessionEpochError.errno})


@dataclass(frozen=True, slots=True)
class FetchSettings:
    max_wait_ms: int = REPLICA_FETCH_WAIT_MAX_MS
    max_bytes: int = REPLICA_FETCH_MAX_BYTES
    backoff_ms: int = REPLICA_FETCH_BACKOFF_MS
    #: how long past max_wait_ms a fetch may go unanswered before it counts as lost
    request_timeout_ms: int = 30_000
    #: the simulator's planted bugs (no-follower-truncation); never set by a real node
    planted_bug: PlantedBug | None = None


@dataclass(eq=False)
class _Followed:
    tp: TopicPartition
    log: ReplicaLog
    core: FollowerFetcher
    #: the high watermark the leader last gave, applied once what it covers here is fsynced
    pending_high_watermark: int = -1
    #: the log start the leader last gave, applied with the high watermark
    pending_log_start: int = -1
    #: not fetched again before this time (an error backs off this partition, not the others)
    retry_at_ms: int = 0


class FetchSession:
    """The partitions this node follows on leader `leader_id`, fetched together."""

    def __init__(self, io: NodeIO, leader_id: int, settings: FetchSettings = FetchSettings(),
                 on_error: Callable[[TopicPartition, str], None] = lambda _tp, _error: None) -> None:
        self._io = io
        self.leader_id = leader_id
        self._settings = settings
        self._on_error = on_error
        self._lock = threading.Lock()
        self._followed: dict[TopicPartition, _Followed] = {}
        #: partitions about to be followed, once their logs are durable (a token per follow() call)
        self._pending: dict[TopicPartition, object] = {}
        self._in_flight = False
        self._closed = False
        #: the fetch session: its id (0: the next request is a full one), the epoch the next request carries,
        #: and what the leader holds of each partition (the fetch state last sent)
        self._session_id = 0
        self._session_epoch = NEW_SESSION_EPOCH
        self._session_sent: dict[TopicPartition, FetchRequest] = {}

    def follow(self, tp: TopicPartition, replica_log: ReplicaLog, leader_epoch: int) -> None:
        """Follow `tp` at `leader_epoch` (its first fetch checks where the log parts from the leader's), once
        what the log holds is fsynced: its first fetch tells the leader it has all of it (a former leader's
        last writes, or another session's appends, may not be durable yet)."""
        replica_log.become_follower(leader_epoch)
        end = replica_log.log_end_offset

        def durable(failures: Failures) -> None:
            if failures:
                log.error("%s: cannot make the log durable before following node %d (%s)", tp, self.leader_id,
                          failures[replica_log])
                self._on_error(tp, failures[replica_log].message)
                return
            core = FollowerFetcher(leader_epoch=leader_epoch, log_end_offset=replica_log.log_end_offset,
                                   high_watermark=replica_log.high_watermark, epochs=replica_log.epoch_cache(),
                                   planted_bug=self._settings.planted_bug)
            with self._lock:
                if self._closed or self._pending.get(tp) is not marker:
                    return  # unfollowed, or followed again, meanwhile
                del self._pending[tp]
                self._followed[tp] = _Followed(tp, replica_log, core)
            self._kick()
        marker = object()
        with self._lock:
            self._followed.pop(tp, None)
            self._pending[tp] = marker
        self._io.durable({replica_log: end}, durable)

    def unfollow(self, tp: TopicPartition) -> None:
        with self._lock:
            self._followed.pop(tp, None)
            self._pending.pop(tp, None)

    def state_of(self, tp: TopicPartition) -> FetchState | None:
        with self._lock:
            followed = self._followed.get(tp)
            return followed.core.state if followed is not None else None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._followed.clear()

    # ------------------------------------------------------------ rounds

    def _kick(self) -> None:
        with self._lock:
            if self._in_flight or self._closed:
                return
            self._in_flight = True
        self._io.soon(self._send, f"fetch from node {self.leader_id}")

    def _send(self) -> None:
        now = self._io.now_ms()
        with self._lock:
            asked = {followed: next_fetch for followed in self._followed.values()
                     if followed.retry_at_ms <= now and (next_fetch := followed.core.next_fetch()) is not None}
            later = [f.retry_at_ms for f in self._followed.values() if f.retry_at_ms > now]
            if not asked or self._closed:
                self._in_flight = False
                if later and not self._closed:
                    self._io.after(min(later) - now, self._kick, f"fetch from node {self.leader_id} after a backoff")
                return
            wanted = {f.tp: r for f, r in asked.items()}
            incremental = self._session_id != 0
            listed = [(tp, r) for tp, r in wanted.items() if not incremental or self._session_sent.get(tp) != r]
            forgotten = [tp for tp in self._session_sent if tp not in wanted] if incremental else []
            session_id, session_epoch = self._session_id, self._session_epoch
        request = pb.ReplicaFetchRequest(
            replica_id=self._io.node_id, max_wait_ms=self._settings.max_wait_ms, max_bytes=self._settings.max_bytes,
            session_id=session_id, session_epoch=session_epoch,
            partitions=[pb.ReplicaFetchPartition(topic=tp.topic, partition=tp.partition,
                                                 fetch_offset=r.fetch_offset, last_fetched_epoch=r.last_fetched_epoch,
                                                 current_leader_epoch=r.current_leader_epoch)
                        for tp, r in listed],
            forgotten=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in forgotten])
        self._io.call(self.leader_id, request, self._settings.max_wait_ms + self._settings.request_timeout_ms,
                      lambda outcome: self._answered(asked, wanted, outcome))

    def _answered(self, asked: dict[_Followed, FetchRequest], wanted: dict[TopicPartition, FetchRequest],
                  outcome: Outcome) -> None:
        try:
            self._take_answer(asked, wanted, outcome)
        except Exception:  # a bug must not end fetching for every partition of the session: back off, go on
            log.exception("fetch from node %d: handling its answer failed", self.leader_id)
            self._start_session_over()
            self._back_off(asked)
            self._next_round()

    def _start_session_over(self) -> None:
        with self._lock:
            self._session_id, self._session_epoch, self._session_sent = 0, NEW_SESSION_EPOCH, {}

    def _take_answer(self, asked: dict[_Followed, FetchRequest], wanted: dict[TopicPartition, FetchRequest],
                     outcome: Outcome) -> None:
        if isinstance(outcome, BaseException):
            log.info("fetch from node %d failed (%s); again in %d ms", self.leader_id, outcome,
                     self._settings.backoff_ms)
            self._start_session_over()
            self._back_off(asked)
            self._next_round()
            return
        assert isinstance(outcome, pb.ReplicaFetchResponse)
        if outcome.error_code in _SESSION_ERRORS:  # the leader restarted, or an answer was lost: a full fetch now
            log.info("fetch from node %d: %s; fetching in full", self.leader_id, outcome.error_message)
            self._start_session_over()
            self._next_round()
            return
        if outcome.error_code != NONE:  # the whole request refused (a node that keeps no replicas, a node bug)
            log.info("fetch from node %d refused: %s", self.leader_id, outcome.error_message)
            self._start_session_over()
            self._back_off(asked)
            self._next_round()
            return
        with self._lock:
            self._session_id = outcome.session_id
            self._session_epoch = self._session_epoch + 1 if outcome.session_id else NEW_SESSION_EPOCH
            self._session_sent = wanted if outcome.session_id else {}
        by_tp = {(f.tp.topic, f.tp.partition): f for f in asked}
        appended: dict[PartitionLog, int] = {}
        for data in outcome.partitions:
            followed = by_tp.get((data.topic, data.partition))
            if followed is not None and self._apply(followed, asked[followed], data, appended):
                self._back_off([followed])
        if appended:
            self._io.durable(appended, lambda failures: self._durable(asked, failures))
        else:
            self._durable(asked, {})

    def _apply(self, followed: _Followed, asked: FetchRequest, data: pb.ReplicaFetchPartitionData,
               appended: dict[PartitionLog, int]) -> bool:
        """Carry out one partition's effects on its log; True if the session should back off."""
        with self._lock:
            if self._followed.get(followed.tp) is not followed or self._closed:
                return False  # unfollowed, or followed again at another epoch, meanwhile
            answer = FetchAnswer(
                error=name_of(data.error_code) if data.error_code != NONE else None,
                diverging=EpochEnd(data.diverging_epoch, data.diverging_end_offset)
                if data.diverging_end_offset >= 0 else None,
                records=data.records, records_end=data.records_end, high_watermark=data.high_watermark,
                log_start_offset=data.log_start_offset)
            effects = followed.core.answered(asked, answer)
            backoff = False  # True: this partition waits before its next fetch
            try:
                for effect in effects:
                    if isinstance(effect, Truncate):
                        followed.log.truncate_to(effect.offset)
                    elif isinstance(effect, StartAt):
                        followed.log.truncate_fully_and_start_at(effect.offset)
                    elif isinstance(effect, Append):
                        followed.log.append_as_follower(effect.records, wait_durable=False)
                        appended[followed.log] = followed.log.log_end_offset
                    elif isinstance(effect, SetHighWatermark):
                        followed.pending_high_watermark = effect.high_watermark
                    elif isinstance(effect, Backoff):
                        backoff = True
                        self._on_error(followed.tp, effect.reason)
            except KafkaError as error:
                log.error("%s: following node %d failed: %s", followed.tp, self.leader_id, error)
                self._on_error(followed.tp, error.message)
                backoff = True
            if not data.error_code:
                followed.pending_log_start = data.log_start_offset
            # the core follows the log as it now is (a failed append left it where it was)
            followed.core.log_end_offset = followed.log.log_end_offset
            followed.core.epochs = followed.log.epoch_cache()
            return backoff

    def _durable(self, asked: dict[_Followed, FetchRequest], failures: Failures) -> None:
        try:
            for followed in asked:
                if followed.log in failures:
                    # its next fetch would tell the leader it has offsets it could not make durable: it stops
                    log.error("%s: cannot make the leader's batches durable (%s); this replica stops following",
                              followed.tp, failures[followed.log])
                    self._on_error(followed.tp, failures[followed.log].message)
                    with self._lock:
                        if self._followed.get(followed.tp) is followed:
                            del self._followed[followed.tp]
                else:
                    if followed.pending_high_watermark >= 0:
                        followed.log.set_high_watermark(followed.pending_high_watermark)
                        followed.pending_high_watermark = -1
                    # records the leader deleted (retention, DeleteRecords) go here too, up to this replica's
                    # mark (the leader tells a log start once: the mark it came with is applied first)
                    start = min(followed.pending_log_start, followed.log.high_watermark)
                    if start > followed.log.log_start_offset:
                        followed.log.delete_records_before(start)
                    followed.pending_log_start = -1
        finally:
            self._next_round()

    def _back_off(self, followed: Iterable[_Followed]) -> None:
        at = self._io.now_ms() + self._settings.backoff_ms
        with self._lock:
            for one in followed:
                one.retry_at_ms = at

    def _next_round(self) -> None:
        with self._lock:
            self._in_flight = False
        self._kick()
