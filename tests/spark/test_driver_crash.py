"""Streaming queries in a driver process of their own: SIGKILLed mid-batch, restarted from the checkpoint."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.helpers import wait_until
from tests.integration.test_transactions import read_values
from txnsim import Producer

pytestmark = pytest.mark.slow


class Driver:
    """`python -m spark.jobs ...` in its own process group, so SIGKILL takes its JVM down with it."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "spark.jobs", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self.events: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def batches_done(self) -> int:
        return sum(1 for e in self.events if "batch" in e)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


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
    args = ["copy", "--bootstrap-servers", bs, "--input", source, "--output", topic,
            "--checkpoint", str(tmp_path / "ckpt"), "--max-offsets-per-trigger", "500", "--trigger-ms", "100"]
    first = Driver(*args)
    try:
        wait_until(lambda: first.batches_done() >= 1 and open_batches(admin), timeout_s=120,
                   what="a committed batch, then tasks writing the next one")
        first.kill()
    finally:
        first.stop()
    written = len(read_values(bs, topic, "read_committed", partitions=2))
    assert 0 < written < len(inputs)
    second = Driver(*args)
    try:
        wait_until(lambda: len(read_values(bs, topic, "read_committed", partitions=2)) >= len(inputs),
                   timeout_s=180, what="the restarted query to catch up")
    finally:
        second.stop()
    assert sorted(read_values(bs, topic, "read_committed", partitions=2)) == sorted(inputs)


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
    driver = Driver("income", "--bootstrap-servers", bs, "--input", orders, "--output", topic,
                    "--checkpoint", str(tmp_path / "ckpt"))
    try:
        wait_until(lambda: len(read_values(bs, topic, "read_committed", partitions=2)) >= len(expected),
                   timeout_s=180, what="every minute's income")
    finally:
        driver.stop()
    windows = [json.loads(v) for v in read_values(bs, topic, "read_committed", partitions=2)]
    assert {w["window_start_ms"]: w["income_cents"] for w in windows} == expected
    assert len(windows) == len(expected)  # no window written twice
