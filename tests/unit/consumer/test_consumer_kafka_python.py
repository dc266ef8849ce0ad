"""The Consumer as kafka-python code uses it, against the in-process fake node of test_consumer.py:
deserializers, iteration, commit_async, highwater, kafka-python's named tuples, and arguments
checked at the call (a bad seek used to break every later poll)."""
from __future__ import annotations

import json
import threading
import time
from typing import Any

import kafka
import pytest
from kafka.serializer import Deserializer

import consumer.consumer as consumer_module
from consumer.arguments import MAX_OFFSET, as_topic_partition, check_offset
from proto.errors import (
    IllegalArgumentError,
    IllegalStateError,
    KafkaConfigurationError,
    UnknownTopicOrPartitionError,
)
from proto.structs import OffsetAndMetadata, TopicPartition
from tests.helpers import wait_until
from tests.unit.consumer.test_consumer import (
    TP0,
    TP1,
    FakeClusterClient,
    FakeNode,
    make,
    values,
)


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    fake = FakeNode()
    monkeypatch.setattr(consumer_module, "ClusterClient", lambda *a, **k: FakeClusterClient(fake))
    return fake


# ---------------------------------------------------------------- deserializers


class Utf8Upper(Deserializer):
    """kafka-python 3's Deserializer: deserialize(topic, headers, data)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[Any]]] = []
        self.closed = False

    def deserialize(self, topic: str, headers: list[Any], data: bytes | None) -> str | None:
        self.seen.append((topic, headers))
        return None if data is None else data.decode().upper()

    def close(self) -> None:
        self.closed = True


class OldStyle:
    """An older kafka-python deserializer object: deserialize(topic, data)."""

    def deserialize(self, topic: str, data: bytes | None) -> tuple[str, bytes | None]:
        return topic, data


def test_callable_and_deserializer_objects_apply_to_polled_records(node: FakeNode) -> None:
    node.partitions[TP0].produce(b'{"n": 1}', b'{"n": 2}')
    with make(value_deserializer=json.loads, key_deserializer=OldStyle()) as c:
        c.assign([TP0])
        got = wait_until(lambda: c.poll(timeout_ms=100), what="records")
    assert [r.value for r in got[TP0]] == [{"n": 1}, {"n": 2}]
    assert [r.key for r in got[TP0]] == [("orders", None), ("orders", None)]


def test_a_kafka_python_deserializer_sees_topic_and_headers_and_is_closed_with_the_consumer(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"abc")
    upper = Utf8Upper()
    c = make(value_deserializer=upper)
    c.assign([TP0])
    got = wait_until(lambda: c.poll(timeout_ms=100), what="records")
    assert got[TP0][0].value == "ABC"
    assert upper.seen == [("orders", [])]
    c.close()
    assert upper.closed


def test_a_failing_deserializer_raises_from_poll_and_keeps_the_position_at_the_bad_record(node: FakeNode) -> None:
    node.partitions[TP0].produce(b'{"ok": 1}', b"not json", b'{"ok": 3}')
    with make(value_deserializer=json.loads) as c:
        c.assign([TP0])
        first = wait_until(lambda: c.poll(timeout_ms=100), what="the good record")
        assert [r.value for r in first[TP0]] == [{"ok": 1}]  # returned before the error, never lost with it
        for _ in range(2):  # raised again on every poll until the application skips the record
            with pytest.raises(json.JSONDecodeError) as info:
                wait_until(lambda: c.poll(timeout_ms=100), what="the error")
            assert "offset 1" in "".join(getattr(info.value, "__notes__", []))
            assert c.position(TP0) == 1
        c.seek(TP0, 2)
        assert [r.value for r in wait_until(lambda: c.poll(timeout_ms=100))[TP0]] == [{"ok": 3}]


def test_a_deserializer_that_is_neither_callable_nor_a_deserializer_fails_at_construction() -> None:
    with pytest.raises(KafkaConfigurationError, match="value_deserializer"):
        make(value_deserializer="utf-8")


# ---------------------------------------------------------------- iteration


def test_iteration_yields_records_one_at_a_time_and_stops_after_consumer_timeout_ms(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a", b"b")
    node.partitions[TP1].produce(b"c")
    with make(consumer_timeout_ms=300) as c:
        c.assign([TP0, TP1])
        started = time.monotonic()
        got = [(r.partition, r.value) for r in c]
        elapsed = time.monotonic() - started
    assert sorted(got) == [(0, b"a"), (0, b"b"), (1, b"c")]
    assert 0.3 <= elapsed < 3.0


def test_iteration_resumes_after_stopping_and_sees_new_records(node: FakeNode) -> None:
    with make(consumer_timeout_ms=100) as c:
        c.assign([TP0])
        assert list(c) == []
        node.partitions[TP0].produce(b"late")
        assert [r.value for r in c] == [b"late"]


def test_leaving_iteration_early_counts_only_the_records_handed_out(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a", b"b", b"c", b"d")
    with make(consumer_timeout_ms=2000) as c:
        c.assign([TP0])
        for record in c:
            if record.value == b"b":
                break
        assert c.position(TP0) == 2
        c.commit()
        assert c.committed(TP0) == 2
        # poll() goes on right after the last record iteration handed out: nothing is skipped
        rest = wait_until(lambda: c.poll(timeout_ms=100), what="the rest")
        assert values(rest) == {TP0: [b"c", b"d"]}


def test_seek_and_pause_during_iteration_take_effect_at_once(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a", b"b", b"c")
    with make(consumer_timeout_ms=300) as c:
        c.assign([TP0])
        it = iter(c)
        assert next(it).value == b"a"
        c.seek(TP0, 0)
        assert next(it).value == b"a"
        c.pause(TP0)
        assert list(it) == []
        assert c.position(TP0) == 1  # b was fetched for iteration but never handed out
        c.resume(TP0)
        assert [r.value for r in c] == [b"b", b"c"]


def test_iteration_stops_when_the_consumer_is_closed(node: FakeNode) -> None:
    c = make()
    c.assign([TP0])
    c.close()
    assert list(c) == []


# ---------------------------------------------------------------- commit_async


def test_commit_async_calls_back_in_order_from_the_consumers_thread(node: FakeNode) -> None:
    calls: list[tuple[dict, Any, str]] = []

    def callback(offsets: dict, response: Any) -> None:
        calls.append((dict(offsets), response, threading.current_thread().name))

    with make() as c:
        c.assign([TP0])
        f1 = c.commit_async({TP0: OffsetAndMetadata(1)}, callback)
        f2 = c.commit_async({TP0: 2}, callback)
        f2.get(timeout=5)
        assert f1.succeeded() and f2.is_done and f2.exception is None
        assert calls == []  # not until the consumer's thread comes back
        c.poll(timeout_ms=0)
        assert [(o, r) for o, r, _ in calls] == [({TP0: OffsetAndMetadata(1)}, None), ({TP0: OffsetAndMetadata(2)}, None)]
        assert {name for _, _, name in calls} == {threading.current_thread().name}
        assert c.committed(TP0) == 2


def test_commit_waits_for_earlier_commit_async_so_a_later_commit_is_never_overwritten(node: FakeNode) -> None:
    entered, release = threading.Event(), threading.Event()

    def hold_first_commit() -> None:
        entered.set()
        assert release.wait(10)

    node.before["OffsetCommit"] = hold_first_commit
    calls: list[Any] = []
    with make() as c:
        c.assign([TP0])
        c.commit_async({TP0: 5}, lambda offsets, response: calls.append(offsets[TP0].offset))
        assert entered.wait(5)
        sync = threading.Thread(target=c.commit, args=({TP0: 3},))
        sync.start()
        sync.join(0.2)
        assert sync.is_alive()  # it waits for the held commit instead of overtaking it
        release.set()
        sync.join(5)
        assert not sync.is_alive()
        assert calls == [5]  # commit() ran the earlier callback before returning
        assert c.committed(TP0) == 3


def test_commit_async_failure_reaches_future_and_callback(node: FakeNode) -> None:
    calls: list[Any] = []
    with make() as c:
        c.assign([TP0])
        future = c.commit_async({TopicPartition("nope", 0): 1}, lambda o, r: calls.append(r))
        with pytest.raises(UnknownTopicOrPartitionError):
            future.get(timeout=5)
        assert future.failed() and isinstance(future.exception, UnknownTopicOrPartitionError)
        c.commit({TP0: 1})
        assert len(calls) == 1 and isinstance(calls[0], UnknownTopicOrPartitionError)


def test_default_offset_commit_callback_is_used_without_a_callback(node: FakeNode) -> None:
    calls: list[Any] = []
    with make(default_offset_commit_callback=lambda o, r: calls.append((dict(o), r))) as c:
        c.assign([TP0])
        c.commit_async({TP0: 4}).get(timeout=5)
        c.commit_async({TP0: 5})
    assert calls == [({TP0: OffsetAndMetadata(4)}, None), ({TP0: OffsetAndMetadata(5)}, None)]  # close waits


def test_commit_async_without_a_group_fails_at_the_call(node: FakeNode) -> None:
    with make(group_id=None) as c, pytest.raises(KafkaConfigurationError):
        c.commit_async()


# ---------------------------------------------------------------- highwater


def test_highwater_is_none_before_a_fetch_then_the_last_fetched_high_watermark(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a", b"b")
    with make() as c:
        c.assign([TP0])
        assert c.highwater(TP0) is None
        wait_until(lambda: c.poll(timeout_ms=100), what="records")
        assert c.highwater(TP0) == 2
        with pytest.raises(IllegalStateError):
            c.highwater(TopicPartition("orders", 9))
        with pytest.raises(TypeError):
            c.highwater("orders-0")  # type: ignore[arg-type]


# ---------------------------------------------------------------- kafka-python's named tuples


def test_kafka_pythons_topic_partition_and_offset_and_metadata_work_everywhere(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a", b"b", b"c")
    kp0 = kafka.TopicPartition("orders", 0)
    with make() as c:
        c.assign([kp0])
        assert c.assignment() == {TP0}
        assert all(type(tp) is TopicPartition for tp in c.assignment())
        c.seek(kp0, 1)
        assert values(wait_until(lambda: c.poll(timeout_ms=100))) == {TP0: [b"b", b"c"]}
        c.commit({kp0: kafka.OffsetAndMetadata(2, "meta", -1)})
        assert c.committed(kp0, metadata=True) == OffsetAndMetadata(2, "meta")
        assert c.position(kp0) == 3 and c.highwater(kp0) == 3


# ---------------------------------------------------------------- arguments checked at the call


@pytest.mark.parametrize("offset", [2**63, -1, -(2**63), 1.5, "3", True, None])
def test_a_bad_seek_offset_fails_at_the_call_and_poll_goes_on(node: FakeNode, offset: Any) -> None:
    node.partitions[TP0].produce(b"a")
    with make() as c:
        c.assign([TP0])
        with pytest.raises(IllegalArgumentError) as info:
            c.seek(TP0, offset)
        assert isinstance(info.value, ValueError)  # what kafka-python code catches
        assert values(wait_until(lambda: c.poll(timeout_ms=100), what="records")) == {TP0: [b"a"]}


def test_the_largest_offset_is_accepted_by_seek() -> None:
    assert check_offset(2**63 - 1, "x") == MAX_OFFSET


@pytest.mark.parametrize("partition", [TopicPartition("orders", "0"), ("orders", 0.0), "orders-0", ("orders",),  # type: ignore[arg-type]
                                       (b"orders", 0), None])
def test_a_partition_that_is_not_a_topic_and_an_int_is_a_type_error_everywhere(node: FakeNode, partition: Any) -> None:
    node.partitions[TP0].produce(b"a")
    with make() as c:
        c.assign([TP0])
        for call in (lambda: c.seek(partition, 0), lambda: c.assign([partition]), lambda: c.pause(partition),
                     lambda: c.position(partition), lambda: c.commit({partition: 1}),
                     lambda: c.end_offsets([partition])):
            with pytest.raises(TypeError):
                call()
        assert c.assignment() == {TP0}
        assert values(wait_until(lambda: c.poll(timeout_ms=100), what="records")) == {TP0: [b"a"]}


@pytest.mark.parametrize("partition", [TopicPartition("orders", -1), TopicPartition("orders", 2**31),
                                       TopicPartition("", 0)])
def test_a_partition_number_out_of_kafkas_range_is_an_illegal_argument(node: FakeNode, partition: Any) -> None:
    with make() as c:
        with pytest.raises(IllegalArgumentError):
            c.assign([partition])
        assert c.assignment() == set()


@pytest.mark.parametrize("offset", [-1, 2**63, "5", OffsetAndMetadata(-3)])
def test_a_bad_offset_to_commit_fails_before_anything_is_sent(node: FakeNode, offset: Any) -> None:
    with make() as c:
        with pytest.raises((IllegalArgumentError, TypeError)):
            c.commit({TP0: offset})
        with pytest.raises((IllegalArgumentError, TypeError)):
            c.commit_async({TP0: offset})
        assert c.committed(TP0) is None


def test_as_topic_partition_keeps_txnsims_own_instances() -> None:
    assert as_topic_partition(TP0) is TP0
    converted = as_topic_partition(kafka.TopicPartition("orders", 1))
    assert type(converted) is TopicPartition and converted == TP1 and str(converted) == "orders-1"


# ---------------------------------------------------------------- a topic that does not exist


@pytest.mark.parametrize("call", ["end_offsets", "beginning_offsets", "offsets_for_times", "commit"])
def test_a_topic_that_does_not_exist_fails_at_once_not_after_the_request_timeout(node: FakeNode, call: str) -> None:
    missing = TopicPartition("nope", 0)
    with make(request_timeout_ms=20_000) as c:
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError):
            if call == "offsets_for_times":
                c.offsets_for_times({missing: 0})
            elif call == "commit":
                c.commit({missing: 1})
            else:
                getattr(c, call)([missing])
        assert time.monotonic() - started < 5


def test_offsets_for_times_rejects_a_negative_timestamp_at_the_call(node: FakeNode) -> None:
    with make() as c:
        with pytest.raises(IllegalArgumentError):
            c.offsets_for_times({TP0: -1})
        with pytest.raises(TypeError):
            c.offsets_for_times({TP0: "yesterday"})


@pytest.mark.parametrize("timeout", [None, "1000", True, float("nan")])
def test_consumer_timeout_ms_must_be_a_number(timeout: Any) -> None:
    with pytest.raises(KafkaConfigurationError, match="consumer_timeout_ms"):
        make(consumer_timeout_ms=timeout)


def test_consumer_timeout_ms_defaults_to_forever_and_a_negative_one_means_forever_too() -> None:
    from consumer.config import ConsumerConfig

    assert ConsumerConfig.from_kwargs({"bootstrap_servers": "x:1"}).iteration_timeout_s == float("inf")
    assert ConsumerConfig.from_kwargs({"bootstrap_servers": "x:1", "consumer_timeout_ms": -1}).iteration_timeout_s \
        == float("inf")
    assert ConsumerConfig.from_kwargs({"bootstrap_servers": "x:1", "consumer_timeout_ms": 250}).iteration_timeout_s \
        == 0.25


def test_position_and_close_take_kafka_pythons_timeout_ms(node: FakeNode) -> None:
    node.partitions[TP0].produce(b"a")
    c = make()
    c.assign([TP0])
    assert c.position(TP0, timeout_ms=2000) == 0
    with pytest.raises(IllegalArgumentError):
        c.close(timeout_ms=-1)
    c.close(timeout_ms=1000)
    with pytest.raises(IllegalStateError):
        c.poll()


def test_poll_of_a_partition_whose_topic_does_not_exist_yet_waits_for_it(node: FakeNode) -> None:
    from tests.unit.consumer.test_consumer import FakePartition

    later = TopicPartition("later", 0)
    with make(group_id=None) as c:
        c.assign([later])
        assert c.poll(timeout_ms=200) == {}  # no error: the topic may be created meanwhile, as Kafka's consumers wait
        node.topics["later"] = 1
        node.partitions[later] = FakePartition()
        node.partitions[later].produce(b"first")
        assert values(wait_until(lambda: c.poll(timeout_ms=100), what="the new topic's record")) == {later: [b"first"]}
