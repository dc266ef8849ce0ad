"""The records of __consumer_offsets: what the group coordinator writes and replays.

Keys are UTF-8 text split by NUL (group ids may not contain NUL; topics never do):
    f"{group}\\x00{topic}\\x00{partition}"  -> pb.OffsetLogValue (a committed or pending offset)
    f"{group}\\x00__generation__"           -> JSON {"version": 1, "generation", "protocol_type", "protocol",
                                                "leader", "members": [...]} (None: the group was deleted)
The membership record is written before an assignment is handed out (and when a group empties or a
static member's id changes), so a reloaded coordinator serves the generation its members hold.
Version 0 records (txnsim's server-side assignment, no protocols) load as an empty group at their
generation: their members get UNKNOWN_MEMBER_ID and rejoin.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from coordinator.group.classic import GroupRecord, Member
from coordinator.group.metadata import CommittedOffset
from proto import txnsim_pb2 as pb
from proto.errors import CorruptMessageError
from proto.structs import TopicPartition

GENERATION_SUFFIX = "__generation__"
_GROUP_VALUE_VERSION = 1


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    tp: TopicPartition


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


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
    record = pb.OffsetLogValue(offset=value.offset, metadata=value.metadata, commit_time_ms=value.commit_time_ms)
    if value.leader_epoch >= 0:
        record.leader_epoch = value.leader_epoch
    return record.SerializeToString()


def decode_offset(raw: bytes, log_offset: int) -> CommittedOffset:
    value = pb.OffsetLogValue.FromString(raw)
    return CommittedOffset(value.offset, value.metadata, value.commit_time_ms, log_offset,
                           value.leader_epoch if value.HasField("leader_epoch") else -1)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def encode_group(record: GroupRecord) -> bytes:
    return json.dumps({
        "version": _GROUP_VALUE_VERSION,
        "generation": record.generation,
        "protocol_type": record.protocol_type,
        "protocol": record.protocol_name,
        "leader": record.leader_id,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                     "client_host": m.client_host, "session_timeout_ms": m.session_timeout_ms,
                     "rebalance_timeout_ms": m.rebalance_timeout_ms,
                     "protocols": [[name, _b64(metadata)] for name, metadata in m.protocols],
                     "assignment": _b64(m.assignment)} for m in record.members],
    }, separators=(",", ":")).encode()


def decode_group(raw: bytes) -> GroupRecord:
    try:
        data = json.loads(raw)
        if int(data.get("version", 0)) == 0:  # server-side assignment: nothing a client could resume
            return GroupRecord(int(data["generation"]), None, None, None, ())
        protocol_type = data["protocol_type"]
        members = tuple(
            Member(m["member_id"], m.get("group_instance_id"), m.get("client_id", ""), m.get("client_host", ""),
                   int(m["session_timeout_ms"]), int(m["rebalance_timeout_ms"]), protocol_type or "",
                   tuple((name, base64.b64decode(metadata)) for name, metadata in m["protocols"]),
                   base64.b64decode(m["assignment"]))
            for m in data["members"])
        return GroupRecord(int(data["generation"]), protocol_type, data.get("protocol"), data.get("leader"), members)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptMessageError(f"unreadable group membership record: {exc}") from None
