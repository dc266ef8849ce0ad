"""The pipeline demo's script: orders in, Spark computing income per minute, crashes on purpose, a check.

Steps: start a cluster; write orders in transactions; run the income query in its own driver
process; SIGKILL that driver while a micro-batch is being written and start it again from
its checkpoint; SIGKILL the txnsim node that coordinates the query's batch transactions and
restart it; write the closing event; wait until every minute's income is readable with
read_committed; compare with the totals computed from the orders.
"""
from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from consumer import Consumer
from proto.errors import KafkaError
from proto.structs import TopicPartition
from txnsim.admin import Admin
from txnsim.cluster import LocalCluster
from txnsim.ownership import OwnershipChange, read_ownership_changes
from txnsim.pipeline.driver import SparkDriver
from txnsim.pipeline.orders import OrderWriter, income_per_minute, make_orders

ORDERS, INCOME = "orders", "income"
BATCH_PREFIX = "txnsim-spark-"  # spark.write_options.DEFAULT_PREFIX


@dataclass(frozen=True)
class PipelineConfig:
    orders: int = 2400
    minutes: int = 6
    rate: float = 120.0          # orders per second
    seed: int = 1
    master: str = "local[2]"
    nodes: int = 3
    data_dir: Path | None = None
    timeout_s: float = 300.0     # for the whole run after the orders are written
    kill_driver: bool = True
    kill_node: bool = True
    #: the cluster's shape: replicas of every log on ZooKeeper, or that on hosts of its own (LocalCluster's)
    replicated: bool = False
    namespaces: bool = False


@dataclass
class Progress:
    """What the display shows; updated by the runner."""

    phase: str = "starting"
    orders_committed: int = 0
    orders_total: int = 0
    batches: int = 0
    windows_read: int = 0
    windows_expected: int = 0
    events: list[tuple[float, str]] = field(default_factory=list)


@dataclass
class PipelineResult:
    expected: dict[int, tuple[int, int]]        # minute -> (income cents, orders), from the orders
    read_back: dict[int, list[tuple[int, int]]]  # minute -> every (income, orders) read, duplicates kept
    events: list[tuple[float, str]]
    elapsed_s: float
    # for the report; times are seconds after the start, like `events`
    #: (time, "committed" or "aborted and retried", orders in it) per order-writing transaction
    order_txns: list[tuple[float, str, int]] = field(default_factory=list)
    #: (time it finished, driver run 1 or 2, input rows) per Spark micro-batch
    batches: list[tuple[float, int, int]] = field(default_factory=list)
    ownership: list[OwnershipChange] = field(default_factory=list)
    #: where the cluster, checkpoint and driver log are
    work_dir: Path | None = None

    @property
    def ok(self) -> bool:
        return (set(self.read_back) == set(self.expected)
                and all(self.read_back[m] == [self.expected[m]] for m in self.expected))


