"""Group membership over the shards a GroupCoordinator owns: the classic protocol's requests carried out.

classic.py decides; this part of the coordinator carries the effects out. JoinGroup and SyncGroup answer
with a Future that the effects complete (the join barrier, the leader's assignment); a membership record
is durable in the group's shard before the SyncGroups it answers; each group's deadlines (initial delay,
rebalance timeout, session expiry) are one timer on the node's I/O, armed at the next. Both front doors
(gRPC, the Kafka port) and the simulator call these methods. GroupCoordinator (coordinator.py) mixes this
in and provides the shards, the I/O and the log writes.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

from coordinator.group import log_format
from coordinator.group.classic import (
    Effect,
    GroupConfig,
    GroupState,
    JoinOutcome,
    JoinRequest,
    StoreGroup,
    SyncOutcome,
)
from coordinator.group.metadata import GroupMetadata
from coordinator.group.shard import Shard
from coordinator.observers import GroupObserver
from coordinator.rpc import wire_message
from coordinator.runtime.io import NodeIO
from coordinator.runtime.shard_status import ShardStatus
from partitions.model import AppendResult
from proto import consumer_protocol
from proto import txnsim_pb2 as pb
from proto.errors import (
    GroupIdNotFoundError,
    KafkaError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    code_of,
)
from proto.records import encode_batch

logger = logging.getLogger(__name__)
O = TypeVar("O")  # what a blocked JoinGroup or SyncGroup answers

#: how long past its own timeouts a blocked JoinGroup/SyncGroup waits before it gives up (a bug guard)
_WAIT_MARGIN_S = 30.0


class GroupMembership:
    """The membership requests of GroupCoordinator (which provides the shards, the clock and the log)."""

    _lock: threading.Lock
    _shards: dict[int, Shard]
    _closed: bool
    _group_config: GroupConfig
    _io: NodeIO
    _run_timers: bool
    _now_ms: Callable[[], int]
    _observer: GroupObserver

    if TYPE_CHECKING:  # provided by GroupCoordinator
        def _group(self, group_id: str, *, create: bool) -> tuple[Shard, GroupMetadata | None]: ...
        def _check_serving(self, shard: Shard) -> None: ...
        def _check_still_leader(self, shard: Shard) -> None: ...
        def _taken_over(self, shard: Shard) -> bool: ...
        def _append(self, shard: Shard, batch: bytes, *, offsets: bool = False) -> AppendResult: ...
        def _write(self, shard: Shard, batch: bytes, records: int, then: Callable[[KafkaError | None], None], *,
                   offsets: bool = False) -> None: ...
        def _write_blocking(self, shard: Shard, batch: bytes, records: int, *, offsets: bool = False) -> None: ...

    # ------------------------------------------------------------ membership (classic.py decides, this carries out)

    def join(self, group_id: str, request: JoinRequest) -> JoinOutcome:
        """JoinGroup; blocks until the group's join barrier lifts (or at once when Kafka answers at once)."""
        return self.join_future(group_id, request).result()

    def join_future(self, group_id: str, request: JoinRequest) -> Future[JoinOutcome]:
        """JoinGroup's answer to come, once the group's join barrier lifts: no thread waits for it meanwhile."""
        shard, group = self._group(group_id, create=True)
        assert group is not None
        waiter: Future[JoinOutcome] = Future()
        with group.lock:
            self._check_serving(shard)
            self._decide(shard, group, lambda: group.classic.join(self._now_ms(), request, waiter))
            wait_s = self._longest_wait_s(group)
        return self._bounded(waiter, wait_s, lambda error: JoinOutcome(code_of(error), str(error),
                                                                       member_id=request.member_id or ""))

    def sync(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes]) -> SyncOutcome:
        """SyncGroup; a follower's blocks until the leader's assignment is durable."""
        return self.sync_future(group_id, member_id, instance_id, generation_id, protocol_type, protocol_name,
                                assignments).result()

    def sync_future(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                    protocol_type: str | None, protocol_name: str | None,
                    assignments: dict[str, bytes]) -> Future[SyncOutcome]:
        """SyncGroup's answer to come (a follower's once the leader's assignment is durable)."""
        shard, group = self._group(group_id, create=False)
        waiter: Future[SyncOutcome] = Future()
        if group is None:
            waiter.set_result(SyncOutcome(UnknownMemberIdError.errno,
                                          f"[UNKNOWN_MEMBER_ID] group {group_id!r} has no members"))
            return waiter
        with group.lock:
            self._check_serving(shard)
            self._decide(shard, group, lambda: group.classic.sync(self._now_ms(), member_id, instance_id, generation_id,
                                                                  protocol_type, protocol_name, assignments, waiter))
            wait_s = self._longest_wait_s(group)
        return self._bounded(waiter, wait_s, lambda error: SyncOutcome(code_of(error), str(error)))

    def heartbeat_member(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> None:
        """Heartbeat; raises what Kafka answers (REBALANCE_IN_PROGRESS: rejoin)."""
        shard, group = self._group(group_id, create=False)
        if group is None:
            raise UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] group {group_id!r} has no members")
        with group.lock:
            self._check_serving(shard)
            group.classic.heartbeat(self._now_ms(), member_id, instance_id, generation_id)
        self._check_still_leader(shard)  # an "OK" from a coordinator taken over would delay the rejoin

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[KafkaError | None]:
        """LeaveGroup of (member id, instance id) pairs: an error or None for each."""
        shard, group = self._group(group_id, create=False)
        if group is None:
            return [UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] group {group_id!r} has no members")
                    for _ in leaving]
        with group.lock:
            self._check_serving(shard)
            errors: list[KafkaError | None] = []

            def leave() -> list[Effect]:
                answers, effects = group.classic.leave(self._now_ms(), leaving)
                errors.extend(answers)
                return effects
            self._decide(shard, group, leave)
        return errors

    def _longest_wait_s(self, group: GroupMetadata) -> float:
        """The longest the group can hold a JoinGroup or SyncGroup: its barrier (initial delay included), or a
        silent leader's session. Caller holds group.lock."""
        longest = max((max(m.rebalance_timeout_ms, m.session_timeout_ms) for m in group.classic.members.values()),
                      default=0)
        return (longest + self._group_config.initial_rebalance_delay_ms) / 1000 + _WAIT_MARGIN_S

    def _bounded(self, waiter: Future[O], wait_s: float, timed_out: Callable[[KafkaError], O]) -> Future[O]:
        """`waiter`, answered REBALANCE_IN_PROGRESS if nothing answered it within `wait_s` (the group's timers
        answer every waiter in time; this only guards against a bug)."""
        if waiter.done():
            return waiter
        answer: Future[O] = Future()  # the core completes `waiter`; only this side completes `answer`
        settled = threading.Lock()

        def settle(outcome: O) -> None:
            with settled:
                if not answer.done():
                    answer.set_result(outcome)

        def expire() -> None:
            if not answer.done():
                logger.warning("a group request waited %.1f s without an answer", wait_s)
                settle(timed_out(RebalanceInProgressError(
                    "[REBALANCE_IN_PROGRESS] the rebalance did not finish in time; rejoin")))

        def copy(done: Future[O]) -> None:
            error = done.exception()
            if error is None:
                settle(done.result())
                return
            with settled:
                if not answer.done():
                    answer.set_exception(error)

        waiter.add_done_callback(copy)

        guard = self._io.after(int(wait_s * 1000), expire, "group wait guard")
        waiter.add_done_callback(lambda _done: guard.cancel())
        return answer

    def _decide(self, shard: Shard, group: GroupMetadata, decide: Callable[[], list[Effect]]) -> None:
        """Ask the group's core for one decision and carry out its effects; a decision that starts a new
        generation completed a rebalance (the observer counts it). Then the group's timer is armed at its next
        deadline. Caller holds group.lock."""
        generation = group.classic.generation
        self._carry_out(shard, group, decide())
        if group.classic.generation > generation:
            self._observer.group_rebalanced()
        self._arm(shard, group)

    def _carry_out(self, shard: Shard, group: GroupMetadata, effects: list[Effect]) -> None:
        """Carry out the group core's effects in order; a membership record is written, and what its being
        durable (or not) decides is carried out when the I/O says so. Caller holds group.lock."""
        for effect in effects:
            if isinstance(effect, StoreGroup):
                record = effect.record
                batch = encode_batch([(self._now_ms(), log_format.group_key(group.group_id),
                                       log_format.encode_group(record), ())])
                self._write(shard, batch, 1, functools.partial(self._stored, shard, group, record.generation,
                                                               [m.member_id for m in record.members]))
            elif not effect.waiter.done():
                effect.waiter.set_result(effect.outcome)

    def _stored(self, shard: Shard, group: GroupMetadata, generation: int, members: list[str],
                error: KafkaError | None) -> None:
        """A membership record of `generation` is durable (or failed): the core decides what follows (the
        SyncGroups it answers)."""
        with group.lock:
            if error is None:
                logger.info("group %r: generation %d (%s) stored; members %s", group.group_id, generation,
                            group.classic.state.value, members)
            else:
                logger.warning("group %r: membership not stored: %s", group.group_id, error)
            self._carry_out(shard, group, group.classic.store_completed(self._now_ms(), generation, error))
            self._arm(shard, group)

    # ------------------------------------------------------------ the groups' deadlines

    def _arm(self, shard: Shard, group: GroupMetadata) -> None:
        """One timer per group, at its next deadline (sessions, the join barrier, the initial delay). A timer
        already armed earlier stays: it finds nothing due and arms the next (a heartbeat only moves a
        deadline later). Caller holds group.lock."""
        if not self._run_timers:
            return
        deadline = group.classic.next_deadline_ms()
        armed = shard.timers.get(group.group_id)
        if armed is not None:
            if deadline is not None and armed[0] <= deadline:
                return
            armed[1].cancel()
            del shard.timers[group.group_id]
        if deadline is None:
            return
        handle = self._io.after(max(0, deadline - self._now_ms()),
                                functools.partial(self._tick, shard, group, deadline), "group timer")
        shard.timers[group.group_id] = (deadline, handle)

    def _tick(self, shard: Shard, group: GroupMetadata, deadline: int) -> None:
        """A group's timer: run what is due on the group's clock, then arm the next."""
        with group.lock:
            armed = shard.timers.get(group.group_id)
            if armed is None or armed[0] != deadline:
                return  # replaced by an earlier one, or cancelled
            del shard.timers[group.group_id]
            if self._closed or shard.groups.get(group.group_id) is not group:
                return
            with self._lock:
                if self._shards.get(shard.number) is not shard:
                    return
            if self._run_due(shard, group, self._now_ms()):
                self._arm(shard, group)

    def _cancel_timers(self, shard: Shard) -> None:
        for _deadline, handle in list(shard.timers.values()):
            handle.cancel()
        shard.timers.clear()

    def expire_members(self) -> None:
        """Run every group's due deadlines now (what the groups' timers do; for owners that run none)."""
        now = self._now_ms()
        with self._lock:
            candidates = [(shard, group) for shard in self._shards.values() if shard.status is ShardStatus.SERVING
                          for group in shard.groups.values()]
        for shard, group in candidates:
            with group.lock:
                self._run_due(shard, group, now)

    def _run_due(self, shard: Shard, group: GroupMetadata, now: int) -> bool:
        """Let the group's core act on the deadlines due at `now` (none due: nothing); False when the shard is
        no longer served here. Caller holds group.lock."""
        deadline = group.classic.next_deadline_ms()
        if deadline is None or deadline > now:
            return True
        try:
            self._check_serving(shard)
            self._decide(shard, group, lambda: group.classic.tick(now))
        except KafkaError as exc:
            logger.warning("group %r: timers not run: %s", group.group_id, exc)
            return False
        return True

    def _fail_waiters(self, shard: Shard, error: KafkaError) -> None:
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
        return join_response(self.join(req.group_id, join_request(req)))

    def sync_group(self, req: pb.SyncGroupRequest) -> pb.SyncGroupResponse:
        outcome = self.sync(req.group_id, req.member_id, req.group_instance_id or None, req.generation_id,
                            req.protocol_type or None, req.protocol_name or None,
                            {a.member_id: a.assignment for a in req.assignments})
        return sync_response(req.group_id, outcome)

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
                                error_message=wire_message(str(e)) if e else "")
            for (m, i), e in zip(leaving, errors)])

    # ------------------------------------------------------------ describe, list, delete

    def describe_groups(self, req: pb.DescribeGroupsRequest) -> pb.DescribeGroupsResponse:
        """State, protocol and members (with metadata and assignment bytes) of each group."""
        described = []
        for group_id in req.group_ids:
            try:
                shard, group = self._group(group_id, create=False)
            except KafkaError as exc:
                described.append(pb.DescribedGroup(group_id=group_id, error_code=code_of(exc),
                                                   error_message=wire_message(str(exc)), state="Dead"))
                continue
            if group is None:
                described.append(pb.DescribedGroup(
                    group_id=group_id, state=GroupState.DEAD.value, error_code=GroupIdNotFoundError.errno,
                    error_message=f"group {group_id!r} does not exist"))
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
            try:
                self._check_still_leader(shard)
            except KafkaError as exc:
                described[-1] = pb.DescribedGroup(group_id=group_id, error_code=code_of(exc),
                                                  error_message=wire_message(str(exc)), state="Dead")
        return pb.DescribeGroupsResponse(groups=described)

    def list_groups(self, req: pb.ListGroupsRequest) -> pb.ListGroupsResponse:
        """The groups of the shards this node serves (Kafka's admin asks every broker and merges)."""
        states = {s.lower() for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        with self._lock:
            found = [(shard, group) for shard in self._shards.values() if shard.status is ShardStatus.SERVING
                     for group in shard.groups.values()]
        listed: list[tuple[Shard, pb.ListedGroup]] = []
        for shard, group in found:
            with group.lock:
                state, protocol_type = group.classic.state, group.classic.protocol_type or ""
            if state is GroupState.DEAD or (states and state.value.lower() not in states):
                continue
            if types and "classic" not in types:
                continue
            listed.append((shard, pb.ListedGroup(group_id=group.group_id, protocol_type=protocol_type,
                                                 state=state.value)))
        # after the read (see PartitionLog.check_still_leader): a node woken from a stall lists only the shards
        # no later owner has claimed; the new owner lists the others
        shards = {shard.number: shard for shard, _ in listed}
        taken = {number for number, shard in shards.items() if self._taken_over(shard)}  # one check per shard
        groups = sorted((g for shard, g in listed if shard.number not in taken), key=lambda g: g.group_id)
        return pb.ListGroupsResponse(groups=groups)

    def delete_groups(self, req: pb.DeleteGroupsRequest) -> pb.DeleteGroupsResponse:
        """Delete Empty groups: tombstones for their offsets and membership, then they are Dead."""
        results = []
        for group_id in req.group_ids:
            result = pb.DeleteGroupResult(group_id=group_id)
            try:
                self._delete_group(group_id)
            except KafkaError as exc:
                result.error_code, result.error_message = code_of(exc), wire_message(str(exc))
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
            self._write_blocking(shard, encode_batch(records), len(records))
            self._carry_out(shard, group, group.classic.delete())
            group.offsets.clear()
            with self._lock:
                if not group.pending and shard.groups.get(group_id) is group:
                    del shard.groups[group_id]
        logger.info("group %r deleted", group_id)


# ------------------------------------------------------------ gRPC messages <-> the group core (node and simulator)

def join_request(req: pb.JoinGroupRequest) -> JoinRequest:
    """The core's JoinRequest for a gRPC JoinGroup (a rebalance timeout of 0 means the session timeout)."""
    return JoinRequest(
        req.member_id, req.group_instance_id or None, req.client_id, "", req.session_timeout_ms,
        req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms,
        req.protocol_type, tuple((p.name, p.metadata) for p in req.protocols), req.require_known_member_id)


def join_response(outcome: JoinOutcome) -> pb.JoinGroupResponse:
    return pb.JoinGroupResponse(
        error_code=outcome.error_code, error_message=wire_message(outcome.error_message),
        generation_id=outcome.generation_id, member_id=outcome.member_id, leader_id=outcome.leader_id,
        members=[m[0] for m in outcome.members], protocol_type=outcome.protocol_type or "",
        protocol_name=outcome.protocol_name or "", skip_assignment=outcome.skip_assignment,
        member_list=[pb.JoinGroupMember(member_id=m, group_instance_id=i or "", metadata=meta)
                     for m, i, meta in outcome.members])


def sync_response(group_id: str, outcome: SyncOutcome) -> pb.SyncGroupResponse:
    """The gRPC SyncGroup answer; a ConsumerProtocol assignment is also given decoded."""
    response = pb.SyncGroupResponse(error_code=outcome.error_code, error_message=wire_message(outcome.error_message),
                                    assignment_bytes=outcome.assignment, protocol_type=outcome.protocol_type or "",
                                    protocol_name=outcome.protocol_name or "")
    if outcome.protocol_type == "consumer" and outcome.assignment:
        try:
            response.assignment.extend(pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)
                                       for tp in consumer_protocol.decode_assignment(outcome.assignment))
        except ValueError as exc:
            logger.info("group %r: an assignment is not ConsumerProtocol: %s", group_id, exc)
    return response
