"""`txnsim topics create|delete|list|describe`."""
from __future__ import annotations

import argparse
from typing import TypedDict

from proto import txnsim_pb2 as pb
from proto.errors import InvalidConfigError, UnknownTopicOrPartitionError, raise_for
from proto.structs import INTERNAL_TOPICS, TopicPartition
from txnsim.admin import Admin
from txnsim.cli.common import (
    add_cluster_args,
    add_json_arg,
    admin_client,
    console,
    exits_cleanly,
    partition_count_arg,
    positive_int,
    print_data,
)
from txnsim.cli.output import new_table, print_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = sub.add_parser("topics", help="create, delete, list and describe topics")
    verbs = topics.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create")
    create.add_argument("name")
    create.add_argument("--partitions", type=partition_count_arg, default=1)
    create.add_argument("--replication-factor", type=positive_int, default=None,
                        help="copies of each partition (default: the cluster's, 3 on a replicated cluster of at "
                             "least 3 nodes; a shared directory keeps 1)")
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="a topic setting, as kafka-topics.sh --config: message.type=NORMAL|FIFO|DELAY|"
                             "TRANSACTION|MIXED, half.message.storage=rocketmq|kafka (repeatable)")
    add_cluster_args(create)
    create.set_defaults(func=create_topic)
    delete = verbs.add_parser("delete", help="delete a topic and its data on every node")
    delete.add_argument("name")
    add_cluster_args(delete)
    delete.set_defaults(func=delete_topic)
    alter = verbs.add_parser("alter", help="add partitions to a topic, or change its settings (kafka-topics.sh "
                                           "--alter)")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=partition_count_arg, help="the new partition count (more, never fewer)")
    alter.add_argument("--config", action="append", default=[], metavar="NAME=VALUE", help="set a setting (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME",
                       help="back to the default (repeatable)")
    add_cluster_args(alter)
    alter.set_defaults(func=alter_topic)
    listing = verbs.add_parser("list")
    listing.add_argument("--internal", action="store_true", help="include __transaction_state and __consumer_offsets")
    add_cluster_args(listing)
    add_json_arg(listing)
    listing.set_defaults(func=list_topics)
    describe = verbs.add_parser("describe", help="partitions, leaders and offsets of one topic, or of every topic")
    describe.add_argument("name", nargs="?", help="default: every topic (with --internal, the internal ones too)")
    describe.add_argument("--internal", action="store_true", help="with no name: include the internal topics")
    add_cluster_args(describe)
    add_json_arg(describe)
    describe.set_defaults(func=describe_topic)


def _configs(items: list[str]) -> dict[str, str]:
    configs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidConfigError(f"[INVALID_CONFIG] --config takes NAME=VALUE, not {item!r}")
        configs[name] = value
    return configs


@exits_cleanly
def create_topic(args: argparse.Namespace) -> int:
    configs = _configs(args.config)
    with admin_client(args) as admin:
        factor = admin.create_topic(args.name, partitions=args.partitions, configs=configs,
                                    replication_factor=args.replication_factor)
    console.print(f"created topic {args.name} with {args.partitions} partition(s) of {factor} replica(s) each")
    return 0


@exits_cleanly
def alter_topic(args: argparse.Namespace) -> int:
    configs = _configs(args.config)
    if args.partitions is None and not configs and not args.delete_config:
        raise SystemExit("error: [INVALID_REQUEST] nothing to alter: give --partitions, --config or --delete-config")
    with admin_client(args) as admin:
        partitions, settings = admin.alter_topic(args.name, args.partitions or 0, configs, args.delete_config)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) or "no settings of its own"
    console.print(f"topic {args.name}: {partitions} partition(s), {shown}")
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
        topics = sorted(admin.list_topics(include_internal=args.internal).items())
    if args.json:
        print_json([{"topic": name, "partitions": partitions} for name, partitions in topics])
        return 0
    for name, partitions in topics:
        print_data(f"{name}\t{partitions}")
    return 0


@exits_cleanly
def describe_topic(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        metadata = admin.describe_cluster()
        if args.name is None:
            topics = sorted((t for t in metadata.topics if t.error_code == 0
                             and (args.internal or t.name not in INTERNAL_TOPICS)), key=lambda t: t.name)
        else:
            topic = next((t for t in metadata.topics if t.name == args.name), None)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {args.name!r} does not exist")
            raise_for(topic.error_code, topic.error_message)
            topics = [topic]
        described = [_describe(admin, topic) for topic in topics]
    if args.json:
        print_json(described if args.name is None else described[0])
        return 0
    for d in described:
        configs = ", ".join(f"{k}={v}" for k, v in sorted(d["configs"].items()))
        table = new_table(f"topic {d['topic']}" + (f" ({configs})" if configs else ""), "partition", "leader",
                          "replicas", "isr", "offline", "log start", "high watermark", "last stable offset",
                          justify="right")
        for p in d["partitions"]:
            table.add_row(str(p["partition"]), str(p["leader"]), _ids(p["replicas"]), _ids(p["isr"]),
                          _ids(p["offline_replicas"]) or "-", str(p["log_start_offset"]), str(p["high_watermark"]),
                          str(p["last_stable_offset"]))
        console.print(table)
    if not described:
        console.print("no topics")
    return 0


class PartitionDescription(TypedDict):
    """One partition in `topics describe` (a table row, or an object of --json's "partitions")."""

    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


class TopicDescription(TypedDict):
    """One topic in `topics describe`: its settings and partitions."""

    topic: str
    configs: dict[str, str]
    partitions: list[PartitionDescription]


def _describe(admin: Admin, topic: pb.TopicMetadata) -> TopicDescription:
    tps = [TopicPartition(topic.name, p.partition) for p in topic.partitions]
    start, end, stable = admin.beginning_offsets(tps), admin.end_offsets(tps), admin.last_stable_offsets(tps)
    return {"topic": topic.name, "configs": dict(topic.configs), "partitions": [
        {"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isr),
         "offline_replicas": list(p.offline_replicas), "log_start_offset": start[tp], "high_watermark": end[tp],
         "last_stable_offset": stable[tp]} for p, tp in zip(topic.partitions, tps)]}


def _ids(nodes: list[int]) -> str:
    """Node ids as kafka-topics --describe prints them: "1,2,3"."""
    return ",".join(str(n) for n in nodes)
