"""ProducerConfig: Kafka's names and defaults, validated once, with Kafka's derived settings."""
from __future__ import annotations

import pytest

from producer.config import ProducerConfig
from proto.errors import InvalidTransactionTimeoutError, KafkaConfigurationError


def config(**kwargs: object) -> ProducerConfig:
    return ProducerConfig.from_kwargs(bootstrap_servers="127.0.0.1:1", **kwargs)


def test_defaults_are_kafkas() -> None:
    c = config()
    assert (c.acks, c.linger_ms, c.batch_size, c.buffer_memory, c.max_block_ms) == (-1, 5, 16384, 33554432, 60000)
    assert (c.max_request_size, c.request_timeout_ms, c.delivery_timeout_ms) == (1048576, 30000, 120000)
    assert (c.retry_backoff_ms, c.retry_backoff_max_ms, c.max_in_flight_requests_per_connection) == (100, 1000, 5)
    assert c.enable_idempotence and c.transaction_timeout_ms == 60000 and c.transactional_id is None
    assert c.client_id.startswith("producer-")


def test_unknown_settings_are_named() -> None:
    with pytest.raises(KafkaConfigurationError, match="unrecognized producer config.*bogus_setting.*lingerms"):
        config(bogus_setting=1, lingerms=5)


def test_bootstrap_servers_is_required() -> None:
    with pytest.raises(KafkaConfigurationError, match="bootstrap_servers"):
        ProducerConfig.from_kwargs(linger_ms=5)


@pytest.mark.parametrize("timeout", [0, -1, 2**31])
def test_transaction_timeout_outside_int32_range_is_rejected(timeout: int) -> None:
    with pytest.raises(InvalidTransactionTimeoutError, match="transaction_timeout_ms"):
        config(transactional_id="tx-1", transaction_timeout_ms=timeout)


@pytest.mark.parametrize("timeout", [1, 2**31 - 1])
def test_transaction_timeout_bounds_are_accepted(timeout: int) -> None:
    assert config(transaction_timeout_ms=timeout).transaction_timeout_ms == timeout


def test_acks_all_is_minus_one() -> None:
    assert config(acks="all").acks == -1


def test_idempotence_quietly_off_when_acks_is_not_all() -> None:
    assert config(acks=1).enable_idempotence is False


def test_explicit_idempotence_with_acks_1_is_an_error() -> None:
    with pytest.raises(KafkaConfigurationError, match="acks"):
        config(acks=1, enable_idempotence=True)


def test_transactional_producer_needs_idempotence_and_acks_all() -> None:
    with pytest.raises(KafkaConfigurationError, match="enable_idempotence"):
        config(transactional_id="tx-1", enable_idempotence=False)
    with pytest.raises(KafkaConfigurationError, match="acks"):
        config(transactional_id="tx-1", acks=1)
    with pytest.raises(KafkaConfigurationError, match="max_in_flight"):
        config(transactional_id="tx-1", max_in_flight_requests_per_connection=6)


@pytest.mark.parametrize("bad", [dict(acks=2), dict(linger_ms=-1), dict(batch_size="big"), dict(buffer_memory=0),
                                 dict(transactional_id=""), dict(retries=-1), dict(enable_idempotence="yes"),
                                 dict(delivery_timeout_ms=1000, request_timeout_ms=30000)])
def test_invalid_values_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(KafkaConfigurationError):
        config(**bad)


def test_transactional_client_id_names_the_transactional_id() -> None:
    assert config(transactional_id="tx-9").client_id == "producer-tx-9"
    assert config(client_id="mine").client_id == "mine"
