"""The group coordinator: membership (Kafka's classic protocol, decided by classic.py) and offsets of the
groups whose __consumer_offsets shards this node owns. No gRPC here; the clock is passed in.

JoinGroup and SyncGroup block their caller's thread on a Future that the group core's effects complete
(the join barrier, the leader's assignment); a timer thread runs the cores' deadlines (initial delay,
rebalance timeout, session expiry). Both front doors (gRPC, the Kafka port) call the same methods.

Every change is written to the shard's log before it is applied or answered (prepare, append,
apply), under the group's lock, so memory always equals what a replay of the log rebuilds.
Transactional offsets stay pending per producer id until its marker reaches the shard.
Every `snapshot_interval_records` writes a background job snapshots the shard from its durable
log (snapshots.py), so loading replays only the tail after the newest snapshot.
Request-level failures are raised as KafkaError (the servicer turns them into error codes);
per-partition failures come back in the response.
"""
from __future__ import annotations

import enum
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from coordinator.group import log_format, snapshots
from coordinator.group.classic import (
    Effect,
    GroupConfig,
    GroupState,
    JoinOutcome,
    JoinRequest,
    StoreGroup,
    SyncOutcome,
)
from coordinator.group.metadata import GroupMetadata, PartitionCount
from coordinator.group.validation import (
    map_append_error,
    validate_group_id,
    validate_offsets,
)
from coordinator.shard_snapshots import SnapshottedLog
from partitions.model import AppendOrigin
from proto import consumer_protocol
from proto import txnsim_pb2 as pb
from proto.errors import (
    CoordinatorLoadInProgressError,
    GroupIdNotFoundError,
    InvalidRequestError,
    KafkaError,
    NonEmptyGroupError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
    code_of,
)
from proto.hashing import partition_for
from proto.records import encode_batch
from proto.structs import TopicPartition

logger = logging.getLogger(__name__)


#: how long past its own timeouts a blocked JoinGroup/SyncGroup waits before it gives up (a bug guard)
_WAIT_MARGIN_S = 30.0


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _random_member_id(client_id: str, instance_id: str | None) -> str:
    """Kafka's form: the client id (or the instance id of a static member), a dash, a random UUID."""
    return f"{instance_id or client_id or 'consumer'}-{uuid.uuid4()}"


def _wire_message(text: str) -> str:
    """A message without its "[NAME] " prefix: the client's for_code() puts that back."""
    if text.startswith("[") and "] " in text:
        return text.split("] ", 1)[1]
    return text


class ShardStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass(frozen=True, slots=True)
class ShardLoad:
    """How a shard was loaded: from which snapshot, and how many log records were replayed after it."""

    snapshot_offset: int | None
    replayed: int


@dataclass(eq=False)
class _Shard:
    number: int
    #: partitions.PartitionLog: append(records, origin=...) and what shard_snapshots.SnapshottedLog lists
    #: (or, for a log that keeps no files, batches(): replayed whole and never snapshotted)
    log: Any
    status: ShardStatus = ShardStatus.LOADING
    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    #: producer id -> groups that may hold its pending offsets
    txn_groups: dict[int, set[str]] = field(default_factory=dict)
    #: markers that arrived while the shard was loading: (producer_id, committed, marker_offset)
    deferred: list[tuple[int, bool, int | None]] = field(default_factory=list)
    snapshotted: bool = False
    writes_since_snapshot: int = 0


def _run_timers(coordinator: weakref.ref[GroupCoordinator], wake: threading.Event) -> None:
    """The group timers' thread: due timers first, then sleep until the next (at least every half second, for
    clocks that jump). It holds its coordinator weakly, so a coordinator dropped without close() stops it."""
    while True:
        live = coordinator()
        wait_s = live._timer_step() if live is not None else None
        del live
        if wait_s is None:
            return
        wake.wait(wait_s)
        wake.clear()


