"""acks=0, 1 and all from kafka-python and aiokafka, unchanged, on a replicated cluster of three real nodes:
every acknowledged record is there for a reader; with fewer in-sync replicas than min.insync.replicas an
acks=all write is refused with Kafka's NOT_ENOUGH_REPLICAS (nothing written) while acks=1 still goes
through, and once the replica is back and in sync acks=all is taken again."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import kafka.errors
import pytest
from aiokafka import AIOKafkaProducer
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType

from client.transport import call
from proto import txnsim_pb2 as pb
from tests.helpers import read_all, wait_until
from txnsim import Admin, LocalCluster
from txnsim.zookeeper import zookeeper_available

_MISSING = zookeeper_available()
pytestmark = [pytest.mark.skipif(_MISSING is not None, reason=f"ZooKeeper cannot run here: {_MISSING}"),
              pytest.mark.timeout(240)]
RECORDS = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data: Path = tmp_path_factory.mktemp("acks")
    with LocalCluster(nodes=3, data_dir=data, replicated=True, txn_shards=4, half_shards=2,
                      zookeeper_session_timeout_ms=2000) as started:
        yield started


def topic_with(cluster: LocalCluster, name: str, min_insync: int) -> str:
    with Admin(cluster.bootstrap_servers) as admin:
        assert admin.create_topic(name, partitions=1, replication_factor=3,
                                  configs={"min.insync.replicas": str(min_insync)}) == 3
    return name


def values_once_replicated(cluster: LocalCluster, topic: str, expected: int) -> list[bytes]:
    """Every record of `topic` once a reader sees `expected`: with acks=0 or 1 the producer is answered before
    the followers have its records, and a reader gets them once the high watermark passes them."""
    def seen() -> list[bytes] | None:
        found = [r.value for r in read_all(cluster.bootstrap_servers, topic, partitions=1)]
        return found if len(found) >= expected else None
    return wait_until(seen, 30, f"{expected} records of {topic} replicated")


def partition_0(cluster: LocalCluster, topic: str) -> pb.PartitionMetadata:
    response: pb.MetadataResponse = cluster.client.any_node(
        lambda s: call(s.cluster.Metadata, pb.MetadataRequest(topics=[topic]), 5.0))
    return response.topics[0].partitions[0]


def isr_of(cluster: LocalCluster, topic: str) -> list[int]:
    return sorted(partition_0(cluster, topic).isr)


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_kafka_python_writes_with_each_acks_setting_and_a_reader_gets_every_record(cluster, acks) -> None:
    topic = topic_with(cluster, f"kp-acks-{acks}", 2)
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks=acks)
    futures = [producer.send(topic, f"kp-{acks}-{i}".encode()) for i in range(RECORDS)]
    producer.flush(timeout=30)
    for future in futures:
        future.get(timeout=30)
    producer.close()
    assert values_once_replicated(cluster, topic, RECORDS) == [f"kp-{acks}-{i}".encode() for i in range(RECORDS)]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_aiokafka_writes_with_each_acks_setting_and_a_reader_gets_every_record(cluster, acks) -> None:
    topic = topic_with(cluster, f"aio-acks-{acks}", 2)

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks=acks)
        await producer.start()
        try:
            for i in range(RECORDS):
                await producer.send_and_wait(topic, f"aio-{acks}-{i}".encode())
        finally:
            await producer.stop()
    asyncio.run(run())
    assert values_once_replicated(cluster, topic, RECORDS) == [f"aio-{acks}-{i}".encode() for i in range(RECORDS)]


def test_acks_all_is_refused_below_min_insync_replicas_while_acks_1_goes_through(cluster) -> None:
    """min.insync.replicas changed on the topic while it is written (AlterConfigs over the Kafka port, then
    txnsim's Admin): the leader obeys the new setting at the next write."""
    topic = topic_with(cluster, "acks-min-insync", 2)
    wait_until(lambda: isr_of(cluster, topic) == [0, 1, 2], 30, "all three replicas in sync")
    follower = next(n for n in cluster.node_ids if n != partition_0(cluster, topic).leader)
    cluster.kill(follower)
    try:
        wait_until(lambda: follower not in isr_of(cluster, topic), 30, f"node {follower} out of the ISR")
        strict = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks="all", retries=0)
        strict.send(topic, b"two in sync is enough").get(timeout=30)
        admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"min.insync.replicas": "3"})])
        admin.close()
        with pytest.raises(kafka.errors.NotEnoughReplicasError):
            strict.send(topic, b"refused").get(timeout=30)
        strict.close()
        loose = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks=1)
        loose.send(topic, b"taken with acks=1").get(timeout=30)
        loose.close()
    finally:
        cluster.restart(follower)
    wait_until(lambda: isr_of(cluster, topic) == [0, 1, 2], 60, f"node {follower} back in the ISR")
    strict = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks="all")
    strict.send(topic, b"three in sync").get(timeout=30)
    strict.close()
    with Admin(cluster.bootstrap_servers) as txnsim_admin:
        _count, settings = txnsim_admin.alter_topic(topic, delete_configs=["min.insync.replicas"])
        assert "min.insync.replicas" not in settings
    assert values_once_replicated(cluster, topic, 3) == [b"two in sync is enough", b"taken with acks=1",
                                                         b"three in sync"]  # the refused one is not there
