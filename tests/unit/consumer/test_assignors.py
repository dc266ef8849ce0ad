"""The leader's assignors: for any members and subscriptions, every partition of a subscribed topic goes to
exactly one member subscribed to it, and the split is as even as Kafka's."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from consumer.assignors import ASSIGNORS, range_assign, roundrobin_assign
from proto.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from proto.structs import TopicPartition

TOPICS = {"a": 5, "b": 3, "c": 0, "d": 8}

subscriptions = st.dictionaries(st.text("mnop", min_size=1, max_size=3),
                                st.lists(st.sampled_from(sorted(TOPICS)), min_size=1, unique=True),
                                min_size=1, max_size=6)


@given(subscriptions, st.sampled_from(sorted(ASSIGNORS)))
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(subs, name):
    assignment = ASSIGNORS[name](subs, TOPICS.__getitem__)
    assert set(assignment) == set(subs)
    given_out = [tp for tps in assignment.values() for tp in tps]
    wanted = {TopicPartition(t, p) for topics in subs.values() for t in topics for p in range(TOPICS[t])}
    assert sorted(given_out) == sorted(wanted)
    for member, tps in assignment.items():
        assert all(tp.topic in subs[member] for tp in tps)


@given(subscriptions)
def test_range_splits_each_topic_within_one_partition_between_its_subscribers(subs):
    assignment = range_assign(subs, TOPICS.__getitem__)
    for topic, count in TOPICS.items():
        shares = [sum(tp.topic == topic for tp in assignment[m]) for m in subs if topic in subs[m]]
        if shares:
            assert max(shares) - min(shares) <= 1 and sum(shares) == count


def test_range_and_roundrobin_as_kafka_documents_them():
    subs = {"m1": ["a", "b"], "m2": ["a", "b"]}
    assert range_assign(subs, TOPICS.__getitem__) == {
        "m1": [TopicPartition("a", p) for p in (0, 1, 2)] + [TopicPartition("b", p) for p in (0, 1)],
        "m2": [TopicPartition("a", p) for p in (3, 4)] + [TopicPartition("b", 2)]}
    assert roundrobin_assign(subs, TOPICS.__getitem__) == {
        "m1": [TopicPartition("a", 0), TopicPartition("a", 2), TopicPartition("a", 4), TopicPartition("b", 1)],
        "m2": [TopicPartition("a", 1), TopicPartition("a", 3), TopicPartition("b", 0), TopicPartition("b", 2)]}


@given(st.lists(st.sampled_from(sorted(TOPICS)), unique=True),
       st.sets(st.tuples(st.sampled_from(sorted(TOPICS)), st.integers(0, 2**31 - 1)), max_size=20))
def test_consumer_protocol_bytes_round_trip(topics, partitions):
    assert decode_subscription(encode_subscription(topics)) == sorted(topics)
    tps = {TopicPartition(t, p) for t, p in partitions}
    assert sorted(decode_assignment(encode_assignment(tps))) == sorted(tps)
