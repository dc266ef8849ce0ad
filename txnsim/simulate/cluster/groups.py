"""A simulated node's group coordinator: Kafka's classic protocol core (coordinator/group/classic.py) for the
groups of the offsets shards the node owns, driven by simulated messages, timers and durable writes.

The node's driver blocks a JoinGroup's thread on a Future; here the waiter is the request's envelope, and
completing it is replying. A membership record (StoreGroup) is kept in the model's durable store after a
simulated fsync, and only then does the core hear store_completed; a node taking an offsets shard over
loads each group from that store, as the real coordinator replays __consumer_offsets.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from coordinator.group.classic import (
    ClassicGroup,
    CompleteJoin,
    CompleteSync,
    Effect,
    GroupConfig,
    StoreGroup,
)
from coordinator.group.membership import join_request, join_response, sync_response
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, NotCoordinatorError, UnknownMemberIdError, code_of
from proto.hashing import partition_for
from proto.structs import CONSUMER_OFFSETS_TOPIC
from txnsim.simulate.network import Envelope

if TYPE_CHECKING:
    from txnsim.simulate.cluster.node import SimNode

OFFSETS_SHARDS = 2
#: a short initial delay: the simulated members start together
GROUP_CONFIG = GroupConfig(initial_rebalance_delay_ms=100, min_session_timeout_ms=100, max_session_timeout_ms=60_000)


def shard_of_group(group_id: str) -> int:
    return partition_for(group_id, OFFSETS_SHARDS)


class SimGroupCoordinator:
    """The classic groups of one simulated node (volatile: a crash loses them, the durable store keeps them)."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.model = node.model
        self.groups: dict[str, ClassicGroup] = {}
        self.shards: set[int] = set()
        self._timers: dict[str, int] = {}  # group -> the deadline a timer is armed for
        #: with the planted bug "ack-group-before-fsync": the record acknowledged but not yet written, per group
        self._unwritten: dict[str, StoreGroup] = {}

    # ------------------------------------------------------------ ownership

    def reconcile(self) -> None:
        wanted = {s for s in range(OFFSETS_SHARDS) if self.node.owner(CONSUMER_OFFSETS_TOPIC, s) == self.node.node_id}
        for shard in sorted(self.shards - wanted):
            self._unload(shard)
        for shard in sorted(wanted - self.shards):
            self.shards.add(shard)
            for group_id, record in sorted(self.model.group_records.items()):
                if shard_of_group(group_id) == shard:
                    group = self._new_group(group_id)
                    group.load(record, self.node.now())
                    self._arm(group)
            self.model.ownership_changed(self.node.name, CONSUMER_OFFSETS_TOPIC, shard, -1)

    def _unload(self, shard: int) -> None:
        self.shards.discard(shard)
        error = NotCoordinatorError(f"[NOT_COORDINATOR] {self.node.name} gave up offsets shard {shard}")
        for group_id in [g for g in self.groups if shard_of_group(g) == shard]:
            group = self.groups.pop(group_id)
            for member in group.members.values():
                for env, answer in ((member.awaiting_join, pb.JoinGroupResponse),
                                    (member.awaiting_sync, pb.SyncGroupResponse)):
                    if env is not None:
                        self.node.net.reply(env, answer(error_code=code_of(error), error_message=str(error)))

    def _new_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, GROUP_CONFIG, new_member_id=self.model.new_member_id)
        self.groups[group_id] = group
        return group

    # ------------------------------------------------------------ requests

    def receive(self, env: Envelope) -> None:
        message: Any = env.message
        group_id = message.group_id
        if shard_of_group(group_id) not in self.shards:
            error = NotCoordinatorError(f"[NOT_COORDINATOR] {self.node.name} is not the coordinator of {group_id!r}")
            response_type = type(message).__name__.replace("Request", "Response")
            self.node.net.reply(env, getattr(pb, response_type)(error_code=code_of(error), error_message=str(error)))
            return
        now = self.node.now()
        group = self.groups.get(group_id)
        if isinstance(message, pb.JoinGroupRequest):
            group = group or self._new_group(group_id)
            self._carry_out(group, group.join(now, join_request(message), env))
        elif group is None:
            unknown = UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] group {group_id!r} has no members")
            response_type = type(message).__name__.replace("Request", "Response")
            self.node.net.reply(env, getattr(pb, response_type)(error_code=code_of(unknown), error_message=str(unknown)))
        elif isinstance(message, pb.SyncGroupRequest):
            self._carry_out(group, group.sync(now, message.member_id, message.group_instance_id or None,
                                              message.generation_id, message.protocol_type or None,
                                              message.protocol_name or None,
                                              {a.member_id: a.assignment for a in message.assignments}, env))
        elif isinstance(message, pb.HeartbeatRequest):
            try:
                group.heartbeat(now, message.member_id, message.group_instance_id or None, message.generation_id)
                self.node.net.reply(env, pb.HeartbeatResponse())
            except KafkaError as exc:
                self.node.net.reply(env, pb.HeartbeatResponse(error_code=code_of(exc), error_message=str(exc)))
        elif isinstance(message, pb.LeaveGroupRequest):
            errors, effects = group.leave(now, [(message.member_id, None)])
            left = errors[0]
            self.node.net.reply(env, pb.LeaveGroupResponse(error_code=code_of(left) if left else 0,
                                                           error_message=str(left) if left else ""))
            self._carry_out(group, effects)
        if group is not None:
            self._arm(group)

    # ------------------------------------------------------------ the core's effects

    def _carry_out(self, group: ClassicGroup, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, CompleteJoin):
                self.node.net.reply(effect.waiter, join_response(effect.outcome))
            elif isinstance(effect, CompleteSync):
                self.node.net.reply(effect.waiter, sync_response(group.group_id, effect.outcome))
                if effect.outcome.error_code == 0:
                    self.model.assigned(group.group_id, group.generation, effect.outcome.assignment, effect.waiter)
            elif isinstance(effect, StoreGroup):
                self._store(group, effect)

    def _store(self, group: ClassicGroup, effect: StoreGroup) -> None:
        if self.model.bug == "ack-group-before-fsync":
            # the planted bug: the assignment is handed out now and written only with the group's next record
            earlier = self._unwritten.pop(group.group_id, None)
            if earlier is not None:
                self.model.group_records[group.group_id] = earlier.record
            self._unwritten[group.group_id] = effect
            self._carry_out(group, group.store_completed(self.node.now(), effect.record.generation, None))
            return
        self.model.group_records[group.group_id] = effect.record  # the write; durable after the fsync below
        self.node.net.set_timer(self.node.name, self.node.fsync_ms,
                                functools.partial(self._stored, group, effect.record.generation), label="fsync")

    def _stored(self, group: ClassicGroup, generation: int) -> None:
        if self.groups.get(group.group_id) is not group:
            return  # the shard moved away meanwhile
        self._carry_out(group, group.store_completed(self.node.now(), generation, None))
        self._arm(group)

    def _arm(self, group: ClassicGroup) -> None:
        """One timer per group, at its next deadline (sessions, the join barrier, the initial delay)."""
        deadline = group.next_deadline_ms()
        if deadline is None or self._timers.get(group.group_id) == deadline:
            return
        self._timers[group.group_id] = deadline
        self.node.net.set_timer(self.node.name, max(0, deadline - self.node.now()),
                                functools.partial(self._tick, group, deadline), label="group-timer")

    def _tick(self, group: ClassicGroup, deadline: int) -> None:
        if self._timers.get(group.group_id) != deadline:
            return  # a later timer replaced this one
        del self._timers[group.group_id]
        if self.groups.get(group.group_id) is not group:
            return
        self._carry_out(group, group.tick(self.node.now()))
        self._arm(group)
