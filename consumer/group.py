"""Group membership of a subscribed consumer: Kafka's classic protocol over gRPC (JoinGroup, SyncGroup, a
heartbeat thread, LeaveGroup), eager.

Each member sends its subscription in Kafka's ConsumerProtocol format for every assignor it offers; the
coordinator holds the JoinGroup answers until every member has rejoined, and the member it makes leader runs
the chosen assignor (assignors.py) and sends the assignment with its SyncGroup. State lives in one
`MemberState` machine guarded by one lock; the heartbeat thread never touches positions, it only flags a
rejoin that the next poll() carries out (after revoking everything, consumer.py).
"""
from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from client.cluster import GROUP, ClusterClient
from client.transport import Deadline, call, call_in_worker, result_of, retrying
from consumer.assignors import ASSIGNORS
from consumer.config import ConsumerConfig
from proto import txnsim_pb2 as pb
from proto.consumer_protocol import (
    PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from proto.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    IllegalStateError,
    KafkaError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    needs_rediscovery,
    raise_for,
)
from proto.structs import ConsumerGroupMetadata, TopicPartition

log = logging.getLogger(__name__)


class GroupCoordinatorClient:
    """Calls to the node that coordinates one group; it forgets that node when it moves or dies."""

    def __init__(self, cluster: ClusterClient, group_id: str, config: ConsumerConfig) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self._config = config
        self._backoff_s = max(config.retry_backoff_ms / 1000, 0.01)

    def coordinator_stub(self, deadline: Deadline) -> Any:
        address = self.cluster.coordinator_address(GROUP, self.group_id, deadline)
        return self.cluster.stubs(address).groups

    def call(self, rpc_name: str, request: Any, deadline: Deadline, *, timeout_s: float | None = None,
             check: bool = True) -> Any:
        """One attempt; the response's error code is raised (with `check`); a moved coordinator is forgotten.

        `timeout_s` overrides the RPC's timeout: a JoinGroup or SyncGroup waits for the whole group."""
        try:
            stub = self.coordinator_stub(deadline)
            timeout = self._config.rpc_timeout(deadline) if timeout_s is None else timeout_s
            response = call(getattr(stub, rpc_name), request, timeout, check=False)
            if check:
                raise_for(getattr(response, "error_code", 0), getattr(response, "error_message", ""))
            return response
        except KafkaError as exc:
            self.note_error(exc)
            raise

    def call_with_retries(self, rpc_name: str, request: Any, deadline: Deadline,
                          check: Callable[[Any], None] | None = None) -> Any:
        """Retry retriable errors (coordinator moved, loading, ...) with backoff until `deadline`.

        `check` raises for errors inside the response (per-partition codes), so that those are
        retried by the same policy.
        """
        for attempt in retrying(deadline.remaining(), initial_backoff_s=self._backoff_s):
            with attempt:
                response = self.call(rpc_name, request, deadline)
                if check is not None:
                    check(response)
                return response
        raise AssertionError("unreachable")

    def note_error(self, exc: KafkaError) -> None:
        if needs_rediscovery(exc):
            self.cluster.invalidate_coordinator(GROUP, self.group_id)


class MemberState(enum.Enum):
    #: no member id or generation: the next poll() joins from scratch
    UNJOINED = "Unjoined"
    #: still a member, but the generation moved on: the next poll() rejoins
    PREPARING_REBALANCE = "PreparingRebalance"
    #: JoinGroup answered; SyncGroup not yet
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


#: target state -> the states it may be entered from
_VALID_PREVIOUS: dict[MemberState, frozenset[MemberState]] = {
    MemberState.UNJOINED: frozenset(MemberState),
    MemberState.PREPARING_REBALANCE: frozenset({MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE,
                                                MemberState.STABLE}),
    MemberState.COMPLETING_REBALANCE: frozenset({MemberState.UNJOINED, MemberState.PREPARING_REBALANCE}),
    MemberState.STABLE: frozenset({MemberState.COMPLETING_REBALANCE}),
}


