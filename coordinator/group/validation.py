"""The group coordinator's request rules, with Kafka's error names: group ids, offsets to commit,
and what a failed write of __consumer_offsets means to a client (KAFKA-REFERENCE §2). Who may
commit (members, generations) is the group's own rule: ClassicGroup.validate_offset_commit.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from coordinator.group.metadata import CommittedOffset
from proto import txnsim_pb2 as pb
from proto.errors import (
    CoordinatorNotAvailableError,
    InvalidCommitOffsetSizeError,
    InvalidGroupIdError,
    InvalidRequestError,
    KafkaError,
    NotCoordinatorError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    code_of,
)
from proto.structs import TopicPartition

MAX_GROUP_ID_LENGTH = 249
#: Kafka's offset.metadata.max.bytes
MAX_OFFSET_METADATA_BYTES = 4096


def validate_group_id(group_id: str) -> None:
    """Kafka answers INVALID_GROUP_ID for an empty id; txnsim also refuses ids its log keys cannot hold."""
    if not group_id:
        raise InvalidGroupIdError("[INVALID_GROUP_ID] the group id is empty")
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupIdError(f"[INVALID_GROUP_ID] the group id is {len(group_id)} characters long; "
                                  f"the limit is {MAX_GROUP_ID_LENGTH}")
    if "\x00" in group_id:
        raise InvalidGroupIdError("[INVALID_GROUP_ID] a group id may not contain NUL characters")


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
            accepted[tp] = CommittedOffset(entry.offset, entry.metadata, now, None,
                                           entry.leader_epoch if entry.HasField("leader_epoch") else -1)
        results.append(result)
    return results, list(accepted.items())
