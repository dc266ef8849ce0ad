"""The producer's settings: Kafka's names in snake_case, Kafka's defaults, validated once.

`ProducerConfig.from_kwargs(**kwargs)` is the only way the Producer builds one; it
rejects unknown names (naming them), checks each value and the settings against each
other, and derives what Kafka derives (a transactional id implies idempotence).
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from proto.errors import InvalidTransactionTimeoutError, KafkaConfigurationError
from proto.structs import MAX_TRANSACTIONAL_ID_LENGTH

MAX_INT32 = 2**31 - 1
#: Kafka's limit: the broker keeps the metadata of the last 5 batches per producer
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5

_client_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """Every producer setting; see Kafka's ProducerConfig for the long descriptions."""

    #: "host:port[,host:port...]" or a list of them
    bootstrap_servers: str | tuple[str, ...]
    #: a name for logs; Kafka's default is "producer-N" (or "producer-<transactional id>")
    client_id: str = ""
    #: stable id of a transactional producer; None: idempotent (or plain) producer
    transactional_id: str | None = None
    #: the coordinator aborts a transaction open longer than this (1..2^31-1)
    transaction_timeout_ms: int = 60_000
    #: pid/epoch/sequence on every batch so retries never duplicate (implied by transactional_id)
    enable_idempotence: bool = True
    #: -1 ("all"), 1 or 0; idempotence requires -1. -1 waits for every in-sync replica (on a cluster of one
    #: copy per log, the leader alone: there -1 and 1 are alike)
    acks: int = -1
    #: how long a batch may wait for more records before it is sent
    linger_ms: int = 5
    #: upper bound of one batch, in bytes (a single larger record still gets its own batch)
    batch_size: int = 16_384
    #: bytes of records the producer may hold before send() blocks
    buffer_memory: int = 33_554_432
    #: how long send() may block (metadata, buffer space) and transactional calls may take
    max_block_ms: int = 60_000
    #: the largest request, and so the largest record, the producer sends
    max_request_size: int = 1_048_576
    #: deadline of each RPC
    request_timeout_ms: int = 30_000
    #: a record not acknowledged this long after send() fails (retries included)
    delivery_timeout_ms: int = 120_000
    #: first backoff between retries; doubles up to retry_backoff_max_ms
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    #: how often a failed produce is retried (delivery_timeout_ms bounds it too)
    retries: int = MAX_INT32
    #: produce requests outstanding per node (one batch per partition at a time regardless)
    max_in_flight_requests_per_connection: int = 5
    #: RocketMQ-style transactional messages: the producer group (check-backs go to one live member)
    producer_group: str | None = None
    #: runs the local transaction and answers check-backs (a txnsim.TransactionListener)
    transaction_listener: Any = None
    #: threads answering check-backs (RocketMQ's checkThreadPoolMinSize)
    check_thread_pool_size: int = 1
    #: kafka-python style: turn keys and values into bytes
    key_serializer: Callable[[Any], bytes | None] | None = None
    value_serializer: Callable[[Any], bytes | None] | None = None

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ProducerConfig:
        """Validate user keyword arguments and derive the defaults Kafka derives."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise KafkaConfigurationError(
                f"unrecognized producer config(s): {', '.join(unknown)}; "
                f"valid names are {', '.join(sorted(known))}")
        if "bootstrap_servers" not in kwargs or not kwargs["bootstrap_servers"]:
            raise KafkaConfigurationError("bootstrap_servers is required, e.g. '127.0.0.1:9093'")
        values = dict(kwargs)
        values["bootstrap_servers"] = _bootstrap(values["bootstrap_servers"])
        if "acks" in values:
            values["acks"] = _acks(values["acks"])
        idempotence_explicit = "enable_idempotence" in values
        config = cls(**values)
        config._check_types()
        config._check_ranges()
        return config._derive(idempotence_explicit)

    # ------------------------------------------------------------ validation

    def _check_types(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "int" and (not isinstance(value, int) or isinstance(value, bool)):
                raise KafkaConfigurationError(f"{field.name} must be an int, not {value!r}")
        if not isinstance(self.enable_idempotence, bool):
            raise KafkaConfigurationError(f"enable_idempotence must be a bool, not {self.enable_idempotence!r}")
        if not isinstance(self.client_id, str):
            raise KafkaConfigurationError(f"client_id must be a str, not {self.client_id!r}")
        if self.producer_group is not None and (not isinstance(self.producer_group, str) or not self.producer_group):
            raise KafkaConfigurationError("producer_group must be a non-empty string (or None)")
        if self.transaction_listener is not None:
            if self.producer_group is None:
                raise KafkaConfigurationError("a transaction_listener needs a producer_group (check-backs go to the group)")
            for method in ("execute_local_transaction", "check_local_transaction"):
                if not callable(getattr(self.transaction_listener, method, None)):
                    raise KafkaConfigurationError(f"transaction_listener must have a {method}(...) method")
        for name in ("key_serializer", "value_serializer"):
            serializer = getattr(self, name)
            if serializer is not None and not callable(serializer) \
                    and not callable(getattr(serializer, "serialize", None)):
                raise KafkaConfigurationError(f"{name} must be callable or have serialize(topic, headers, data)")

    def _check_ranges(self) -> None:
        if not 1 <= self.transaction_timeout_ms <= MAX_INT32:
            raise InvalidTransactionTimeoutError(
                f"[INVALID_TRANSACTION_TIMEOUT] transaction_timeout_ms={self.transaction_timeout_ms} is outside "
                f"1..{MAX_INT32}")
        if self.transactional_id is not None:
            if not isinstance(self.transactional_id, str) or not self.transactional_id:
                raise KafkaConfigurationError("transactional_id must be a non-empty string (or None)")
            if len(self.transactional_id) > MAX_TRANSACTIONAL_ID_LENGTH:
                raise KafkaConfigurationError(
                    f"transactional_id is {len(self.transactional_id)} characters; the limit is "
                    f"{MAX_TRANSACTIONAL_ID_LENGTH}")
        minimums = {"linger_ms": 0, "batch_size": 0, "buffer_memory": 1, "max_block_ms": 0, "max_request_size": 1,
                    "request_timeout_ms": 1, "delivery_timeout_ms": 1, "retry_backoff_ms": 0,
                    "retry_backoff_max_ms": 0, "retries": 0, "max_in_flight_requests_per_connection": 1,
                    "check_thread_pool_size": 1}
        for name, minimum in minimums.items():
            value = getattr(self, name)
            if value < minimum:
                raise KafkaConfigurationError(f"{name}={value} must be at least {minimum}")
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise KafkaConfigurationError(
                f"delivery_timeout_ms={self.delivery_timeout_ms} must be at least linger_ms + request_timeout_ms "
                f"({self.linger_ms} + {self.request_timeout_ms})")

    def _derive(self, idempotence_explicit: bool) -> ProducerConfig:
        changes: dict[str, Any] = {}
        if not self.client_id:
            suffix = self.transactional_id if self.transactional_id else str(next(_client_ids))
            changes["client_id"] = f"producer-{suffix}"
        idempotence_conflict = (
            "acks=-1 ('all')" if self.acks != -1 else
            f"max_in_flight_requests_per_connection <= {MAX_IN_FLIGHT_FOR_IDEMPOTENCE}"
            if self.max_in_flight_requests_per_connection > MAX_IN_FLIGHT_FOR_IDEMPOTENCE else None)
        if self.transactional_id is not None:
            if idempotence_explicit and not self.enable_idempotence:
                raise KafkaConfigurationError("a transactional producer needs enable_idempotence=True")
            if idempotence_conflict:
                raise KafkaConfigurationError(f"a transactional producer needs {idempotence_conflict}")
        elif self.enable_idempotence and idempotence_conflict:
            if idempotence_explicit:
                raise KafkaConfigurationError(f"enable_idempotence=True needs {idempotence_conflict}")
            # Kafka's rule: idempotence is a default, quietly off when other settings forbid it
            changes["enable_idempotence"] = False
        return dataclasses.replace(self, **changes) if changes else self


def _bootstrap(value: str | Iterable[str]) -> str | tuple[str, ...]:
    if isinstance(value, str):
        return value
    try:
        return tuple(str(v) for v in value)
    except TypeError:
        raise KafkaConfigurationError(f"bootstrap_servers must be 'host:port,...' or a list, not {value!r}") from None


def _acks(value: int | str) -> int:
    if value in ("all", "-1", -1):
        return -1
    if value in (0, 1, "0", "1"):
        return int(value)
    raise KafkaConfigurationError(f"acks must be 'all', -1, 0 or 1, not {value!r}")
