"""Conversions between RocketMQ 5's Message and what txnsim stores: a Kafka record on the real topic
(user properties as headers, plus RocketMQ's UNIQ_KEY, TAGS, KEYS and BORN_TIMESTAMP), a HalfMessage,
a check-back. Also which message types a topic accepts (its "message.type" setting).

Invariant: a message read back carries the id, tag, keys and properties it was sent with, whichever
way it entered (RocketMQ's front door, or a half message committed by txnsim's own client).
"""
from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable

from coordinator.rocketmq import log_format
from coordinator.rocketmq.rmq_wire import rmq, rmq_service
from proto import records
from proto import txnsim_pb2 as pb
from proto.errors import IllegalMessagePropertyKeyError, InvalidRequestError, RecordTooLargeError, UnsupportedError
from proto.records import Header

#: every type, for a MIXED topic (or one without the setting)
ALL_TYPES = (rmq.NORMAL, rmq.FIFO, rmq.DELAY, rmq.TRANSACTION)
#: the most a message's body may inflate to when the caller names no limit (Kafka's message.max.bytes, which a
#: node's batches are held to)
DEFAULT_MAX_BODY_BYTES = 1048588
_TYPES_BY_SETTING = {"NORMAL": (rmq.NORMAL,), "FIFO": (rmq.FIFO,), "DELAY": (rmq.DELAY,),
                     "TRANSACTION": (rmq.TRANSACTION,), "MIXED": ALL_TYPES}


def accepted_types(configs: dict[str, str]) -> tuple[int, ...]:
    """The message types a topic's queues accept, from its "message.type" setting (MIXED if unset)."""
    return _TYPES_BY_SETTING.get(configs.get("message.type", "MIXED"), ALL_TYPES)


def type_name(message_type: int) -> str:
    return rmq.MessageType.Name(message_type) if message_type in rmq.MessageType.values() else str(message_type)


