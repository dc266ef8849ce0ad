"""Every replica one node holds: the partitions it leads and those it follows, and the followers' fetches it
serves (Kafka's ReplicaManager).

The controller's word for a partition (its leader, leader epoch, ISR and the state's version) comes in
through `apply`: this node leads it, follows its leader, or holds no replica of it. A follower's fetch names
every partition it follows here; when none has anything new the fetch is parked, a registered waiter that a
local append or the fetch's deadline wakes, so an idle follower costs one call per max_wait, not a spin.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.controller.znodes import PartitionState
from coordinator.replication.follower import FetchSession, FetchSettings
from coordinator.replication.isr_writes import IsrWriter
from coordinator.replication.leader import LeaderPartition, partition_error
from coordinator.replication.served_sessions import CachedPartition, ServedSession, ServedSessions
from coordinator.runtime.io import Cancellable, NodeIO, Outcome
from partitions.epoch_cache import UNDEFINED_EPOCH
from partitions.leader_replicas import REPLICA_LAG_TIME_MAX_MS
from partitions.replica_log import ReplicaLog
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, NotLeaderOrFollowerError, code_of
from proto.planted_bugs import PlantedBug
from proto.structs import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    min_insync_replicas: int = 2
    max_lag_ms: int = REPLICA_LAG_TIME_MAX_MS
    fetch: FetchSettings = FetchSettings()
    #: the simulator's planted bugs of the leader (hw-from-leader-alone, acks-before-isr); never set by a real node
    planted_bug: PlantedBug | None = None


@dataclass(eq=False)
class _Parked:
    request: pb.ReplicaFetchRequest
    session: ServedSession
    done: Callable[[Outcome], None]
    partitions: frozenset[TopicPartition]
    timer: Cancellable | None = None
    answered: bool = False


@dataclass
class _Replica:
    log: ReplicaLog
    state: PartitionState
    leader: LeaderPartition | None = None
    followed_from: int | None = None


class ReplicaManager:
    def __init__(self, io: NodeIO, isr_writer: IsrWriter, settings: ReplicationSettings = ReplicationSettings()) -> None:
        self._io = io
        self._isr_writer = isr_writer
        self.settings = settings
        self._lock = threading.Lock()
        self._replicas: dict[TopicPartition, _Replica] = {}
        self._sessions: dict[int, FetchSession] = {}
        self._parked: list[_Parked] = []
        self._served = ServedSessions()
        self._closed = False
        self._lost_listeners: list[Callable[[str, int], None]] = []

    @property
    def node_id(self) -> int:
        return self._io.node_id

    def on_leadership_lost(self, listener: Callable[[str, int], None]) -> None:
        """Told (topic, partition) whenever this node stops leading a partition (a waiting consumer fetch of it
        answers then, not at its max wait)."""
        self._lost_listeners.append(listener)

    def _resign(self, tp: TopicPartition, leader: LeaderPartition) -> None:
        leader.resign()
        for listener in self._lost_listeners:
            listener(tp.topic, tp.partition)

    def leader_id_of(self, tp: TopicPartition) -> int:
        """The leader of `tp` as the controller's last word here says (-1: none, or no replica here)."""
        with self._lock:
            replica = self._replicas.get(tp)
            return replica.state.leader if replica is not None else -1

    def leaders(self) -> list[LeaderPartition]:
        with self._lock:
            return [replica.leader for replica in self._replicas.values() if replica.leader is not None]

    # ------------------------------------------------------------ the controller's word

    def apply(self, tp: TopicPartition, replica_log: ReplicaLog, state: PartitionState, version: int,
              replicas: tuple[int, ...], *, min_insync_replicas: int | Callable[[], int] | None = None) -> None:
        """The partition's state as the store holds it (`version`: its znode's): lead it, follow its leader,
        or (leader -1, the partition offline) wait. A state at an older leader epoch than the replica's is
        ignored (a stale word). While this node goes on leading, a newer state is taken up in place (a new
        epoch for an ISR the controller changed, or the store's ISR at the same epoch), so waiting writes
        go on waiting; a follower of the same leader at the same epoch goes on as it is."""
        required = self.settings.min_insync_replicas if min_insync_replicas is None else min_insync_replicas
        with self._lock:
            current = self._replicas.get(tp)
            if current is not None and state.leader_epoch < current.state.leader_epoch:
                log.info("%s: ignoring a state at leader epoch %d, older than %d", tp, state.leader_epoch,
                         current.state.leader_epoch)
                return
            kept = current.leader if current is not None and state.leader == self.node_id else None
            if current is not None and (kept is not None or (
                    state.leader != self.node_id and current.followed_from == state.leader
                    and state.leader_epoch == current.state.leader_epoch)):
                current.state = state
                if kept is None:
                    return
            if kept is None:
                replica = current or _Replica(replica_log, state)
                replica.state = state
                self._replicas[tp] = replica
                old_leader, replica.leader = replica.leader, None
                old_session = (self._sessions.get(replica.followed_from) if replica.followed_from is not None
                               else None)
                replica.followed_from = None
        if kept is not None:
            kept.update(state, version)
            self._wake_parked(tp)
            return
        if old_leader is not None:
            self._resign(tp, old_leader)
        if old_session is not None:
            old_session.unfollow(tp)
        self._wake_parked(tp)  # a follower's parked fetch hears of the change now, not at its max wait
        if state.leader == self.node_id:
            leader = LeaderPartition(tp, replica.log, io=self._io, state=state, version=version,
                                     replicas=replicas, isr_writer=self._isr_writer,
                                     min_insync_replicas=required, max_lag_ms=self.settings.max_lag_ms,
                                     planted_bug=self.settings.planted_bug)
            with self._lock:
                replica.leader = leader
            log.info("node %d leads %s at epoch %d, ISR %s", self.node_id, tp, state.leader_epoch, list(state.isr))
        elif state.leader >= 0 and self.node_id in replicas:
            session = self._session_for(state.leader)
            with self._lock:
                replica.followed_from = state.leader
            session.follow(tp, replica.log, state.leader_epoch)
            log.info("node %d follows %s on node %d at epoch %d", self.node_id, tp, state.leader, state.leader_epoch)

    def resign_all(self) -> None:
        """Give up every leadership (the store session expired: the controller moves them, and this node may
        not know to whom); followers go on fetching. The next word for a partition is applied afresh."""
        with self._lock:
            leaders = [(tp, replica.leader) for tp, replica in self._replicas.items() if replica.leader is not None]
            for replica in self._replicas.values():
                replica.leader = None
        for tp, leader in leaders:
            self._resign(tp, leader)

    def stop(self, tp: TopicPartition) -> ReplicaLog | None:
        """This node holds no replica of `tp` any more; the log is the caller's to close or delete."""
        with self._lock:
            replica = self._replicas.pop(tp, None)
        if replica is None:
            return None
        if replica.leader is not None:
            self._resign(tp, replica.leader)
        if replica.followed_from is not None:
            self._sessions[replica.followed_from].unfollow(tp)
        return replica.log

    def leader(self, tp: TopicPartition) -> LeaderPartition | None:
        with self._lock:
            replica = self._replicas.get(tp)
            return replica.leader if replica is not None else None

    def session(self, leader_id: int) -> FetchSession | None:
        with self._lock:
            return self._sessions.get(leader_id)

    def _session_for(self, leader_id: int) -> FetchSession:
        with self._lock:
            session = self._sessions.get(leader_id)
            if session is None:
                session = self._sessions[leader_id] = FetchSession(self._io, leader_id, self.settings.fetch)
            return session

    def close(self) -> None:
        with self._lock:
            self._closed = True
            replicas, sessions = list(self._replicas.values()), list(self._sessions.values())
            parked, self._parked = self._parked, []
        for replica in replicas:
            if replica.leader is not None:
                replica.leader.resign()
        for session in sessions:
            session.close()
        for fetch in parked:
            if fetch.timer is not None:
                fetch.timer.cancel()

    # ------------------------------------------------------------ serving followers

    def handle_fetch(self, request: pb.ReplicaFetchRequest, done: Callable[[Outcome], None]) -> None:
        """A follower's ReplicaFetch in its fetch session: answered now if any partition has news, else parked
        up to max_wait_ms. A session the leader lost (it restarted) or a request out of turn is refused, and
        the follower starts over with a full fetch."""
        try:
            session = self._served.take(request)
        except KafkaError as error:
            done(pb.ReplicaFetchResponse(error_code=code_of(error), error_message=error.message))
            return
        # answered at once even when parked: the fetch tells each leader how far the follower has fsynced
        response, sent = self._answer(session, request, first=True)
        if request.max_wait_ms <= 0 or any(_urgent(data) for data in response.partitions):
            done(_sent(response, sent))
            return
        with session.lock:
            partitions = frozenset(session.partitions)
            cached = list(session.partitions.values())
        parked = _Parked(request, session, done, partitions)
        with self._lock:
            if self._closed:
                parked.answered = True
            else:
                self._parked.append(parked)
        if parked.answered:
            done(_sent(*self._answer(session, request, first=False)))
            return
        parked.timer = self._io.after(request.max_wait_ms, lambda: self._unpark(parked), "parked replica fetch")
        # an append between the check above and the parking would have found nothing to wake: look again
        leaders = self._leaders_of([TopicPartition(c.asked.topic, c.asked.partition) for c in cached])
        if any(leader is not None and leader.has_news_for(c.asked) for c, leader in zip(cached, leaders)):
            self._unpark(parked)

    def appended(self, tp: TopicPartition) -> None:
        """A local write to `tp` is durable: the leader's high watermark may move (an ISR of one), and fetches
        parked on `tp` are answered."""
        leader = self.leader(tp)
        if leader is not None:
            leader.appended()
        self._wake_parked(tp)

    def _wake_parked(self, tp: TopicPartition) -> None:
        with self._lock:
            woken = [fetch for fetch in self._parked if tp in fetch.partitions]
        for fetch in woken:
            self._unpark(fetch)

    def _unpark(self, fetch: _Parked) -> None:
        with self._lock:
            if fetch.answered:
                return
            fetch.answered = True
            if fetch in self._parked:
                self._parked.remove(fetch)
        if fetch.timer is not None:
            fetch.timer.cancel()
        fetch.done(_sent(*self._answer(fetch.session, fetch.request, first=False)))

    def _leaders_of(self, tps: list[TopicPartition]) -> list[LeaderPartition | None]:
        with self._lock:
            return [replica.leader if (replica := self._replicas.get(tp)) else None for tp in tps]

    def _answer(self, session: ServedSession, request: pb.ReplicaFetchRequest,
                first: bool) -> tuple[pb.ReplicaFetchResponse, list[tuple[CachedPartition, int, int]]]:
        """The answer for every partition of the session with news (every one for a full fetch), and what it
        tells each: recorded only once it is sent (a parked fetch's first answer is not). A partition the
        request listed is fetched in full (the leader takes the follower's new offset); one it did not is
        skipped, cheaply, while its follower is in sync at this leader's log end."""
        with session.lock:
            items = list(session.partitions.items())
            listed = session.listed if first else frozenset()
            full = session.full
        response = pb.ReplicaFetchResponse(session_id=session.session_id)
        sent: list[tuple[CachedPartition, int, int]] = []
        for (tp, cached), leader in zip(items, self._leaders_of([tp for tp, _cached in items])):
            asked = cached.asked
            if leader is None:
                data = partition_error(tp, NotLeaderOrFollowerError(
                    f"[NOT_LEADER_OR_FOLLOWER] node {self.node_id} does not lead {tp}"))
            elif tp in listed or not leader.settled_for(session.replica_id, asked):
                data = leader.fetch(session.replica_id, asked, request.max_bytes)
            else:  # nothing to fetch: at most a new high watermark or log start to tell
                data = pb.ReplicaFetchPartitionData(
                    topic=tp.topic, partition=tp.partition, records_end=asked.fetch_offset,
                    high_watermark=leader.log.high_watermark, log_start_offset=leader.log.log_start_offset,
                    diverging_epoch=UNDEFINED_EPOCH, diverging_end_offset=-1)
            if not full and not _urgent(data) and (
                    data.high_watermark, data.log_start_offset) == (cached.sent_high_watermark, cached.sent_log_start):
                continue
            response.partitions.append(data)
            sent.append((cached, data.high_watermark, data.log_start_offset))
        return response, sent


def _urgent(data: pb.ReplicaFetchPartitionData) -> bool:
    """Whether a partition's answer must go out now rather than wait: batches, an error, or a divergence."""
    return bool(data.records or data.error_code or data.diverging_end_offset >= 0)


def _sent(response: pb.ReplicaFetchResponse,
          sent: list[tuple[CachedPartition, int, int]]) -> pb.ReplicaFetchResponse:
    """Record what `response` tells the follower of each partition, as it goes out."""
    for cached, high_watermark, log_start in sent:
        cached.sent_high_watermark, cached.sent_log_start = high_watermark, log_start
    return response
