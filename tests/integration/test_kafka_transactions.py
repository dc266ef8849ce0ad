"""Transactions through confluent-kafka (librdkafka) unchanged, on real nodes: the contract cases of the core
(commit and abort visibility in both isolation levels, records held behind an open transaction, zombie fencing,
transactional offsets, timeout abort) as a Kafka user runs them, with transactions V1 on the wire.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from tests.helpers import wait_until
from txnsim import Admin
from txnsim import Consumer as TxnsimConsumer
from txnsim import TopicPartition as TxnsimTopicPartition

pytestmark = pytest.mark.timeout(180)


def transactional_producer(cluster, txn_id: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": txn_id,
                         "linger.ms": 5, "transaction.timeout.ms": 60_000, **extra})
    producer.init_transactions(30)
    return producer


def consumer(cluster, isolation_level: str, group: str = "reader") -> Consumer:
    return Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": group,
                     "isolation.level": isolation_level, "enable.auto.commit": False,
                     "fetch.wait.max.ms": 50, "enable.partition.eof": True})


def read_all(c: Consumer, topic: str, partitions: int = 3, timeout_s: float = 20.0) -> list[bytes]:
    """Every value up to the end each partition shows this consumer (the LSO for read_committed)."""
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(at_end) < partitions:
        assert time.monotonic() < deadline, f"partitions {sorted(at_end)} of {partitions} reached their end"
        message = c.poll(0.1)
        if message is None:
            continue
        if message.error() is not None:
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            at_end.add(message.partition())
            continue
        at_end.discard(message.partition())
        values.append(message.value())
    return values


def produce(producer: Producer, topic: str, values: list[str]) -> None:
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), key=str(i).encode(), partition=i % 3)


def test_committed_records_are_read_by_both_levels_and_aborted_only_by_read_uncommitted(cluster, topic, txn_id):
    producer = transactional_producer(cluster, txn_id)
    producer.begin_transaction()
    produce(producer, topic, [f"committed-{i}" for i in range(6)])
    producer.commit_transaction(30)
    producer.begin_transaction()
    produce(producer, topic, [f"aborted-{i}" for i in range(6)])
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()  # the epoch is kept across transactions (V1): a third one still works
    produce(producer, topic, ["last"])
    producer.commit_transaction(30)

    committed = read_all(consumer(cluster, "read_committed"), topic)
    uncommitted = read_all(consumer(cluster, "read_uncommitted"), topic)
    assert sorted(committed) == sorted([f"committed-{i}".encode() for i in range(6)] + [b"last"])
    assert sorted(uncommitted) == sorted(committed + [f"aborted-{i}".encode() for i in range(6)])


def test_read_committed_stops_behind_an_open_transaction_until_it_commits(cluster, topic, txn_id):
    producer = transactional_producer(cluster, txn_id)
    producer.begin_transaction()
    produce(producer, topic, ["open-0", "open-1", "open-2"])
    producer.flush(30)
    other = transactional_producer(cluster, txn_id + "-other")
    other.begin_transaction()
    produce(other, topic, ["after-0", "after-1", "after-2"])  # behind the open one on every partition
    other.commit_transaction(30)

    assert read_all(consumer(cluster, "read_committed"), topic) == []
    assert len(read_all(consumer(cluster, "read_uncommitted"), topic)) == 6
    producer.commit_transaction(30)
    assert sorted(read_all(consumer(cluster, "read_committed"), topic)) == sorted(
        [b"open-0", b"open-1", b"open-2", b"after-0", b"after-1", b"after-2"])


def test_a_new_instance_fences_the_zombie_and_aborts_its_open_transaction(cluster, topic, txn_id):
    zombie = transactional_producer(cluster, txn_id)
    zombie.begin_transaction()
    produce(zombie, topic, ["zombie"])
    zombie.flush(30)
    successor = transactional_producer(cluster, txn_id)  # fences the zombie, aborting its transaction
    successor.begin_transaction()
    produce(successor, topic, ["successor"])
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() and error.code() == KafkaError._FENCED, error
    assert read_all(consumer(cluster, "read_committed"), topic) == [b"successor"]


def test_send_offsets_to_transaction_commits_the_group_offsets_with_the_records(cluster, admin, topic, txn_id):
    group = f"copier-{txn_id}"
    source = consumer(cluster, "read_committed", group=group)
    source.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    producer = transactional_producer(cluster, txn_id)
    offsets = [TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)]

    producer.begin_transaction()
    produce(producer, topic, ["a"])
    producer.send_offsets_to_transaction(offsets, source.consumer_group_metadata(), 30)
    producer.abort_transaction(30)
    assert committed_offsets(cluster, group, topic) == {0: None, 1: None}

    producer.begin_transaction()
    produce(producer, topic, ["b"])
    producer.send_offsets_to_transaction(offsets, source.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    wait_until(lambda: committed_offsets(cluster, group, topic) == {0: 5, 1: 7}, timeout_s=10)


def committed_offsets(cluster, group: str, topic: str) -> dict[int, int | None]:
    """The group's committed offsets of partitions 0 and 1, read with txnsim's own consumer."""
    with TxnsimConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group) as c:
        return {p: c.committed(TxnsimTopicPartition(topic, p)) for p in (0, 1)}


def test_a_transaction_left_open_is_aborted_at_its_timeout_and_the_producer_is_fenced(cluster, topic, txn_id):
    producer = transactional_producer(cluster, txn_id, **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    produce(producer, topic, ["abandoned"])
    producer.flush(30)
    with Admin(cluster.bootstrap_servers) as admin:
        wait_until(lambda: admin.describe_transaction(txn_id).state in ("CompleteAbort", "PrepareAbort"),
                   timeout_s=20)
    assert read_all(consumer(cluster, "read_committed"), topic) == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)


# ------------------------------------------------------------ the coordinator killed during a commit


@pytest.fixture
def fresh_cluster(tmp_path):
    """A cluster of its own: this test kills nodes."""
    from tests.integration.conftest import FAST_SETTINGS
    from txnsim import LocalCluster
    with LocalCluster(nodes=3, data_dir=tmp_path / "cluster", kafka_port=0, **FAST_SETTINGS) as c:
        with Admin(c.bootstrap_servers) as admin:
            admin.create_topic("t", partitions=3)
        yield c


@pytest.mark.parametrize("kill_at", ["before EndTxn", "after EndTxn"])
def test_a_coordinator_killed_during_a_commit_ends_in_one_outcome(fresh_cluster, kill_at):
    txn_id = f"killed-{kill_at.split()[0]}"
    producer = transactional_producer(fresh_cluster, txn_id)
    producer.begin_transaction()
    produce(producer, "t", [f"r{i}" for i in range(30)])
    producer.flush(30)
    coordinator = fresh_cluster.coordinator_for(txn_id)
    if kill_at == "before EndTxn":
        fresh_cluster.kill(coordinator)
        producer.commit_transaction(60)  # librdkafka finds the node that took the shard over and retries there
    else:
        producer.commit_transaction(60)
        fresh_cluster.kill(coordinator)  # markers may not all be written: the next owner finishes them
    wait_until(lambda: fresh_cluster.coordinator_for(txn_id) != coordinator, timeout_s=10,
               what="another node to take the shard over")
    with Admin(fresh_cluster.bootstrap_servers) as admin:
        wait_until(lambda: admin.describe_transaction(txn_id).state == "CompleteCommit", timeout_s=20,
                   what="the commit to complete on the new owner")
    assert sorted(read_all(consumer(fresh_cluster, "read_committed"), "t")) == sorted(
        f"r{i}".encode() for i in range(30))
    producer.begin_transaction()  # the producer goes on with the new owner
    produce(producer, "t", ["next"])
    producer.commit_transaction(60)
