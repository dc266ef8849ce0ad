"""`txnsim transactions ...`: kafka-transactions.sh's verbs (KIP-664)."""
from __future__ import annotations

import argparse
import time

from rich.markup import escape
from rich.table import Table

from proto.hashing import partition_for
from proto.structs import TRANSACTION_STATE_TOPIC, TopicPartition
from txnsim.admin import Admin, HangingTransaction
from txnsim.cli import timeline_cmd
from txnsim.cli.common import (
    add_cluster_args,
    add_json_arg,
    admin_client,
    console,
    exits_cleanly,
    offset_arg,
    partition_arg,
    positive_int,
)
from txnsim.cli.output import new_table, print_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    txns = sub.add_parser("transactions", help="list, describe, find hanging and abort transactions")
    verbs = txns.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list")
    listing.add_argument("--half", action="store_true",
                         help="list undecided RocketMQ-style half messages (producer group, age, check count)")
    listing.add_argument("--producer-group", help="with --half: only this producer group's")
    add_cluster_args(listing)
    add_json_arg(listing)
    listing.set_defaults(func=list_transactions)
    describe = verbs.add_parser("describe")
    describe.add_argument("transactional_id")
    add_cluster_args(describe)
    add_json_arg(describe)
    describe.set_defaults(func=describe_transaction)
    producers = verbs.add_parser("describe-producers")
    producers.add_argument("topic")
    producers.add_argument("partition", type=partition_arg)
    add_cluster_args(producers)
    add_json_arg(producers)
    producers.set_defaults(func=describe_producers)
    hanging = verbs.add_parser("find-hanging")
    hanging.add_argument("--topic")
    hanging.add_argument("--max-transaction-timeout", type=positive_int, metavar="MINUTES",
                         help="report only transactions open longer than this (kafka-transactions.sh's option; "
                              "default: all)")
    add_cluster_args(hanging)
    add_json_arg(hanging)
    hanging.set_defaults(func=find_hanging)
    abort = verbs.add_parser("abort")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=partition_arg, required=True)
    abort.add_argument("--start-offset", type=offset_arg, required=True,
                       help="where the open transaction starts (CurrentTransactionStartOffset of describe-producers)")
    add_cluster_args(abort)
    abort.set_defaults(func=abort_transaction)
    timeline_cmd.register(verbs)


def _table(title: str, *columns: str) -> Table:
    return new_table(title, *columns)


@exits_cleanly
def list_transactions(args: argparse.Namespace) -> int:
    if args.half:
        return list_half_messages(args)
    with admin_client(args) as admin:
        listings = admin.list_transactions()
    if args.json:
        print_json([{"TransactionalId": t.transactional_id, "ProducerId": t.producer_id,
                     "TransactionState": str(t.state)} for t in listings])
        return 0
    table = _table("transactions", "TransactionalId", "ProducerId", "TransactionState")
    for t in listings:
        table.add_row(escape(t.transactional_id), str(t.producer_id), str(t.state))
    console.print(table)
    return 0


