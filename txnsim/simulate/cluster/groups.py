"""A simulated node's group coordinator: the groups of the `__consumer_offsets` shards the node owns, on
the real parts - Kafka's classic protocol core (coordinator/group/classic.py), the groups' offsets and
pending transactional offsets (coordinator/group/metadata.py), the log's record format and its replay
(log_format.py, replay.py) - driven by simulated messages, timers and a simulated fsync.

Each shard is a real PartitionLog on the simulated disk, opened with a bumped leader epoch as the node
opens it. A membership record (StoreGroup) and a TxnOffsetCommit are appended to it and answered after
the simulated fsync; a COMMIT/ABORT marker the node appends to it applies or drops the producer's
pending offsets; a node taking a shard over loads its newest snapshot and replays the log after it, as the
real coordinator does, and every few dozen records the shard is snapshotted (SimNode.count_shard_write).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

from coordinator.group import log_format, snapshots
from coordinator.group.classic import (
    CompleteJoin,
    CompleteSync,
    Effect,
    GroupConfig,
    GroupState,
    StoreGroup,
)
from coordinator.group.membership import join_request, join_response, sync_response
from coordinator.group.metadata import GroupMetadata
from coordinator.group.offsets import add_pending, fetch_offsets, prepare_txn_offset_commit
from coordinator.placement import NO_OWNER
from coordinator.verification import ADD_CALL_TIMEOUT_S, verification_error
from partitions import PartitionLog
from partitions.model import AppendOrigin
from proto import txnsim_pb2 as pb
from proto.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    UnknownMemberIdError,
    code_of,
)
from proto.hashing import partition_for
from proto.records import encode_batch
from proto.structs import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from txnsim.simulate.network import TIMED_OUT, Envelope

if TYPE_CHECKING:
    from txnsim.simulate.cluster.node import SimNode

OFFSETS_SHARDS = 2
#: a short initial delay: the simulated members start together
GROUP_CONFIG = GroupConfig(initial_rebalance_delay_ms=100, min_session_timeout_ms=100, max_session_timeout_ms=60_000)

GROUP_REQUESTS = (pb.JoinGroupRequest, pb.SyncGroupRequest, pb.HeartbeatRequest, pb.LeaveGroupRequest,
                  pb.TxnOffsetCommitRequest, pb.OffsetFetchRequest)


def shard_of_group(group_id: str) -> int:
    return partition_for(group_id, OFFSETS_SHARDS)


def add_answer_code(response: Any) -> int:
    """The error code of a coordinator's answer to a one-partition AddPartitionsToTxn (an add or a
    verification); a timeout is COORDINATOR_NOT_AVAILABLE, retriable: the client sends again."""
    if response is TIMED_OUT:
        return CoordinatorNotAvailableError.errno
    code: int = response.error_code or (response.results[0].error_code if response.results else 0)
    return code


class SimGroupCoordinator:
    """The groups of one simulated node (volatile: a crash loses them, the shard logs keep them)."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.model = node.model
        self.groups: dict[str, GroupMetadata] = {}
        self.shards: dict[int, PartitionLog] = {}
        #: producer id -> the groups holding its pending offsets, per shard
        self._txn_groups: dict[int, dict[int, set[str]]] = {}
        self._timers: dict[str, int] = {}  # group -> the deadline a timer is armed for
        #: with the planted bug "ack-group-before-fsync": the record acknowledged but not yet written, per group
        self._unwritten: dict[str, StoreGroup] = {}

    # ------------------------------------------------------------ ownership

    def reconcile(self) -> bool:
        """Let go of the shards that moved away, take (open, replay) the ones that moved here; False if one
        could not be taken yet (its previous owner still holds it)."""
        wanted = {s for s in range(OFFSETS_SHARDS) if self.node.owner(CONSUMER_OFFSETS_TOPIC, s) == self.node.node_id}
        for shard in sorted(set(self.shards) - wanted):
            self._unload(shard)
        for shard, log in sorted(self.shards.items()):
            if self.node.logs.get(CONSUMER_OFFSETS_TOPIC, shard) is not log:
                self._unload(shard)  # the node let go of the log (fenced): the groups go with it
        taken = True
        for shard in sorted(wanted - set(self.shards)):
            taken = self._take(shard) and taken
        return taken

    def _take(self, shard: int) -> bool:
        try:
            log = self.node.logs.get(CONSUMER_OFFSETS_TOPIC, shard) or self.node.logs.open_as_leader(
                CONSUMER_OFFSETS_TOPIC, shard, self.model.may_cut_off)
        except KafkaError as error:
            self.model.note(self.node.name, f"offsets shard {shard} not taken: {type(error).__name__}")
            return False
        contents = snapshots.restore(log, shard, self.node.now())  # its newest snapshot and the log after it
        self.shards[shard] = log
        for group_id, group in contents.groups.items():
            self._configure(group)
            self.groups[group_id] = group
            self._arm(group)
            for tp, value in group.offsets.items():  # what the log kept: never behind what was committed
                self.model.offset_committed(group_id, tp, value.offset)
        for producer_id, names in contents.txn_groups.items():
            self._txn_groups.setdefault(producer_id, {})[shard] = set(names)
        self.model.ownership_changed(self.node.name, CONSUMER_OFFSETS_TOPIC, shard, log.leader_epoch)
        return True

    def _unload(self, shard: int) -> None:
        self.shards.pop(shard, None)
        error = NotCoordinatorError(f"[NOT_COORDINATOR] {self.node.name} gave up offsets shard {shard}")
        for group_id in [g for g in self.groups if shard_of_group(g) == shard]:
            group = self.groups.pop(group_id)
            self._unwritten.pop(group_id, None)
            for member in group.classic.members.values():
                for env, answer in ((member.awaiting_join, pb.JoinGroupResponse),
                                    (member.awaiting_sync, pb.SyncGroupResponse)):
                    if env is not None:
                        self.node.net.reply(env, answer(error_code=code_of(error), error_message=str(error)))
        for by_shard in self._txn_groups.values():
            by_shard.pop(shard, None)

    def log_of(self, shard: int) -> PartitionLog | None:
        return self.shards.get(shard)

    def _configure(self, group: GroupMetadata) -> GroupMetadata:
        group.classic.config = dataclasses.replace(GROUP_CONFIG, planted_bug=self.model.bug)
        group.classic.new_member_id = self.model.new_member_id
        return group

    # ------------------------------------------------------------ requests

    def receive(self, env: Envelope) -> None:
        message: Any = env.message
        if isinstance(message, pb.TxnOffsetCommitRequest) and message.add_partitions:
            return self._add_offsets_partition(env, message)
        group_id = message.group_id
        response_type = getattr(pb, type(message).__name__.replace("Request", "Response"))
        if shard_of_group(group_id) not in self.shards:
            error: KafkaError = NotCoordinatorError(
                f"[NOT_COORDINATOR] {self.node.name} is not the coordinator of {group_id!r}")
            self.node.net.reply(env, response_type(error_code=code_of(error), error_message=str(error)))
            return
        if isinstance(message, pb.OffsetFetchRequest):
            answer = self._offset_fetch(message)
            try:  # after the read, as coordinator/group/coordinator.py
                self.shards[shard_of_group(group_id)].check_still_leader()
            except NotLeaderOrFollowerError:
                answer = pb.OffsetFetchResponse(error_code=NotCoordinatorError.errno, error_message=(
                    f"[NOT_COORDINATOR] {self.node.name}'s shard of {group_id!r} was taken over"))
            self.node.net.reply(env, answer)
            return
        now = self.node.now()
        group = self.groups.get(group_id)
        if group is None or group.classic.state is GroupState.DEAD:
            if not isinstance(message, (pb.JoinGroupRequest, pb.TxnOffsetCommitRequest)):
                unknown = UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] group {group_id!r} has no members")
                self.node.net.reply(env, response_type(error_code=code_of(unknown), error_message=str(unknown)))
                return
            group = self.groups[group_id] = self._configure(GroupMetadata(group_id))
        classic = group.classic
        if isinstance(message, pb.JoinGroupRequest):
            self._carry_out(group, classic.join(now, join_request(message), env))
        elif isinstance(message, pb.SyncGroupRequest):
            self._carry_out(group, classic.sync(now, message.member_id, message.group_instance_id or None,
                                                message.generation_id, message.protocol_type or None,
                                                message.protocol_name or None,
                                                {a.member_id: a.assignment for a in message.assignments}, env))
        elif isinstance(message, pb.HeartbeatRequest):
            try:
                classic.heartbeat(now, message.member_id, message.group_instance_id or None, message.generation_id)
                self.model.member_heard(group_id, env.src, self.node.name, now)
                self.node.net.reply(env, pb.HeartbeatResponse())
            except KafkaError as exc:
                self.node.net.reply(env, pb.HeartbeatResponse(error_code=code_of(exc), error_message=str(exc)))
        elif isinstance(message, pb.LeaveGroupRequest):
            errors, effects = classic.leave(now, [(message.member_id, None)])
            left = errors[0]
            self.node.net.reply(env, pb.LeaveGroupResponse(error_code=code_of(left) if left else 0,
                                                           error_message=str(left) if left else ""))
            self._carry_out(group, effects)
        elif isinstance(message, pb.TxnOffsetCommitRequest):
            self._txn_offset_commit(env, group, message)
        self._arm(group)

    def _add_offsets_partition(self, env: Envelope, req: pb.TxnOffsetCommitRequest) -> None:
        """Transactions V2's TxnOffsetCommit (coordinator/group/coordinator.py): the group's offsets partition is
        added to the transaction at its coordinator first; then the commit is handled as any other."""
        tp = TopicPartition(CONSUMER_OFFSETS_TOPIC, shard_of_group(req.group_id))
        coordinator = self.node.owner(TRANSACTION_STATE_TOPIC, self.node.txn.shard_of(req.transactional_id))

        def refuse(code: int) -> None:
            error = verification_error(code, req.transactional_id, tp, req.producer_id, req.producer_epoch)
            assert error is not None
            self.node.net.reply(env, pb.TxnOffsetCommitResponse(error_code=code_of(error), error_message=str(error)))

        if coordinator == NO_OWNER:
            return refuse(CoordinatorNotAvailableError.errno)

        def added(response: Any) -> None:
            code = add_answer_code(response)
            if code:
                return refuse(code)
            plain = pb.TxnOffsetCommitRequest()
            plain.CopyFrom(req)
            plain.add_partitions = False
            self.receive(dataclasses.replace(env, message=plain))

        add = pb.AddPartitionsToTxnRequest(transactional_id=req.transactional_id, producer_id=req.producer_id,
                                           producer_epoch=req.producer_epoch,
                                           partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)])
        self.node.net.call(self.node.name, f"n{coordinator}", add, int(ADD_CALL_TIMEOUT_S * 1000), added)

    def _offset_fetch(self, req: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
        return fetch_offsets(self.groups.get(req.group_id), req,
                             honour_require_stable=self.model.bug != "unstable-offset-fetch")

    def _txn_offset_commit(self, env: Envelope, group: GroupMetadata, req: pb.TxnOffsetCommitRequest) -> None:
        """The coordinator's rule (coordinator/group/offsets.py): the member and generation checked (KIP-447),
        the offsets appended as the producer's transactional batch, pending until its marker; answered
        after the fsync."""
        now = self.node.now()
        try:
            write = prepare_txn_offset_commit(group, req, now, self._partition_exists,
                                              check_generation=self.model.bug != "no-generation-fence")
        except KafkaError as exc:
            self.node.net.reply(env, pb.TxnOffsetCommitResponse(error_code=code_of(exc), error_message=str(exc)))
            return
        if write.batch is not None:
            shard = shard_of_group(group.group_id)
            log = self.shards[shard]
            try:
                appended = log.append(write.batch, origin=AppendOrigin.COORDINATOR, wait_durable=False)
            except KafkaError as exc:
                return self._refuse_offsets(env, shard, exc)
            self.model.appended(self.node.name, log, appended.base_offset, appended.last_offset)
            self._txn_groups.setdefault(req.producer_id, {}).setdefault(shard, set()).add(group.group_id)
            add_pending(group, req.producer_id, write, appended.base_offset)

            def durable() -> None:  # the fsync happens when its time has passed (a power loss before it loses
                try:                # the offsets, unacknowledged)
                    log.make_durable(appended.last_offset + 1)
                except KafkaError as exc:
                    return self._refuse_offsets(env, shard, exc)
                self.node.count_shard_write(log)
                self.node.net.reply(env, pb.TxnOffsetCommitResponse(results=write.results))

            self.node.net.set_timer(self.node.name, self.node.fsync_ms, durable, label="fsync")
            return
        self.node.net.set_timer(self.node.name, self.node.fsync_ms, self.node.net.reply, env,
                                pb.TxnOffsetCommitResponse(results=write.results), label="fsync")

    def _refuse_offsets(self, env: Envelope, shard: int, exc: KafkaError) -> None:
        error = NotCoordinatorError(f"[NOT_COORDINATOR] writing __consumer_offsets-{shard} failed: {exc}")
        self.node.net.reply(env, pb.TxnOffsetCommitResponse(error_code=code_of(error), error_message=str(error)))

    def _partition_exists(self, tp: TopicPartition) -> bool:
        count = self.model.partitions_for(tp.topic)
        return count is not None and 0 <= tp.partition < count

    def complete_transaction(self, shard: int, producer_id: int, committed: bool, marker_offset: int) -> None:
        """The node appended a marker of `producer_id` to shard `shard`: apply or drop its pending offsets."""
        names = self._txn_groups.get(producer_id, {}).pop(shard, set())
        for name in sorted(names):
            group = self.groups.get(name)
            if group is None:
                continue
            group.complete_pending(producer_id, committed, marker_offset)
            if producer_id in group.pending:
                self._txn_groups.setdefault(producer_id, {}).setdefault(shard, set()).add(name)
            elif committed:
                for tp, value in group.offsets.items():
                    self.model.offset_committed(name, tp, value.offset)

    # ------------------------------------------------------------ the core's effects

    def _carry_out(self, group: GroupMetadata, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, CompleteJoin):
                self.node.net.reply(effect.waiter, join_response(effect.outcome))
            elif isinstance(effect, CompleteSync):
                self.node.net.reply(effect.waiter, sync_response(group.group_id, effect.outcome))
                if effect.outcome.error_code == 0:
                    self.model.assigned(group.group_id, group.classic.generation, effect.outcome.assignment,
                                        effect.waiter, self.node.name, self.node.now())
            elif isinstance(effect, StoreGroup):
                self._store(group, effect)

    def _append_record(self, group: GroupMetadata, effect: StoreGroup) -> tuple[PartitionLog, int] | None:
        """Write the group's record (not yet durable): the log and the end offset to make durable, or None."""
        log = self.shards.get(shard_of_group(group.group_id))
        if log is None:
            return None
        batch = encode_batch([(self.node.now(), log_format.group_key(group.group_id),
                               log_format.encode_group(effect.record), ())])
        try:
            appended = log.append(batch, origin=AppendOrigin.COORDINATOR, wait_durable=False)
        except KafkaError:
            return None
        self.model.appended(self.node.name, log, appended.base_offset, appended.last_offset)
        return log, appended.last_offset + 1

    def _store(self, group: GroupMetadata, effect: StoreGroup) -> None:
        classic = group.classic
        if self.model.bug == "ack-group-before-fsync":
            # the planted bug: the assignment is handed out now and written only with the group's next record
            earlier = self._unwritten.pop(group.group_id, None)
            if earlier is not None:
                self._append_record(group, earlier)
            self._unwritten[group.group_id] = effect
            self._carry_out(group, classic.store_completed(self.node.now(), effect.record.generation, None))
            return
        written = self._append_record(group, effect)
        if written is None:
            error = NotCoordinatorError(f"[NOT_COORDINATOR] {self.node.name} cannot write {group.group_id!r}")
            self._carry_out(group, classic.store_completed(self.node.now(), effect.record.generation, error))
            return
        self.node.net.set_timer(self.node.name, self.node.fsync_ms,
                                functools.partial(self._stored, group, effect.record.generation, *written),
                                label="fsync")

    def _stored(self, group: GroupMetadata, generation: int, log: PartitionLog, end: int) -> None:
        """The fsync's time has passed: make the record durable, then let the group go on."""
        if self.groups.get(group.group_id) is not group:
            return  # the shard moved away meanwhile
        error: KafkaError | None = None
        try:
            log.make_durable(end)
            self.node.count_shard_write(log)
        except KafkaError as exc:
            error = NotCoordinatorError(f"[NOT_COORDINATOR] {self.node.name} cannot write {group.group_id!r}: {exc}")
        self._carry_out(group, group.classic.store_completed(self.node.now(), generation, error))
        self._arm(group)

    def _arm(self, group: GroupMetadata) -> None:
        """One timer per group, at its next deadline (sessions, the join barrier, the initial delay)."""
        deadline = group.classic.next_deadline_ms()
        if deadline is None or self._timers.get(group.group_id) == deadline:
            return
        self._timers[group.group_id] = deadline
        self.node.net.set_timer(self.node.name, max(0, deadline - self.node.now()),
                                functools.partial(self._tick, group, deadline), label="group-timer")

    def _tick(self, group: GroupMetadata, deadline: int) -> None:
        if self._timers.get(group.group_id) != deadline:
            return  # a later timer replaced this one
        del self._timers[group.group_id]
        if self.groups.get(group.group_id) is not group:
            return
        self._carry_out(group, group.classic.tick(self.node.now()))
        self._arm(group)
