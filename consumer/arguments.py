"""What the consumer's methods accept, checked at the call: kafka-python's shapes in, txnsim's values out.

Anything shaped like `(topic, partition)` or with an `.offset` is taken (kafka-python's named tuples
included); a value the nodes could not take fails here with TypeError or IllegalArgumentError (a
ValueError, as kafka-python raises), never in a later poll() or in a background thread.
"""
from __future__ import annotations

from typing import Any

from proto.errors import IllegalArgumentError
from proto.structs import OffsetAndMetadata, TopicPartition

#: Kafka's partition numbers are int32
MAX_PARTITION = 2**31 - 1
#: Kafka's offsets and timestamps are int64
MAX_OFFSET = 2**63 - 1


def as_topic_partition(value: Any, what: str = "partition") -> TopicPartition:
    """txnsim's TopicPartition from anything shaped like one (duck typing on (topic, partition))."""
    try:
        topic, partition = value
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a TopicPartition (topic, partition), not {value!r}") from None
    if not isinstance(topic, str):
        raise TypeError(f"the topic of {what} {value!r} must be a str, not {type(topic).__name__}")
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"the partition of {what} {value!r} must be an int, not {type(partition).__name__}")
    if not topic:
        raise IllegalArgumentError(f"{what} {value!r} has an empty topic name")
    if not 0 <= partition <= MAX_PARTITION:
        raise IllegalArgumentError(f"the partition of {what} {value!r} must be between 0 and {MAX_PARTITION}")
    return value if type(value) is TopicPartition else TopicPartition(topic, partition)


def check_offset(offset: Any, what: str) -> int:
    """An offset the nodes can take (0..2^63-1), else IllegalArgumentError."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise IllegalArgumentError(f"{what} must be an int, not {type(offset).__name__} {offset!r}")
    if not 0 <= offset <= MAX_OFFSET:
        raise IllegalArgumentError(f"{what} must be between 0 and {MAX_OFFSET}, not {offset}")
    return offset


def check_timestamp(timestamp: Any, tp: TopicPartition) -> int:
    """A timestamp to look up (ms since the epoch), as kafka-python's offsets_for_times takes it."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        raise TypeError(f"the timestamp of {tp} must be an int of milliseconds, not {timestamp!r}")
    if not 0 <= timestamp <= MAX_OFFSET:
        raise IllegalArgumentError(f"the target time for {tp} is {timestamp}; it must be between 0 and {MAX_OFFSET}")
    return int(timestamp)


def as_offset_and_metadata(value: Any, tp: TopicPartition) -> OffsetAndMetadata:
    """An int, or an OffsetAndMetadata of txnsim's or kafka-python's (duck typing on .offset)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return OffsetAndMetadata(check_offset(value, f"the offset of {tp}"))
    if not hasattr(value, "offset"):
        raise TypeError(f"the offset of {tp} must be an OffsetAndMetadata or an int, not {value!r}")
    offset = check_offset(value.offset, f"the offset of {tp}")
    metadata = getattr(value, "metadata", "") or ""
    if not isinstance(metadata, str):
        raise TypeError(f"the metadata of {tp}'s offset must be a str, not {metadata!r}")
    if type(value) is OffsetAndMetadata and value.metadata == metadata:
        return value
    leader_epoch = getattr(value, "leader_epoch", -1)
    return OffsetAndMetadata(offset, metadata, -1 if leader_epoch is None else leader_epoch)