class GroupCoordinator:
    """Serves the group RPCs for the __consumer_offsets shards loaded into it."""

    def __init__(self, offsets_shards: int, *, now_ms: Callable[[], int] = _wall_clock_ms,
                 min_session_timeout_ms: int = 6000, max_session_timeout_ms: int = 1_800_000,
                 partitions_for: PartitionCount | None = None, snapshot_interval_records: int = 1000,
                 initial_rebalance_delay_ms: int = 3000,
                 new_member_id: Callable[[str, str | None], str] = _random_member_id,
                 run_timers: bool = True) -> None:
        if offsets_shards < 1:
            raise ValueError(f"offsets_shards must be at least 1, not {offsets_shards}")
        if snapshot_interval_records < 1:
            raise ValueError(f"snapshot_interval_records must be at least 1, not {snapshot_interval_records}")
        self.offsets_shards = offsets_shards
        self._now_ms = now_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self._partitions_for = partitions_for
        self._lock = threading.Lock()
        self._shards: dict[int, _Shard] = {}
        self._snapshot_interval = snapshot_interval_records
        self._snapshotter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="group-snapshot")
        self._closed = False
        self._group_config = GroupConfig(initial_rebalance_delay_ms, min_session_timeout_ms, max_session_timeout_ms)
        self._new_member_id = new_member_id
        self._timer_wake = threading.Event()
        if run_timers:
            threading.Thread(target=_run_timers, args=(weakref.ref(self), self._timer_wake), name="group-timers",
                             daemon=True).start()

    # ------------------------------------------------------------ shards

    def shard_of(self, group_id: str) -> int:
        return partition_for(group_id, self.offsets_shards)

    def owns_group(self, group_id: str) -> bool:
        """True while this coordinator owns the group's shard (loaded or still loading)."""
        with self._lock:
            return self.shard_of(group_id) in self._shards

    def load_shard(self, shard: int, log: Any) -> ShardLoad:
        """Load the shard (newest snapshot + log tail), then serve it; meanwhile its groups get
        COORDINATOR_LOAD_IN_PROGRESS."""
        state = _Shard(shard, log, snapshotted=isinstance(log, SnapshottedLog))
        with self._lock:
            self._shards[shard] = state
        try:
            loaded = self._replay(state)
        except Exception:
            with self._lock:
                if self._shards.get(shard) is state:
                    del self._shards[shard]
            raise
        while True:  # markers that came in during the replay are applied before anyone is served
            with self._lock:
                if self._shards.get(shard) is not state:
                    return
                deferred, state.deferred = state.deferred, []
                if not deferred:
                    state.status = ShardStatus.ACTIVE
                    break
            for producer_id, committed, marker_offset in deferred:
                self._complete(state, producer_id, committed, marker_offset)
        logger.info("loaded __consumer_offsets-%d: %d groups, snapshot at %s, %d log records replayed", shard,
                    len(state.groups), loaded.snapshot_offset, loaded.replayed)
        return loaded

    def unload_shard(self, shard: int) -> None:
        with self._lock:
            state = self._shards.pop(shard, None)
        if state is not None:
            self._fail_waiters(state, NotCoordinatorError(
                f"[NOT_COORDINATOR] __consumer_offsets-{shard} moved away; find the coordinator again"))

    def close(self, *, wait: bool = False) -> None:
        """Stop snapshotting. With `wait`, snapshots already due are written first; without, they are
        dropped (the log still holds everything, so only the next load's replay is longer)."""
        with self._lock:
            self._closed = True
        self._timer_wake.set()
        self._snapshotter.shutdown(wait=wait, cancel_futures=not wait)

    def loaded_shards(self) -> list[int]:
        """Shards this coordinator owns now (loaded or loading)."""
        with self._lock:
            return list(self._shards)

    def _replay(self, shard: _Shard) -> ShardLoad:
        """Rebuild the shard's groups from its newest snapshot and the log after it (replay.py)."""
        contents = snapshots.restore(shard.log, shard.number, self._now_ms())
        for group in contents.groups.values():
            self._configure(group)
        shard.groups, shard.txn_groups = contents.groups, contents.txn_groups
        return ShardLoad(contents.snapshot_offset, contents.replayed)

    def _group(self, group_id: str, *, create: bool) -> tuple[_Shard, GroupMetadata | None]:
        validate_group_id(group_id)
        number = self.shard_of(group_id)
        with self._lock:
            shard = self._shards.get(number)
            if shard is None:
                raise NotCoordinatorError(f"[NOT_COORDINATOR] this node does not own __consumer_offsets-{number}, "
                                          f"the shard of group {group_id!r}; find the coordinator again")
            if shard.status is ShardStatus.LOADING:
                raise CoordinatorLoadInProgressError(
                    f"[COORDINATOR_LOAD_IN_PROGRESS] __consumer_offsets-{number} is still loading; retry")
            group = shard.groups.get(group_id)
            if create and (group is None or group.classic.state is GroupState.DEAD):
                group = shard.groups[group_id] = self._configure(GroupMetadata(group_id))
            return shard, group

    def _configure(self, group: GroupMetadata) -> GroupMetadata:
        group.classic.config = self._group_config
        group.classic.new_member_id = self._new_member_id
        return group

    def _check_serving(self, shard: _Shard) -> None:
        with self._lock:
            if self._shards.get(shard.number) is not shard:
                raise NotCoordinatorError(f"[NOT_COORDINATOR] __consumer_offsets-{shard.number} moved away; "
                                          f"find the coordinator again")

    def _append(self, shard: _Shard, batch: bytes, records: int, *, offsets: bool = False) -> int | None:
        """Write `batch` (of `records` records) durably; returns its base offset. Failures map to
        coordinator errors (§2)."""
        try:
            result = shard.log.append(batch, origin=AppendOrigin.COORDINATOR)
        except KafkaError as exc:
            raise map_append_error(exc, shard.number, offsets=offsets) from None
        except OSError as exc:
            raise NotCoordinatorError(f"[NOT_COORDINATOR] __consumer_offsets-{shard.number} cannot be written: "
                                      f"{exc}") from None
        self._wrote(shard, records)
        self._check_serving(shard)
        return getattr(result, "base_offset", None)

    # ------------------------------------------------------------ snapshots

    def _wrote(self, shard: _Shard, records: int) -> None:
        """Count records written to the shard; every snapshot interval, snapshot it in the background."""
        if not shard.snapshotted:
            return
        with self._lock:
            shard.writes_since_snapshot += records
            if self._closed or shard.writes_since_snapshot < self._snapshot_interval:
                return
            shard.writes_since_snapshot = 0
            self._snapshotter.submit(self._snapshot, shard)  # under the lock: close() cannot slip in between

    def _snapshot(self, shard: _Shard) -> None:
        """Snapshot the shard from its durable log and drop the segments the previous snapshot covers."""
        with self._lock:
            if self._shards.get(shard.number) is not shard:
                return  # moved away meanwhile: the next owner snapshots
        try:
            contents = snapshots.take_snapshot(shard.log, shard.number)
            logger.info("__consumer_offsets-%d: snapshot of %d groups up to offset %d", shard.number,
                        len(contents.groups), contents.next_offset)
        except KafkaError as exc:  # the log was closed or fenced meanwhile
            logger.info("__consumer_offsets-%d: snapshot skipped: %s", shard.number, exc)
        except OSError as exc:  # the log keeps everything; the next interval tries again
            logger.warning("__consumer_offsets-%d: snapshot failed: %s", shard.number, exc)
        except Exception:  # a bug: say so (an executor would swallow it), the log still keeps everything
            logger.exception("__consumer_offsets-%d: snapshot failed", shard.number)

    # ------------------------------------------------------------ membership (classic.py decides, this carries out)

    def join(self, group_id: str, request: JoinRequest) -> JoinOutcome:
        """JoinGroup; blocks until the group's join barrier lifts (or at once when Kafka answers at once)."""
        shard, group = self._group(group_id, create=True)
        assert group is not None
        waiter: Future[JoinOutcome] = Future()
        with group.lock:
            self._check_serving(shard)
            self._carry_out(shard, group, group.classic.join(self._now_ms(), request, waiter))
            wait_s = self._longest_wait_s(group)
        self._timer_wake.set()
        return self._await(waiter, wait_s, JoinOutcome, request.member_id)

    def sync(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes]) -> SyncOutcome:
        """SyncGroup; a follower's blocks until the leader's assignment is durable."""
        shard, group = self._group(group_id, create=False)
        if group is None:
            return SyncOutcome(UnknownMemberIdError.errno, f"[UNKNOWN_MEMBER_ID] group {group_id!r} has no members")
        waiter: Future[SyncOutcome] = Future()
        with group.lock:
            self._check_serving(shard)
            self._carry_out(shard, group, group.classic.sync(self._now_ms(), member_id, instance_id, generation_id,
                                                             protocol_type, protocol_name, assignments, waiter))
            wait_s = self._longest_wait_s(group)
        self._timer_wake.set()
        return self._await(waiter, wait_s, SyncOutcome, None)

    def heartbeat_member(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> None:
        """Heartbeat; raises what Kafka answers (REBALANCE_IN_PROGRESS: rejoin)."""
        shard, group = self._group(group_id, create=False)
        if group is None:
            raise UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] group {group_id!r} has no members")
        with group.lock:
            self._check_serving(shard)
            group.classic.heartbeat(self._now_ms(), member_id, instance_id, generation_id)

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[KafkaError | None]:
        """LeaveGroup of (member id, instance id) pairs: an error or None for each."""
        shard, group = self._group(group_id, create=False)
        if group is None:
            return [UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] group {group_id!r} has no members")
                    for _ in leaving]
        with group.lock:
            self._check_serving(shard)
            errors, effects = group.classic.leave(self._now_ms(), leaving)
            self._carry_out(shard, group, effects)
        self._timer_wake.set()
        return errors

    def _longest_wait_s(self, group: GroupMetadata) -> float:
        """The longest the group can hold a JoinGroup or SyncGroup: its barrier (initial delay included), or a
        silent leader's session. Caller holds group.lock."""
        longest = max((max(m.rebalance_timeout_ms, m.session_timeout_ms) for m in group.classic.members.values()),
                      default=0)
        return (longest + self._group_config.initial_rebalance_delay_ms) / 1000 + _WAIT_MARGIN_S

    def _await(self, waiter: Future, wait_s: float, outcome_type: type, member_id: str | None) -> Any:
        try:
            return waiter.result(timeout=wait_s)
        except TimeoutError:  # the timers complete every waiter in time; this only guards against a bug
            logger.warning("a group request waited %.1f s without an answer", wait_s)
            error = RebalanceInProgressError("[REBALANCE_IN_PROGRESS] the rebalance did not finish in time; rejoin")
            if outcome_type is JoinOutcome:
                return JoinOutcome(code_of(error), str(error), member_id=member_id or "")
            return SyncOutcome(code_of(error), str(error))

    def _carry_out(self, shard: _Shard, group: GroupMetadata, effects: list[Effect]) -> None:
        """Carry out the group core's effects in order. Caller holds group.lock."""
        queue = list(effects)
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, StoreGroup):
                error: KafkaError | None = None
                now = self._now_ms()
                try:
                    value = log_format.encode_group(effect.record)
                    self._append(shard, encode_batch([(now, log_format.group_key(group.group_id), value, ())]), 1)
                    logger.info("group %r: generation %d (%s) stored; members %s", group.group_id,
                                effect.record.generation, group.classic.state.value,
                                [m.member_id for m in effect.record.members])
                except KafkaError as exc:
                    logger.warning("group %r: membership not stored: %s", group.group_id, exc)
                    error = exc
                queue[0:0] = group.classic.store_completed(now, effect.record.generation, error)
            elif not effect.waiter.done():
                effect.waiter.set_result(effect.outcome)

    def expire_members(self) -> None:
        """The group timers: lapsed sessions and member ids, join barriers whose time is up, initial delays."""
        now = self._now_ms()
        with self._lock:
            candidates = [(shard, group) for shard in self._shards.values() if shard.status is ShardStatus.ACTIVE
                          for group in shard.groups.values()]
        for shard, group in candidates:
            with group.lock:
                deadline = group.classic.next_deadline_ms()
                if deadline is None or deadline > now:
                    continue
                try:
                    self._check_serving(shard)
                    self._carry_out(shard, group, group.classic.tick(now))
                except KafkaError as exc:
                    logger.warning("group %r: timers not run: %s", group.group_id, exc)

    def _next_timer_ms(self) -> int | None:
        with self._lock:
            groups = [group for shard in self._shards.values() if shard.status is ShardStatus.ACTIVE
                      for group in shard.groups.values()]
        deadlines = []
        for group in groups:
            with group.lock:
                deadline = group.classic.next_deadline_ms()
            if deadline is not None:
                deadlines.append(deadline)
        return min(deadlines, default=None)

    def _timer_step(self) -> float | None:
        """Run the due group timers; how long until the next one (None: closed)."""
        if self._closed:
            return None
        try:
            self.expire_members()
            next_ms = self._next_timer_ms()
        except Exception:  # a bug: say so, keep the timers alive
            logger.exception("group timers failed")
            next_ms = None
        return 0.5 if next_ms is None else min(0.5, max(0.002, (next_ms - self._now_ms()) / 1000))

    def _fail_waiters(self, shard: _Shard, error: KafkaError) -> None:
        """The shard moved away: nobody waiting on its groups will be answered by this node."""
        for group in list(shard.groups.values()):
            with group.lock:
                for member in group.classic.members.values():
                    for waiter, outcome in ((member.awaiting_join, JoinOutcome(code_of(error), str(error),
                                                                               member_id=member.member_id)),
                                            (member.awaiting_sync, SyncOutcome(code_of(error), str(error)))):
                        if waiter is not None and not waiter.done():
                            waiter.set_result(outcome)

    # ------------------------------------------------------------ membership over gRPC (txnsim's own consumer)

    def join_group(self, req: pb.JoinGroupRequest) -> pb.JoinGroupResponse:
        outcome = self.join(req.group_id, JoinRequest(
            req.member_id, req.group_instance_id or None, req.client_id, "", req.session_timeout_ms,
            req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms,
            req.protocol_type, tuple((p.name, p.metadata) for p in req.protocols), req.require_known_member_id))
        return pb.JoinGroupResponse(
            error_code=outcome.error_code, error_message=_wire_message(outcome.error_message),
            generation_id=outcome.generation_id, member_id=outcome.member_id, leader_id=outcome.leader_id,
            members=[m[0] for m in outcome.members], protocol_type=outcome.protocol_type or "",
            protocol_name=outcome.protocol_name or "", skip_assignment=outcome.skip_assignment,
            member_list=[pb.JoinGroupMember(member_id=m, group_instance_id=i or "", metadata=meta)
                         for m, i, meta in outcome.members])

    def sync_group(self, req: pb.SyncGroupRequest) -> pb.SyncGroupResponse:
        outcome = self.sync(req.group_id, req.member_id, req.group_instance_id or None, req.generation_id,
                            req.protocol_type or None, req.protocol_name or None,
                            {a.member_id: a.assignment for a in req.assignments})
        response = pb.SyncGroupResponse(error_code=outcome.error_code,
                                        error_message=_wire_message(outcome.error_message),
                                        assignment_bytes=outcome.assignment, protocol_type=outcome.protocol_type or "",
                                        protocol_name=outcome.protocol_name or "")
        if outcome.protocol_type == "consumer" and outcome.assignment:
            try:
                response.assignment.extend(pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)
                                           for tp in consumer_protocol.decode_assignment(outcome.assignment))
            except ValueError as exc:
                logger.info("group %r: assignment of %r is not ConsumerProtocol: %s", req.group_id, req.member_id, exc)
        return response

    def heartbeat(self, req: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        self.heartbeat_member(req.group_id, req.member_id, req.group_instance_id or None, req.generation_id)
        return pb.HeartbeatResponse()

    def leave_group(self, req: pb.LeaveGroupRequest) -> pb.LeaveGroupResponse:
        leaving = [(m.member_id, m.group_instance_id or None) for m in req.members] or [(req.member_id, None)]
        errors = self.leave(req.group_id, leaving)
        if not req.members:  # the single-member form answers with the member's error
            if errors[0] is not None:
                raise errors[0]
            return pb.LeaveGroupResponse()
        return pb.LeaveGroupResponse(members=[
            pb.LeaveGroupResult(member_id=m, group_instance_id=i or "", error_code=code_of(e) if e else 0,
                                error_message=_wire_message(str(e)) if e else "")
            for (m, i), e in zip(leaving, errors)])

    # ------------------------------------------------------------ describe, list, delete

    def describe_groups(self, req: pb.DescribeGroupsRequest) -> pb.DescribeGroupsResponse:
        """State, protocol and members (with metadata and assignment bytes) of each group."""
        described = []
        for group_id in req.group_ids:
            try:
                _, group = self._group(group_id, create=False)
            except KafkaError as exc:
                described.append(pb.DescribedGroup(group_id=group_id, error_code=code_of(exc),
                                                   error_message=_wire_message(str(exc)), state="Dead"))
                continue
            if group is None:
                described.append(pb.DescribedGroup(group_id=group_id, state=GroupState.DEAD.value))
                continue
            with group.lock:
                g = group.classic
                described.append(pb.DescribedGroup(
                    group_id=group_id, state=g.state.value, protocol_type=g.protocol_type or "",
                    protocol=g.protocol_name or "" if g.state is GroupState.STABLE else "",
                    generation_id=g.generation,
                    members=[pb.DescribedGroupMember(
                        member_id=m.member_id, group_instance_id=m.group_instance_id or "", client_id=m.client_id,
                        client_host=m.client_host, metadata=m.metadata(g.protocol_name),
                        assignment=m.assignment if g.state is GroupState.STABLE else b"")
                        for m in g.members.values()]))
        return pb.DescribeGroupsResponse(groups=described)

    def list_groups(self, req: pb.ListGroupsRequest) -> pb.ListGroupsResponse:
        """The groups of the shards this node serves (Kafka's admin asks every broker and merges)."""
        states = {s.lower() for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        with self._lock:
            groups = [group for shard in self._shards.values() if shard.status is ShardStatus.ACTIVE
                      for group in shard.groups.values()]
        listed = []
        for group in groups:
            with group.lock:
                state, protocol_type = group.classic.state, group.classic.protocol_type or ""
            if state is GroupState.DEAD or (states and state.value.lower() not in states):
                continue
            if types and "classic" not in types:
                continue
            listed.append(pb.ListedGroup(group_id=group.group_id, protocol_type=protocol_type, state=state.value))
        return pb.ListGroupsResponse(groups=sorted(listed, key=lambda g: g.group_id))

    def delete_groups(self, req: pb.DeleteGroupsRequest) -> pb.DeleteGroupsResponse:
        """Delete Empty groups: tombstones for their offsets and membership, then they are Dead."""
        results = []
        for group_id in req.group_ids:
            result = pb.DeleteGroupResult(group_id=group_id)
            try:
                self._delete_group(group_id)
            except KafkaError as exc:
                result.error_code, result.error_message = code_of(exc), _wire_message(str(exc))
            results.append(result)
        return pb.DeleteGroupsResponse(results=results)

    def _delete_group(self, group_id: str) -> None:
        shard, group = self._group(group_id, create=False)
        if group is None:
            raise GroupIdNotFoundError(f"[GROUP_ID_NOT_FOUND] group {group_id!r} does not exist")
        with group.lock:
            self._check_serving(shard)
            if group.classic.state is GroupState.DEAD:
                raise GroupIdNotFoundError(f"[GROUP_ID_NOT_FOUND] group {group_id!r} does not exist")
            if group.classic.state is not GroupState.EMPTY:
                raise NonEmptyGroupError(f"[NON_EMPTY_GROUP] group {group_id!r} has members "
                                         f"({group.classic.state.value}); they must leave first")
            now = self._now_ms()
            records = [(now, log_format.offset_key(group_id, tp), None, ()) for tp in group.offsets]
            records.append((now, log_format.group_key(group_id), None, ()))
            self._append(shard, encode_batch(records), len(records))
            self._carry_out(shard, group, group.classic.delete())
            group.offsets.clear()
            with self._lock:
                if not group.pending and shard.groups.get(group_id) is group:
                    del shard.groups[group_id]
        logger.info("group %r deleted", group_id)

    # ------------------------------------------------------------ offsets

    def offset_commit(self, req: pb.OffsetCommitRequest) -> pb.OffsetCommitResponse:
        shard, group = self._group(req.group_id, create=True)
        assert group is not None
        now = self._now_ms()
        with group.lock:
            self._check_serving(shard)
            group.classic.validate_offset_commit(req.generation_id, req.member_id, req.group_instance_id or None,
                                                 transactional=False)
            results, accepted = validate_offsets(req.offsets, now, self._partition_exists)
            if accepted:
                records = [(now, log_format.offset_key(group.group_id, tp), log_format.encode_offset(v), ())
                           for tp, v in accepted]
                base = self._append(shard, encode_batch(records), len(records), offsets=True)
                for i, (tp, value) in enumerate(accepted):
                    group.apply_commit(tp, replace(value, log_offset=None if base is None else base + i))
            group.classic.commit_heartbeat(now, req.member_id)
            return pb.OffsetCommitResponse(results=results)

    def txn_offset_commit(self, req: pb.TxnOffsetCommitRequest) -> pb.TxnOffsetCommitResponse:
        if not req.transactional_id:
            raise InvalidRequestError("[INVALID_REQUEST] TxnOffsetCommit needs a transactional id")
        if req.producer_id < 0 or req.producer_epoch < 0:
            raise InvalidRequestError(f"[INVALID_REQUEST] TxnOffsetCommit needs a producer id and epoch, got "
                                      f"{req.producer_id}/{req.producer_epoch}")
        shard, group = self._group(req.group_id, create=True)
        assert group is not None
        now = self._now_ms()
        with group.lock:
            self._check_serving(shard)
            group.classic.validate_offset_commit(req.generation_id, req.member_id, req.group_instance_id or None,
                                                 transactional=True)
            results, accepted = validate_offsets(req.offsets, now, self._partition_exists)
            if accepted:
                with self._lock:  # registered before the write, so a marker racing it finds this group
                    shard.txn_groups.setdefault(req.producer_id, set()).add(group.group_id)
                records = [(now, log_format.offset_key(group.group_id, tp), log_format.encode_offset(v), ())
                           for tp, v in accepted]
                batch = encode_batch(records, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
                                     transactional=True)
                base = self._append(shard, batch, len(records), offsets=True)
                for i, (tp, value) in enumerate(accepted):
                    group.add_pending(req.producer_id, tp,
                                      replace(value, log_offset=None if base is None else base + i))
            return pb.TxnOffsetCommitResponse(results=results)

    def offset_fetch(self, req: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
        shard, group = self._group(req.group_id, create=False)
        wanted = [TopicPartition(p.topic, p.partition) for p in req.partitions]
        if group is None:
            return pb.OffsetFetchResponse(results=[pb.OffsetFetchResult(topic=tp.topic, partition=tp.partition,
                                                                        offset=-1) for tp in wanted])
        with group.lock:
            self._check_serving(shard)
            pending = group.pending_partitions() if req.require_stable else set()
            if not wanted:
                wanted = sorted(set(group.offsets) | pending)
            results = []
            for tp in wanted:
                result = pb.OffsetFetchResult(topic=tp.topic, partition=tp.partition, offset=-1)
                if tp in pending:
                    result.error_code = UnstableOffsetCommitError.errno
                    result.error_message = (f"[UNSTABLE_OFFSET_COMMIT] {tp} of group {req.group_id!r} has a "
                                            f"transactional commit awaiting its marker")
                elif tp in group.offsets:
                    result.offset = group.offsets[tp].offset
                    result.metadata = group.offsets[tp].metadata
                results.append(result)
            return pb.OffsetFetchResponse(results=results)

    def _partition_exists(self, tp: TopicPartition) -> bool:
        if not tp.topic or tp.partition < 0:
            return False
        if self._partitions_for is None:
            return True
        try:
            count = self._partitions_for(tp.topic)
        except KafkaError:
            return False
        return count is not None and tp.partition < count

    # ------------------------------------------------------------ transaction markers

    def complete_transaction(self, shard: int, producer_id: int, committed: bool,
                             marker_offset: int | None = None) -> None:
        """The node appended a COMMIT/ABORT marker of `producer_id` to shard `shard`: apply or drop its offsets.

        `marker_offset` (the marker's offset, when known) keeps offsets written after the
        marker pending, exactly as a replay would.
        """
        with self._lock:
            state = self._shards.get(shard)
            if state is None:
                return
            if state.status is ShardStatus.LOADING:
                state.deferred.append((producer_id, committed, marker_offset))
                return
        self._complete(state, producer_id, committed, marker_offset)
        self._wrote(state, 1)  # the node wrote the marker to the shard's log

    def _complete(self, shard: _Shard, producer_id: int, committed: bool, marker_offset: int | None) -> None:
        with self._lock:
            names = list(shard.txn_groups.get(producer_id, ()))
        for name in names:
            group = shard.groups.get(name)
            if group is None:
                continue
            with group.lock:
                group.complete_pending(producer_id, committed, marker_offset)
                done = producer_id not in group.pending
            if done:
                with self._lock:
                    remaining = shard.txn_groups.get(producer_id)
                    if remaining is not None:
                        remaining.discard(name)
                        if not remaining:
                            del shard.txn_groups[producer_id]
        logger.debug("__consumer_offsets-%d: %s of producer %d applied to %d groups", shard.number,
                  "COMMIT" if committed else "ABORT", producer_id, len(names))
