"""The partition assignors a group leader runs (Kafka's RangeAssignor and RoundRobinAssignor, eager).

Pure functions of the members' subscriptions and the topics' partition counts, so every leader computes
the same assignment from the same JoinGroup answer.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from proto.structs import TopicPartition

#: member id -> the topics it subscribed to
Subscriptions = Mapping[str, list[str]]
#: topic -> partition count (0 for a topic that does not exist)
PartitionCount = Callable[[str], int]
Assignment = dict[str, list[TopicPartition]]


def range_assign(subscriptions: Subscriptions, partitions: PartitionCount) -> Assignment:
    """Per topic, contiguous ranges over its subscribers sorted by member id; the first get one more."""
    assigned: Assignment = {member_id: [] for member_id in subscriptions}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        subscribers = sorted(m for m, topics in subscriptions.items() if topic in topics)
        per_member, extra = divmod(partitions(topic), len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            length = per_member + (1 if i < extra else 0)
            assigned[member_id] += [TopicPartition(topic, p) for p in range(start, start + length)]
            start += length
    return assigned


def roundrobin_assign(subscriptions: Subscriptions, partitions: PartitionCount) -> Assignment:
    """Every partition of every topic in order, dealt to the sorted members in turn (skipping a member not
    subscribed to that partition's topic)."""
    assigned: Assignment = {member_id: [] for member_id in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return assigned
    turn = 0
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        for p in range(partitions(topic)):
            for _ in range(len(members)):
                member_id = members[turn % len(members)]
                turn += 1
                if topic in subscriptions[member_id]:
                    assigned[member_id].append(TopicPartition(topic, p))
                    break
    return assigned


ASSIGNORS: dict[str, Callable[[Subscriptions, PartitionCount], Assignment]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
}
