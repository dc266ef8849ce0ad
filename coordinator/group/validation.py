"""The group coordinator's request rules, with Kafka's error names: group ids, members,
generations, who may commit offsets (Kafka's ClassicGroup.validateOffsetCommit, KIP-447),
and what a failed write of __consumer_offsets means to a client (KAFKA-REFERENCE §2).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from proto import txnsim_pb2 as pb
from proto.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InvalidCommitOffsetSizeError,
    InvalidRequestError,
    KafkaError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    code_of,
)
from proto.structs import TopicPartition

from coordinator.group.metadata import CommittedOffset, GroupMetadata, MemberMetadata

MAX_GROUP_ID_LENGTH = 249
#: Kafka's offset.metadata.max.bytes
MAX_OFFSET_METADATA_BYTES = 4096


def validate_group_id(group_id: str) -> None:
    if not group_id:
        raise InvalidRequestError("[INVALID_REQUEST] the group id is empty")
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidRequestError(f"[INVALID_REQUEST] the group id is {len(group_id)} characters long; "
                                  f"the limit is {MAX_GROUP_ID_LENGTH}")
    if "\x00" in group_id:
        raise InvalidRequestError("[INVALID_REQUEST] a group id may not contain NUL characters")


@contextmanager
def locked(group: GroupMetadata | None) -> Iterator[None]:
    """The group's lock; a group that does not exist has none (member_of then answers UNKNOWN_MEMBER_ID)."""
    if group is None:
        yield
        return
    with group.lock:
        yield


def member_of(group: GroupMetadata | None, group_id: str, member_id: str) -> MemberMetadata:
    member = group.members.get(member_id) if group is not None else None
    if member is None:
        raise UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] member {member_id!r} is not in group {group_id!r}; "
                                   f"rejoin with an empty member id")
    return member


def check_generation(group: GroupMetadata, generation_id: int) -> None:
    if generation_id < group.generation:
        raise RebalanceInProgressError(f"[REBALANCE_IN_PROGRESS] group {group.group_id!r} is at generation "
                                       f"{group.generation}, not {generation_id}; rejoin")
    if generation_id > group.generation:
        raise IllegalGenerationError(f"[ILLEGAL_GENERATION] group {group.group_id!r} is at generation "
                                     f"{group.generation}, not {generation_id}")


def validate_commit_member(group: GroupMetadata, generation_id: int, member_id: str, instance_id: str | None,
                            *, transactional: bool) -> None:
    """Kafka's ClassicGroup.validateOffsetCommit (KIP-447 for TxnOffsetCommit)."""
    if generation_id < 0 and not group.members:
        return  # assign()-style use, or an admin: the group only stores offsets
    if generation_id >= 0 or member_id or instance_id is not None:
        member = member_of(group, group.group_id, member_id)
        if instance_id is not None and member.group_instance_id != instance_id:
            raise FencedInstanceIdError(f"[FENCED_INSTANCE_ID] member {member_id!r} of group {group.group_id!r} "
                                        f"has instance id {member.group_instance_id!r}, not {instance_id!r}")
        if generation_id != group.generation:
            raise IllegalGenerationError(f"[ILLEGAL_GENERATION] group {group.group_id!r} is at generation "
                                         f"{group.generation}; a commit from generation {generation_id} is fenced")
    elif not transactional:
        # A commit without member id and generation is accepted only while the group is empty;
        # TxnOffsetCommit with a bare group id is not fenced (Kafka keeps that for old producers).
        raise UnknownMemberIdError(f"[UNKNOWN_MEMBER_ID] group {group.group_id!r} has members; a commit with "
                                   f"generation -1 and no member id is accepted only for a group without members")


def map_append_error(exc: KafkaError, shard: int, *, offsets: bool) -> KafkaError:
    """KAFKA-REFERENCE §2: what a failed write of the coordinator's own log means to its clients."""
    name = getattr(exc, "name", "")
    where = f"writing __consumer_offsets-{shard} failed: {exc}"
    if name in ("UNKNOWN_TOPIC_OR_PARTITION", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
                "REQUEST_TIMED_OUT"):
        return CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] {where}")
    if name in ("NOT_LEADER_OR_FOLLOWER", "KAFKA_STORAGE_ERROR"):
        return NotCoordinatorError(f"[NOT_COORDINATOR] {where}")
    if name in ("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"):
        if offsets:
            return InvalidCommitOffsetSizeError(f"[INVALID_COMMIT_OFFSET_SIZE] {where}")
        return UnknownServerError(f"[UNKNOWN_SERVER_ERROR] {where}")
    return exc


def validate_offsets(entries: Iterable[pb.OffsetEntry], now: int, partition_exists: Callable[[TopicPartition], bool]
                     ) -> tuple[list[pb.PartitionError], list[tuple[TopicPartition, CommittedOffset]]]:
    results: list[pb.PartitionError] = []
    accepted: dict[TopicPartition, CommittedOffset] = {}
    for entry in entries:
        tp = TopicPartition(entry.topic, entry.partition)
        error: KafkaError | None = None
        if entry.offset < -1:
            error = InvalidRequestError(f"[INVALID_REQUEST] offset {entry.offset} of {tp} is below -1")
        elif len(entry.metadata.encode()) > MAX_OFFSET_METADATA_BYTES:
            error = InvalidCommitOffsetSizeError(f"[INVALID_COMMIT_OFFSET_SIZE] metadata of {tp} is longer than "
                                                 f"{MAX_OFFSET_METADATA_BYTES} bytes")
        elif not partition_exists(tp):
            error = UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] {tp} does not exist")
        result = pb.PartitionError(topic=tp.topic, partition=tp.partition)
        if error is not None:
            result.error_code, result.error_message = code_of(error), str(error)
        else:
            accepted[tp] = CommittedOffset(entry.offset, entry.metadata, now, None)
        results.append(result)
    return results, list(accepted.items())
