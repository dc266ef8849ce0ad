"""Kafka's classic group protocol for one group, as plain logic: states, the join barrier, sync, heartbeats,
leaves, static members and who may commit offsets (KAFKA-REFERENCE §14; Kafka's ClassicGroup and
GroupCoordinator). No threads, no I/O: every call takes the time and returns effects the driver carries out
(answer these waiting JoinGroups, these SyncGroups, write this membership record). Invariant: an assignment
is handed out only after the membership record holding it is durable (store_completed)."""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proto.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    KafkaError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    code_of,
)
from proto.planted_bugs import PlantedBug


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
#: target state -> the states it may be entered from (Kafka's ClassicGroupState.validPreviousStates)
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
}

#: an opaque handle of a waiting request, chosen by the driver (a Future, say)
Waiter = Any


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's group.* broker settings that shape a rebalance."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    #: `txnsim simulate --bug no-join-barrier` switches the join barrier off; a real node never sets it
    planted_bug: PlantedBug | None = None


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    #: (assignor name, subscription metadata) in the member's order of preference
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    awaiting_join: Waiter | None = None
    awaiting_sync: Waiter | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    #: JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED and an id to rejoin with
    require_known_member_id: bool = True


@dataclass(frozen=True, slots=True)
class JoinOutcome:
    error_code: int = 0
    error_message: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    #: (member id, instance id, metadata): only in the leader's answer
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    error_code: int = 0
    error_message: str = ""
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class CompleteJoin:
    waiter: Waiter
    outcome: JoinOutcome


@dataclass(frozen=True, slots=True)
class CompleteSync:
    waiter: Waiter
    outcome: SyncOutcome


@dataclass(frozen=True, slots=True)
class StoreGroup:
    """Write the group's membership (GroupRecord) durably, then call store_completed(generation, error)."""

    record: GroupRecord


Effect = CompleteJoin | CompleteSync | StoreGroup


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """What the log keeps of a group's membership: enough to serve its generation after a reload."""

    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: tuple[Member, ...]


def _error(exc: KafkaError) -> tuple[int, str]:
    return code_of(exc), str(exc)


