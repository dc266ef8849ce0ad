"""Streaming queries in a driver process of their own: SIGKILLed mid-batch, restarted from the checkpoint."""
from __future__ import annotations

import json

import pytest

from tests.helpers import wait_until
from tests.integration.test_transactions import read_values
from txnsim import Producer
from txnsim.pipeline.driver import SparkDriver

pytestmark = pytest.mark.slow


def copy_driver(bs, source, output, checkpoint, *extra: str, env=None) -> SparkDriver:
    """`python -m spark.jobs copy ...` as its own process group (SIGKILL takes its JVM too)."""
    return SparkDriver("copy", bootstrap_servers=bs, input_topic=source, output_topic=output,
                       checkpoint=checkpoint, extra=extra, env=env)


def produce(bs, topic, values):
    with Producer(bootstrap_servers=bs, transactional_id=f"gen-{topic}") as p:
        p.init_transactions()
        p.begin_transaction()
        for i, value in enumerate(values):
            p.send(topic, value=value, partition=i % 2)
        p.commit_transaction()


def open_batches(admin):
    return [t for t in admin.list_transactions(states=["Ongoing"])
            if t.transactional_id.startswith("txnsim-spark-")]


def test_a_driver_killed_mid_batch_and_restarted_copies_exactly_once(cluster, admin, topic, tmp_path):
    bs = cluster.bootstrap_servers
    source = topic + "-in"
    admin.create_topic(source, partitions=2)
    inputs = [f"r{i}".encode() for i in range(6000)]
    produce(bs, source, inputs)
    args = (bs, source, topic, tmp_path / "ckpt", "--max-offsets-per-trigger", "500", "--trigger-ms", "100")
    first = copy_driver(*args)
    try:
        wait_until(lambda: first.batches_done() >= 1 and open_batches(admin), timeout_s=120,
                   what="a committed batch, then tasks writing the next one")
        first.kill()
    finally:
        first.stop()
    written = len(read_values(bs, topic, "read_committed", partitions=2, left_open=True))
    assert 0 < written < len(inputs)
    second = copy_driver(*args)
    try:
        wait_until(lambda: len(read_values(bs, topic, "read_committed", partitions=2, left_open=True))
                   >= len(inputs),
                   timeout_s=180, what="the restarted query to catch up")
    finally:
        second.stop()
    assert sorted(read_values(bs, topic, "read_committed", partitions=2, left_open=True)) == sorted(inputs)


def test_income_per_minute_matches_the_orders(cluster, admin, topic, tmp_path):
    bs = cluster.bootstrap_servers
    orders = topic + "-orders"
    admin.create_topic(orders, partitions=2)
    base = 1_700_000_040_000  # a minute boundary
    values = [json.dumps({"order_id": i, "amount_cents": 100 + i, "event_time_ms": base + i * 1500}).encode()
              for i in range(200)]  # 40 orders per minute over 5 minutes
    closing = json.dumps({"order_id": -1, "amount_cents": 0, "event_time_ms": base + 3_600_000}).encode()
    produce(bs, orders, values + [closing])
    expected = {}
    for i in range(200):
        minute = (base + i * 1500) // 60_000 * 60_000
        expected[minute] = expected.get(minute, 0) + 100 + i
    income = SparkDriver("income", bootstrap_servers=bs, input_topic=orders, output_topic=topic,
                         checkpoint=tmp_path / "ckpt")
    try:
        wait_until(lambda: len(read_values(bs, topic, "read_committed", partitions=2, left_open=True))
                   >= len(expected),
                   timeout_s=180, what="every minute's income")
    finally:
        income.stop()
    windows = [json.loads(v) for v in read_values(bs, topic, "read_committed", partitions=2, left_open=True)]
    assert {w["window_start_ms"]: w["income_cents"] for w in windows} == expected
    assert len(windows) == len(expected)  # no window written twice


def test_a_driver_killed_right_after_a_commit_replays_that_batch_without_writing_it_twice(cluster, admin, topic,
                                                                                       tmp_path):
    """The commit is durable and visible but Spark's commit log never hears of it: the restart replays
    the batch, whose tasks find it committed and write nothing."""
    bs = cluster.bootstrap_servers
    source = topic + "-in"
    admin.create_topic(source, partitions=2)
    inputs = [f"r{i}".encode() for i in range(3000)]
    produce(bs, source, inputs)
    args = (bs, source, topic, tmp_path / "ckpt", "--max-offsets-per-trigger", "500", "--available-now")
    first = copy_driver(*args, "--kill-driver-after-batch", "2")
    assert first.wait(180) == -9  # SIGKILLed by the fault right after batch 2's commit
    assert len(read_values(bs, topic, "read_committed", partitions=2, left_open=True)) == 1500  # batches 0, 1 and 2
    second = copy_driver(*args)
    assert second.wait(180) == 0
    assert sorted(read_values(bs, topic, "read_committed", partitions=2, left_open=True)) == sorted(inputs)
