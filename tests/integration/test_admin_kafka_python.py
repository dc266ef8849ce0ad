"""txnsim's Admin as kafka-python's KafkaAdminClient is used: create_topics with NewTopic objects (txnsim's or
kafka-python's own), names or a dict, validate_only; describe_transactions; Kafka's error names for bad input,
with nothing created."""
from __future__ import annotations

import pytest
from kafka.admin import NewTopic as KafkaPythonNewTopic

from txnsim import NewTopic, Producer
from txnsim.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
)


def test_create_topics_takes_new_topics_names_and_dicts(admin, request):
    base = f"kp-{request.node.name[:20]}"
    admin.create_topics([NewTopic(f"{base}-a", num_partitions=3), f"{base}-b",
                         KafkaPythonNewTopic(f"{base}-c", num_partitions=2, replication_factor=1,
                                             topic_configs={"message.type": "NORMAL"})])
    admin.create_topics({f"{base}-d": {"num_partitions": 4}})
    topics = admin.list_topics()
    assert [topics[f"{base}-{x}"] for x in "abcd"] == [3, 1, 2, 4]

    admin.create_topics([NewTopic(f"{base}-e", 2)], validate_only=True)
    assert f"{base}-e" not in admin.list_topics()


@pytest.mark.parametrize(("topic", "error"), [
    (NewTopic("kp-rf", 1, replication_factor=3), InvalidReplicationFactorError),
    (NewTopic("kp-zero", 0), InvalidPartitionsError),
])
def test_bad_new_topics_get_kafkas_error_names_and_nothing_is_created(admin, topic, error):
    with pytest.raises(error, match=error.name):
        admin.create_topics([NewTopic("kp-fine-one", 1), topic])
    assert "kp-fine-one" not in admin.list_topics(), "a valid topic of a refused request was created"


def test_an_existing_topic_is_topic_already_exists(admin, topic):
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, 1)])


def test_describe_transactions_describes_each_id(cluster, admin, topic, txn_id):
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"v", partition=1).get(timeout=10)
        (described,) = admin.describe_transactions([txn_id])
        assert str(described.state) == "Ongoing"
        assert {(tp.topic, tp.partition) for tp in described.partitions} == {(topic, 1)}
        producer.abort_transaction()