@dataclass(eq=False)
class ClassicGroup:
    """One group's membership and rebalance; the caller serialises calls (one lock per group)."""

    group_id: str
    config: GroupConfig
    #: makes a member id from (client id, instance id): randomness injected, so tests choose ids
    new_member_id: Callable[[str, str | None], str]
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    #: insertion order is join order
    members: dict[str, Member] = field(default_factory=dict)
    #: member ids handed out with MEMBER_ID_REQUIRED -> when they lapse unless the member joins with it
    pending_members: dict[str, int] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    #: the join barrier: when it gives up on members that did not rejoin
    rebalance_deadline_ms: int | None = None
    #: the first rebalance of an Empty group waits until then for more members
    initial_delay_until_ms: int | None = None
    #: a generation whose leader's assignment is being written (store_completed not called yet)
    storing_generation: int | None = None
    #: CompletingRebalance: members that have not sent SyncGroup by then are removed (Kafka's pending sync)
    sync_deadline_ms: int | None = None
    #: a static member's new id being written in Stable: (the old member, the new id, its JoinGroup's waiter)
    replacing: tuple[Member, str, Waiter] | None = None

    # ------------------------------------------------------------ state

    def transition_to(self, target: GroupState) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise AssertionError(f"group {self.group_id!r} cannot go from {self.state.value} to {target.value}")
        self.state = target

    def is_empty(self) -> bool:
        return not self.members

    def record(self) -> GroupRecord:
        return GroupRecord(self.generation, self.protocol_type, self.protocol_name, self.leader_id,
                           tuple(self.members.values()))

    def load(self, record: GroupRecord, now_ms: int) -> None:
        """Rebuild from a durable record: a group with members is Stable, their sessions start now."""
        self.generation, self.protocol_type = record.generation, record.protocol_type
        self.protocol_name, self.leader_id = record.protocol_name, record.leader_id
        self.members = {}
        self.static_members = {}
        for m in record.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                            m.rebalance_timeout_ms, m.protocol_type, m.protocols, m.assignment, now_ms)
            self.members[member.member_id] = member
            if member.group_instance_id is not None:
                self.static_members[member.group_instance_id] = member.member_id
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.pending_members.clear()
        self.rebalance_deadline_ms = self.initial_delay_until_ms = self.storing_generation = None

    def supported_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's order."""
        if not self.members:
            return []
        common = set.intersection(*({name for name, _ in m.protocols} for m in self.members.values()))
        first = next(iter(self.members.values()))
        return [name for name, _ in first.protocols if name in common]

    def _supports(self, protocol_type: str, protocols: Sequence[tuple[str, bytes]]) -> bool:
        if self.is_empty():
            return bool(protocol_type) and bool(protocols)
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and any(p in names for p in self.supported_protocols())

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its favourite protocol among those all support."""
        candidates = self.supported_protocols()
        votes = {name: 0 for name in candidates}
        for m in self.members.values():
            favourite = next(name for name, _ in m.protocols if name in votes)
            votes[favourite] += 1
        return max(candidates, key=lambda name: votes[name])  # ties: the first member's preference

    # ------------------------------------------------------------ JoinGroup

    def join(self, now_ms: int, req: JoinRequest, waiter: Waiter) -> list[Effect]:
        """A JoinGroup; its answer is a CompleteJoin for `waiter`, now or when the barrier lifts."""
        try:
            return self._join(now_ms, req, waiter)
        except KafkaError as exc:
            return [CompleteJoin(waiter, JoinOutcome(*_error(exc), member_id=req.member_id))]

    def _join(self, now_ms: int, req: JoinRequest, waiter: Waiter) -> list[Effect]:
        if not self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms:
            raise InvalidSessionTimeoutError(
                f"[INVALID_SESSION_TIMEOUT] session_timeout_ms {req.session_timeout_ms} is outside "
                f"[{self.config.min_session_timeout_ms}, {self.config.max_session_timeout_ms}]")
        if self.state is GroupState.DEAD:
            raise CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] group {self.group_id!r} was deleted")
        if not self._supports(req.protocol_type, req.protocols):
            raise InconsistentGroupProtocolError(
                f"[INCONSISTENT_GROUP_PROTOCOL] group {self.group_id!r} uses protocol type {self.protocol_type!r} "
                f"with {self.supported_protocols()}; this member offers {req.protocol_type!r} with "
                f"{[name for name, _ in req.protocols]}")
        if not req.member_id:
            return self._join_new(now_ms, req, waiter)
        return self._join_known(now_ms, req, waiter)

    def _join_new(self, now_ms: int, req: JoinRequest, waiter: Waiter) -> list[Effect]:
        member_id = self.new_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            old_id = self.static_members.get(req.group_instance_id)
            if old_id is not None and old_id in self.members:
                return self._replace_static_member(now_ms, req, old_id, member_id, waiter)
            return self._add_member_and_rebalance(now_ms, req, member_id, waiter)
        if req.require_known_member_id:
            self.pending_members[member_id] = now_ms + req.session_timeout_ms
            required = MemberIdRequiredError(f"[MEMBER_ID_REQUIRED] rejoin group {self.group_id!r} with member id "
                                             f"{member_id!r}")
            return [CompleteJoin(waiter, JoinOutcome(*_error(required), member_id=member_id))]
        return self._add_member_and_rebalance(now_ms, req, member_id, waiter)

    def _join_known(self, now_ms: int, req: JoinRequest, waiter: Waiter) -> list[Effect]:
        if req.member_id in self.pending_members:
            del self.pending_members[req.member_id]
            return self._add_member_and_rebalance(now_ms, req, req.member_id, waiter)
        self._check_member(req.member_id, req.group_instance_id)
        member = self.members[req.member_id]
        changed = member.protocols != req.protocols
        if self.state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(now_ms, member, req, waiter)
        if self.state is GroupState.COMPLETING_REBALANCE and not changed:
            # it lost the JoinGroup answer: give it again (the members only if it leads)
            member.last_heartbeat_ms = now_ms
            return [CompleteJoin(waiter, self._join_outcome(member.member_id))]
        if self.state is GroupState.STABLE and not changed and member.member_id != self.leader_id:
            member.last_heartbeat_ms = now_ms
            return [CompleteJoin(waiter, self._join_outcome(member.member_id, members=False))]
        return self._update_member_and_rebalance(now_ms, member, req, waiter)

    def _add_member_and_rebalance(self, now_ms: int, req: JoinRequest, member_id: str, waiter: Waiter
                                  ) -> list[Effect]:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.session_timeout_ms,
                        req.rebalance_timeout_ms, req.protocol_type, req.protocols, last_heartbeat_ms=now_ms,
                        awaiting_join=waiter)
        if not self.members:
            self.protocol_type = req.protocol_type
        self.members[member_id] = member
        if self.leader_id is None or self.leader_id not in self.members:
            self.leader_id = member_id
        if req.group_instance_id is not None:
            self.static_members[req.group_instance_id] = member_id
        if self.initial_delay_until_ms is not None and self.rebalance_deadline_ms is not None:
            # one more member during the initial delay: wait that long again, within the rebalance timeout
            self.initial_delay_until_ms = min(now_ms + self.config.initial_rebalance_delay_ms,
                                              self.rebalance_deadline_ms)
        return self._maybe_prepare_rebalance(now_ms) + self.tick(now_ms)

    def _update_member_and_rebalance(self, now_ms: int, member: Member, req: JoinRequest, waiter: Waiter
                                     ) -> list[Effect]:
        effects: list[Effect] = []
        if member.awaiting_join is not None and member.awaiting_join is not waiter:
            # a retried JoinGroup replaces the one still waiting; that one is told to rejoin
            effects.append(CompleteJoin(member.awaiting_join, JoinOutcome(
                *_error(RebalanceInProgressError(f"[REBALANCE_IN_PROGRESS] a newer JoinGroup of member "
                                                 f"{member.member_id!r} replaced this one")),
                member_id=member.member_id)))
        member.protocols, member.protocol_type = req.protocols, req.protocol_type
        member.session_timeout_ms, member.rebalance_timeout_ms = req.session_timeout_ms, req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.awaiting_join, member.last_heartbeat_ms = waiter, now_ms
        return effects + self._maybe_prepare_rebalance(now_ms) + self.tick(now_ms)

    def _replace_static_member(self, now_ms: int, req: JoinRequest, old_id: str, new_id: str, waiter: Waiter
                               ) -> list[Effect]:
        """KIP-345: a static member back within its session keeps its assignment; the old id is fenced."""
        old = self.members.pop(old_id)
        fenced = _error(FencedInstanceIdError(f"[FENCED_INSTANCE_ID] instance {req.group_instance_id!r} of group "
                                              f"{self.group_id!r} joined again as {new_id!r}"))
        effects: list[Effect] = []
        if old.awaiting_join is not None:
            effects.append(CompleteJoin(old.awaiting_join, JoinOutcome(*fenced, member_id=old_id)))
        if old.awaiting_sync is not None:
            effects.append(CompleteSync(old.awaiting_sync, SyncOutcome(*fenced)))
        member = Member(new_id, req.group_instance_id, req.client_id, req.client_host, req.session_timeout_ms,
                        req.rebalance_timeout_ms, req.protocol_type, req.protocols, old.assignment, now_ms)
        self.members[new_id] = member
        self.static_members[req.group_instance_id or ""] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if self.state is GroupState.STABLE and self.protocol_name == self.select_protocol():
            # nothing to reassign: answer with the current generation once the new id is durable (store_completed;
            # if the write fails, the old member comes back and the JoinGroup gets the error)
            self.replacing = (old, new_id, waiter)
            effects.append(StoreGroup(self.record()))
            return effects
        member.awaiting_join = waiter
        # Stable with another protocol to choose, or CompletingRebalance (the leader may be assigning to the
        # old id): start over so that the new id is in the assignment
        return effects + self._maybe_prepare_rebalance(now_ms) + self.tick(now_ms)

    def _join_outcome(self, member_id: str, *, members: bool = True) -> JoinOutcome:
        leads = members and member_id == self.leader_id
        listed = tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                       for m in self.members.values()) if leads else ()
        return JoinOutcome(0, "", self.generation, self.protocol_type, self.protocol_name, self.leader_id or "",
                           member_id, listed)

    def _maybe_prepare_rebalance(self, now_ms: int) -> list[Effect]:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            return self._prepare_rebalance(now_ms)
        return []

    def _prepare_rebalance(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        if self.state is GroupState.COMPLETING_REBALANCE:
            effects += self._fail_syncs(RebalanceInProgressError(
                f"[REBALANCE_IN_PROGRESS] group {self.group_id!r} is rebalancing again; rejoin"))
        self.storing_generation = self.sync_deadline_ms = None
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self.rebalance_deadline_ms = now_ms + timeout
        if self.state is GroupState.EMPTY:
            self.initial_delay_until_ms = now_ms + min(self.config.initial_rebalance_delay_ms, timeout)
        else:
            self.initial_delay_until_ms = None
        self.transition_to(GroupState.PREPARING_REBALANCE)
        return effects

    def _fail_syncs(self, exc: KafkaError) -> list[Effect]:
        effects: list[Effect] = []
        for m in self.members.values():
            m.assignment = b""
            if m.awaiting_sync is not None:
                effects.append(CompleteSync(m.awaiting_sync, SyncOutcome(*_error(exc))))
                m.awaiting_sync = None
        return effects

    # ------------------------------------------------------------ the barrier and timers

    def tick(self, now_ms: int) -> list[Effect]:
        """Timers: pending ids that lapsed, sessions that expired, and the join barrier."""
        effects: list[Effect] = []
        for member_id, until in list(self.pending_members.items()):
            if now_ms >= until:
                del self.pending_members[member_id]
        for member in list(self.members.values()):
            if member.member_id not in self.members:
                continue  # removed by the rebalance an earlier expiry completed
            kept_alive = member.awaiting_join is not None or member.awaiting_sync is not None
            if not kept_alive and now_ms - member.last_heartbeat_ms > member.session_timeout_ms:
                effects += self._remove_member(now_ms, member.member_id)
        if self.state is GroupState.PREPARING_REBALANCE:
            effects += self._maybe_complete_join(now_ms)
        elif self._sync_overdue(now_ms):
            # a member (often the leader) joined but never sent SyncGroup: without it the others wait for good
            for member in [m for m in self.members.values() if m.awaiting_sync is None]:
                effects += self._drop(member)
            effects += self._maybe_prepare_rebalance(now_ms) + self.tick_barrier(now_ms)
        return effects

    def _sync_overdue(self, now_ms: int) -> bool:
        return (self.state is GroupState.COMPLETING_REBALANCE and self.storing_generation is None
                and self.sync_deadline_ms is not None and now_ms >= self.sync_deadline_ms)

    def next_deadline_ms(self) -> int | None:
        """The earliest time tick() may have something to do."""
        times = list(self.pending_members.values())
        times += [m.last_heartbeat_ms + m.session_timeout_ms + 1 for m in self.members.values()
                  if m.awaiting_join is None and m.awaiting_sync is None]
        if self.state is GroupState.PREPARING_REBALANCE:
            times += [t for t in (self.initial_delay_until_ms, self.rebalance_deadline_ms) if t is not None]
        if self.state is GroupState.COMPLETING_REBALANCE and self.sync_deadline_ms is not None \
                and self.storing_generation is None:  # as _sync_overdue: a deadline tick() would not act on
            times.append(self.sync_deadline_ms)
        return min(times, default=None)

    def _all_joined(self) -> bool:
        if self.config.planted_bug is PlantedBug.NO_JOIN_BARRIER:  # the first rejoin ends the wait for everyone else
            return any(m.awaiting_join is not None for m in self.members.values())
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def _maybe_complete_join(self, now_ms: int) -> list[Effect]:
        timed_out = self.rebalance_deadline_ms is not None and now_ms >= self.rebalance_deadline_ms
        if not timed_out:
            if self.initial_delay_until_ms is not None:
                if now_ms < self.initial_delay_until_ms:
                    return []
                self.initial_delay_until_ms = None  # over: from now on only the members decide (and no timer)
            if not self._all_joined():
                return []
        effects: list[Effect] = []
        for member in [m for m in self.members.values() if m.awaiting_join is None and m.group_instance_id is None]:
            effects += self._drop(member)  # a dynamic member that did not rejoin in time
        # static members that did not rejoin stay (KIP-345): their session timeout, not the rebalance, removes
        # them, and the leader assigns them their share, which a restart within the session gets back
        self.pending_members.clear()
        joined = [m.member_id for m in self.members.values() if m.awaiting_join is not None]
        if self.members and not joined:
            # only static members are left and none rejoined: wait another rebalance timeout for them (or for
            # their sessions to end), as Kafka postpones the join
            self.rebalance_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in self.members.values())
            return effects
        if self.leader_id not in joined:
            self.leader_id = joined[0] if joined else None
        self.rebalance_deadline_ms = self.initial_delay_until_ms = None
        self.generation += 1
        if not self.members:
            # the protocol type stays, as Kafka keeps it: an Empty group is still a "consumer" group (librdkafka
            # takes one without a type for a simple group); the next member may bring another
            self.protocol_name = self.leader_id = None
            self.transition_to(GroupState.EMPTY)
            return effects + [StoreGroup(self.record())]
        self.protocol_name = self.select_protocol()
        self.transition_to(GroupState.COMPLETING_REBALANCE)
        self.sync_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in self.members.values())
        for member in self.members.values():
            member.assignment = b""
            if member.awaiting_join is None:
                continue  # a static member that did not rejoin: the leader assigns it all the same
            member.last_heartbeat_ms = now_ms
            waiter, member.awaiting_join = member.awaiting_join, None
            effects.append(CompleteJoin(waiter, self._join_outcome(member.member_id)))
        return effects

    def _drop(self, member: Member) -> list[Effect]:
        """Forget `member`, answering what it still waits on."""
        effects: list[Effect] = []
        gone = _error(UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] member {member.member_id!r} left group "
                                           f"{self.group_id!r} or was removed; rejoin with an empty member id"))
        if member.awaiting_join is not None:
            effects.append(CompleteJoin(member.awaiting_join, JoinOutcome(*gone, member_id=member.member_id)))
        if member.awaiting_sync is not None:
            effects.append(CompleteSync(member.awaiting_sync, SyncOutcome(*gone)))
        del self.members[member.member_id]
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == \
                member.member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)
        return effects

    def _remove_member(self, now_ms: int, member_id: str) -> list[Effect]:
        effects = self._drop(self.members[member_id])
        if self.state is GroupState.PREPARING_REBALANCE:
            return effects + self._maybe_complete_join(now_ms)
        return effects + self._maybe_prepare_rebalance(now_ms) + self.tick_barrier(now_ms)

    def tick_barrier(self, now_ms: int) -> list[Effect]:
        return self._maybe_complete_join(now_ms) if self.state is GroupState.PREPARING_REBALANCE else []

    # ------------------------------------------------------------ SyncGroup

    def sync(self, now_ms: int, member_id: str, instance_id: str | None, generation_id: int,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
             waiter: Waiter) -> list[Effect]:
        """A SyncGroup; the leader's carries the assignment, the others wait for it to be stored."""
        try:
            if self.state is GroupState.DEAD:
                raise CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] group {self.group_id!r} was deleted")
            self._check_member(member_id, instance_id)
            self._check_generation(generation_id)
            if (protocol_type is not None and protocol_type != self.protocol_type) or \
                    (protocol_name is not None and protocol_name != self.protocol_name):
                raise InconsistentGroupProtocolError(
                    f"[INCONSISTENT_GROUP_PROTOCOL] group {self.group_id!r} runs {self.protocol_type!r}/"
                    f"{self.protocol_name!r}, not {protocol_type!r}/{protocol_name!r}")
            if self.state is GroupState.PREPARING_REBALANCE:
                raise RebalanceInProgressError(f"[REBALANCE_IN_PROGRESS] group {self.group_id!r} is rebalancing; "
                                               f"rejoin")
        except KafkaError as exc:
            return [CompleteSync(waiter, SyncOutcome(*_error(exc)))]
        member = self.members[member_id]
        member.last_heartbeat_ms = now_ms
        if self.state is GroupState.STABLE:
            return [CompleteSync(waiter, self._sync_outcome(member))]
        replaced: list[Effect] = []
        if member.awaiting_sync is not None:  # a retried SyncGroup: the earlier call is answered, not left hanging
            replaced.append(CompleteSync(member.awaiting_sync, SyncOutcome(*_error(RebalanceInProgressError(
                f"[REBALANCE_IN_PROGRESS] member {member_id!r} sent SyncGroup again")))))
        member.awaiting_sync = waiter
        if member_id != self.leader_id or self.storing_generation is not None:
            return replaced
        for m in self.members.values():  # members the leader left out get nothing
            m.assignment = assignments.get(m.member_id, b"")
        self.storing_generation = self.generation
        return replaced + [StoreGroup(self.record())]

    def store_completed(self, now_ms: int, generation: int, error: KafkaError | None) -> list[Effect]:
        """The membership record of `generation` is durable (or failed): answer the waiting SyncGroups, or the
        static member whose new id it records."""
        if self.replacing is not None:
            return self._replaced(error)
        if self.state is not GroupState.COMPLETING_REBALANCE or self.storing_generation != generation \
                or self.generation != generation:
            return []  # the group moved on meanwhile: those SyncGroups were answered already
        self.storing_generation = None
        if error is not None:
            return self._fail_syncs(error) + self._prepare_rebalance(now_ms)
        self.sync_deadline_ms = None
        self.transition_to(GroupState.STABLE)
        effects: list[Effect] = []
        for m in self.members.values():
            if m.awaiting_sync is not None:
                effects.append(CompleteSync(m.awaiting_sync, self._sync_outcome(m)))
                m.awaiting_sync = None
                m.last_heartbeat_ms = now_ms
        return effects

    def _replaced(self, error: KafkaError | None) -> list[Effect]:
        assert self.replacing is not None
        old, new_id, waiter = self.replacing
        self.replacing = None
        if error is None:
            return [CompleteJoin(waiter, self._join_outcome(new_id, members=False))]
        self.members.pop(new_id, None)  # as Kafka: the old member is put back, the new id never existed
        old.awaiting_join = old.awaiting_sync = None  # answered (fenced) when it was replaced
        self.members[old.member_id] = old
        if old.group_instance_id is not None:
            self.static_members[old.group_instance_id] = old.member_id
        if self.leader_id == new_id:
            self.leader_id = old.member_id
        return [CompleteJoin(waiter, JoinOutcome(*_error(error), member_id=new_id))]

    def _sync_outcome(self, member: Member) -> SyncOutcome:
        return SyncOutcome(0, "", self.protocol_type, self.protocol_name, member.assignment)

    # ------------------------------------------------------------ Heartbeat, LeaveGroup

    def heartbeat(self, now_ms: int, member_id: str, instance_id: str | None, generation_id: int) -> None:
        """Raises what Kafka answers; REBALANCE_IN_PROGRESS tells a member of a rebalance."""
        if self.state is GroupState.DEAD:
            raise CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] group {self.group_id!r} was deleted")
        self._check_member(member_id, instance_id)
        self._check_generation(generation_id)
        self.members[member_id].last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"[REBALANCE_IN_PROGRESS] group {self.group_id!r} is rebalancing; "
                                           f"rejoin")

    def leave(self, now_ms: int, leaving: Sequence[tuple[str, str | None]]
              ) -> tuple[list[KafkaError | None], list[Effect]]:
        """LeaveGroup of (member id, instance id) pairs: an error (or None) per member, and the effects."""
        if self.state is GroupState.DEAD:
            raise CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] group {self.group_id!r} was deleted")
        errors: list[KafkaError | None] = []
        effects: list[Effect] = []
        for member_id, instance_id in leaving:
            try:
                if instance_id is not None:
                    found = self.static_members.get(instance_id)
                    if found is None or found not in self.members:
                        raise UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] no member of group {self.group_id!r} has "
                                                   f"instance id {instance_id!r}")
                    if member_id and member_id != found:
                        raise FencedInstanceIdError(f"[FENCED_INSTANCE_ID] instance {instance_id!r} is member "
                                                    f"{found!r} now, not {member_id!r}")
                    member_id = found
                if member_id in self.pending_members:
                    del self.pending_members[member_id]
                    effects += self.tick_barrier(now_ms)
                elif member_id in self.members:
                    effects += self._remove_member(now_ms, member_id)
                else:
                    raise UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] member {member_id!r} is not in group "
                                               f"{self.group_id!r}")
                errors.append(None)
            except KafkaError as exc:
                errors.append(exc)
        return errors, effects

    def delete(self) -> list[Effect]:
        """DeleteGroups: only an Empty group; it becomes Dead."""
        effects = self._fail_syncs(CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] group "
                                                                f"{self.group_id!r} was deleted"))
        self.transition_to(GroupState.DEAD)
        return effects

    # ------------------------------------------------------------ checks

    def _check_member(self, member_id: str, instance_id: str | None) -> None:
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is not None and current != member_id:
                raise FencedInstanceIdError(f"[FENCED_INSTANCE_ID] instance {instance_id!r} of group "
                                            f"{self.group_id!r} is member {current!r} now, not {member_id!r}")
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] member {member_id!r} is not in group "
                                       f"{self.group_id!r}; rejoin with an empty member id")
        if instance_id is not None and member.group_instance_id != instance_id:
            raise FencedInstanceIdError(f"[FENCED_INSTANCE_ID] member {member_id!r} has instance id "
                                        f"{member.group_instance_id!r}, not {instance_id!r}")

    def _check_generation(self, generation_id: int) -> None:
        if generation_id != self.generation:
            raise IllegalGenerationError(f"[ILLEGAL_GENERATION] group {self.group_id!r} is at generation "
                                         f"{self.generation}, not {generation_id}; rejoin")

    def validate_offset_commit(self, generation_id: int, member_id: str, instance_id: str | None, *,
                               transactional: bool) -> None:
        """Kafka's ClassicGroup.validateOffsetCommit (KIP-447 for TxnOffsetCommit)."""
        if self.state is GroupState.DEAD:
            raise CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] group {self.group_id!r} was deleted")
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return  # a group that only stores offsets (assign(), an admin)
        if generation_id >= 0 or member_id or instance_id is not None:
            self._check_member(member_id, instance_id)
            # the generation first, as Kafka: a commit of an older generation is fenced (CommitFailedError), not
            # told to wait for a rebalance it is no longer part of
            if generation_id != self.generation:
                raise IllegalGenerationError(f"[ILLEGAL_GENERATION] group {self.group_id!r} is at generation "
                                             f"{self.generation}; a commit from generation {generation_id} is "
                                             f"fenced")
            if not transactional and self.state is GroupState.COMPLETING_REBALANCE:
                raise RebalanceInProgressError(f"[REBALANCE_IN_PROGRESS] group {self.group_id!r} is completing a "
                                               f"rebalance; commit after SyncGroup")
        elif not transactional:
            raise UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] group {self.group_id!r} has members; a commit with "
                                       f"generation -1 and no member id is accepted only for a group without "
                                       f"members")

    def commit_heartbeat(self, now_ms: int, member_id: str) -> None:
        """A commit from a member counts as a sign of life, as in Kafka."""
        member = self.members.get(member_id)
        if member is not None:
            member.last_heartbeat_ms = now_ms
