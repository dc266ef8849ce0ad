"""`txnsim transactions ...`: kafka-transactions.sh's verbs (KIP-664)."""
from __future__ import annotations

import argparse
import time

from rich.markup import escape
from rich.table import Table

from proto.structs import TopicPartition
from txnsim.cli import timeline_cmd
from txnsim.cli.common import add_cluster_args, admin_client, console, exits_cleanly, offset_arg, partition_arg


def register(sub: argparse._SubParsersAction) -> None:
    txns = sub.add_parser("transactions", help="list, describe, find hanging and abort transactions")
    verbs = txns.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list")
    listing.add_argument("--half", action="store_true",
                         help="list undecided RocketMQ-style half messages (producer group, age, check count)")
    listing.add_argument("--producer-group", help="with --half: only this producer group's")
    add_cluster_args(listing)
    listing.set_defaults(func=list_transactions)
    describe = verbs.add_parser("describe")
    describe.add_argument("transactional_id")
    add_cluster_args(describe)
    describe.set_defaults(func=describe_transaction)
    producers = verbs.add_parser("describe-producers")
    producers.add_argument("topic")
    producers.add_argument("partition", type=partition_arg)
    add_cluster_args(producers)
    producers.set_defaults(func=describe_producers)
    hanging = verbs.add_parser("find-hanging")
    hanging.add_argument("--topic")
    add_cluster_args(hanging)
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
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    return table


@exits_cleanly
def list_transactions(args: argparse.Namespace) -> int:
    if args.half:
        return list_half_messages(args)
    with admin_client(args) as admin:
        table = _table("transactions", "TransactionalId", "ProducerId", "TransactionState")
        for t in admin.list_transactions():
            table.add_row(escape(t.transactional_id), str(t.producer_id), str(t.state))
        console.print(table)
    return 0


def list_half_messages(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        messages = admin.list_half_messages(args.producer_group)
    now = int(time.time() * 1000)
    table = _table("undecided half messages", "TransactionId", "ProducerGroup", "Topic", "Partition", "MessageId",
                   "AgeMs", "CheckTimes", "LastCheckAgoMs", "NextCheckInMs", "UnansweredPasses", "Storage", "Node")
    for m in messages:
        table.add_row(m.transaction_id, escape(m.producer_group), escape(m.topic), str(m.partition), m.message_id,
                      str(now - m.store_time_ms), str(m.check_times),
                      str(now - m.last_check_ms) if m.last_check_ms else "never", str(max(0, m.next_check_ms - now)),
                      str(m.unanswered_checks), m.storage, str(m.node_id))
    console.print(table if messages else "no undecided half messages")
    return 0


@exits_cleanly
def describe_transaction(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        d = admin.describe_transaction(args.transactional_id)
    now = int(time.time() * 1000)
    table = _table(f"transaction {escape(d.transactional_id)}", "CoordinatorId", "TransactionalId", "ProducerId",
                   "ProducerEpoch", "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                   "TransactionDurationMs", "TopicPartitions")
    duration = str(now - d.start_time_ms) if d.start_time_ms >= 0 else "None"
    table.add_row(str(d.coordinator_id), escape(d.transactional_id), str(d.producer_id), str(d.producer_epoch),
                  str(d.state), str(d.timeout_ms), str(d.start_time_ms) if d.start_time_ms >= 0 else "None",
                  duration, ",".join(str(tp) for tp in sorted(d.partitions)))
    console.print(table)
    return 0


@exits_cleanly
def describe_producers(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        producers = admin.describe_producers(TopicPartition(args.topic, args.partition))
    table = _table(f"producers of {args.topic}-{args.partition}", "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                   "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset")
    for p in producers:
        table.add_row(str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch), str(p.last_sequence),
                      str(p.last_timestamp), str(p.current_txn_start_offset) if p.current_txn_start_offset >= 0 else "None")
    console.print(table)
    return 0


@exits_cleanly
def find_hanging(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        hanging = admin.find_hanging_transactions(topic=args.topic)
    table = _table("hanging transactions", "Topic", "Partition", "ProducerId", "ProducerEpoch", "StartOffset", "Why")
    for h in hanging:
        table.add_row(h.topic_partition.topic, str(h.topic_partition.partition), str(h.producer_id),
                      str(h.producer_epoch), str(h.start_offset), escape(h.reason))
    console.print(table if hanging else "no hanging transactions")
    return 0


@exits_cleanly
def abort_transaction(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        p = admin.abort_transaction(args.topic, args.partition, args.start_offset)
    console.print(f"aborted the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) on "
                  f"{args.topic}-{args.partition} starting at offset {args.start_offset}")
    return 0
