"""TopicStore: deleting topics, and a name created again starting with empty logs."""
from __future__ import annotations

import pytest

from coordinator.topics import TopicStore, remove_log_dirs
from proto.errors import (
    InvalidTopicError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


@pytest.fixture
def store(tmp_path) -> TopicStore:
    (tmp_path / "metadata").mkdir()
    (tmp_path / "logs").mkdir()
    return TopicStore(tmp_path / "metadata", tmp_path / "logs")


def test_delete_returns_the_partition_count_and_the_topic_is_gone(store):
    store.create("orders", 3, {"message.type": "FIFO"})
    store.create("audit", 1)
    assert store.delete("orders") == 3
    assert store.all() == {"audit": 1} and store.configs("orders") == {}
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete("orders")
    with pytest.raises(InvalidTopicError):
        store.delete("__consumer_offsets")


def test_validate_checks_everything_create_checks_without_writing(store):
    store.create("orders", 1)
    with pytest.raises(TopicAlreadyExistsError):
        store.validate("orders", 1)
    assert store.validate("fresh", 2, {"half.message.storage": "kafka"}) == {"half.message.storage": "kafka"}
    assert "fresh" not in store.all()


def test_creating_a_name_again_clears_log_directories_a_deletion_left_behind(store, tmp_path):
    logs = tmp_path / "logs"
    store.create("audit", 1)  # the cluster had topics, so topics.json exists beside what deletions left
    for name in ("orders-0", "orders-1", "orders-x-0", "orders2-0"):
        (logs / name).mkdir()
        (logs / name / "00000000000000000000-e0.log").write_bytes(b"old")
    store.create("orders", 2)
    assert sorted(p.name for p in logs.iterdir()) == ["orders-x-0", "orders2-0"]
    assert remove_log_dirs(logs, "orders-x") == ["orders-x-0"]
    assert sorted(p.name for p in logs.iterdir()) == ["orders2-0"]


def test_a_deletion_removes_logs_only_while_the_name_is_unused(store, tmp_path):
    logs = tmp_path / "logs"
    store.create("orders", 1)
    (logs / "orders-0").mkdir()
    assert store.remove_logs_if_deleted("orders") == []  # created again meanwhile: its logs stay
    store.delete("orders")
    assert store.remove_logs_if_deleted("orders") == ["orders-0"]
    assert not (logs / "orders-0").exists()


def test_a_missing_topics_file_beside_topic_logs_is_damage_not_an_empty_cluster(store, tmp_path, caplog):
    store.create("orders", 2)
    for partition in range(2):
        (tmp_path / "logs" / f"orders-{partition}").mkdir()
        (tmp_path / "logs" / f"orders-{partition}" / "00000000000000000000-e0.log").write_bytes(b"kept")
    (tmp_path / "logs" / "__consumer_offsets-0").mkdir()
    (tmp_path / "metadata" / "topics.json").unlink()
    with caplog.at_level("ERROR"):
        with pytest.raises(KafkaStorageError, match="topics.json is missing.*logs of 1 topic.*orders"):
            store.partitions("orders")
        with pytest.raises(KafkaStorageError):
            store.all()
    assert caplog.text.count("topics.json is missing") == 1  # said once, however often it is asked
    with pytest.raises(KafkaStorageError):
        store.create("orders", 2)  # which would clear the surviving logs
    assert (tmp_path / "logs" / "orders-0" / "00000000000000000000-e0.log").read_bytes() == b"kept"
    (tmp_path / "metadata" / "topics.json").write_text('{"orders": 2}')
    assert store.partitions("orders") == 2


def test_a_cluster_that_never_had_a_topic_needs_no_topics_file(store, tmp_path):
    (tmp_path / "logs" / "__transaction_state-3").mkdir()
    assert store.all() == {}
    store.create("first", 1)
    assert store.all() == {"first": 1}