def body_of(message: rmq.Message, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> bytes:
    """The message's body as sent by the application: a GZIP-encoded body is inflated, but never past
    `max_bytes` (MESSAGE_BODY_TOO_LARGE then), so a small body cannot inflate to gigabytes in the node."""
    encoding = message.system_properties.body_encoding
    if encoding == rmq.GZIP:
        inflater = zlib.decompressobj(wbits=31)  # the gzip format, as RocketMQ's clients write it
        try:
            body = inflater.decompress(message.body, max_bytes + 1)
        except zlib.error as exc:
            raise InvalidRequestError(f"[INVALID_REQUEST] message body is not valid GZIP: {exc}") from None
        if len(body) > max_bytes:
            raise RecordTooLargeError(f"[MESSAGE_BODY_TOO_LARGE] the GZIP body inflates past {max_bytes} bytes, "
                                      "the most a message may hold here")
        if not inflater.eof:
            raise InvalidRequestError("[INVALID_REQUEST] message body is not valid GZIP: it ends early")
        return body
    if encoding not in (rmq.IDENTITY, rmq.ENCODING_UNSPECIFIED):
        raise UnsupportedError(f"body encoding {encoding} is not supported; send IDENTITY or GZIP")
    plain: bytes = message.body
    return plain


def validate(message: rmq.Message) -> None:
    """Refuse what no topic could store: no topic, no id, an empty body, reserved property names."""
    if not message.topic.name:
        raise InvalidRequestError("[INVALID_REQUEST] the message names no topic")
    if not message.system_properties.message_id:
        raise InvalidRequestError("[INVALID_REQUEST] the message has no message_id (system_properties.message_id)")
    if not message.body:
        raise InvalidRequestError(f"[INVALID_REQUEST] message {message.system_properties.message_id} has an empty body")
    reserved = sorted(set(message.user_properties) & log_format.SYSTEM_PROPERTIES)
    if reserved:
        raise IllegalMessagePropertyKeyError(
            f"[ILLEGAL_MESSAGE_PROPERTY_KEY] property {reserved[0]!r} is reserved by RocketMQ; rename it")


def _user_headers(message: rmq.Message) -> list[Header]:
    return [(name, value.encode()) for name, value in sorted(message.user_properties.items())]


def _millis(message: rmq.Message) -> int:
    born = message.system_properties.born_timestamp
    millis: int = born.seconds * 1000 + born.nanos // 1_000_000
    return millis


def record_of(message: rmq.Message, now_ms: int,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> tuple[int, bytes | None, bytes | None, list[Header]]:
    """The Kafka record of a NORMAL (or FIFO) message: no key, the body as value, properties as headers."""
    props = message.system_properties
    system = [(log_format.MESSAGE_ID, props.message_id)]
    if props.tag:
        system.append((log_format.TAGS, props.tag))
    if props.keys:
        system.append((log_format.KEYS, " ".join(props.keys)))
    if _millis(message):
        system.append((log_format.BORN_TIMESTAMP, str(_millis(message))))
    headers = _user_headers(message) + [(name, value.encode()) for name, value in system]
    return (now_ms, None, body_of(message, max_body_bytes), headers)


def encode_normal(message: rmq.Message, now_ms: int, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> bytes:
    """One Kafka v2 batch holding the message (no producer id: a client's retry may duplicate it, as in RocketMQ)."""
    return records.encode_batch([record_of(message, now_ms, max_body_bytes)])


def half_message_of(message: rmq.Message, partition: int,
                    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> pb.HalfMessage:
    props = message.system_properties
    immunity = props.orphaned_transaction_recovery_duration
    return pb.HalfMessage(
        topic=message.topic.name, partition=partition, value=body_of(message, max_body_bytes),
        headers=[pb.MessageHeader(key=k, value=v) for k, v in _user_headers(message)],
        message_id=props.message_id, tag=props.tag, keys=" ".join(props.keys),
        check_immunity_ms=immunity.seconds * 1000 + immunity.nanos // 1_000_000, born_timestamp_ms=_millis(message))


def _system_properties(message_id: str, message_type: int, tag: str, keys: str, born_ms: int,
                       body: bytes) -> rmq.SystemProperties:
    """The system properties of a message as the proxy delivers it: its body's digest always set (MD5, upper-case
    hex, as GrpcConverter.buildSystemProperties sets it; the Node.js client cannot read a message without one)."""
    props = rmq.SystemProperties(message_id=message_id, message_type=message_type, body_encoding=rmq.IDENTITY)
    props.body_digest.type = rmq.MD5
    props.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    if tag:
        props.tag = tag
    props.keys.extend(k for k in keys.split(" ") if k)
    if born_ms:
        props.born_timestamp.FromMilliseconds(born_ms)
    return props


def _properties(headers: list[tuple[str, bytes]]) -> dict[str, str]:
    return {name: (value or b"").decode(errors="replace") for name, value in headers}


def check_command(check: pb.TransactionCheck) -> rmq_service.TelemetryCommand:
    """The Telemetry command that asks a RocketMQ 5 producer about an undecided transaction."""
    m = check.message
    message = rmq.Message(
        topic=rmq.Resource(name=m.topic), body=m.value,
        user_properties=_properties([(h.key, h.value) for h in m.headers]),
        system_properties=_system_properties(m.message_id, rmq.TRANSACTION, m.tag, m.keys, m.born_timestamp_ms,
                                             m.value))
    command = rmq_service.TelemetryCommand()
    command.recover_orphaned_transaction_command.message.CopyFrom(message)
    command.recover_orphaned_transaction_command.transaction_id = check.transaction_id
    return command


def message_of_record(topic: str, partition: int, record: records.Record) -> rmq.Message:
    """A stored record as a RocketMQ message; a record written by a Kafka producer gets an id from its offset."""
    system = {name: (value or b"").decode(errors="replace") for name, value in record.headers
              if name in log_format.KEPT_ON_COMMIT}
    user = [(name, value or b"") for name, value in record.headers if name not in log_format.KEPT_ON_COMMIT]
    message_id = system.get(log_format.MESSAGE_ID) or f"{partition:08X}{record.offset:024X}"
    born = int(system.get(log_format.BORN_TIMESTAMP, "0") or 0) or record.timestamp
    props = _system_properties(message_id, rmq.NORMAL, system.get(log_format.TAGS, ""),
                               system.get(log_format.KEYS, ""), born, record.value or b"")
    props.queue_id = partition
    props.queue_offset = record.offset
    props.store_timestamp.FromMilliseconds(record.timestamp)
    return rmq.Message(topic=rmq.Resource(name=topic), body=record.value or b"", user_properties=_properties(user),
                       system_properties=props)


def tag_filter(expression: rmq.FilterExpression) -> Callable[[records.Record], bool]:
    """Whether a stored record matches a subscription's TAG expression ("*", or "a || b")."""
    if expression.type not in (rmq.TAG, rmq.FILTER_TYPE_UNSPECIFIED):
        raise UnsupportedError("[UNSUPPORTED] only TAG filter expressions are served, not SQL")
    text = expression.expression.strip()
    if text in ("", "*"):
        return lambda record: True
    wanted = {tag.strip() for tag in text.split("||") if tag.strip()}

    def matches(record: records.Record) -> bool:
        tag = next(((value or b"").decode(errors="replace") for name, value in record.headers
                    if name == log_format.TAGS), "")
        return tag in wanted
    return matches
