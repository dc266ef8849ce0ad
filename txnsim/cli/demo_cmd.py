"""`txnsim demo`: the protocol, scene by scene, on an embedded 3-node cluster.

Each scene does something with the public API and shows what both kinds of consumer see,
so the rules of read_committed, fencing and transactional offsets are visible, not claimed.
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from rich.rule import Rule
from rich.table import Table

from consumer import Consumer
from partitions.segment import segment_files
from producer import Producer
from proto.errors import KafkaError, ProducerFencedError
from proto.hashing import partition_for
from proto.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition
from txnsim.admin import Admin
from txnsim.cli.common import add_cluster_shape_args, console, exits_cleanly, scratch_dir
from txnsim.cli.demo_confluent import run_confluent_demo
from txnsim.cli.demo_views import scene, show_side_by_side
from txnsim.cli.dump_log_cmd import describe_segment
from txnsim.cluster import LocalCluster
from txnsim.demo_orders.runner import run_orders_demo


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="the transaction protocol, scene by scene, on an embedded cluster")
    demo.add_argument("which", nargs="?", choices=["orders"], default=None,
                      help="orders: RocketMQ-style transactional messages, order service and points service on "
                           "SQLite, every check-back path (default: the Kafka-style scenes)")
    demo.add_argument("--client", choices=["native", "rocketmq", "confluent-kafka"], default=None,
                      help="txnsim's own Producer/Consumer (native, the default); confluent-kafka: the scenes "
                           "through librdkafka on the Kafka listeners; with `orders`, rocketmq: the official "
                           "RocketMQ 5 Python client")
    demo.add_argument("--data-dir", type=Path, default=None, help="keep the cluster's files here (default: a temp dir)")
    add_cluster_shape_args(demo)  # the Kafka-style scenes only
    demo.set_defaults(func=run_demo)


def read_all(bs: str, topic: str, partitions: int, isolation: str) -> list[ConsumerRecord]:
    """Everything a fresh consumer of `isolation` can read now (stops when a poll returns nothing)."""
    with Consumer(bootstrap_servers=bs, isolation_level=isolation, auto_offset_reset="earliest",
                  enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        records: list[list[ConsumerRecord]] = []
        while True:
            batch = c.poll(timeout_ms=500)
            if not batch:
                return sorted((r for rs in records for r in rs), key=lambda r: (r.partition, r.offset))
            records.extend(batch.values())


def side_by_side(bs: str, topic: str, partitions: int, title: str) -> None:
    show_side_by_side(title, lambda isolation: [(r.partition, r.offset, r.value or b"")
                                                for r in read_all(bs, topic, partitions, isolation)])


def offsets_table(admin: Admin, topic: str, partitions: int) -> Table:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    hw, lso = admin.end_offsets(tps), admin.last_stable_offsets(tps)
    table = Table(title=f"{topic}: high watermark vs last stable offset")
    for column in ("partition", "high watermark", "last stable offset", "held back"):
        table.add_column(column, justify="right")
    for tp in tps:
        table.add_row(str(tp.partition), str(hw[tp]), str(lso[tp]), str(hw[tp] - lso[tp]))
    return table


@exits_cleanly
def run_demo(args: argparse.Namespace) -> int:
    shape = {"replicated": args.replicated, "namespaces": args.namespaces}
    if args.which == "orders":
        if args.replicated or args.namespaces:
            raise SystemExit("error: `txnsim demo orders` runs on a shared-directory cluster; --replicated and "
                             "--namespaces apply to the Kafka-style scenes")
        if args.client == "confluent-kafka":
            raise SystemExit("error: `txnsim demo orders` runs RocketMQ-style transactions: --client native or rocketmq")
        logging.getLogger().setLevel(logging.ERROR)  # nodes are killed on purpose: retry warnings are expected
        with scratch_dir(args.data_dir, "txnsim-demo-orders-", "demo files (cluster logs, SQLite files)") as path:
            return run_orders_demo(path, args.client or "native", console)
    if args.client == "rocketmq":
        raise SystemExit("error: --client rocketmq applies to `txnsim demo orders` only")
    if args.client == "confluent-kafka":
        logging.getLogger().setLevel(logging.ERROR)
        with scratch_dir(args.data_dir, "txnsim-demo-", "demo cluster's files") as path:
            return run_confluent_demo(path, **shape)
    # the clients' retry warnings (a node was killed on purpose) would interrupt the tables
    logging.getLogger().setLevel(logging.ERROR)
    with scratch_dir(args.data_dir, "txnsim-demo-", "demo cluster's files") as data_dir:
        return _run_demo(data_dir, **shape)


def cluster_kind(replicated: bool, namespaces: bool) -> str:
    """How the demo's cluster is built, in words."""
    if namespaces:
        return "3 nodes and a ZooKeeper, each on a host of its own (network namespaces), 3 replicas of every log"
    if replicated:
        return "3 node processes with a directory each, 3 replicas of every log, a controller on ZooKeeper"
    return "3 node processes on one shared directory"


