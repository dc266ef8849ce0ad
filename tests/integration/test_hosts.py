"""A replicated cluster on hosts of its own: every node and the ZooKeeper in a Linux network namespace with
its own address, nothing shared but the network, links cut with nftables. confluent-kafka runs transactions
on it unchanged; a leader cut off from its peers and the ZooKeeper is replaced and rejoins the ISR once the
link heals, losing nothing acknowledged; a leader cut off from the ZooKeeper alone keeps serving until its
session expires, then stops leading (as Kafka's brokers in ZooKeeper mode do)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from client.transport import call
from proto import txnsim_pb2 as pb
from proto.errors import NotLeaderOrFollowerError, raise_for
from tests.helpers import read_all, wait_until
from txnsim import LocalCluster, Producer
from txnsim.hosts import namespaces_unavailable
from txnsim.zookeeper import zookeeper_available

_MISSING = zookeeper_available() or namespaces_unavailable()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=f"hosts of their own cannot be made here: {_MISSING}")

SESSION_TIMEOUT_MS = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data: Path = tmp_path_factory.mktemp("hosts")
    with LocalCluster(nodes=3, data_dir=data, namespaces=True, txn_shards=4, half_shards=2,
                      zookeeper_session_timeout_ms=SESSION_TIMEOUT_MS, replica_lag_time_max_ms=3000) as started:
        yield started


@pytest.fixture
def healed(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The cluster, its links mended after the test whatever it did."""
    try:
        yield cluster
    finally:
        cluster.heal()


def metadata_of(cluster: LocalCluster, topic: str, node: int) -> pb.PartitionMetadata:
    """Partition 0 of `topic` as `node` sees it."""
    response: pb.MetadataResponse = call(cluster.client.stubs(cluster.spec.nodes[node]).cluster.Metadata,
                                         pb.MetadataRequest(topics=[topic]), 5.0)
    return response.topics[0].partitions[0]


def fetch_at(cluster: LocalCluster, node: int, topic: str) -> None:
    """Fetch partition 0 of `topic` from `node` itself, raising its error (NOT_LEADER_OR_FOLLOWER, ...)."""
    request = pb.FetchRequest(max_wait_ms=0, partitions=[pb.FetchPartition(topic=topic, partition=0, fetch_offset=0,
                                                                           max_bytes=1 << 16)])
    response: pb.FetchResponse = call(cluster.client.stubs(cluster.spec.nodes[node]).partitions.Fetch, request, 5.0)
    result = response.partitions[0]
    raise_for(result.error_code, result.error_message)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for value in values:
            producer.send(topic, value=value, partition=0).get(timeout=20)


def read_committed(cluster: LocalCluster, topic: str, expected: int) -> list[bytes]:
    """Every committed value of partition 0 of `topic`, up to its end (tests.helpers.read_all), once there are
    `expected` of them: a new leader's high watermark trails until its followers fetch again."""
    def enough() -> list[bytes] | None:
        found = [record.value for record in read_all(cluster.bootstrap_servers, topic, partitions=1)]
        return found if len(found) >= expected else None
    return wait_until(enough, 30, f"{expected} records of {topic}")


def test_each_node_has_a_host_and_confluent_kafka_transactions_commit_and_abort_on_it(cluster: LocalCluster) -> None:
    assert len({address.rsplit(":", 1)[0] for address in cluster.spec.nodes.values()}) == 3
    assert cluster.zookeeper is not None and not cluster.zookeeper.address.startswith("127.")
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    admin.create_topics([NewTopic("hosts-orders", num_partitions=3, replication_factor=3)])["hosts-orders"].result(30)
    described = admin.list_topics("hosts-orders", timeout=10).topics["hosts-orders"].partitions
    assert all(sorted(p.replicas) == [0, 1, 2] for p in described.values()), described
    wait_until(lambda: all(sorted(p.isrs) == [0, 1, 2] for p in admin.list_topics(
        "hosts-orders", timeout=10).topics["hosts-orders"].partitions.values()), 20, "every replica in sync")

    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "hosts-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(9):
        producer.produce("hosts-orders", value=b"committed-%d" % i, partition=i % 3)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("hosts-orders", value=b"aborted-%d" % i, partition=i % 3)
    producer.flush(30)
    producer.abort_transaction(30)

    consumer = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "hosts-reader",
                              "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["hosts-orders"])
        values: list[bytes] = []

        def nine_read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            elif message is not None and message.error().code() != ConfluentError._PARTITION_EOF:
                raise AssertionError(message.error())
            return len(values) >= 9
        wait_until(nine_read, 30, "the committed records")
        assert consumer.poll(1.0) is None  # nothing of the aborted transaction follows
    finally:
        consumer.close()
    assert sorted(values) == [b"committed-%d" % i for i in range(9)]


def test_a_leader_cut_off_from_its_peers_and_zookeeper_is_replaced_and_rejoins_after_heal(healed: LocalCluster) -> None:
    cluster = healed
    cluster.create_topic("cut-leader", partitions=1)
    before = [b"before-%d" % i for i in range(20)]
    produce(cluster.bootstrap_servers, "cut-leader", before)
    first = metadata_of(cluster, "cut-leader", 0)
    leader = first.leader
    others = [n for n in cluster.node_ids if n != leader]
    wait_until(lambda: sorted(metadata_of(cluster, "cut-leader", others[0]).isr) == [0, 1, 2], 20, "a full ISR")

    cluster.partition([leader], [*others, "zookeeper"])
    moved = wait_until(lambda: (m := metadata_of(cluster, "cut-leader", others[0])).leader in others and m,
                       4 * SESSION_TIMEOUT_MS / 1000 + 10, "a new leader among the nodes still together")
    assert moved.leader_epoch > first.leader_epoch
    assert leader not in moved.isr
    after = [b"after-%d" % i for i in range(20)]
    produce(",".join(cluster.spec.nodes[n] for n in others), "cut-leader", after)  # acks=all: the two left

    cluster.heal()
    wait_until(lambda: sorted(metadata_of(cluster, "cut-leader", others[0]).isr) == [0, 1, 2], 30,
               f"node {leader} back in the ISR")
    assert read_committed(cluster, "cut-leader", 40) == before + after


