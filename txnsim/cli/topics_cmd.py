"""`txnsim topics create|delete|list|describe`."""
from __future__ import annotations

import argparse

from rich.table import Table

from proto.errors import InvalidConfigError, UnknownTopicOrPartitionError, raise_for
from proto.structs import TopicPartition
from txnsim.cli.common import (
    add_cluster_args,
    admin_client,
    console,
    exits_cleanly,
    partition_count_arg,
    print_data,
)


def register(sub: argparse._SubParsersAction) -> None:
    topics = sub.add_parser("topics", help="create, delete, list and describe topics")
    verbs = topics.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create")
    create.add_argument("name")
    create.add_argument("--partitions", type=partition_count_arg, default=1)
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="a topic setting, as kafka-topics.sh --config: message.type=NORMAL|FIFO|DELAY|"
                             "TRANSACTION|MIXED, half.message.storage=rocketmq|kafka (repeatable)")
    add_cluster_args(create)
    create.set_defaults(func=create_topic)
    delete = verbs.add_parser("delete", help="delete a topic and its data on every node")
    delete.add_argument("name")
    add_cluster_args(delete)
    delete.set_defaults(func=delete_topic)
    listing = verbs.add_parser("list")
    listing.add_argument("--internal", action="store_true", help="include __transaction_state and __consumer_offsets")
    add_cluster_args(listing)
    listing.set_defaults(func=list_topics)
    describe = verbs.add_parser("describe")
    describe.add_argument("name")
    add_cluster_args(describe)
    describe.set_defaults(func=describe_topic)


@exits_cleanly
def create_topic(args: argparse.Namespace) -> int:
    configs = {}
    for item in args.config:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidConfigError(f"[INVALID_CONFIG] --config takes NAME=VALUE, not {item!r}")
        configs[name] = value
    with admin_client(args) as admin:
        admin.create_topic(args.name, partitions=args.partitions, configs=configs)
    console.print(f"created topic {args.name} with {args.partitions} partition(s)")
    return 0


@exits_cleanly
def delete_topic(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        partitions = admin.delete_topic(args.name)
    console.print(f"deleted topic {args.name} ({partitions} partition(s))")
    return 0


@exits_cleanly
def list_topics(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        for name, partitions in sorted(admin.list_topics(include_internal=args.internal).items()):
            print_data(f"{name}\t{partitions}")
    return 0


@exits_cleanly
def describe_topic(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        metadata = admin.describe_cluster()
        topic = next((t for t in metadata.topics if t.name == args.name), None)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {args.name!r} does not exist")
        raise_for(topic.error_code, topic.error_message)
        tps = [TopicPartition(args.name, p.partition) for p in topic.partitions]
        start, end, stable = admin.beginning_offsets(tps), admin.end_offsets(tps), admin.last_stable_offsets(tps)
        table = Table(title=f"topic {args.name}")
        for column in ("partition", "leader", "log start", "high watermark", "last stable offset"):
            table.add_column(column, justify="right")
        for p, tp in zip(topic.partitions, tps):
            table.add_row(str(p.partition), str(p.leader), str(start[tp]), str(end[tp]), str(stable[tp]))
        console.print(table)
    return 0
