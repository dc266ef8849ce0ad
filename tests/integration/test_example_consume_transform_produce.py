"""examples/consume_transform_produce.py as a real process: crashed, killed, restarted and fenced, it still
turns every input record into exactly one committed output record, and commits the group's offsets to the end."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import ScriptProcess, wait_until
from txnsim import Consumer, Producer, TopicPartition

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "consume_transform_produce.py"
PARTITIONS = 3
#: short enough that a crashed instance's partitions move on within a second (the cluster allows 500 ms)
SESSION_TIMEOUT_MS = "1000"


def write_numbers(bs: str, topic: str, numbers: range) -> None:
    """Plain (idempotent, not transactional) writes: the input has no markers, so its end offsets are record counts."""
    with Producer(bootstrap_servers=bs) as producer:
        for n in numbers:
            producer.send(topic, key=str(n).encode(), value=str(n).encode())
        producer.flush()


def read_committed_values(bs: str, topic: str) -> list[int]:
    """Every committed value of `topic`, read up to its last stable offsets."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Consumer(bootstrap_servers=bs, isolation_level="read_committed", auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        consumer.assign(tps)
        end = consumer.end_offsets(tps)  # read_committed: the last stable offsets
        values: list[int] = []

        def caught_up() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                values.extend(int(r.value) for r in records)
            return all(consumer.position(tp) >= end[tp] for tp in tps)

        wait_until(caught_up, timeout_s=30, what=f"reading {topic} up to its last stable offsets {end}")
        return values


def committed_offsets(bs: str, group: str, topic: str) -> dict[TopicPartition, int]:
    with Consumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False) as consumer:
        return {tp: consumer.committed(tp) or 0 for tp in (TopicPartition(topic, p) for p in range(PARTITIONS))}


class Example(ScriptProcess):
    """One run of the example."""

    def __init__(self, bs: str, input_topic: str, output_topic: str, group: str, txn_id: str, log: Path,
                 *extra: str) -> None:
        super().__init__(EXAMPLE, ["--bootstrap-servers", bs, "--input", input_topic, "--output", output_topic,
                                   "--group", group, "--transactional-id", txn_id, "--batch-size", "10",
                                   "--session-timeout-ms", SESSION_TIMEOUT_MS, *extra], log)


@pytest.fixture
def topics(admin, topic):
    output = f"{topic}-out"
    admin.create_topic(output, partitions=PARTITIONS)
    return topic, output


@pytest.fixture
def run_example(cluster, topics, txn_id, tmp_path):
    started: list[Example] = []

    def start(name: str, *extra: str) -> Example:
        example = Example(cluster.bootstrap_servers, *topics, f"group-{txn_id}", txn_id, tmp_path / f"{name}.log",
                          *extra)
        started.append(example)
        return example

    yield start
    for example in started:
        if example.process.poll() is None:
            example.kill()


def assert_exactly_once(bs: str, topics: tuple[str, str], group: str, admin, numbers: range) -> None:
    input_topic, output_topic = topics
    values = read_committed_values(bs, output_topic)
    duplicates = sorted({v for v in values if values.count(v) > 1})
    missing = sorted(set(2 * n for n in numbers) - set(values))
    assert not duplicates and not missing, f"duplicated outputs {duplicates}, missing outputs {missing}"
    assert len(values) == len(numbers)
    input_tps = [TopicPartition(input_topic, p) for p in range(PARTITIONS)]
    assert committed_offsets(bs, group, input_topic) == admin.end_offsets(input_tps)


@pytest.mark.slow  # about 7 s: three runs, and the last one waits 5 s of idleness before it exits
def test_crash_kill_and_restart_transform_every_input_exactly_once(cluster, admin, topics, txn_id, run_example):
    bs, (input_topic, output_topic) = cluster.bootstrap_servers, topics
    group, numbers = f"group-{txn_id}", range(300)
    write_numbers(bs, input_topic, numbers)
    input_tps = [TopicPartition(input_topic, p) for p in range(PARTITIONS)]
    output_tps = [TopicPartition(output_topic, p) for p in range(PARTITIONS)]

    # 1. it crashes itself with records of an open transaction in the output log
    first = run_example("first", "--fail-after", "125")
    assert first.wait() == 1, first.output()
    assert "crashing on purpose" in first.output()
    assert admin.last_stable_offsets(output_tps) != admin.end_offsets(output_tps), "no transaction left open"
    after_crash = sum(committed_offsets(bs, group, input_topic).values())
    assert 0 < after_crash < len(numbers)

    # 2. the restart aborts that transaction and resumes; SIGKILL it once it has committed more
    second = run_example("second")
    wait_until(lambda: sum(committed_offsets(bs, group, input_topic).values()) > after_crash, timeout_s=30,
               what="the restarted example to commit a transaction")
    second.kill()

    # 3. a third run aborts what the killed one left open, finishes the rest, and exits once idle
    third = run_example("third", "--idle-exit-seconds", "5")
    wait_until(lambda: committed_offsets(bs, group, input_topic) == admin.end_offsets(input_tps), timeout_s=60,
               what="the group's offsets to reach the end of the input")
    assert third.wait() == 0, third.output()

    assert_exactly_once(bs, topics, group, admin, numbers)


def test_a_second_instance_fences_the_first_and_output_stays_exactly_once(cluster, admin, topics, txn_id,
                                                                          run_example):
    bs, (input_topic, _) = cluster.bootstrap_servers, topics
    group = f"group-{txn_id}"
    first_half, second_half = range(0, 150), range(150, 300)
    write_numbers(bs, input_topic, first_half)
    older = run_example("older")
    wait_until(lambda: sum(committed_offsets(bs, group, input_topic).values()) == len(first_half), timeout_s=30,
               what="the older instance to process the first half")

    # the older instance cannot commit once the newer one has initialised: the second half is all the newer's
    newer = run_example("newer", "--max-records", str(len(second_half)))
    wait_until(lambda: "ready:" in newer.output(), timeout_s=30, what="the newer instance's init_transactions")
    write_numbers(bs, input_topic, second_half)  # the older instance gets some of it, and finds out it is fenced

    assert older.wait() == 3, older.output()
    assert f"fenced: a newer instance with transactional id '{txn_id}' took over" in older.output()
    assert newer.wait() == 0, newer.output()
    assert f"done: {len(second_half)} records processed" in newer.output()
    assert_exactly_once(bs, topics, group, admin, range(0, 300))

