"""Kafka's admin surface beyond topics, through confluent-kafka's and kafka-python's admin clients unchanged:
topic and broker configs described and altered, partitions added, records deleted, a group's offsets deleted,
topics auto-created when the cluster allows it, and retention that deletes what it should."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse

from tests.helpers import kafka_round_trip, wait_until
from txnsim import Admin, LocalCluster, TopicPartition

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(nodes=2, data_dir=tmp_path_factory.mktemp("configs"), txn_shards=4, offsets_shards=2,
                      auto_create_topics_enable=True, num_partitions=2, log_retention_check_interval_ms=200,
                      group_min_session_timeout_ms=500, group_initial_rebalance_delay_ms=100) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers})


def create(admin: AdminClient, name: str, partitions: int = 1, **configs: str) -> None:
    for future in admin.create_topics([NewTopic(name, partitions, config=configs)]).values():
        future.result(timeout=20)


def produce(cluster, topic: str, count: int, partition: int = 0, value: bytes = b"x" * 100) -> None:
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "linger.ms": 0})
    for _ in range(count):
        producer.produce(topic, value=value, partition=partition)
        producer.flush(20)


def test_topic_configs_are_described_with_their_source_and_altered_both_ways(cluster, admin):
    create(admin, "described", **{"cleanup.policy": "compact", "retention.ms": "86400000"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "described")
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    assert configs["cleanup.policy"].value == "compact" and configs["cleanup.policy"].source == \
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "1048588"  # the node's message.max.bytes
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # IncrementalAlterConfigs: one setting changed, the others kept
    change = ConfigResource(ConfigResource.Type.TOPIC, "described", incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([change])[change].result(timeout=20)
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    assert configs["max.message.bytes"].value == "2000" and configs["cleanup.policy"].value == "compact,delete"
    assert configs["retention.ms"].value == "86400000"
    # the new limit holds at once: a batch over 2000 bytes is refused
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "message.max.bytes": 100_000})
    errors: list = []
    producer.produce("described", value=b"y" * 5000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    assert errors and errors[0] is not None and errors[0].name() == "MSG_SIZE_TOO_LARGE"
    # a bad value or an unknown name is INVALID_CONFIG, and changes nothing
    bad = ConfigResource(ConfigResource.Type.TOPIC, "described", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="INVALID_CONFIG|Invalid config|invalid value"):
        admin.incremental_alter_configs([bad])[bad].result(timeout=20)
    assert admin.describe_configs([resource])[resource].result(timeout=20)["retention.ms"].value == "86400000"


def test_kafka_3s_deprecated_topic_settings_are_accepted(cluster, admin):
    # librdkafka's mixed-message-version test sets message.format.version, as tools written for Kafka 3 do
    create(admin, "kafka3-settings")
    change = ConfigResource(ConfigResource.Type.TOPIC, "kafka3-settings",
                            set_config={"message.format.version": "0.10.0",
                                        "message.timestamp.difference.max.ms": "60000"})
    admin.alter_configs([change])[change].result(timeout=20)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "kafka3-settings")
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    assert configs["message.format.version"].value == "0.10.0"
    assert configs["message.timestamp.difference.max.ms"].value == "60000"


def test_broker_configs_are_described_and_read_only(cluster, admin):
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([broker])[broker].result(timeout=20)
    assert configs["message.max.bytes"].value == "1048588" and configs["message.max.bytes"].is_read_only
    assert configs["auto.create.topics.enable"].value == "true" and configs["num.partitions"].value == "2"
    change = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"message.max.bytes": "5"})
    with pytest.raises(KafkaException, match="dynamically"):
        admin.alter_configs([change])[change].result(timeout=20)
    assert admin.describe_configs([broker])[broker].result(timeout=20)["message.max.bytes"].value == "1048588"


def test_kafkas_dynamic_broker_settings_are_stored_per_node_and_as_the_cluster_default(cluster, admin):
    # librdkafka's admin test sets a SASL setting on a broker; Kafka's tools set thread counts cluster-wide
    node = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("sasl.kerberos.min.time.before.relogin", "58000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([node])[node].result(timeout=20)
    # the cluster default (resource name ""), which confluent-kafka will not send: through kafka-python's client
    Resource = AlterConfigsRequest.AlterConfigsResource
    answer = kafka_round_trip(cluster.kafka_bootstrap_servers, AlterConfigsRequest(version=1, validate_only=False, resources=[
        Resource(resource_type=4, resource_name="", configs=[
            Resource.AlterableConfig(name="log.cleaner.threads", value="2"),
            Resource.AlterableConfig(name="sasl.kerberos.min.time.before.relogin", value="1")])]), AlterConfigsResponse)
    assert [(r.resource_name, r.error_code) for r in answer.responses] == [("", 0)]
    described = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([described])[described].result(timeout=20)
    kerberos = configs["sasl.kerberos.min.time.before.relogin"]
    assert kerberos.value == "58000" and kerberos.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert configs["log.cleaner.threads"].value == "2"
    assert configs["log.cleaner.threads"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    # node 0 has only the default; a restart of the cluster would read the same file
    other = ConfigResource(ConfigResource.Type.BROKER, "0")
    assert admin.describe_configs([other])[other].result(timeout=20)[
        "sasl.kerberos.min.time.before.relogin"].value == "1"
    # a mix with one of a node's own settings changes nothing
    mixed = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("num.io.threads", "16", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="dynamically"):
        admin.incremental_alter_configs([mixed])[mixed].result(timeout=20)
    assert "num.io.threads" not in admin.describe_configs([described])[described].result(timeout=20)
    # DELETE takes a node's own value away, and the default shows through
    undo = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("sasl.kerberos.min.time.before.relogin", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([undo])[undo].result(timeout=20)
    assert admin.describe_configs([described])[described].result(timeout=20)[
        "sasl.kerberos.min.time.before.relogin"].value == "1"


def test_create_partitions_then_delete_records_move_the_topic_as_kafka_would(cluster, admin):
    create(admin, "grown", 1)
    for future in admin.create_partitions([NewPartitions("grown", 3)]).values():
        future.result(timeout=20)
    with pytest.raises(KafkaException, match="INVALID_PARTITIONS|already has 3"):
        for future in admin.create_partitions([NewPartitions("grown", 3)]).values():
            future.result(timeout=20)
    assert len(admin.list_topics("grown", timeout=10).topics["grown"].partitions) == 3
    produce(cluster, "grown", 10)
    for future in admin.delete_records([CkTopicPartition("grown", 0, 6)]).values():
        assert future.result(timeout=20).low_watermark == 6
    with Admin(cluster.bootstrap_servers) as txnsim_admin:
        assert txnsim_admin.beginning_offsets([TopicPartition("grown", 0)])[TopicPartition("grown", 0)] == 6
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE|out of range"):
        for future in admin.delete_records([CkTopicPartition("grown", 0, 99)]).values():
            future.result(timeout=20)


def test_a_groups_offsets_are_deleted_unless_it_is_subscribed_to_the_topic(cluster, admin):
    from kafka.admin import KafkaAdminClient

    create(admin, "committed", 1)
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "forgetful",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[CkTopicPartition("committed", 0, 3)], asynchronous=False)
    consumer.close()
    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers, request_timeout_ms=10_000)
    try:
        from kafka import TopicPartition as KpTopicPartition
        deleted = client.delete_group_offsets("forgetful", [KpTopicPartition("committed", 0)])
        assert [error.errno for error in deleted.values()] == [0]
    finally:
        client.close()
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "forgetful",
                         "enable.auto.commit": False})
    try:
        (committed,) = consumer.committed([CkTopicPartition("committed", 0)], timeout=10)
        assert committed.offset == -1001  # nothing committed any more
    finally:
        consumer.close()


def test_metadata_for_an_unknown_topic_creates_it_when_the_cluster_allows(cluster, admin):
    produce(cluster, "made-on-demand", 1)
    metadata = admin.list_topics("made-on-demand", timeout=10)
    assert len(metadata.topics["made-on-demand"].partitions) == 2  # num.partitions


def test_retention_deletes_old_segments_and_moves_the_earliest_offset(cluster, admin):
    create(admin, "fleeting", 1, **{"segment.bytes": "1000", "retention.ms": "1000"})
    produce(cluster, "fleeting", 30)
    tp = TopicPartition("fleeting", 0)
    with Admin(cluster.bootstrap_servers) as txnsim_admin:
        wait_until(lambda: txnsim_admin.beginning_offsets([tp])[tp] > 0, 20,
                   what="retention to delete the segments older than a second")
        assert txnsim_admin.end_offsets([tp])[tp] == 30

