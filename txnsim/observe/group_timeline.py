"""A consumer group's rebalances as timeline events, built from its durable membership records (no I/O here).

The group coordinator writes a membership record to `__consumer_offsets` before it hands a generation's
assignment out (and when a group empties, or a static member comes back under a new id), so the log
holds every generation the members were given: its number, protocol, leader, members and assignment.
The coordinator keeps only the current one in memory; the log is the history.

Each record becomes events in the group's lanes: `group G` for the generation (a Rebalance when the
number went up), and a lane per member (`G: member-id`) for what it was assigned or that it left.
The record's timestamp is the coordinator's time of the write, the moment the assignment was fixed.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coordinator.group.classic import GroupRecord, Member
from proto.consumer_protocol import decode_assignment
from proto.structs import CONSUMER_OFFSETS_TOPIC
from txnsim.observe.timeline import LogOwners, OwnershipEvent, TimelineEvent, partition_lane, sort_events


@dataclass(frozen=True, slots=True)
class GroupEntry:
    """One durable membership record of the group (record None: a tombstone, the group was deleted)."""

    offset: int
    timestamp_ms: int
    leader_epoch: int
    record: GroupRecord | None


def group_lane(group_id: str) -> str:
    return f"group {group_id}"


def member_lane(group_id: str, member_id: str) -> str:
    return f"{group_id}: {member_id}"


def assignment_text(member: Member) -> str:
    """A member's assignment as people read it: its partitions, or what the bytes are when not a consumer's."""
    if member.protocol_type != "consumer":
        return f"{len(member.assignment)} bytes of {member.protocol_type or 'unknown'} protocol assignment"
    try:
        partitions = decode_assignment(member.assignment)
    except ValueError:
        return f"{len(member.assignment)} bytes (not a ConsumerProtocol assignment)"
    return ", ".join(partition_lane(tp) for tp in sorted(partitions)) or "nothing"


def _client(m: Member) -> str:
    where = f" on {m.client_host}" if m.client_host else ""
    return f"client {m.client_id or '-'}{where}" + (f", instance {m.group_instance_id}" if m.group_instance_id else "")


def build_group_timeline(group_id: str, shard: int, entries: Sequence[GroupEntry],
                         ownership: Sequence[OwnershipEvent],
                         first_owners: Mapping[tuple[str, int], int] | None = None) -> list[TimelineEvent]:
    """Every generation of `group_id` the log still holds, oldest first.

    `entries`: its membership records in offsets shard `shard`, in log order; `ownership` and
    `first_owners` say which node coordinated the group when (as for a transaction's timeline).
    """
    owners = LogOwners(ownership, first_owners or {})
    lane = group_lane(group_id)
    events: list[TimelineEvent] = []
    previous: GroupRecord | None = None
    for entry in entries:
        t = entry.timestamp_ms
        node = owners.node(CONSUMER_OFFSETS_TOPIC, shard, entry.leader_epoch, t)
        record = entry.record
        if record is None:
            events.append(TimelineEvent(t, lane, "GroupDeleted", f"group {group_id} deleted", node,
                                        detail="its offsets and membership removed",
                                        generation=previous.generation if previous else 0))
            previous = None
            continue
        g = record.generation
        members = {m.member_id: m for m in record.members}
        had = {m.member_id: m for m in previous.members} if previous is not None else {}
        described = f"{len(members)} member(s)" + (f", leader {record.leader_id}" if record.leader_id else "")
        if previous is None or g != previous.generation:
            was = f"; was generation {previous.generation}" if previous is not None else ""
            events.append(TimelineEvent(
                t, lane, "Rebalance", f"generation {g}: {described}" if members else f"generation {g}: empty", node,
                detail=f"protocol {record.protocol_name or '-'} ({record.protocol_type or '-'}), "
                       f"coordinator node {node}{was}", generation=g))
            changed = list(members.values())
        else:  # the same generation written again: a static member's new id, the assignment unchanged
            events.append(TimelineEvent(t, lane, "Membership", f"generation {g} rewritten: {described}", node,
                                        detail="a static member rejoined under a new member id", generation=g))
            changed = [m for m_id, m in members.items() if m_id not in had]
        for m in changed:
            events.append(TimelineEvent(t, member_lane(group_id, m.member_id), "Assignment",
                                        f"assigned {assignment_text(m)}", node,
                                        detail=_client(m),
                                        generation=g))
        for member_id in had.keys() - members.keys():
            events.append(TimelineEvent(t, member_lane(group_id, member_id), "MemberLeft",
                                        f"not in generation {g}", node, detail="left, or its session ended",
                                        generation=g))
        previous = record
    return events


def _runs(events: Sequence[TimelineEvent]) -> list[list[TimelineEvent]]:
    """The events cut into generations as they happened: a new run at each change of generation and after a
    deletion, so a group deleted and created again (its numbers starting over) keeps its incarnations apart."""
    runs: list[list[TimelineEvent]] = []
    for event in events:
        if not runs or event.generation != runs[-1][-1].generation or runs[-1][-1].kind == "GroupDeleted":
            runs.append([])
        runs[-1].append(event)
    return runs


def last_generations(events: Sequence[TimelineEvent], count: int) -> list[TimelineEvent]:
    """The events of the group's last `count` generations, in the order they happened (negative: all)."""
    if count < 0:
        return list(events)
    return [e for run in (_runs(events)[-count:] if count else []) for e in run]


def generations_since(events: Sequence[TimelineEvent], start_ms: int) -> list[TimelineEvent]:
    """The group's events from `start_ms` on, with the generation in force at `start_ms` (what a
    transaction's picture shows beside it: who held which partition when its first step happened)."""
    before = [[e for e in run if e.time_ms < start_ms] for run in _runs(events) if run[0].time_ms < start_ms]
    current = before[-1] if before and before[-1][-1].kind != "GroupDeleted" else []
    return [*current, *(e for e in events if e.time_ms >= start_ms)]


def beside_transactions(events: Sequence[TimelineEvent],
                        groups: Mapping[str, Sequence[TimelineEvent]]) -> list[TimelineEvent]:
    """A transaction's events with the rebalances of the groups it committed offsets for, from its first
    shown step on: one picture of a copier's transactions and the generations they ran under."""
    if not events or not groups:
        return list(events)
    start = min(e.time_ms for e in events)
    return sort_events([*events, *(e for group in groups.values() for e in generations_since(group, start))])
