"""The main transaction cases through kafka-python's and aiokafka's transactional producers and read_committed
consumers, unchanged, on real nodes (both speak transactions V1; aiokafka only version 0 of its APIs)."""
from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from tests.helpers import wait_until
from txnsim import Consumer as TxnsimConsumer
from txnsim import TopicPartition as TxnsimTopicPartition

pytestmark = pytest.mark.timeout(180)


def read_committed_values(cluster, topic: str, expected: int, timeout_s: float = 20.0) -> list[bytes]:
    """Values a kafka-python read_committed consumer sees from the start; waits for `expected`, then 0.5 s more
    for anything that should not be there."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap_servers, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=500)
    consumer.assign([KpTopicPartition(topic, p) for p in range(3)])
    consumer.seek_to_beginning()
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            values.extend(r.value for r in records)
    for records in consumer.poll(timeout_ms=500).values():
        values.extend(r.value for r in records)
    consumer.close()
    return values


def committed_offset(cluster, group: str, topic: str, partition: int) -> int | None:
    with TxnsimConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group) as c:
        return c.committed(TxnsimTopicPartition(topic, partition))


# ------------------------------------------------------------ kafka-python


def kafka_python_producer(cluster, txn_id: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, transactional_id=txn_id,
                             linger_ms=5)
    producer.init_transactions()
    return producer


def test_kafka_python_commits_and_aborts(cluster, topic, txn_id):
    producer = kafka_python_producer(cluster, txn_id)
    producer.begin_transaction()
    for i in range(6):
        producer.send(topic, value=f"kept-{i}".encode(), partition=i % 3)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(6):
        producer.send(topic, value=f"dropped-{i}".encode(), partition=i % 3)
    producer.flush()
    producer.abort_transaction()
    producer.close()
    assert sorted(read_committed_values(cluster, topic, 6)) == sorted(f"kept-{i}".encode() for i in range(6))


def test_kafka_python_sends_offsets_in_its_transaction(cluster, topic, txn_id):
    group = f"kp-{txn_id}"
    producer = kafka_python_producer(cluster, txn_id)
    producer.begin_transaction()
    producer.send(topic, value=b"out", partition=0)
    producer.send_offsets_to_transaction({KpTopicPartition(topic, 0): _offset(11)}, group)
    producer.commit_transaction()
    producer.close()
    wait_until(lambda: committed_offset(cluster, group, topic, 0) == 11, timeout_s=10)


def _offset(offset: int):
    from kafka.structs import OffsetAndMetadata
    return OffsetAndMetadata(offset, "", -1)


def test_kafka_python_zombie_is_fenced_by_its_successor(cluster, topic, txn_id):
    from kafka.errors import KafkaError as KpError
    zombie = kafka_python_producer(cluster, txn_id)
    zombie.begin_transaction()
    zombie.send(topic, value=b"zombie", partition=0)
    zombie.flush()
    successor = kafka_python_producer(cluster, txn_id)
    successor.begin_transaction()
    successor.send(topic, value=b"successor", partition=1)
    successor.commit_transaction()
    with pytest.raises(KpError):
        zombie.commit_transaction()
    zombie.close(timeout=1)
    successor.close()
    assert read_committed_values(cluster, topic, 1) == [b"successor"]


# ------------------------------------------------------------ aiokafka


def test_aiokafka_transactions_and_offsets(cluster, topic, txn_id):
    group = f"aio-{txn_id}"

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, transactional_id=txn_id)
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(3):
                    await producer.send_and_wait(topic, f"aio-{i}".encode(), partition=i)
                await producer.send_offsets_to_transaction({AioTopicPartition(topic, 2): 4}, group)
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aio-aborted", partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap_servers,
                                    isolation_level="read_committed", enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, p) for p in range(3)])
            await consumer.seek_to_beginning()
            values: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(values) < 3 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    values.extend(r.value for r in records)
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records)
            return values
        finally:
            await consumer.stop()

    values = asyncio.run(run())
    assert sorted(values) == [b"aio-0", b"aio-1", b"aio-2"]
    wait_until(lambda: committed_offset(cluster, group, topic, 2) == 4, timeout_s=10)
