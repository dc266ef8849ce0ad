"""The consumer's settings: Kafka's names in snake_case, Kafka's defaults, validated once.

`ConsumerConfig.from_kwargs` is the only way a Consumer reads its keyword arguments, so an
unknown or ill-typed setting fails at construction with KafkaConfigurationError, never later.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from client.cluster import parse_bootstrap
from client.transport import Deadline
from proto.errors import KafkaConfigurationError
from proto.structs import IsolationLevel

#: Kafka's max.poll.interval.ms doubles as the rebalance timeout; accept that name too
_ALIASES = {"max_poll_interval_ms": "rebalance_timeout_ms"}
_UNSET: Any = object()
#: the shortest deadline any single RPC gets, so that poll(timeout_ms=0) can still make progress
MIN_RPC_TIMEOUT_S = 0.25


class OffsetResetStrategy(enum.Enum):
    """What auto_offset_reset does for a partition without a valid position."""

    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"

    @classmethod
    def parse(cls, text: str | OffsetResetStrategy) -> OffsetResetStrategy:
        if isinstance(text, OffsetResetStrategy):
            return text
        try:
            return cls(str(text).lower())
        except ValueError:
            raise KafkaConfigurationError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', not {text!r}") from None


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Every consumer setting, with Kafka's default."""

    #: "host:port[,host:port...]" or a list of them; any node answers metadata
    bootstrap_servers: tuple[str, ...]
    client_id: str = "txnsim-consumer"
    #: None: no group (assign() only, no commits)
    group_id: str | None = None
    #: KIP-345 static membership id, sent with JoinGroup and in group_metadata()
    group_instance_id: str | None = None
    #: read_uncommitted (Kafka's default) or read_committed
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    #: where a partition without a committed offset starts: earliest, latest or none (raise)
    auto_offset_reset: OffsetResetStrategy = OffsetResetStrategy.LATEST
    #: defaults to True when group_id is set, else False
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    #: long-poll: how long a node may hold a fetch while fewer than fetch_min_bytes are available
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    max_poll_records: int = 500
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    #: also max.poll.interval.ms: a member that does not poll for this long leaves the group
    rebalance_timeout_ms: int = 30_000
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    #: assignors this member offers, in order of preference (names as kafka-python: "range", "roundrobin")
    partition_assignment_strategy: tuple[str, ...] = ("range", "roundrobin")
    #: how often a pattern subscription, and a leader's view of partition counts, are checked against metadata
    metadata_max_age_ms: int = 300_000
    #: applied to each record's key / value before poll() or iteration returns it: a callable of the bytes, or
    #: an object with deserialize(topic, headers, data) or deserialize(topic, data) (kafka-python's Deserializer)
    key_deserializer: Any = None
    value_deserializer: Any = None
    #: `for record in consumer` stops (StopIteration) after this long without a record; inf: never (kafka-python)
    consumer_timeout_ms: float = float("inf")
    #: commit_async(callback=None) calls this as callback(offsets, None or exception)
    default_offset_commit_callback: Any = None

    @classmethod
    def from_kwargs(cls, configs: Mapping[str, Any]) -> ConsumerConfig:
        """Build and validate from Consumer(**configs); KafkaConfigurationError names the bad setting."""
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        unknown = []
        for key, value in configs.items():
            target = _ALIASES.get(key, key)
            if target not in names:
                unknown.append(key)
                continue
            if target in values:
                raise KafkaConfigurationError(f"{key} and {target} set the same thing; pass only one")
            values[target] = value
        if unknown:
            raise KafkaConfigurationError(f"Unrecognized configs: {sorted(unknown)}")
        if "bootstrap_servers" not in values:
            raise KafkaConfigurationError("bootstrap_servers is required, e.g. '127.0.0.1:7001'")
        values["bootstrap_servers"] = _parse_servers(values["bootstrap_servers"])
        if "isolation_level" in values:
            try:
                values["isolation_level"] = IsolationLevel.parse(values["isolation_level"])
            except ValueError as exc:
                raise KafkaConfigurationError(str(exc)) from None
        if "auto_offset_reset" in values:
            values["auto_offset_reset"] = OffsetResetStrategy.parse(values["auto_offset_reset"])
        strategy = values.get("partition_assignment_strategy")
        if strategy is not None:
            values["partition_assignment_strategy"] = _assignor_names(strategy)
        auto_commit = values.pop("enable_auto_commit", _UNSET)
        group_id = values.get("group_id")
        if auto_commit is _UNSET:
            auto_commit = group_id is not None
        elif auto_commit and group_id is None:
            raise KafkaConfigurationError("enable_auto_commit=True needs a group_id to commit to; "
                                          "set group_id or enable_auto_commit=False")
        values["enable_auto_commit"] = auto_commit
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        for name in ("auto_commit_interval_ms", "fetch_max_bytes", "max_partition_fetch_bytes", "max_poll_records",
                     "session_timeout_ms", "heartbeat_interval_ms", "rebalance_timeout_ms", "request_timeout_ms"):
            _require_int(name, getattr(self, name), minimum=1)
        _require_int("metadata_max_age_ms", self.metadata_max_age_ms, minimum=1)
        from consumer.assignors import (
            ASSIGNORS,  # here, so that config stays importable on its own
        )
        unknown = [name for name in self.partition_assignment_strategy if name not in ASSIGNORS]
        if not self.partition_assignment_strategy or unknown:
            raise KafkaConfigurationError(f"partition_assignment_strategy must name assignors among "
                                          f"{sorted(ASSIGNORS)}, not {list(self.partition_assignment_strategy)}")
        for name in ("fetch_max_wait_ms", "fetch_min_bytes", "retry_backoff_ms"):
            _require_int(name, getattr(self, name), minimum=0)
        for name in ("key_deserializer", "value_deserializer"):
            value = getattr(self, name)
            if value is not None and not callable(value) and not callable(getattr(value, "deserialize", None)):
                raise KafkaConfigurationError(f"{name} must be a callable of the bytes or an object with "
                                              f"deserialize(topic, headers, data), not {value!r}")
        if self.default_offset_commit_callback is not None and not callable(self.default_offset_commit_callback):
            raise KafkaConfigurationError("default_offset_commit_callback must be callable(offsets, response)")
        timeout = self.consumer_timeout_ms
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout):
            raise KafkaConfigurationError(f"consumer_timeout_ms must be a number of milliseconds, not {timeout!r}")
        if not isinstance(self.enable_auto_commit, bool):
            raise KafkaConfigurationError(f"enable_auto_commit must be a bool, not {self.enable_auto_commit!r}")
        if self.enable_auto_commit and self.group_id is None:
            raise KafkaConfigurationError("enable_auto_commit=True needs a group_id to commit to")
        if self.group_id is not None and (not isinstance(self.group_id, str) or not self.group_id):
            raise KafkaConfigurationError(f"group_id must be a non-empty string or None, not {self.group_id!r}")
        if self.group_instance_id is not None and (not isinstance(self.group_instance_id, str)
                                                   or not self.group_instance_id):
            raise KafkaConfigurationError("group_instance_id must be a non-empty string or None")
        if not isinstance(self.client_id, str):
            raise KafkaConfigurationError(f"client_id must be a string, not {self.client_id!r}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise KafkaConfigurationError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms})")
        if self.request_timeout_ms <= self.fetch_max_wait_ms:
            raise KafkaConfigurationError(
                f"request_timeout_ms ({self.request_timeout_ms}) must be larger than "
                f"fetch_max_wait_ms ({self.fetch_max_wait_ms}), or every long-poll fetch would time out")

    @property
    def reads_committed(self) -> bool:
        return self.isolation_level is IsolationLevel.READ_COMMITTED

    @property
    def iteration_timeout_s(self) -> float:
        """How long iteration waits for a record; kafka-python takes a negative consumer_timeout_ms as forever."""
        return self.consumer_timeout_ms / 1000 if self.consumer_timeout_ms >= 0 else float("inf")

    def rpc_timeout(self, deadline: Deadline) -> float:
        """Seconds one RPC may take: what is left of `deadline`, within [MIN_RPC_TIMEOUT_S, request_timeout_ms]."""
        return min(self.request_timeout_ms / 1000, max(deadline.remaining(), MIN_RPC_TIMEOUT_S))


def _parse_servers(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (str, Iterable)):
        raise KafkaConfigurationError(f"bootstrap_servers must be 'host:port,...' or a list, not {value!r}")
    try:
        return tuple(parse_bootstrap(value))
    except ValueError as exc:
        raise KafkaConfigurationError(str(exc)) from None


def _require_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KafkaConfigurationError(f"{name} must be an int, not {value!r}")
    if value < minimum:
        raise KafkaConfigurationError(f"{name} must be at least {minimum}, not {value}")


def _assignor_names(value: Any) -> tuple[str, ...]:
    """Names, or kafka-python's assignor classes (their `name`), as a tuple of names."""
    items = [value] if isinstance(value, str) else list(value) if isinstance(value, Iterable) else [value]
    return tuple(item if isinstance(item, str) else str(getattr(item, "name", item)) for item in items)