def test_a_leader_cut_off_from_zookeeper_alone_serves_until_its_session_expires(healed: LocalCluster) -> None:
    cluster = healed
    cluster.create_topic("zk-cut", partitions=1)
    produce(cluster.bootstrap_servers, "zk-cut", [b"v-%d" % i for i in range(5)])
    leader = metadata_of(cluster, "zk-cut", 0).leader
    others = [n for n in cluster.node_ids if n != leader]

    cluster.partition([leader], ["zookeeper"])
    fetch_at(cluster, leader, "zk-cut")  # still the leader: its session has not expired yet
    wait_until(lambda: metadata_of(cluster, "zk-cut", others[0]).leader in others,
               4 * SESSION_TIMEOUT_MS / 1000 + 10, "the controller moving the leadership")

    def refused() -> bool:
        try:
            fetch_at(cluster, leader, "zk-cut")
        except NotLeaderOrFollowerError:
            return True
        return False
    wait_until(refused, 4 * SESSION_TIMEOUT_MS / 1000 + 10, f"node {leader} giving up its leadership")

    cluster.heal()
    wait_until(lambda: sorted(metadata_of(cluster, "zk-cut", others[0]).isr) == [0, 1, 2], 30,
               f"node {leader} registered again and back in the ISR")
    produce(cluster.bootstrap_servers, "zk-cut", [b"w-%d" % i for i in range(5)])
    assert read_committed(cluster, "zk-cut", 10) == [b"v-%d" % i for i in range(5)] + [b"w-%d" % i for i in range(5)]


@pytest.mark.slow
def test_the_demo_runs_every_scene_on_three_hosts() -> None:
    source = (Path(__file__).parents[2] / "txnsim" / "cli" / "demo_cmd.py").read_text()
    scenes = re.findall(r'scene\((\d+), "([^"]+)"', source)
    result = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "demo", "--namespaces"], capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, COLUMNS="200", TERM="dumb", NO_COLOR="1"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for number, title in scenes:
        assert f"Scene {number}: {title}" in result.stdout, title
    assert "10.213." in result.stdout  # the nodes' own addresses, not loopback
    assert "ProducerFencedError" in result.stdout and "all there, once" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("unclean", [False, True], ids=["clean", "unclean"])
def test_unclean_election_loses_acknowledged_writes_and_a_clean_one_waits(tmp_path: Path, unclean: bool) -> None:
    """Replica Y is cut off from the leader and falls out of the ISR; ten records are acknowledged by the two
    left (acks=all, min.insync.replicas 2); both die. A clean controller leaves the partition offline until an
    ISR member returns, then serves all ten; an unclean one lets Y lead, and the ten are gone for good."""
    with LocalCluster(nodes=3, data_dir=tmp_path, namespaces=True, txn_shards=2, half_shards=1,
                      zookeeper_session_timeout_ms=SESSION_TIMEOUT_MS, replica_lag_time_max_ms=2000,
                      min_insync_replicas=2, unclean_leader_election_enable=unclean) as cluster:
        cluster.create_topic("unclean", partitions=1)
        state = metadata_of(cluster, "unclean", 0)
        leader = state.leader
        behind, other = [n for n in state.replicas if n != leader]
        cluster.partition([behind], [leader, other])  # it still reaches the ZooKeeper: registered, alive
        # acks=all: the first write waits until the leader drops the silent replica from the ISR
        # (replica.lag.time.max.ms), then the two left have each record
        acknowledged = [b"acked-%d" % i for i in range(10)]
        produce(",".join(cluster.spec.nodes[n] for n in (leader, other)), "unclean", acknowledged)
        assert sorted(metadata_of(cluster, "unclean", other).isr) == sorted([leader, other])
        cluster.kill(leader)
        cluster.kill(other)
        cluster.heal()
        if unclean:
            wait_until(lambda: metadata_of(cluster, "unclean", behind).leader == behind,
                       4 * SESSION_TIMEOUT_MS / 1000 + 10, f"node {behind} elected uncleanly")
        else:
            offline = wait_until(lambda: (m := metadata_of(cluster, "unclean", behind)).leader == -1 and m,
                                 4 * SESSION_TIMEOUT_MS / 1000 + 10, "the partition offline")
            assert list(offline.isr) == [other] or list(offline.isr) == [leader], offline  # the last ISR member
        cluster.restart(leader)
        cluster.restart(other)
        wait_until(lambda: sorted(metadata_of(cluster, "unclean", behind).isr) == [0, 1, 2], 30, "every replica back")
        produce(cluster.bootstrap_servers, "unclean", [b"after"])
        values = read_committed(cluster, "unclean", 1 if unclean else 11)
    if unclean:
        assert values == [b"after"], "the acknowledged records outlived an unclean election"
    else:
        assert values == [*acknowledged, b"after"]
