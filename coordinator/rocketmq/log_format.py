"""The records of RocketMQ's three system topics, as txnsim stores them (Kafka v2 batches).

- RMQ_SYS_TRANS_HALF_TOPIC: one record per half message; key and value are the message's, the
  headers its user properties plus RocketMQ's system properties (REAL_TOPIC, REAL_QID, PGROUP,
  TRAN_MSG, UNIQ_KEY, ...). A message checked back is appended again with its check count
  (TRANSACTION_CHECK_TIMES) and its first offset (TRAN_PREPARED_QUEUE_OFFSET), as RocketMQ does,
  so the count survives restarts and failovers through the log itself.
- RMQ_SYS_TRANS_OP_HALF_TOPIC: one OP record per decision; key = the transaction id, value =
  the half message's first offset (RocketMQ's OP body), tag "d", plus the decision.
- TRANS_CHECK_MAX_TIME_TOPIC: the half message as it was when discarded after too many checks.
A transaction id names its shard and the half message's first offset: "TX-<shard>-<offset>".
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from proto import records
from proto.errors import InvalidRecordError
from proto.records import Header

# RocketMQ's property names (MessageConst)
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
PRODUCER_GROUP = "PGROUP"
TRANSACTION_PREPARED = "TRAN_MSG"
MESSAGE_ID = "UNIQ_KEY"
TRANSACTION_ID = "__transactionId__"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
TAGS = "TAGS"
KEYS = "KEYS"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
#: RocketMQ's tag of OP records ("remove")
REMOVE_TAG = "d"
# txnsim's own bookkeeping, in the same place
STORE_TIME = "TXNSIM_STORE_MS"            # when the half message was first stored (kept across re-appends)
LAST_CHECK = "TXNSIM_LAST_CHECK_MS"       # when the check this record counts was sent
CHECK_IMMUNITY_MS = "TXNSIM_CHECK_IMMUNITY_MS"
STORAGE = "TXNSIM_STORAGE"
RESOLUTION = "TXNSIM_RESOLUTION"
SOURCE = "TXNSIM_SOURCE"
COPY_PRODUCER_ID = "TXNSIM_COPY_PRODUCER_ID"
IN_PLACE_PRODUCER_ID = "TXNSIM_PRODUCER_ID"    # Storage.KAFKA: the producer id of the message's own transaction
COPY_SEQUENCE = "TXNSIM_COPY_SEQUENCE"
OP_KIND = "TXNSIM_OP"

SYSTEM_PROPERTIES = frozenset({
    REAL_TOPIC, REAL_QID, PRODUCER_GROUP, TRANSACTION_PREPARED, MESSAGE_ID, TRANSACTION_ID, CHECK_TIMES,
    CHECK_IMMUNITY, PREPARED_QUEUE_OFFSET, TAGS, KEYS, BORN_TIMESTAMP, STORE_TIME, LAST_CHECK, CHECK_IMMUNITY_MS,
    STORAGE, RESOLUTION, SOURCE, COPY_PRODUCER_ID, COPY_SEQUENCE, OP_KIND, IN_PLACE_PRODUCER_ID, "DELAY", "WAIT",
})
#: properties a committed message keeps on its real topic, so RocketMQ consumers see its id, tag and keys
KEPT_ON_COMMIT = (MESSAGE_ID, TAGS, KEYS, BORN_TIMESTAMP)


class Storage(enum.StrEnum):
    """How an undecided message waits (chosen per topic, with a cluster default)."""

    ROCKETMQ = "rocketmq"   # parked in RMQ_SYS_TRANS_HALF_TOPIC; commit copies it to its real topic
    KAFKA = "kafka"         # written in place in a one-message Kafka transaction; a marker decides it


class Resolution(enum.StrEnum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    DISCARD = "DISCARD"     # too many check-backs: never delivered


class OpKind(enum.StrEnum):
    DECIDED = "DECIDED"     # the decision, durable before anything is done about it
    DONE = "DONE"           # its effect (the copy, or the marker) is written: nothing left to redo


@dataclass(frozen=True, slots=True)
class HalfRecord:
    """One record of RMQ_SYS_TRANS_HALF_TOPIC (or TRANS_CHECK_MAX_TIME_TOPIC), decoded."""

    topic: str
    partition: int
    producer_group: str
    message_id: str
    key: bytes | None
    value: bytes | None
    user_headers: tuple[Header, ...]
    store_time_ms: int
    check_immunity_ms: int
    storage: Storage
    tag: str = ""
    keys: str = ""
    born_timestamp_ms: int = 0
    check_times: int = 0
    last_check_ms: int = 0
    #: set on a re-appended (checked) copy: the offset of the message's first record
    first_offset: int | None = None
    #: Storage.KAFKA: the producer id of the message's one-message transaction on its real partition
    producer_id: int = -1

    def system_headers(self) -> list[Header]:
        out: list[tuple[str, str]] = [
            (REAL_TOPIC, self.topic), (REAL_QID, str(self.partition)), (PRODUCER_GROUP, self.producer_group),
            (TRANSACTION_PREPARED, "true"), (MESSAGE_ID, self.message_id), (STORE_TIME, str(self.store_time_ms)),
            (CHECK_IMMUNITY_MS, str(self.check_immunity_ms)), (STORAGE, self.storage.value),
        ]
        if self.check_immunity_ms % 1000 == 0:
            out.append((CHECK_IMMUNITY, str(self.check_immunity_ms // 1000)))
        if self.tag:
            out.append((TAGS, self.tag))
        if self.keys:
            out.append((KEYS, self.keys))
        if self.born_timestamp_ms:
            out.append((BORN_TIMESTAMP, str(self.born_timestamp_ms)))
        if self.check_times:
            out.append((CHECK_TIMES, str(self.check_times)))
        if self.last_check_ms:
            out.append((LAST_CHECK, str(self.last_check_ms)))
        if self.first_offset is not None:
            out.append((PREPARED_QUEUE_OFFSET, str(self.first_offset)))
        if self.producer_id >= 0:
            out.append((IN_PLACE_PRODUCER_ID, str(self.producer_id)))
        return [(name, value.encode()) for name, value in out]

    def committed_headers(self) -> tuple[Header, ...]:
        """The headers the message carries on its real topic: the user's plus its id, tag and keys."""
        kept = [(name, value) for name, value in self.system_headers() if name in KEPT_ON_COMMIT]
        return tuple(self.user_headers) + tuple(kept)


