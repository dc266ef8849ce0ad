"""Admin APIs and ListOffsets by time on the Kafka port of real nodes, through confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient unchanged: create, delete and list topics, Kafka's error names for bad input,
describe and list transactions, describe producers, offsets_for_times; topic deletion through txnsim's own Admin.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient

from tests.helpers import wait_until
from tests.integration.conftest import FAST_SETTINGS
from txnsim import Admin, LocalCluster, errors
from txnsim import Producer as TxnsimProducer
from txnsim import TopicPartition as TxnsimTopicPartition

pytestmark = pytest.mark.timeout(180)


def confluent_admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers})


def kafka_python_admin(cluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers, request_timeout_ms=10_000)


def create_with_confluent(admin: AdminClient, *topics: NewTopic, validate_only: bool = False) -> dict[str, object]:
    """topic -> None when created, else the KafkaError the node answered."""
    futures = admin.create_topics(list(topics), operation_timeout=10, request_timeout=15, validate_only=validate_only)
    out: dict[str, object] = {}
    for name, future in futures.items():
        try:
            future.result(timeout=20)
            out[name] = None
        except KafkaException as exc:
            out[name] = exc.args[0]
    return out


def delete_with_confluent(admin: AdminClient, *names: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, future in admin.delete_topics(list(names), operation_timeout=10, request_timeout=15).items():
        try:
            future.result(timeout=20)
            out[name] = None
        except KafkaException as exc:
            out[name] = exc.args[0]
    return out


def produce(cluster, topic: str, records: list[dict]) -> list:
    """Produce with confluent-kafka; returns each delivery's (error, message). A topic missing from metadata fails
    its records at once (librdkafka otherwise waits for it to appear until the message timeout)."""
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 10_000, "topic.metadata.propagation.max.ms": 10})
    reports: list = []
    for record in records:
        producer.produce(topic, **record, on_delivery=lambda err, msg: reports.append((err, msg)))
    producer.flush(20)
    return reports


def consume(cluster, topic: str, partitions: int, expected: int, timeout_s: float = 20.0) -> list:
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "admin-test",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([CkTopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            seen.append(message)
    consumer.close()
    return seen


def log_dirs(cluster, topic: str) -> list[str]:
    logs = cluster.data_dir / "logs"
    return sorted(p.name for p in logs.iterdir() if p.name.rsplit("-", 1)[0] == topic)


# ------------------------------------------------------------ topics through confluent-kafka


def test_confluent_admin_creates_a_topic_that_clients_then_produce_to_and_consume(cluster):
    admin = confluent_admin(cluster)
    assert create_with_confluent(admin, NewTopic("ck-created", num_partitions=3, replication_factor=1)) == {
        "ck-created": None}
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["ck-created"].partitions) == 3
    reports = produce(cluster, "ck-created", [{"value": f"v{i}".encode(), "partition": i % 3} for i in range(9)])
    assert [err for err, _ in reports] == [None] * 9
    assert sorted(m.value() for m in consume(cluster, "ck-created", 3, 9)) == sorted(
        f"v{i}".encode() for i in range(9))


def test_confluent_admin_bad_input_gets_kafkas_error_names(cluster):
    admin = confluent_admin(cluster)
    create_with_confluent(admin, NewTopic("ck-twice", num_partitions=1))
    errors = create_with_confluent(
        admin, NewTopic("bad name!", num_partitions=1), NewTopic("ck-rf3", num_partitions=1, replication_factor=3),
        NewTopic("ck-twice", num_partitions=1), NewTopic("ck-conf", num_partitions=1, config={"cleanup.policy": "x"}),
        NewTopic("__reserved", num_partitions=1))
    codes = {name: err.code() for name, err in errors.items()}
    assert codes == {"bad name!": KafkaError.TOPIC_EXCEPTION, "ck-rf3": KafkaError.INVALID_REPLICATION_FACTOR,
                     "ck-twice": KafkaError.TOPIC_ALREADY_EXISTS, "ck-conf": KafkaError.INVALID_CONFIG,
                     "__reserved": KafkaError.TOPIC_EXCEPTION}
    assert "needs a replicated cluster" in errors["ck-rf3"].str()
    assert create_with_confluent(admin, NewTopic("ck-only-checked", num_partitions=2), validate_only=True) == {
        "ck-only-checked": None}
    assert "ck-only-checked" not in admin.list_topics(timeout=10).topics
    assert delete_with_confluent(admin, "ck-never-was")["ck-never-was"].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_admin_deletes_a_topic_metadata_and_produce_say_it_is_gone_and_its_logs_are_removed(cluster):
    admin = confluent_admin(cluster)
    create_with_confluent(admin, NewTopic("ck-deleted", num_partitions=3))
    assert [err for err, _ in produce(cluster, "ck-deleted", [{"value": b"x", "partition": p} for p in range(3)])] \
        == [None] * 3
    assert log_dirs(cluster, "ck-deleted") == ["ck-deleted-0", "ck-deleted-1", "ck-deleted-2"]
    assert delete_with_confluent(admin, "ck-deleted") == {"ck-deleted": None}
    assert "ck-deleted" not in admin.list_topics(timeout=10).topics
    assert log_dirs(cluster, "ck-deleted") == []
    (err, _msg), = produce(cluster, "ck-deleted", [{"value": b"y", "partition": 0}])
    assert err is not None and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
    txnsim_producer = TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            txnsim_producer.send("ck-deleted", value=b"z", partition=0).get(timeout=10)
    finally:
        txnsim_producer.close()
    # the name can be used again, and starts empty
    create_with_confluent(admin, NewTopic("ck-deleted", num_partitions=1))
    with Admin(cluster.bootstrap_servers) as txnsim_admin:
        assert txnsim_admin.end_offsets([TxnsimTopicPartition("ck-deleted", 0)]) == {
            TxnsimTopicPartition("ck-deleted", 0): 0}


# ------------------------------------------------------------ topics through kafka-python


def test_kafka_python_admin_creates_lists_and_deletes_topics(cluster):
    admin = kafka_python_admin(cluster)
    try:
        created = admin.create_topics({"kp-a": {"num_partitions": 2, "replication_factor": 1},
                                       "kp-b": {"configs": {"message.type": "FIFO"}}})
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [("kp-a", 0), ("kp-b", 0)]
        assert {"kp-a", "kp-b"} <= set(admin.list_topics())
        bad = admin.create_topics({"kp-zero": {"num_partitions": 0}, "kp-rf3": {"replication_factor": 3},
                                   "bad/name": {}}, raise_errors=False)
        assert {t["name"]: t["error_code"] for t in bad["topics"]} == {"kp-zero": 37, "kp-rf3": 38, "bad/name": 17}
        deleted = admin.delete_topics(["kp-a", "kp-b", "kp-none"], raise_errors=False)
        assert {t["name"]: t["error_code"] for t in deleted["topics"]} == {"kp-a": 0, "kp-b": 0, "kp-none": 3}
        assert not {"kp-a", "kp-b"} & set(admin.list_topics())
    finally:
        admin.close()


# ------------------------------------------------------------ transactions and producers through kafka-python


def test_kafka_python_admin_describes_and_lists_an_open_transaction_and_its_producers(cluster, topic, txn_id):
    producer = TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"open", partition=0).get(timeout=10)
        producer.send(topic, value=b"open", partition=2).get(timeout=10)
        admin = kafka_python_admin(cluster)
        try:
            description = admin.describe_transactions([txn_id])[txn_id]
            assert description.state.value == "Ongoing"
            assert description.coordinator_id == cluster.coordinator_for(txn_id)
            assert {(tp.topic, tp.partition) for tp in description.topic_partitions} == {(topic, 0), (topic, 2)}
            listed = admin.list_transactions()
            everywhere = {t.transactional_id for listings in listed.values() for t in listings}
            assert txn_id in everywhere
            assert len(listed) == 3  # every node answered for its own shards
            producers = admin.describe_producers([KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)])
            p0 = producers[KpTopicPartition(topic, 0)].active_producers
            assert [p.producer_id for p in p0] == [description.producer_id]
            assert p0[0].current_transaction_start_offset == 0
            assert producers[KpTopicPartition(topic, 1)].active_producers == []
        finally:
            admin.close()
    finally:
        producer.abort_transaction()
        producer.close()


# ------------------------------------------------------------ offsets by time


@pytest.fixture(scope="module")
def timed_topic(cluster):
    """'timed', one partition: offsets 0..5 written at 1000, 2000, ..., 6000 ms."""
    create_with_confluent(confluent_admin(cluster), NewTopic("timed", num_partitions=1))
    reports = produce(cluster, "timed", [{"value": f"v{i}".encode(), "partition": 0, "timestamp": 1000 * (i + 1)}
                                         for i in range(6)])
    assert [err for err, _ in reports] == [None] * 6
    return "timed"


def test_confluent_offsets_for_times_is_the_first_record_at_or_after_the_time(cluster, timed_topic):
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "times"})
    try:
        asked = [CkTopicPartition(timed_topic, 0, ts) for ts in (0, 2500, 6000, 9999)]
        found = [consumer.offsets_for_times([tp], timeout=10)[0].offset for tp in asked]
        assert found == [0, 2, 5, -1]  # -1: no record at or after that time (OFFSET_END)
    finally:
        consumer.close()
    admin = confluent_admin(cluster)
    tp = CkTopicPartition(timed_topic, 0)
    result = admin.list_offsets({tp: OffsetSpec.for_timestamp(3000)}, request_timeout=10)[tp].result(timeout=20)
    assert (result.offset, result.timestamp) == (2, 3000)
    result = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=10)[tp].result(timeout=20)
    assert (result.offset, result.timestamp) == (5, 6000)


def test_grpc_list_offsets_finds_by_time_too(cluster, timed_topic):
    from client.transport import NodeChannels, call
    from proto import txnsim_pb2 as pb
    metadata = call(NodeChannels().stubs(cluster.bootstrap_servers.split(",")[0]).cluster.Metadata,
                    pb.MetadataRequest(topics=[timed_topic]), 5.0)
    leader = metadata.topics[0].partitions[0].leader
    stubs = NodeChannels().stubs(cluster.spec.nodes[leader])
    ref = pb.TopicPartitionRef(topic=timed_topic, partition=0)
    answer = call(stubs.partitions.ListOffsets, pb.ListOffsetsRequest(
        partitions=[ref, ref, ref, ref], timestamps=[1500, 6000, 6001, -3], isolation_level=1), 5.0)
    assert [(p.offset_for_timestamp, p.timestamp) for p in answer.partitions] == [
        (1, 2000), (5, 6000), (-1, -1), (5, 6000)]
    assert answer.partitions[0].high_watermark == 6


def test_kafka_python_offsets_for_times(cluster, timed_topic):
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap_servers, request_timeout_ms=10_000)
    try:
        tp = KpTopicPartition(timed_topic, 0)
        found = consumer.offsets_for_times({tp: 4001})[tp]
        assert (found.offset, found.timestamp) == (4, 5000)
        assert consumer.offsets_for_times({tp: 7000})[tp] is None
    finally:
        consumer.close()


# ------------------------------------------------------------ txnsim's own Admin and command line; restarts


def test_a_transaction_that_wrote_to_a_deleted_topic_still_completes(cluster, admin, topic, txn_id):
    admin.create_topic("short-lived", partitions=1)
    producer = TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("short-lived", value=b"a", partition=0).get(timeout=10)
        producer.send(topic, value=b"b", partition=0).get(timeout=10)
        admin.delete_topic("short-lived")
        producer.commit_transaction()
    finally:
        producer.close()
    wait_until(lambda: admin.describe_transaction(txn_id).state == "CompleteCommit", 10, "the commit to complete")
    tp = TxnsimTopicPartition(topic, 0)
    assert admin.last_stable_offsets([tp]) == admin.end_offsets([tp]) == {tp: 2}  # record and marker


def test_txnsim_topics_delete_on_the_command_line(cluster, admin):
    import os
    import subprocess
    import sys
    from pathlib import Path
    script = Path(sys.executable).with_name("txnsim")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "txnsim.cli.main"]
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1")
    admin.create_topic("cli-doomed", partitions=2)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*command, "topics", "delete", *args, "--bootstrap-servers", cluster.bootstrap_servers],
                              check=False, capture_output=True, text=True, env=env, timeout=60)
    done = run("cli-doomed")
    assert done.returncode == 0 and "deleted topic cli-doomed (2 partition(s))" in done.stdout, done
    assert "cli-doomed" not in admin.list_topics()
    again = run("cli-doomed")
    assert again.returncode != 0 and "UNKNOWN_TOPIC_OR_PARTITION" in again.stderr and "Traceback" not in again.stderr


@pytest.mark.slow
def test_a_deleted_topic_stays_deleted_across_a_restart_of_the_cluster(tmp_path):
    with LocalCluster(nodes=3, data_dir=tmp_path, **FAST_SETTINGS) as cluster, Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic("doomed", partitions=3)
        admin.create_topic("kept", partitions=1)
        producer = TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers)
        for p in range(3):
            producer.send("doomed", value=b"x", partition=p).get(timeout=10)
        producer.close()
        assert admin.delete_topic("doomed") == 3
        assert "doomed" not in admin.list_topics()
        assert log_dirs(cluster, "doomed") == []
        # retriable, so retried until the request timeout
        with Admin(cluster.bootstrap_servers, request_timeout_ms=2_000) as impatient, \
                pytest.raises(errors.UnknownTopicOrPartitionError):
            impatient.end_offsets([TxnsimTopicPartition("doomed", 0)])
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            admin.delete_topic("doomed")
    with LocalCluster(nodes=3, data_dir=tmp_path, **FAST_SETTINGS) as cluster, Admin(cluster.bootstrap_servers) as admin:
        assert admin.list_topics() == {"kept": 1}
        assert "doomed" not in confluent_admin(cluster).list_topics(timeout=10).topics
        assert log_dirs(cluster, "doomed") == []


@pytest.mark.slow
def test_a_topic_deleted_and_created_again_while_a_node_is_paused_is_served_afresh_when_it_resumes(tmp_path):
    """The paused node still has the old logs open and misses the request to close them; its next lookup finds
    their directories replaced and opens the new, empty ones."""
    with LocalCluster(nodes=3, data_dir=tmp_path, **FAST_SETTINGS) as cluster, Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic("away", partitions=3)
        producer = TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers)
        for p in range(3):
            producer.send("away", value=b"old", partition=p).get(timeout=10)
        producer.close()
        cluster.pause(2)
        assert admin.delete_topic("away") == 3
        admin.create_topic("away", partitions=3)  # the same name again: new, empty logs
        cluster.resume(2)
        tps = [TxnsimTopicPartition("away", p) for p in range(3)]
        assert wait_until(lambda: admin.end_offsets(tps) == {tp: 0 for tp in tps}, 30, "empty logs everywhere")
        producer = TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers)
        for p in range(3):
            assert producer.send("away", value=b"new", partition=p).get(timeout=20).offset == 0
        producer.close()
        assert admin.end_offsets(tps) == {tp: 1 for tp in tps}


def test_a_topic_deleted_and_created_again_starts_with_no_committed_offsets(cluster):
    """Kafka removes a deleted topic's committed offsets from every group; a consumer of the new topic under the
    old name must not skip its records."""
    admin = confluent_admin(cluster)
    assert create_with_confluent(admin, NewTopic("reborn", num_partitions=2)) == {"reborn": None}
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "reborn-readers",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[CkTopicPartition("reborn", p, 40) for p in range(2)], asynchronous=False)
        assert [tp.offset for tp in consumer.committed([CkTopicPartition("reborn", p) for p in range(2)],
                                                       timeout=10)] == [40, 40]
        assert delete_with_confluent(admin, "reborn") == {"reborn": None}
        assert create_with_confluent(admin, NewTopic("reborn", num_partitions=2)) == {"reborn": None}
        committed = consumer.committed([CkTopicPartition("reborn", p) for p in range(2)], timeout=10)
        assert [tp.offset for tp in committed] == [-1001, -1001]  # OFFSET_INVALID: nothing committed
    finally:
        consumer.close()
    with Admin(cluster.bootstrap_servers) as txnsim_admin:
        offsets = txnsim_admin.list_consumer_group_offsets("reborn-readers")
    assert not any(tp.topic == "reborn" for tp in offsets)