def _run_demo(data_dir: Path, replicated: bool = False, namespaces: bool = False) -> int:
    with console.status(f"starting an embedded cluster: {cluster_kind(replicated, namespaces)}, 50 transaction "
                        "shards ..."):
        cluster = LocalCluster(nodes=3, data_dir=data_dir, txn_shards=50, replicated=replicated,
                               namespaces=namespaces)
        cluster.start()
    try:
        bs = cluster.bootstrap_servers
        console.print(f"cluster up: {bs} (data in {data_dir})")
        admin = Admin(bs)
        admin.create_topic("orders", partitions=3)
        admin.create_topic("audit", partitions=1)
        admin.create_topic("payments", partitions=2)
        _commit_and_abort(bs)
        _held_back(bs, admin)
        _zombie(bs, cluster)
        _consume_transform_produce(bs)
        _on_disk(cluster)
        _coordinator_crash(bs, cluster, admin)
        admin.close()
        console.print(Rule("done"))
        console.print("Every scene above ran against real node processes over gRPC, with fsynced logs.")
    finally:
        cluster.stop()
    return 0


def _commit_and_abort(bs: str) -> None:
    scene(1, "commit and abort across partitions",
          "Producer 'shop' sends order-1..order-3 to three partitions of 'orders' and COMMITS;\n"
          "then sends bad-1..bad-3 and ABORTS. Both transactions wrote to the log; the markers decide.")
    with Producer(bootstrap_servers=bs, transactional_id="shop") as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(3):
            p.send("orders", value=f"order-{i + 1}".encode(), partition=i)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(3):
            p.send("orders", value=f"bad-{i + 1}".encode(), partition=i)
        p.flush()
        p.abort_transaction()
    side_by_side(bs, "orders", 3, "what each consumer sees")
    console.print("read_committed skips the aborted records; read_uncommitted shows them. "
                  "Offsets have gaps where the COMMIT/ABORT markers sit.")


def _held_back(bs: str, admin: Admin) -> None:
    scene(2, "records held back behind an open transaction",
          "Producer 'slow' sends pay-1, pay-2 and waits before committing.\n"
          "The last stable offset (LSO) stays at the transaction's first offset; read_committed stops there.")
    with Producer(bootstrap_servers=bs, transactional_id="slow") as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(2):
            p.send("payments", value=f"pay-{i + 1}".encode(), partition=0).get(timeout=10)
        console.print(offsets_table(admin, "payments", 2))
        side_by_side(bs, "payments", 2, "while the transaction is open")
        p.commit_transaction()
    side_by_side(bs, "payments", 2, "after commit")


def _zombie(bs: str, cluster: LocalCluster) -> None:
    scene(3, "a zombie producer is fenced",
          "Instance A of 'fencer' begins a transaction and sends zombie-1. Instance B starts with the same\n"
          "transactional id: its init_transactions bumps the epoch and aborts A's open transaction.\n"
          "A's commit then fails with ProducerFencedError and its record never becomes visible.")
    a = Producer(bootstrap_servers=bs, transactional_id="fencer")
    a.init_transactions()
    a.begin_transaction()
    a.send("audit", value=b"zombie-1").get(timeout=10)
    console.print(f"coordinator of 'fencer': node {cluster.coordinator_for('fencer')}")
    with Producer(bootstrap_servers=bs, transactional_id="fencer") as b:
        b.init_transactions()
        try:
            a.commit_transaction()
            console.print("[red]unexpected: the zombie committed[/red]")
        except ProducerFencedError as exc:
            console.print(f"instance A: [red]ProducerFencedError[/red]: {exc}")
        except KafkaError as exc:
            console.print(f"instance A: [red]{type(exc).__name__}[/red]: {exc}")
        finally:
            a.close()
        b.begin_transaction()
        b.send("audit", value=b"from-B").get(timeout=10)
        b.commit_transaction()
    side_by_side(bs, "audit", 1, "'audit' after the fencing")


