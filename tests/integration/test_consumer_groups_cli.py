"""`txnsim consumer-groups` as a user runs it against a live group: list and describe show members, assignment,
committed offsets and lag; reset-offsets plans, refuses an active group, and commits for an inactive one;
delete removes the group and its offsets."""
from __future__ import annotations

import pytest

from tests.helpers import wait_until
from tests.integration.test_cli import txnsim
from txnsim import Consumer, Producer, TopicPartition

pytestmark = pytest.mark.timeout(180)


def groups(cluster, *args: str):
    return txnsim("consumer-groups", *args, "--bootstrap-servers", cluster.bootstrap_servers)


def test_describe_reset_and_delete_a_group(cluster, admin, topic):
    bs, group = cluster.bootstrap_servers, f"cli-{topic}"
    with Producer(bootstrap_servers=bs) as producer:
        for i in range(30):
            producer.send(topic, value=str(i).encode(), partition=i % 3)
    consumer = Consumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, client_id="cli-test")
    try:
        seen = 0

        def read_some() -> bool:
            nonlocal seen
            seen += sum(len(records) for records in consumer.poll(timeout_ms=200).values())
            return seen >= 10

        wait_until(read_some, timeout_s=30, what="the member to read records")
        consumer.commit({TopicPartition(topic, 0): 4})

        listed = groups(cluster, "list")
        assert listed.returncode == 0, listed
        assert any(group in line and "Stable" in line and "consumer" in line for line in listed.stdout.splitlines())
        described = groups(cluster, "describe", group)
        assert described.returncode == 0, described
        assert "Stable" in described.stdout and "1 member(s)" in described.stdout
        row = next(line for line in described.stdout.splitlines() if topic in line and " 0 " in line.replace("│", " ")
                   and "cli-test" in line)
        cells = row.replace("│", " ").split()
        assert cells[1:5] == ["0", "4", "10", "6"], row  # partition, committed, log end, lag

        refused = groups(cluster, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
        assert refused.returncode == 1 and "NON_EMPTY_GROUP" in refused.stderr, refused
        assert admin.list_consumer_group_offsets(group)[TopicPartition(topic, 0)].offset == 4
    finally:
        consumer.close(autocommit=False)

    wait_until(lambda: admin.describe_consumer_groups([group])[0].state == "Empty", timeout_s=20,
               what="the group to be empty once its member left")
    plan = groups(cluster, "reset-offsets", group, "--topic", f"{topic}:0,1", "--shift-by", "3")
    assert plan.returncode == 0 and "plan" in plan.stdout, plan
    assert admin.list_consumer_group_offsets(group)[TopicPartition(topic, 0)].offset == 4, "a plan changed offsets"
    done = groups(cluster, "reset-offsets", group, "--topic", f"{topic}:0,1", "--shift-by", "3", "--execute")
    assert done.returncode == 0, done
    offsets = admin.list_consumer_group_offsets(group)
    assert offsets[TopicPartition(topic, 0)].offset == 7
    assert offsets[TopicPartition(topic, 1)].offset == 3  # nothing committed: from the log start
    assert groups(cluster, "reset-offsets", group, "--topic", topic, "--to-latest", "--execute").returncode == 0
    assert {tp.partition: o.offset for tp, o in admin.list_consumer_group_offsets(group).items()} == {0: 10, 1: 10,
                                                                                                       2: 10}

    bad = groups(cluster, "reset-offsets", group, "--topic", f"{topic}:7", "--to-earliest")
    assert bad.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in bad.stderr, bad
    deleted = groups(cluster, "delete", group)
    assert deleted.returncode == 0, deleted
    assert group not in groups(cluster, "list").stdout
    assert admin.list_consumer_group_offsets(group) == {}


def test_consume_with_a_group_waits_for_its_assignment_then_reads_and_commits(cluster, admin, topic):
    """The first rebalance of a new group waits its initial delay (3 s by default, past consume's 2 s idle timeout):
    consume used to give up before it had any partition, printing nothing and leaving no offsets."""
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for i in range(6):
            producer.send(topic, value=f"r{i}".encode(), partition=i % 3)
    group = f"console-{topic}"
    result = txnsim("consume", topic, "--group", group, "--from-beginning", "--bootstrap-servers",
                    cluster.bootstrap_servers)
    assert result.returncode == 0, result
    assert sorted(line.split("\t")[-1] for line in result.stdout.splitlines()) == [f"r{i}" for i in range(6)]
    committed = admin.list_consumer_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in committed.items() if tp.topic == topic} == {0: 2, 1: 2, 2: 2}
