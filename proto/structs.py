"""Plain values both sides of the wire agree on: partitions, offsets, records, states, limits."""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from proto.errors import InvalidTopicError
from proto.records import Header

TRANSACTION_STATE_TOPIC = "__transaction_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
#: RocketMQ's system topics for transactional messages (ROCKETMQ-REFERENCE §3): the half messages, the
#: OP records that mark them decided, and the messages discarded after too many check-backs
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
HALF_MESSAGE_TOPICS = frozenset({HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TOPIC})
INTERNAL_TOPICS = frozenset({TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC}) | HALF_MESSAGE_TOPICS

MAX_TOPIC_NAME_LENGTH = 249  # Kafka's limit
MAX_TRANSACTIONAL_ID_LENGTH = 249
MAX_PARTITIONS_PER_TOPIC = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicPartition(NamedTuple):
    """A topic and a partition number; a named tuple as in kafka-python, so it unpacks, sorts and
    hashes like `(topic, partition)`."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    def __reduce__(self) -> tuple[type[TopicPartition], tuple[str, int]]:
        # by reference to this class: pyspark rewrites namedtuples made after its import to unpickle
        # as anonymous look-alikes without __str__, which isinstance() would then reject
        return TopicPartition, (self.topic, self.partition)


class OffsetAndMetadata(NamedTuple):
    """An offset to commit, its metadata string and the leader epoch the consumer saw (-1: unknown),
    kafka-python's three fields and defaults."""

    offset: int
    metadata: str | None = ""
    leader_epoch: int | None = -1

    def __reduce__(self) -> tuple[type[OffsetAndMetadata], tuple[int, str | None, int | None]]:
        return OffsetAndMetadata, (self.offset, self.metadata, self.leader_epoch)


class OffsetAndTimestamp(NamedTuple):
    """What Consumer.offsets_for_times found: the first record at or after a timestamp, that record's
    timestamp, and the leader epoch (-1: txnsim does not report it), kafka-python's three fields."""

    offset: int
    timestamp: int
    leader_epoch: int | None = -1

    def __reduce__(self) -> tuple[type[OffsetAndTimestamp], tuple[int, int, int | None]]:
        return OffsetAndTimestamp, (self.offset, self.timestamp, self.leader_epoch)


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed. One is made per record (a named tuple, as kafka-python's,
    costs a tenth of a frozen dataclass to build)."""

    topic: str
    partition: int
    offset: int
    timestamp: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __reduce__(self) -> tuple[type[RecordMetadata], tuple[str, int, int, int]]:
        return RecordMetadata, (self.topic, self.partition, self.offset, self.timestamp)


class ConsumerRecord(NamedTuple):
    """A record as poll() hands it out; a named tuple as kafka-python's (and one is made per record, which
    a named tuple does at a tenth of a frozen dataclass's cost)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    #: the record's bytes, or what the consumer's key_deserializer / value_deserializer made of them
    key: Any
    value: Any
    headers: tuple[Header, ...] = ()

    def __reduce__(self) -> tuple[type[ConsumerRecord], tuple[Any, ...]]:
        return ConsumerRecord, tuple(self)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """KIP-447: what a transactional offset commit is fenced by."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class IsolationLevel(enum.IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @classmethod
    def parse(cls, text: str | IsolationLevel) -> IsolationLevel:
        if isinstance(text, IsolationLevel):
            return text
        try:
            return cls[str(text).upper()]
        except KeyError:
            raise ValueError(f"isolation_level must be 'read_committed' or 'read_uncommitted', not {text!r}") from None


class TransactionState(enum.StrEnum):
    """The coordinator's state of a transactional id, with Kafka's names and ids (§1)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        return _STATE_IDS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        return _STATES_BY_ID[state_id]


_STATE_IDS = {state: i for i, state in enumerate(TransactionState)}
_STATES_BY_ID = {i: state for state, i in _STATE_IDS.items()}


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules; InvalidTopicError names what is wrong."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(f"topic name {name!r} may contain only ASCII letters, digits, '.', '_' and '-'")
