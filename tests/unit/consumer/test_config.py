"""ConsumerConfig: Kafka's names and defaults, validated once at construction."""
from __future__ import annotations

import pytest

from consumer import ConsumerConfig
from consumer.config import OffsetResetStrategy
from proto.errors import KafkaConfigurationError
from proto.structs import IsolationLevel


def test_kafka_defaults() -> None:
    config = ConsumerConfig.from_kwargs({"bootstrap_servers": "127.0.0.1:1,127.0.0.1:2"})
    assert config.bootstrap_servers == ("127.0.0.1:1", "127.0.0.1:2")
    assert config.isolation_level is IsolationLevel.READ_UNCOMMITTED
    assert config.auto_offset_reset is OffsetResetStrategy.LATEST
    assert config.enable_auto_commit is False  # no group to commit to
    assert (config.fetch_max_wait_ms, config.max_poll_records, config.session_timeout_ms) == (500, 500, 10_000)


def test_isolation_level_and_reset_are_parsed_once() -> None:
    config = ConsumerConfig.from_kwargs({"bootstrap_servers": "h:1", "group_id": "g",
                                         "isolation_level": "read_committed", "auto_offset_reset": "earliest"})
    assert config.isolation_level is IsolationLevel.READ_COMMITTED and config.reads_committed
    assert config.auto_offset_reset is OffsetResetStrategy.EARLIEST
    assert config.enable_auto_commit is True  # Kafka's default once there is a group


def test_max_poll_interval_is_the_rebalance_timeout() -> None:
    config = ConsumerConfig.from_kwargs({"bootstrap_servers": "h:1", "max_poll_interval_ms": 45_000})
    assert config.rebalance_timeout_ms == 45_000


@pytest.mark.parametrize("kwargs, fragment", [
    ({"bootstrap_servers": "h:1", "bogus_setting": 1}, "Unrecognized configs"),
    ({}, "bootstrap_servers is required"),
    ({"bootstrap_servers": ""}, "empty"),
    ({"bootstrap_servers": "h:1", "isolation_level": "serializable"}, "isolation_level"),
    ({"bootstrap_servers": "h:1", "auto_offset_reset": "smallest"}, "auto_offset_reset"),
    ({"bootstrap_servers": "h:1", "enable_auto_commit": True}, "group_id"),
    ({"bootstrap_servers": "h:1", "group_id": ""}, "group_id"),
    ({"bootstrap_servers": "h:1", "max_poll_records": 0}, "max_poll_records"),
    ({"bootstrap_servers": "h:1", "fetch_max_wait_ms": "500"}, "fetch_max_wait_ms"),
    ({"bootstrap_servers": "h:1", "heartbeat_interval_ms": 10_000}, "heartbeat_interval_ms"),
    ({"bootstrap_servers": "h:1", "request_timeout_ms": 400}, "request_timeout_ms"),
    ({"bootstrap_servers": "h:1", "max_poll_interval_ms": 1, "rebalance_timeout_ms": 2}, "only one"),
])
def test_bad_settings_fail_at_construction(kwargs: dict, fragment: str) -> None:
    with pytest.raises(KafkaConfigurationError, match=fragment):
        ConsumerConfig.from_kwargs(kwargs)