class GroupMembership:
    """This consumer's membership in its group; thread-safe against its own heartbeat thread."""

    def __init__(self, client: GroupCoordinatorClient, config: ConsumerConfig,
                 topics: Callable[[], frozenset[str]], wakeup: threading.Event) -> None:
        self._client = client
        self._config = config
        self._topics = topics
        self._wakeup = wakeup
        self._lock = threading.Lock()
        self._state = MemberState.UNJOINED
        self._member_id = ""
        self._generation_id = -1
        self._last_poll = time.monotonic()
        self._closing = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        #: the JoinGroup or SyncGroup in flight: (kind, future, member id, generation) (poll()'s thread only)
        self._pending: tuple[str, Any, str, int] | None = None
        #: set by a JoinGroup answer that made this member the leader: whom to assign, with which assignor
        self._leader_of: tuple[str, dict[str, list[str]]] | None = None
        #: the partition counts the leader last assigned from (a change calls for a rebalance)
        self._assigned_counts: dict[str, int] = {}
        #: FENCED_INSTANCE_ID from a heartbeat: every later poll() raises it
        self._fenced: FencedInstanceIdError | None = None

    # ------------------------------------------------------------ state

    @property
    def group_id(self) -> str:
        return self._client.group_id

    @property
    def state(self) -> MemberState:
        with self._lock:
            return self._state

    def _transition_to(self, target: MemberState) -> None:
        """Caller holds the lock."""
        if self._state not in _VALID_PREVIOUS[target]:
            raise IllegalStateError(f"group {self.group_id!r}: member state cannot go from "
                                    f"{self._state.value} to {target.value}")
        if self._state is not target:
            log.debug("group %r member %r: %s -> %s", self.group_id, self._member_id, self._state.value, target.value)
        self._state = target

    def needs_join(self) -> bool:
        """Whether a rebalance is to be started or is under way (poll() carries it on)."""
        with self._lock:
            return self._state is not MemberState.STABLE

    def generation(self) -> tuple[int, str]:
        """(generation_id, member_id) to send with commits; (-1, "") outside the group."""
        with self._lock:
            if self._state is MemberState.UNJOINED:
                return -1, ""
            return self._generation_id, self._member_id

    def group_metadata(self) -> ConsumerGroupMetadata:
        generation_id, member_id = self.generation()
        return ConsumerGroupMetadata(self.group_id, generation_id, member_id, self._config.group_instance_id)

    def request_rejoin(self, reason: str, *, if_generation: int | None = None) -> None:
        """Rejoin on the next poll (only if still at `if_generation`, when given)."""
        with self._lock:
            if if_generation is not None and if_generation != self._generation_id:
                return
            if self._state is MemberState.UNJOINED:
                return
            log.info("group %r: rejoining (%s)", self.group_id, reason)
            self._transition_to(MemberState.PREPARING_REBALANCE)
        self._wakeup.set()

    def reset_member(self, reason: str, *, if_member: str | None = None) -> None:
        """Forget member id and generation; the next join starts over with member id ""."""
        with self._lock:
            if if_member is not None and if_member != self._member_id:
                return
            log.info("group %r: member %r reset (%s)", self.group_id, self._member_id, reason)
            self._pending = None  # an answer still on its way belongs to the forgotten member
            self._member_id = ""
            self._generation_id = -1
            self._transition_to(MemberState.UNJOINED)
        self._wakeup.set()

    def handle_group_error(self, exc: KafkaError, generation_id: int, member_id: str) -> None:
        """What a commit or heartbeat error says about our membership."""
        if isinstance(exc, UnknownMemberIdError):
            self.reset_member(str(exc), if_member=member_id)
        elif isinstance(exc, (RebalanceInProgressError, IllegalGenerationError)):
            self.request_rejoin(str(exc), if_generation=generation_id)

    def record_poll(self) -> None:
        with self._lock:
            self._last_poll = time.monotonic()

    # ------------------------------------------------------------ join and sync

    def _group_wait_s(self) -> float:
        """How long a JoinGroup or SyncGroup may be held: the whole rebalance, as Kafka's clients allow."""
        return (max(self._config.rebalance_timeout_ms, self._config.request_timeout_ms) + 5000) / 1000

    def advance(self, deadline: Deadline) -> list[TopicPartition] | None:
        """One step of a rebalance that never blocks: send JoinGroup or SyncGroup, or take an answer that
        arrived (the coordinator holds them until the whole group is there). Returns the assignment once
        SyncGroup answered, None while waiting (poll() comes back); raises what the group answered."""
        while True:
            pending = self._pending
            if pending is None:
                state = self.state
                if state in (MemberState.UNJOINED, MemberState.PREPARING_REBALANCE):
                    self._send_join(deadline)
                elif state is MemberState.COMPLETING_REBALANCE:
                    self._send_sync(deadline)
                else:
                    return None
                continue
            kind, future, member_id, generation_id = pending
            if not future.done():
                return None
            self._pending = None
            try:
                response = result_of(future, check=False)
            except KafkaError as exc:
                self._client.note_error(exc)
                if kind == "sync":
                    self.request_rejoin("SyncGroup failed", if_generation=generation_id)
                raise
            if kind == "join":
                self._on_join(response, member_id)
            else:
                return self._on_sync(response, member_id, generation_id)

    def _send(self, kind: str, rpc: str, request: Any, deadline: Deadline, member_id: str, generation_id: int
              ) -> None:
        stub = self._client.coordinator_stub(deadline)
        future = call_in_worker(getattr(stub, rpc), request, self._group_wait_s())
        self._pending = (kind, future, member_id, generation_id)
        future.add_done_callback(lambda _: self._wakeup.set())

    def _send_join(self, deadline: Deadline) -> None:
        topics = sorted(self._topics())
        subscription = encode_subscription(topics)
        with self._lock:
            member_id = self._member_id
        request = pb.JoinGroupRequest(
            group_id=self.group_id, member_id=member_id, session_timeout_ms=self._config.session_timeout_ms,
            rebalance_timeout_ms=self._config.rebalance_timeout_ms, topics=topics,
            group_instance_id=self._config.group_instance_id or "", protocol_type=PROTOCOL_TYPE,
            protocols=[pb.GroupProtocol(name=name, metadata=subscription)
                       for name in self._config.partition_assignment_strategy],
            client_id=self._config.client_id, require_known_member_id=True)
        self._send("join", "JoinGroup", request, deadline, member_id, -1)

    def _on_join(self, response: pb.JoinGroupResponse, member_id: str) -> None:
        if response.error_code == MemberIdRequiredError.errno:  # a new member: join again with this id
            with self._lock:
                if self._member_id == member_id:
                    self._member_id = response.member_id
            return
        try:
            raise_for(response.error_code, response.error_message)
        except UnknownMemberIdError as exc:
            self.reset_member(str(exc), if_member=member_id)
            raise
        except KafkaError as exc:
            self._client.note_error(exc)
            raise
        with self._lock:
            if self._member_id != member_id or self._state not in (MemberState.UNJOINED,
                                                                    MemberState.PREPARING_REBALANCE):
                raise RebalanceInProgressError(f"[REBALANCE_IN_PROGRESS] group {self.group_id!r}: this member "
                                               f"changed during JoinGroup; rejoining")
            self._member_id = response.member_id
            self._generation_id = response.generation_id
            self._leader_of = None
            if response.leader_id == response.member_id and not response.skip_assignment:
                self._leader_of = (response.protocol_name, {
                    m.member_id: decode_subscription(m.metadata) for m in response.member_list})
            self._transition_to(MemberState.COMPLETING_REBALANCE)
        log.info("group %r: joined as %r, generation %d%s", self.group_id, response.member_id,
                 response.generation_id, " (leader)" if self._leader_of else "")

    def _assign(self, deadline: Deadline) -> list[pb.SyncGroupAssignment]:
        """The leader's part: run the chosen assignor over every member's subscription."""
        with self._lock:
            leader_of = self._leader_of
        if leader_of is None:
            return []
        protocol, subscriptions = leader_of
        counts: dict[str, int] = {}
        for topic in sorted({t for topics in subscriptions.values() for t in topics}):
            try:
                counts[topic] = self._client.cluster.partitions_for(topic, deadline)
            except UnknownTopicOrPartitionError:
                counts[topic] = 0
        assignment = ASSIGNORS[protocol](subscriptions, lambda topic: counts.get(topic, 0))
        with self._lock:
            self._assigned_counts = counts
        return [pb.SyncGroupAssignment(member_id=m, assignment=encode_assignment(tps)) for m, tps in assignment.items()]

    def assigned_counts(self) -> dict[str, int]:
        """As leader: the partition counts of the group's topics the current assignment was made from."""
        with self._lock:
            return dict(self._assigned_counts) if self._leader_of is not None else {}

    def _send_sync(self, deadline: Deadline) -> None:
        with self._lock:
            generation_id, member_id = self._generation_id, self._member_id
        try:
            request = pb.SyncGroupRequest(group_id=self.group_id, generation_id=generation_id, member_id=member_id,
                                          group_instance_id=self._config.group_instance_id or "",
                                          assignments=self._assign(deadline))
            self._send("sync", "SyncGroup", request, deadline, member_id, generation_id)
        except KafkaError:
            self.request_rejoin("SyncGroup failed", if_generation=generation_id)
            raise

    def _on_sync(self, response: pb.SyncGroupResponse, member_id: str, generation_id: int) -> list[TopicPartition]:
        try:
            raise_for(response.error_code, response.error_message)
        except UnknownMemberIdError as exc:
            self.reset_member(str(exc), if_member=member_id)
            raise
        except KafkaError as exc:
            self._client.note_error(exc)
            self.request_rejoin("SyncGroup failed", if_generation=generation_id)
            raise
        with self._lock:
            if self._generation_id != generation_id or self._state is not MemberState.COMPLETING_REBALANCE:
                raise RebalanceInProgressError(f"[REBALANCE_IN_PROGRESS] group {self.group_id!r} moved on during "
                                               f"SyncGroup")
            self._transition_to(MemberState.STABLE)
            self._last_poll = time.monotonic()
        assignment = decode_assignment(response.assignment_bytes)
        log.info("group %r: generation %d assigns %s", self.group_id, generation_id,
                 sorted(map(str, assignment)) or "nothing")
        self._start_heartbeat()
        return assignment

    def leave(self, deadline: Deadline) -> None:
        """Send LeaveGroup (best effort) and forget the membership."""
        with self._lock:
            member_id, joined = self._member_id, self._state is not MemberState.UNJOINED
        if member_id and joined and self._config.group_instance_id is None:  # static members stay (KIP-345)
            try:
                self._client.call("LeaveGroup", pb.LeaveGroupRequest(group_id=self.group_id, member_id=member_id),
                                  deadline)
            except KafkaError as exc:
                log.info("group %r: LeaveGroup failed (%s); the session will expire instead", self.group_id, exc)
        self.reset_member("left the group", if_member=member_id)

    # ------------------------------------------------------------ heartbeats

    def _start_heartbeat(self) -> None:
        if self._heartbeat_thread is None and not self._closing.is_set():
            self._heartbeat_thread = threading.Thread(
                target=self._run_heartbeats, name=f"heartbeat-{self.group_id}", daemon=True)
            self._heartbeat_thread.start()

    def _run_heartbeats(self) -> None:
        interval = self._config.heartbeat_interval_ms / 1000
        while not self._closing.wait(interval):
            try:
                self.heartbeat_once()
            except KafkaError as exc:  # never let the thread die; the next beat tries again
                log.warning("group %r: heartbeat failed: %s", self.group_id, exc)

    def raise_if_fenced(self) -> None:
        """A newer instance with our group.instance.id took our place: fatal, as in Kafka's consumer."""
        if self._fenced is not None:
            raise self._fenced

    def heartbeat_once(self) -> None:
        with self._lock:
            # beat on until the JoinGroup is sent: a revoke (and its commit) between polls must not let the
            # session lapse and cost the group another rebalance
            if self._state not in (MemberState.STABLE, MemberState.PREPARING_REBALANCE) or self._pending is not None \
                    or self._generation_id < 0 or self._fenced is not None:
                return
            generation_id, member_id = self._generation_id, self._member_id
            idle_s = time.monotonic() - self._last_poll
        if idle_s * 1000 > self._config.rebalance_timeout_ms:
            log.warning("group %r: poll() not called for %.1f s (rebalance_timeout_ms / max_poll_interval_ms "
                        "is %d); leaving the group", self.group_id, idle_s, self._config.rebalance_timeout_ms)
            self.leave(Deadline(self._config.heartbeat_interval_ms / 1000))
            return
        request = pb.HeartbeatRequest(group_id=self.group_id, generation_id=generation_id, member_id=member_id,
                                      group_instance_id=self._config.group_instance_id or "")
        deadline = Deadline(min(self._config.request_timeout_ms, self._config.session_timeout_ms) / 1000)
        try:
            self._client.call("Heartbeat", request, deadline)
        except (UnknownMemberIdError, RebalanceInProgressError, IllegalGenerationError) as exc:
            self.handle_group_error(exc, generation_id, member_id)
        except FencedInstanceIdError as exc:
            log.error("group %r: %s; this consumer stops", self.group_id, exc)
            self._fenced = exc
            self._wakeup.set()
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.debug("group %r: heartbeat failed (%s); will rediscover the coordinator", self.group_id, exc)

    def close(self) -> None:
        self._closing.set()
        thread = self._heartbeat_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)  # a daemon; a heartbeat stuck on a paused node must not hold close()
