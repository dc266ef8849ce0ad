"""consumer.read_to_end: a topic read whole, to the end offsets it had when the read began."""
from __future__ import annotations

import pytest

from consumer import read_to_end
from txnsim import Producer, TopicPartition, errors


def test_it_reads_every_committed_record_and_stops_at_an_open_transactions_start(cluster, topic, txn_id):
    bs = cluster.bootstrap_servers
    tps = [TopicPartition(topic, p) for p in range(3)]
    with Producer(bootstrap_servers=bs, transactional_id=txn_id) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for p in range(3):
            producer.send(topic, value=b"committed-%d" % p, partition=p)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, value=b"open", partition=0)
        producer.flush()
        committed = sorted(r.value for r in read_to_end(bs, tps))
        everything = sorted(r.value for r in read_to_end(bs, tps, isolation_level="read_uncommitted"))
        producer.abort_transaction()
    assert committed == [b"committed-0", b"committed-1", b"committed-2"]
    assert everything == [*committed, b"open"]


def test_a_read_that_cannot_reach_the_end_in_time_says_how_far_each_partition_got(cluster, topic):
    bs = cluster.bootstrap_servers
    with Producer(bootstrap_servers=bs) as producer:
        producer.send(topic, value=b"x", partition=1).get(timeout=10)
    with pytest.raises(errors.KafkaTimeoutError, match=rf"{topic}-1 at 0 of 1"):
        list(read_to_end(bs, [TopicPartition(topic, p) for p in range(3)], timeout_s=0))
