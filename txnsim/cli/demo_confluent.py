"""`txnsim demo --client confluent-kafka`: the demo's scenes through librdkafka, unchanged, on the nodes' Kafka
listeners — what a Kafka user's own code does against txnsim.

The scenes mirror `txnsim demo` (demo_cmd.py): commit and abort, records held behind an open transaction, a
zombie fenced, consume-transform-produce with `send_offsets_to_transaction`, and the coordinator SIGKILLed
before a commit. Every read is a confluent-kafka consumer; the offsets table and the ownership changes come
from txnsim's own admin, which sees the same nodes.
"""
from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.rule import Rule
from rich.table import Table

from proto.structs import TopicPartition as TxnsimTopicPartition
from txnsim.admin import Admin
from txnsim.cli.common import console
from txnsim.cli.demo_views import scene as _scene
from txnsim.cli.demo_views import show_side_by_side
from txnsim.cluster import LocalCluster

if TYPE_CHECKING:  # imported where used: the other commands start without loading librdkafka
    from confluent_kafka import Producer

#: patience for one client call (the nodes answer in milliseconds; a failover takes about a second)
CALL_TIMEOUT_S = 30.0
#: librdkafka's log lines (a node killed on purpose, the zombie's fatal error the scene prints itself) would
#: interrupt the tables: they go to a logger that drops them
_LIBRDKAFKA_LOG = logging.getLogger("txnsim.demo.librdkafka")
_LIBRDKAFKA_LOG.setLevel(logging.CRITICAL + 1)
QUIET = {"logger": _LIBRDKAFKA_LOG}


def _producer(kafka: str, transactional_id: str, **extra: Any) -> Producer:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": transactional_id, "linger.ms": 5,
                         **QUIET, **extra})
    producer.init_transactions(CALL_TIMEOUT_S)
    return producer


def _read_all(kafka: str, topic: str, partitions: int, isolation: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of everything a fresh confluent-kafka consumer of `isolation` can read now."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "demo-reader", "isolation.level": isolation,
                         "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 50,
                         **QUIET})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen: list[tuple[int, int, bytes]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise SystemExit(f"error: {topic} did not reach its end for a {isolation} consumer in "
                                 f"{CALL_TIMEOUT_S:.0f} s")
            message = consumer.poll(0.1)
            if message is None:
                continue
            failure = message.error()
            if failure is not None:
                if failure.code() != KafkaError._PARTITION_EOF:
                    raise SystemExit(f"error: {failure}")
                at_end.add(_known(message.partition(), "partition"))
                continue
            at_end.discard(_known(message.partition(), "partition"))
            seen.append((_known(message.partition(), "partition"), _known(message.offset(), "offset"),
                         message.value() or b""))
        return sorted(seen)
    finally:
        consumer.close()


def _known(value: int | None, what: str) -> int:
    """A consumed message's partition or offset: confluent-kafka types both optional (a message being
    produced has neither yet); one a consumer returned always has them."""
    if value is None:
        raise SystemExit(f"error: librdkafka returned a consumed message without its {what}")
    return value


def _side_by_side(kafka: str, topic: str, partitions: int, title: str) -> None:
    show_side_by_side(title, lambda isolation: _read_all(kafka, topic, partitions, isolation), reader="librdkafka")


def run_confluent_demo(data_dir: Path | None, replicated: bool = False, namespaces: bool = False) -> int:
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="txnsim-demo-"))
    with console.status("starting an embedded cluster: 3 node processes with Kafka listeners ..."):
        cluster = LocalCluster(nodes=3, data_dir=data_dir, txn_shards=50, kafka_port=0, replicated=replicated,
                               namespaces=namespaces)
        cluster.start()
    try:
        kafka = cluster.kafka_bootstrap_servers
        console.print(f"cluster up: Kafka bootstrap servers {kafka} (gRPC {cluster.bootstrap_servers}; data in "
                      f"{data_dir}); every client below is confluent-kafka, unchanged")
        with Admin(cluster.bootstrap_servers) as admin:
            for topic, partitions in (("orders", 3), ("audit", 1), ("payments", 2), ("ledger", 3)):
                admin.create_topic(topic, partitions=partitions)
            _commit_and_abort(kafka)
            _held_back(kafka, admin)
            _zombie(kafka)
            _consume_transform_produce(kafka)
            _coordinator_crash(kafka, cluster)
        console.print(Rule("done"))
        console.print("Every scene above ran through librdkafka against real node processes, over Kafka's wire "
                      "protocol, with fsynced logs.")
    finally:
        cluster.stop()
    return 0


