"""Kafka's ConsumerProtocol (protocol type "consumer"): the subscription a member sends in JoinGroup and the
assignment its leader sends back in SyncGroup, as bytes every Kafka client reads. One codec for txnsim's
consumer, the group coordinator and the command line; kafka-python's schemas do the encoding."""
from __future__ import annotations

from collections.abc import Iterable

from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from proto.structs import TopicPartition

PROTOCOL_TYPE = "consumer"


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=0, topics=sorted(set(topics)), user_data=user_data).encode())


def decode_subscription(raw: bytes) -> list[str]:
    """The subscribed topics of any subscription version (librdkafka sends v1+ with owned partitions)."""
    try:
        return list(ConsumerProtocolSubscription.decode(raw).topics)
    except Exception as exc:  # noqa: BLE001 - the decoder raises whatever the bytes provoke
        raise ValueError(f"not a ConsumerProtocol subscription: {type(exc).__name__}: {exc}") from None


def encode_assignment(partitions: Iterable[TopicPartition], user_data: bytes | None = None) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    T = ConsumerProtocolAssignment.TopicPartition
    return bytes(ConsumerProtocolAssignment(
        version=0, assigned_partitions=[T(topic=topic, partitions=ps) for topic, ps in by_topic.items()],
        user_data=user_data).encode())


def decode_assignment(raw: bytes) -> list[TopicPartition]:
    if not raw:
        return []
    try:
        decoded = ConsumerProtocolAssignment.decode(raw)
    except Exception as exc:  # noqa: BLE001 - as above
        raise ValueError(f"not a ConsumerProtocol assignment: {type(exc).__name__}: {exc}") from None
    return [TopicPartition(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions]
