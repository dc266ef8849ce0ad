"""txnsim's Consumer used as kafka-python's KafkaConsumer is, against real nodes: iteration with
deserializers, commit_async, offsets_for_times and highwater, kafka-python's own named tuples, a bad
seek refused at the call, and a topic that does not exist failing at once."""
from __future__ import annotations

import json
import time

import kafka
import pytest

from tests.helpers import wait_until
from txnsim import Consumer, OffsetAndMetadata, Producer, TopicPartition, errors

IllegalArgumentError = errors.IllegalArgumentError
UnknownTopicOrPartitionError = errors.UnknownTopicOrPartitionError


def _produce(cluster, topic: str, values: list[bytes], partition: int = 0, timestamps: list[int] | None = None
             ) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        for i, value in enumerate(values):
            p.send(topic, value=value, partition=partition,
                   timestamp_ms=None if timestamps is None else timestamps[i])
        p.flush()


def test_a_subscribed_consumer_iterates_deserialized_records_and_stops_after_consumer_timeout_ms(cluster, topic):
    _produce(cluster, topic, [json.dumps({"n": i}).encode() for i in range(5)])
    # the timeout spans the join too (the group's initial rebalance delay is 3 s), as kafka-python's does
    with Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=f"g-{topic}",
                  auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=6000,
                  value_deserializer=json.loads, key_deserializer=lambda k: k) as c:
        got = []
        for record in c:
            got.append(record.value["n"])
            last = time.monotonic()
        assert time.monotonic() - last >= 6.0
        assert got == [0, 1, 2, 3, 4]
        future = c.commit_async()
        future.get(timeout=10)
        assert c.committed(TopicPartition(topic, 0)) == 5


def test_leaving_iteration_early_then_committing_replays_nothing_and_loses_nothing(cluster, topic):
    _produce(cluster, topic, [b"a", b"b", b"c", b"d"])
    tp = TopicPartition(topic, 0)
    settings = {"bootstrap_servers": cluster.bootstrap_servers, "group_id": f"g-{topic}",
                "auto_offset_reset": "earliest", "enable_auto_commit": False, "consumer_timeout_ms": 5000}
    with Consumer(**settings) as c:
        c.assign([tp])
        for record in c:
            if record.value == b"b":
                break
        c.commit()
    with Consumer(**settings) as c:  # a restart reads on from the commit
        c.assign([tp])
        assert [r.value for r in c] == [b"c", b"d"]


def test_offsets_for_times_finds_the_first_record_at_or_after_each_timestamp(cluster, topic):
    _produce(cluster, topic, [b"a", b"b", b"c"], timestamps=[1_000, 2_000, 3_000])
    tp, empty = TopicPartition(topic, 0), kafka.TopicPartition(topic, 1)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers) as c:
        found = c.offsets_for_times({tp: 1_500, empty: 0})
        assert found[tp] == (1, 2_000, -1) and found[tp].offset == 1 and found[tp].timestamp == 2_000
        assert found[empty] is None  # kafka-python's key finds it, and an empty partition has no record
        assert c.offsets_for_times({tp: 0})[tp].offset == 0
        assert c.offsets_for_times({tp: 3_001}) == {tp: None}


def test_highwater_follows_fetches_of_an_assigned_partition(cluster, topic):
    _produce(cluster, topic, [b"a", b"b"])
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert c.highwater(tp) is None
        wait_until(lambda: c.poll(timeout_ms=200), what="records")
        assert c.highwater(tp) == 2
        _produce(cluster, topic, [b"c"])
        wait_until(lambda: c.poll(timeout_ms=200) or c.highwater(tp) == 3, what="the new high watermark")
        assert c.highwater(tp) == 3


def test_kafka_pythons_named_tuples_in_assign_seek_commit_and_committed(cluster, topic):
    _produce(cluster, topic, [b"a", b"b", b"c"])
    kp = kafka.TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id=f"g-{topic}", enable_auto_commit=False) as c:
        c.assign([kp])
        c.seek(kp, 2)
        assert [r.value for rs in wait_until(lambda: c.poll(timeout_ms=200)).values() for r in rs] == [b"c"]
        c.commit({kp: kafka.OffsetAndMetadata(3, "done", -1)})
        assert c.committed(kp, metadata=True) == OffsetAndMetadata(3, "done")


@pytest.mark.parametrize("offset", [2**63, -1])
def test_a_seek_kafka_cannot_take_is_refused_and_the_consumer_keeps_reading(cluster, topic, offset):
    _produce(cluster, topic, [b"a"])
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest") as c:
        c.assign([tp])
        with pytest.raises(IllegalArgumentError):
            c.seek(tp, offset)
        with pytest.raises(TypeError):
            c.seek(TopicPartition(topic, "0"), 0)
        assert [r.value for rs in wait_until(lambda: c.poll(timeout_ms=200)).values() for r in rs] == [b"a"]


def test_a_topic_that_does_not_exist_fails_at_once(cluster, topic):
    missing = TopicPartition("no-such-topic", 0)
    beyond = TopicPartition(topic, 7)  # the topic has 3 partitions
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id=f"g-{topic}", enable_auto_commit=False) as c:
        for call in (lambda: c.end_offsets([missing]), lambda: c.beginning_offsets([missing]),
                     lambda: c.offsets_for_times({missing: 0}), lambda: c.commit({missing: OffsetAndMetadata(1)}),
                     lambda: c.end_offsets([beyond]), lambda: c.commit({beyond: 1})):
            started = time.monotonic()
            with pytest.raises(UnknownTopicOrPartitionError):
                call()
            assert time.monotonic() - started < 5  # request_timeout_ms is 30 s
        started = time.monotonic()
        assert c.committed(missing) is None  # as Kafka's OffsetFetch: nothing committed, no error
        assert time.monotonic() - started < 5