def run_pipeline(config: PipelineConfig, on_progress: Callable[[Progress], None]) -> PipelineResult:
    started, started_wall = time.monotonic(), time.time()
    progress = Progress(orders_total=config.orders)
    orders = make_orders(config.orders, config.minutes, config.seed)
    expected = income_per_minute(orders)
    progress.windows_expected = len(expected)

    def event(text: str) -> None:
        progress.events.append((time.monotonic() - started, text))
        on_progress(progress)

    work = Path(config.data_dir) if config.data_dir else Path(tempfile.mkdtemp(prefix="txnsim-pipeline-"))
    with LocalCluster(nodes=config.nodes, data_dir=work / "cluster", replicated=config.replicated,
                      namespaces=config.namespaces) as cluster:
        bs = cluster.bootstrap_servers
        with Admin(bs) as admin:
            admin.create_topic(ORDERS, partitions=3)
            admin.create_topic(INCOME, partitions=2)
        shape = (" on hosts of their own" if config.namespaces else
                 ", replicated" if config.replicated else "")
        event(f"cluster of {config.nodes} nodes{shape} up; topics {ORDERS} (3 partitions) and {INCOME} (2)")
        writer = OrderWriter(bs, ORDERS, orders, rate=config.rate)
        writer.start()

        drivers: list[SparkDriver] = []

        def start_driver() -> SparkDriver:
            driver = SparkDriver("income", bootstrap_servers=bs, input_topic=ORDERS, output_topic=INCOME,
                                 checkpoint=work / "checkpoint", master=config.master,
                                 log_file=work / "spark-driver.log")
            drivers.append(driver)
            return driver

        def tick(driver: SparkDriver, phase: str) -> None:
            progress.phase = phase
            progress.orders_committed = writer.committed
            progress.batches = batches_before + driver.batches_done()
            on_progress(progress)
            if writer.error is not None:
                raise RuntimeError(f"the order writer failed: {writer.error}")
            if not driver.running():
                raise RuntimeError(f"the Spark driver exited: {driver.failure() or 'see ' + str(work)}")

        def wait_for(condition: Callable[[], bool], driver: SparkDriver, phase: str, timeout_s: float,
                     poll_s: float = 0.2) -> None:
            deadline = time.monotonic() + timeout_s
            shown = 0.0
            while not condition():
                if time.monotonic() - shown > 0.2:
                    tick(driver, phase)
                    shown = time.monotonic()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"gave up after {timeout_s:.0f} s while {phase}")
                time.sleep(poll_s)
            tick(driver, phase)

        batches_before = 0
        total = config.orders
        writer.allow(total * 3 // 10)  # the rest flows only while the crashes are set up

        def open_batch_while_orders_flow(driver: SparkDriver, up_to: int) -> Callable[[], bool]:
            """True while the query's micro-batch is being written; lets orders trickle in meanwhile."""
            def check() -> bool:
                writer.allow(min(writer.allowed + 2, up_to))
                return driver.query_id is not None and _batch_open(admin, BATCH_PREFIX + driver.query_id)
            return check

        driver = start_driver()
        event(f"Spark driver started ({config.master})")
        try:
            with Admin(bs) as admin:
                if config.kill_driver:
                    wait_for(lambda: driver.batches_done() >= 1, driver, "driver: starting", 180)
                    wait_for(open_batch_while_orders_flow(driver, total * 6 // 10), driver, "driver: running", 180,
                             poll_s=0.01)
                    driver.kill()
                    batches_before += driver.batches_done()
                    event("Spark driver SIGKILLed while tasks were writing a micro-batch")
                    driver = start_driver()
                    event("Spark driver restarted from its checkpoint")
                if config.kill_node:
                    writer.allow(total * 6 // 10)
                    wait_for(lambda: driver.query_id is not None and driver.batches_done() >= 1, driver,
                             "driver: recovering", 180)
                    wait_for(open_batch_while_orders_flow(driver, total * 9 // 10), driver, "driver: running", 180,
                             poll_s=0.01)
                    query_id = driver.query_id
                    assert query_id is not None  # an open batch was seen: the query had started
                    victim = cluster.coordinator_for(BATCH_PREFIX + query_id)
                    cluster.kill(victim)
                    event(f"txnsim node {victim} (the query's transaction coordinator) SIGKILLed mid-batch")
                    done = driver.batches_done()
                    wait_for(lambda: driver.batches_done() >= done + 2, driver, "node down", 120)
                    cluster.restart(victim)
                    event(f"txnsim node {victim} restarted; it takes its shards back")
                writer.allow_all()
                wait_for(lambda: not writer.is_alive(), driver, "writing orders", config.timeout_s)
                event(f"all {config.orders} orders committed, closing event written")

                def all_windows() -> bool:
                    progress.windows_read = len(_read_income(bs))
                    return progress.windows_read >= len(expected)

                wait_for(all_windows, driver, "closing minutes", config.timeout_s)
                event("every minute's income is readable with read_committed")
        finally:
            writer.stop()
            driver.stop()
        progress.phase = "checking"
        on_progress(progress)
        read_back: dict[int, list[tuple[int, int]]] = {}
        for window in _read_income(bs):
            read_back.setdefault(window["window_start_ms"], []).append((window["income_cents"], window["orders"]))
        ownership = read_ownership_changes(cluster.layout.metadata, started_wall)
    batches = [(round(e["received_at"] - started, 3), run, e["rows"])
               for run, d in enumerate(drivers, 1) for e in list(d.events) if "batch" in e]
    order_txns = [(round(at - started, 3), outcome, n) for at, outcome, n in writer.transactions]
    return PipelineResult(expected, read_back, progress.events, time.monotonic() - started, order_txns, batches,
                          ownership, work)


def _batch_open(admin: Admin, batch_txn_id: str) -> bool:
    try:
        return admin.describe_transaction(batch_txn_id).state == "Ongoing"
    except KafkaError:  # not created yet (no batch has written), or its coordinator is moving
        return False


def _read_income(bootstrap_servers: str) -> list[dict[str, Any]]:
    with Consumer(bootstrap_servers=bootstrap_servers, isolation_level="read_committed",
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition(INCOME, p) for p in range(2)])
        end = consumer.end_offsets([TopicPartition(INCOME, p) for p in range(2)])
        out: list[dict[str, Any]] = []
        while any(consumer.position(tp) < offset for tp, offset in end.items()):
            for records in consumer.poll(timeout_ms=200).values():
                out.extend(json.loads(r.value) for r in records)
        return out