def encode_half(record: HalfRecord, timestamp_ms: int) -> tuple[int, bytes | None, bytes | None, list[Header]]:
    """One (timestamp, key, value, headers) tuple for proto.records.encode_batch."""
    return (timestamp_ms, record.key, record.value, list(record.user_headers) + record.system_headers())


def decode_half(record: records.Record) -> HalfRecord:
    system: dict[str, str] = {}
    user: list[Header] = []
    for name, value in record.headers:
        if name in SYSTEM_PROPERTIES:
            system[name] = (value or b"").decode()
        else:
            user.append((name, value))
    try:
        first = system.get(PREPARED_QUEUE_OFFSET)
        return HalfRecord(
            topic=system[REAL_TOPIC], partition=int(system[REAL_QID]), producer_group=system[PRODUCER_GROUP],
            message_id=system.get(MESSAGE_ID, ""), key=record.key, value=record.value, user_headers=tuple(user),
            store_time_ms=int(system.get(STORE_TIME, record.timestamp)),
            check_immunity_ms=int(system.get(CHECK_IMMUNITY_MS, 0)),
            storage=Storage(system.get(STORAGE, Storage.ROCKETMQ.value)), tag=system.get(TAGS, ""),
            keys=system.get(KEYS, ""), born_timestamp_ms=int(system.get(BORN_TIMESTAMP, 0)),
            check_times=int(system.get(CHECK_TIMES, 0)), last_check_ms=int(system.get(LAST_CHECK, 0)),
            first_offset=None if first is None else int(first),
            producer_id=int(system.get(IN_PLACE_PRODUCER_ID, -1)))
    except (KeyError, ValueError) as exc:
        raise InvalidRecordError(f"[INVALID_RECORD] not a half message at offset {record.offset}: {exc}") from None


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One record of RMQ_SYS_TRANS_OP_HALF_TOPIC: a half message decided."""

    transaction_id: str
    first_offset: int
    resolution: Resolution
    kind: OpKind = OpKind.DECIDED
    source: str = "CLIENT"
    #: Storage.ROCKETMQ commits: the copy's idempotent producer id and sequence on the real partition
    copy_producer_id: int = -1
    copy_sequence: int = -1


def encode_op(op: OpRecord, timestamp_ms: int) -> tuple[int, bytes | None, bytes | None, list[Header]]:
    headers: list[Header] = [(TAGS, REMOVE_TAG.encode()), (OP_KIND, op.kind.value.encode()),
                             (RESOLUTION, op.resolution.value.encode()), (SOURCE, op.source.encode())]
    if op.copy_sequence >= 0:
        headers += [(COPY_PRODUCER_ID, str(op.copy_producer_id).encode()),
                    (COPY_SEQUENCE, str(op.copy_sequence).encode())]
    return (timestamp_ms, op.transaction_id.encode(), str(op.first_offset).encode(), headers)


def decode_op(record: records.Record) -> OpRecord:
    props = {name: (value or b"").decode() for name, value in record.headers}
    try:
        return OpRecord(
            transaction_id=(record.key or b"").decode(), first_offset=int(record.value or b"-1"),
            resolution=Resolution(props[RESOLUTION]), kind=OpKind(props.get(OP_KIND, OpKind.DECIDED.value)),
            source=props.get(SOURCE, "CLIENT"),
            copy_producer_id=int(props.get(COPY_PRODUCER_ID, -1)), copy_sequence=int(props.get(COPY_SEQUENCE, -1)))
    except (KeyError, ValueError) as exc:
        raise InvalidRecordError(f"[INVALID_RECORD] not an OP record at offset {record.offset}: {exc}") from None


def encode(rows: Sequence[tuple[int, bytes | None, bytes | None, Sequence[Header]]]) -> bytes:
    """One batch of system-topic records (no producer id: the shard's owner is its only writer)."""
    return records.encode_batch(list(rows))


#: the transactional id under which a Storage.KAFKA message is written in place; partitions ask the
#: half-message shard named in it to verify the write (KIP-890's first-write verification)
HALF_TRANSACTIONAL_ID_PREFIX = "__rmq_half_shard_"


def half_transactional_id(shard: int) -> str:
    return f"{HALF_TRANSACTIONAL_ID_PREFIX}{shard}"


def shard_of_transactional_id(transactional_id: str) -> int | None:
    """The half-message shard a Storage.KAFKA write belongs to, None for an ordinary transactional id."""
    rest = transactional_id.removeprefix(HALF_TRANSACTIONAL_ID_PREFIX)
    return int(rest) if rest != transactional_id and rest.isdigit() else None


def transaction_id(shard: int, first_offset: int) -> str:
    return f"TX-{shard}-{first_offset}"


def parse_transaction_id(text: str) -> tuple[int, int] | None:
    """(shard, first offset) of a transaction id, or None if it is not one of txnsim's."""
    parts = text.split("-")
    if len(parts) != 3 or parts[0] != "TX" or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return int(parts[1]), int(parts[2])


def describe(headers: Iterable[Header]) -> str:
    """Headers as NAME=value for people (dump-log)."""
    return " ".join(f"{name}={(value or b'').decode(errors='replace')}" for name, value in headers)
