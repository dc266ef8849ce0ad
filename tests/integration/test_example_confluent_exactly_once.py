"""examples/confluent_kafka_exactly_once.py as real processes on txnsim's Kafka listeners: crashed, SIGKILLed,
restarted, and two instances sharing the group through rebalances, librdkafka still turns every input record
into exactly one committed output record and commits the group's offsets to the end."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import ScriptProcess, wait_until
from tests.integration.test_example_consume_transform_produce import (
    PARTITIONS,
    assert_exactly_once,
    committed_offsets,
    topics,  # noqa: F401 -- the fixture: an input topic and its output topic
    write_numbers,
)
from txnsim import TopicPartition

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "confluent_kafka_exactly_once.py"
#: short enough that a killed member's partitions move on within seconds (the cluster allows 500 ms)
SESSION_TIMEOUT_MS = "2000"

pytestmark = pytest.mark.timeout(240)


class Example(ScriptProcess):
    """One run of the example, on the Kafka listeners."""

    def __init__(self, kafka: str, input_topic: str, output_topic: str, group: str, txn_id: str, log: Path,
                 *extra: str) -> None:
        super().__init__(EXAMPLE, ["--bootstrap-servers", kafka, "--input", input_topic, "--output", output_topic,
                                   "--group", group, "--transactional-id", txn_id, "--batch-size", "20",
                                   "--session-timeout-ms", SESSION_TIMEOUT_MS, *extra], log)


@pytest.fixture
def run_example(cluster, topics, txn_id, tmp_path):
    started: list[Example] = []

    def start(name: str, transactional_id: str, *extra: str) -> Example:
        example = Example(cluster.kafka_bootstrap_servers, *topics, f"group-{txn_id}", transactional_id,
                          tmp_path / f"{name}.log", *extra)
        started.append(example)
        return example

    yield start
    for example in started:
        if example.process.poll() is None:
            example.kill()


@pytest.mark.slow
def test_a_crashed_killed_and_restarted_copier_outputs_every_input_once(cluster, admin, topics, txn_id, run_example):
    bs, (input_topic, _output) = cluster.bootstrap_servers, topics
    group, numbers = f"group-{txn_id}", range(300)
    write_numbers(bs, input_topic, numbers)
    input_tps = [TopicPartition(input_topic, p) for p in range(PARTITIONS)]

    first = run_example("first", txn_id, "--fail-after", "50")
    assert first.wait() == 1, first.output()
    assert "crashing on purpose" in first.output()
    after_crash = sum(committed_offsets(bs, group, input_topic).values())
    assert 0 < after_crash < len(numbers)

    second = run_example("second", txn_id)  # fences the crashed instance's open transaction, goes on
    wait_until(lambda: sum(committed_offsets(bs, group, input_topic).values()) > after_crash, timeout_s=60,
               what="the restarted example to commit a transaction")
    second.kill()

    third = run_example("third", txn_id, "--idle-exit-seconds", "4")
    wait_until(lambda: committed_offsets(bs, group, input_topic) == admin.end_offsets(input_tps), timeout_s=90,
               what="the group's offsets to reach the end of the input")
    assert third.wait() == 0, third.output()
    assert_exactly_once(bs, topics, group, admin, numbers)


@pytest.mark.slow
def test_two_copiers_in_one_group_share_the_input_exactly_once(cluster, admin, topics, txn_id, run_example):
    bs, (input_topic, _output) = cluster.bootstrap_servers, topics
    group, numbers = f"group-{txn_id}", range(400)
    input_tps = [TopicPartition(input_topic, p) for p in range(PARTITIONS)]
    write_numbers(bs, input_topic, range(200))
    a = run_example("a", f"{txn_id}-a", "--idle-exit-seconds", "6")
    wait_until(lambda: sum(committed_offsets(bs, group, input_topic).values()) > 0, timeout_s=60,
               what="the first copier to commit")
    b = run_example("b", f"{txn_id}-b", "--idle-exit-seconds", "6")  # joins: the group rebalances
    write_numbers(bs, input_topic, range(200, 400))
    wait_until(lambda: committed_offsets(bs, group, input_topic) == admin.end_offsets(input_tps), timeout_s=120,
               what="the group's offsets to reach the end of the input")
    assert a.wait() == 0, a.output()
    assert b.wait() == 0, b.output()
    assert_exactly_once(bs, topics, group, admin, numbers)