def list_half_messages(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        messages = admin.list_half_messages(args.producer_group)
    now = int(time.time() * 1000)
    rows = [{"TransactionId": m.transaction_id, "ProducerGroup": m.producer_group, "Topic": m.topic,
             "Partition": m.partition, "MessageId": m.message_id, "AgeMs": now - m.store_time_ms,
             "CheckTimes": m.check_times, "LastCheckAgoMs": now - m.last_check_ms if m.last_check_ms else None,
             "NextCheckInMs": max(0, m.next_check_ms - now), "UnansweredPasses": m.unanswered_checks,
             "Storage": m.storage, "Node": m.node_id} for m in messages]
    if args.json:
        print_json(rows)
        return 0
    table = _table("undecided half messages", *(rows[0] if rows else ()))
    for row in rows:
        table.add_row(*(escape("never" if v is None else str(v)) for v in row.values()))
    console.print(table if messages else "no undecided half messages")
    return 0


@exits_cleanly
def describe_transaction(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        d = admin.describe_transaction(args.transactional_id)
        metadata = admin.describe_cluster()
    shards = next((len(t.partitions) for t in metadata.topics if t.name == TRANSACTION_STATE_TOPIC), 0)
    address = next((n.address for n in metadata.nodes if n.node_id == d.coordinator_id), None)
    now = int(time.time() * 1000)
    row = {"CoordinatorId": d.coordinator_id, "TransactionalId": d.transactional_id, "ProducerId": d.producer_id, "ProducerEpoch": d.producer_epoch,
           "TransactionState": str(d.state), "TransactionTimeoutMs": d.timeout_ms,
           "CurrentTransactionStartTimeMs": d.start_time_ms if d.start_time_ms >= 0 else None,
           "TransactionDurationMs": now - d.start_time_ms if d.start_time_ms >= 0 else None,
           "TopicPartitions": [str(tp) for tp in sorted(d.partitions)], "CoordinatorAddress": address,
           "CoordinatorShard": partition_for(d.transactional_id, shards) if shards else None}
    if args.json:
        print_json(row)
        return 0
    # one field a line: eleven columns side by side would fold into unreadable slivers at 80 columns
    table = _table(f"transaction {escape(d.transactional_id)}", "Field", "Value")
    for name, value in row.items():
        table.add_row(name, escape("None" if value is None else ",".join(value) if isinstance(value, list)
                                   else str(value)))
    console.print(table)
    console.print(f"coordinated by node {d.coordinator_id} ({address}), {TRANSACTION_STATE_TOPIC} shard "
                  f"{row['CoordinatorShard']}")
    return 0


@exits_cleanly
def describe_producers(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        producers = admin.describe_producers(TopicPartition(args.topic, args.partition))
    rows = [{"ProducerId": p.producer_id, "ProducerEpoch": p.producer_epoch,
             "LatestCoordinatorEpoch": p.coordinator_epoch, "LastSequence": p.last_sequence,
             "LastTimestamp": p.last_timestamp,
             "CurrentTransactionStartOffset": p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None}
            for p in producers]
    if args.json:
        print_json(rows)
        return 0
    table = _table(f"producers of {args.topic}-{args.partition}", "ProducerId", "ProducerEpoch",
                   "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset")
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    console.print(table)
    return 0


@exits_cleanly
def find_hanging(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        hanging = admin.find_hanging_transactions(topic=args.topic)
        if args.max_transaction_timeout is not None:
            hanging = _older_than(admin, hanging, args.max_transaction_timeout * 60_000)
    rows = [{"Topic": h.topic_partition.topic, "Partition": h.topic_partition.partition, "ProducerId": h.producer_id,
             "ProducerEpoch": h.producer_epoch, "StartOffset": h.start_offset, "Why": h.reason} for h in hanging]
    if args.json:
        print_json(rows)
        return 0
    table = _table("hanging transactions", "Topic", "Partition", "ProducerId", "ProducerEpoch", "StartOffset", "Why")
    for row in rows:
        table.add_row(*(escape(str(v)) for v in row.values()))
    console.print(table if hanging else "no hanging transactions")
    return 0


def _older_than(admin: Admin, hanging: list[HangingTransaction], limit_ms: int) -> list[HangingTransaction]:
    """Those whose producer last wrote to the partition more than `limit_ms` ago (kafka-transactions.sh's
    --max-transaction-timeout: a transaction younger than the longest allowed timeout may still end on its own)."""
    now = int(time.time() * 1000)
    out = []
    for h in hanging:
        last = next((p.last_timestamp for p in admin.describe_producers(h.topic_partition)
                     if p.producer_id == h.producer_id), None)
        if last is None or now - last > limit_ms:
            out.append(h)
    return out


@exits_cleanly
def abort_transaction(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        p = admin.abort_transaction(args.topic, args.partition, args.start_offset)
    console.print(f"aborted the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) on "
                  f"{args.topic}-{args.partition} starting at offset {args.start_offset}")
    return 0