def _consume_transform_produce(bs: str) -> None:
    scene(4, "consume-transform-produce with transactional offsets",
          "Consumer group 'billing' reads the committed orders; producer 'biller' writes an invoice per order to\n"
          "'audit' and sends the consumer's offsets in the SAME transaction. Output and input position commit together.")
    with Consumer(bootstrap_servers=bs, group_id="billing", isolation_level="read_committed",
                  auto_offset_reset="earliest", enable_auto_commit=False) as c, \
            Producer(bootstrap_servers=bs, transactional_id="biller") as p:
        tps = [TopicPartition("orders", i) for i in range(3)]
        c.assign(tps)
        before = {tp: c.committed(tp) for tp in tps}
        p.init_transactions()
        p.begin_transaction()
        positions: dict[TopicPartition, OffsetAndMetadata] = {}
        while True:
            batch = c.poll(timeout_ms=500)
            if not batch:
                break
            for tp, records in batch.items():
                for r in records:
                    p.send("audit", value=b"invoice-for-" + (r.value or b""))
                positions[tp] = OffsetAndMetadata(records[-1].offset + 1)
        p.send_offsets_to_transaction(positions, c.group_metadata())
        table = Table(title="group 'billing' committed offsets")
        for column in ("partition", "before commit", "after commit"):
            table.add_column(column, justify="right")
        p.commit_transaction()
        for tp in tps:
            table.add_row(str(tp.partition), str(before[tp]), str(c.committed(tp)))
        console.print(table)
    side_by_side(bs, "audit", 1, "'audit' after the consume-transform-produce commit")


def _coordinator_crash(bs: str, cluster: LocalCluster, admin: Admin) -> None:
    scene(6, "the coordinator is killed mid-transaction",
          "Producer 'survivor' writes 300 records across 'ledger' and, before it commits, its coordinator node "
          "gets SIGKILL. Another node takes the shard over, the commit is retried there and completes; then the "
          "killed node restarts (and takes its shard back, at once or, replicated, once it is in sync again). "
          "The totals are checked with read_committed.")
    admin.create_topic("ledger", partitions=3)
    with Producer(bootstrap_servers=bs, transactional_id="survivor") as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(300):
            p.send("ledger", value=str(i).encode())
        p.flush()
        victim = cluster.coordinator_for("survivor")
        console.print(f"coordinator of 'survivor': node {victim} (pid {cluster.pid(victim)}) — sending SIGKILL")
        cluster.kill(victim)
        started = time.monotonic()
        p.commit_transaction()
        console.print(f"commit acknowledged {1000 * (time.monotonic() - started):.0f} ms after the kill, "
                      f"by node {cluster.coordinator_for('survivor')}")
        cluster.restart(victim)
        console.print(f"node {victim} restarted; coordinator of 'survivor': node {cluster.coordinator_for('survivor')}")
    values = [r.value for r in read_all(bs, "ledger", 3, "read_committed")]
    expected = {str(i).encode() for i in range(300)}
    table = Table(title="'ledger' checked with read_committed")
    for column in ("expected", "read", "distinct", "missing", "verdict"):
        table.add_column(column, justify="right")
    missing = len(expected - set(values))
    ok = missing == 0 and len(values) == len(set(values)) == 300
    table.add_row("300", str(len(values)), str(len(set(values))), str(missing),
                  "[green]all there, once[/green]" if ok else "[red]WRONG[/red]")
    console.print(table)
    changes = Table(title="ownership changes of the shard of 'survivor' (DATA/metadata/ownership.log)")
    for column in ("node", "action", "shard", "leader epoch", "why"):
        changes.add_column(column)
    shard = partition_for("survivor", 50)
    status = admin.cluster_status()
    for change in [c for c in status.recent_changes if c.topic == "__transaction_state" and c.partition == shard]:
        changes.add_row(str(change.node_id), change.action, str(change.partition), str(change.leader_epoch),
                            change.reason)
    console.print(changes)
    if not ok:
        raise SystemExit("the totals do not match: this is a bug, please report it")


def _on_disk(cluster: LocalCluster) -> None:
    scene(5, "the log on disk", "`txnsim dump-log orders 0`: data batches carry producer id, epoch and sequence;\n"
          "control batches are the COMMIT/ABORT markers the coordinator wrote.")
    # a replicated cluster's every node keeps a copy: node 0's is shown
    for _base, _epoch, segment in segment_files(cluster.node_layout(cluster.node_ids[0]).logs / "orders-0"):
        for line in describe_segment(segment.read_bytes()):
            console.print(line, markup=False)