def _commit_and_abort(kafka: str) -> None:
    _scene(1, "commit and abort across partitions",
           "confluent-kafka Producer 'shop' produces order-1..order-3 to three partitions of 'orders' and "
           "commit_transaction()s; then bad-1..bad-3 and abort_transaction(). The markers decide what is read.")
    producer = _producer(kafka, "shop")
    producer.begin_transaction()
    for i in range(3):
        producer.produce("orders", value=f"order-{i + 1}".encode(), partition=i)
    producer.commit_transaction(CALL_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("orders", value=f"bad-{i + 1}".encode(), partition=i)
    producer.flush(CALL_TIMEOUT_S)
    producer.abort_transaction(CALL_TIMEOUT_S)
    _side_by_side(kafka, "orders", 3, "what each consumer sees")


def _held_back(kafka: str, admin: Admin) -> None:
    _scene(2, "records held back behind an open transaction",
           "Producer 'slow' produces pay-1, pay-2 and waits before committing. The last stable offset stays at "
           "the transaction's first offset; a read_committed consumer stops there.")
    producer = _producer(kafka, "slow")
    producer.begin_transaction()
    for i in range(2):
        producer.produce("payments", value=f"pay-{i + 1}".encode(), partition=0)
    producer.flush(CALL_TIMEOUT_S)
    tps = [TxnsimTopicPartition("payments", p) for p in range(2)]
    hw, lso = admin.end_offsets(tps), admin.last_stable_offsets(tps)
    table = Table(title="payments: high watermark vs last stable offset")
    for column in ("partition", "high watermark", "last stable offset"):
        table.add_column(column, justify="right")
    for tp in tps:
        table.add_row(str(tp.partition), str(hw[tp]), str(lso[tp]))
    console.print(table)
    _side_by_side(kafka, "payments", 2, "while the transaction is open")
    producer.commit_transaction(CALL_TIMEOUT_S)
    _side_by_side(kafka, "payments", 2, "after commit")


def _zombie(kafka: str) -> None:
    from confluent_kafka import KafkaException
    _scene(3, "a zombie producer is fenced",
           "Instance A of 'fencer' produces zombie-1 in a transaction. Instance B starts with the same "
           "transactional.id: its init_transactions() bumps the epoch and aborts A's transaction. A's commit then "
           "fails with librdkafka's fatal _FENCED error.")
    a = _producer(kafka, "fencer")
    a.begin_transaction()
    a.produce("audit", value=b"zombie-1")
    a.flush(CALL_TIMEOUT_S)
    b = _producer(kafka, "fencer")
    try:
        a.commit_transaction(CALL_TIMEOUT_S)
        console.print("[red]unexpected: the zombie committed[/red]")
    except KafkaException as exc:
        error = exc.args[0]
        console.print(f"instance A: [red]{error.name()}[/red] (fatal={error.fatal()}): {error.str()}")
    b.begin_transaction()
    b.produce("audit", value=b"from-B")
    b.commit_transaction(CALL_TIMEOUT_S)
    _side_by_side(kafka, "audit", 1, "'audit' after the fencing")


def _consume_transform_produce(kafka: str) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    _scene(4, "consume-transform-produce with transactional offsets",
           "A read_committed consumer of group 'billing' reads the orders; producer 'biller' writes an invoice per "
           "order to 'audit' and send_offsets_to_transaction()s the consumer's positions in the SAME transaction.")
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "billing", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "enable.partition.eof": True, **QUIET})
    tps = [TopicPartition("orders", p, OFFSET_BEGINNING) for p in range(3)]
    consumer.assign(tps)
    producer = _producer(kafka, "biller")
    producer.begin_transaction()
    at_end: set[int] = set()
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while len(at_end) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is None:
            continue
        if message.error() is not None:
            at_end.add(_known(message.partition(), "partition"))
            continue
        producer.produce("audit", value=b"invoice-for-" + (message.value() or b""))
    positions = consumer.position([TopicPartition("orders", p) for p in range(3)])
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
    producer.commit_transaction(CALL_TIMEOUT_S)
    table = Table(title="group 'billing' committed offsets, read back with consumer.committed()")
    for column in ("partition", "position sent", "committed"):
        table.add_column(column, justify="right")
    committed = consumer.committed([TopicPartition("orders", p) for p in range(3)], CALL_TIMEOUT_S)
    for sent, got in zip(positions, committed):
        table.add_row(str(sent.partition), str(sent.offset), str(got.offset))
    console.print(table)
    consumer.close()
    _side_by_side(kafka, "audit", 1, "'audit' after the consume-transform-produce commit")


def _coordinator_crash(kafka: str, cluster: LocalCluster) -> None:
    _scene(5, "the coordinator is killed mid-transaction",
           "Producer 'survivor' produces 300 records across 'ledger'; before it commits, its coordinator node gets "
           "SIGKILL. librdkafka finds the node that took the shard over and its commit_transaction() completes "
           "there. The totals are checked with a read_committed consumer.")
    producer = _producer(kafka, "survivor")
    producer.begin_transaction()
    for i in range(300):
        producer.produce("ledger", value=str(i).encode(), partition=i % 3)
    producer.flush(CALL_TIMEOUT_S)
    victim = cluster.coordinator_for("survivor")
    console.print(f"coordinator of 'survivor': node {victim} (pid {cluster.pid(victim)}) — sending SIGKILL")
    cluster.kill(victim)
    started = time.monotonic()
    producer.commit_transaction(CALL_TIMEOUT_S * 2)
    console.print(f"commit acknowledged {1000 * (time.monotonic() - started):.0f} ms after the kill")
    cluster.restart(victim)
    values = [value for _p, _o, value in _read_all(kafka, "ledger", 3, "read_committed")]
    ok = sorted(values) == sorted(str(i).encode() for i in range(300))
    table = Table(title="'ledger' checked with read_committed (librdkafka)")
    for column in ("expected", "read", "distinct", "verdict"):
        table.add_column(column, justify="right")
    table.add_row("300", str(len(values)), str(len(set(values))),
                  "[green]all there, once[/green]" if ok else "[red]WRONG[/red]")
    console.print(table)
    if not ok:
        raise SystemExit("the totals do not match: this is a bug, please report it")
