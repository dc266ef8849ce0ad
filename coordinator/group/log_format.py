"""The records of __consumer_offsets: what the group coordinator writes and replays.

Keys are UTF-8 text split by NUL (group ids may not contain NUL; topics never do):
    f"{group}\\x00{topic}\\x00{partition}"  -> pb.OffsetLogValue (a committed or pending offset)
    f"{group}\\x00__generation__"           -> JSON {"version": 0, "generation": int, "members": [...]}
The membership record is rewritten whenever the generation changes, so that a reloaded
coordinator never hands out a generation a stale member still holds.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from proto import txnsim_pb2 as pb
from proto.errors import CorruptMessageError
from proto.structs import TopicPartition

from coordinator.group.metadata import CommittedOffset, MemberMetadata

GENERATION_SUFFIX = "__generation__"
_GROUP_VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    tp: TopicPartition


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class GroupValue:
    generation: int
    members: tuple[MemberMetadata, ...]


def offset_key(group_id: str, tp: TopicPartition) -> bytes:
    return f"{group_id}\x00{tp.topic}\x00{tp.partition}".encode()


def group_key(group_id: str) -> bytes:
    return f"{group_id}\x00{GENERATION_SUFFIX}".encode()


def parse_key(raw: bytes | None) -> OffsetKey | GroupKey:
    if raw is None:
        raise CorruptMessageError("a __consumer_offsets record has no key")
    parts = raw.decode("utf-8", "replace").split("\x00")
    if len(parts) == 3 and parts[2].lstrip("-").isdigit():
        return OffsetKey(parts[0], TopicPartition(parts[1], int(parts[2])))
    if len(parts) == 2 and parts[1] == GENERATION_SUFFIX:
        return GroupKey(parts[0])
    raise CorruptMessageError(f"unrecognised __consumer_offsets key {raw!r}")


def encode_offset(value: CommittedOffset) -> bytes:
    return pb.OffsetLogValue(offset=value.offset, metadata=value.metadata,
                             commit_time_ms=value.commit_time_ms).SerializeToString()


def decode_offset(raw: bytes, log_offset: int) -> CommittedOffset:
    value = pb.OffsetLogValue.FromString(raw)
    return CommittedOffset(value.offset, value.metadata, value.commit_time_ms, log_offset)


def encode_group(generation: int, members: list[MemberMetadata]) -> bytes:
    return json.dumps({
        "version": _GROUP_VALUE_VERSION,
        "generation": generation,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "session_timeout_ms": m.session_timeout_ms, "rebalance_timeout_ms": m.rebalance_timeout_ms,
                     "topics": list(m.topics)} for m in members],
    }, separators=(",", ":")).encode()


def decode_group(raw: bytes) -> GroupValue:
    try:
        data = json.loads(raw)
        members = tuple(MemberMetadata(m["member_id"], m.get("group_instance_id"), int(m["session_timeout_ms"]),
                                       int(m["rebalance_timeout_ms"]), tuple(m["topics"]))
                        for m in data["members"])
        return GroupValue(int(data["generation"]), members)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptMessageError(f"unreadable group membership record: {exc}") from None
