"""FutureRecordMetadata: get with a timeout, errors, callbacks."""
from __future__ import annotations

import pytest

from producer.future import FutureRecordMetadata, ProduceRequestResult
from proto.errors import KafkaTimeoutError, NotLeaderOrFollowerError
from proto.structs import RecordMetadata, TopicPartition

TP = TopicPartition("orders", 1)


def test_get_times_out_with_kafka_timeout_error() -> None:
    future = FutureRecordMetadata(ProduceRequestResult(TP), 0, 123)
    with pytest.raises(KafkaTimeoutError, match="orders-1"):
        future.get(timeout=0.01)
    assert not future.is_done


def test_offset_is_base_plus_delta() -> None:
    result = ProduceRequestResult(TP)
    futures = [FutureRecordMetadata(result, delta, 1000 + delta) for delta in range(3)]
    result.set(40, None)
    assert [f.get(0) for f in futures] == [RecordMetadata("orders", 1, 40 + d, 1000 + d) for d in range(3)]
    assert futures[0].succeeded() and futures[0].value.offset == 40


def test_error_is_raised_as_a_fresh_instance_of_its_class() -> None:
    result = ProduceRequestResult(TP)
    future = FutureRecordMetadata(result, 0, 0)
    original = NotLeaderOrFollowerError("gone")
    result.set(-1, original)
    with pytest.raises(NotLeaderOrFollowerError, match="gone") as info:
        future.get()
    assert info.value is not original
    assert future.failed() and future.exception is original


def test_callbacks_run_on_completion_and_immediately_when_done() -> None:
    result = ProduceRequestResult(TP)
    future = FutureRecordMetadata(result, 2, 7)
    seen: list[object] = []
    future.add_callback(seen.append).add_errback(lambda err: seen.append(("err", err)))
    result.set(10, None)
    future.fire_callbacks()
    assert seen == [RecordMetadata("orders", 1, 12, 7)]
    future.add_callback(lambda tag, md: seen.append((tag, md.offset)), "late")
    assert seen[-1] == ("late", 12)


def test_errback_gets_the_error() -> None:
    result = ProduceRequestResult(TP)
    future = FutureRecordMetadata(result, 0, 0)
    errors: list[Exception] = []
    future.add_errback(errors.append)
    result.set(-1, NotLeaderOrFollowerError("x"))
    future.fire_callbacks()
    assert isinstance(errors[0], NotLeaderOrFollowerError)


def test_a_raising_callback_does_not_break_the_others() -> None:
    result = ProduceRequestResult(TP)
    future = FutureRecordMetadata(result, 0, 0)
    seen: list[int] = []
    future.add_callback(lambda md: 1 / 0)
    future.add_callback(lambda md: seen.append(md.offset))
    result.set(5, None)
    future.fire_callbacks()
    assert seen == [5]
