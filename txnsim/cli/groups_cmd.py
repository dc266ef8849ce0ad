"""`txnsim consumer-groups list | describe | reset-offsets | delete`: kafka-consumer-groups.sh's verbs.

Lag is measured to the high watermark, as kafka-consumer-groups.sh does (a read_committed member can read
only up to the last stable offset, so an open transaction shows as lag it cannot consume yet).
reset-offsets plans by default and changes nothing without --execute, and only for a group with no active
members (Kafka's rule: a live member would overwrite the reset with its own positions).
"""
from __future__ import annotations

import argparse
import datetime

from rich.markup import escape
from rich.table import Table

from proto.errors import IllegalArgumentError, UnknownTopicOrPartitionError
from proto.structs import OffsetAndMetadata, TopicPartition
from txnsim.admin import Admin, GroupDescription, GroupMember
from txnsim.cli import timeline_cmd
from txnsim.cli.common import add_cluster_args, add_json_arg, admin_client, console, exits_cleanly, offset_arg
from txnsim.cli.output import print_json

INACTIVE_STATES = ("Empty", "Dead")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    groups = sub.add_parser("consumer-groups", help="list, describe, reset the offsets of, and delete consumer groups")
    verbs = groups.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="every group, its state and protocol type")
    add_cluster_args(listing)
    add_json_arg(listing)
    listing.set_defaults(func=list_groups)
    describe = verbs.add_parser("describe", help="a group's partitions (committed offset, log end, lag, owner) "
                                                 "and members")
    describe.add_argument("group")
    add_cluster_args(describe)
    add_json_arg(describe)
    describe.set_defaults(func=describe_group)
    reset = verbs.add_parser("reset-offsets", help="move an inactive group's committed offsets (a plan unless "
                                                   "--execute)")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True, action="append",
                       help="TOPIC or TOPIC:P,Q (repeatable): the partitions to reset")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=offset_arg)
    target.add_argument("--shift-by", type=int, help="from the committed offset (clamped to the log's range)")
    target.add_argument("--to-datetime", help="ISO 8601, e.g. 2026-11-24T08:00:00 (local time unless it has a zone)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")
    add_cluster_args(reset)
    add_json_arg(reset)
    reset.set_defaults(func=reset_offsets)
    delete = verbs.add_parser("delete", help="delete an inactive group and its committed offsets")
    delete.add_argument("group")
    add_cluster_args(delete)
    delete.set_defaults(func=delete_group)
    timeline_cmd.register_group_timeline(verbs)


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


@exits_cleanly
def list_groups(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        groups = admin.list_consumer_groups()
        if args.json:
            print_json([{"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type} for g in groups])
            return 0
        table = _table("consumer groups", "GROUP", "STATE", "PROTOCOL TYPE")
        for g in groups:
            table.add_row(escape(g.group_id), g.state, escape(g.protocol_type or "-"))
        console.print(table)
    return 0


@exits_cleanly
def describe_group(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        (group,) = admin.describe_consumer_groups([args.group])
        committed = admin.list_consumer_group_offsets(args.group)
        owners = {tp: m for m in group.members for tp in m.assignment}
        partitions = sorted(set(committed) | set(owners))
        ends = admin.end_offsets(partitions) if partitions else {}
        if args.json:
            print_json(_group_json(group, partitions, committed, owners, ends))
            return 0
        console.print(f"group {escape(group.group_id)}: {group.state}, generation {group.generation_id}, "
                      f"protocol {escape(group.protocol or '-')} ({escape(group.protocol_type or '-')}), "
                      f"{len(group.members)} member(s), coordinator node {group.coordinator_id}")
        table = _table(f"{group.group_id}: partitions", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                       "CONSUMER-ID", "HOST", "CLIENT-ID")
        for tp in partitions:
            offset = committed[tp].offset if tp in committed else None
            member = owners.get(tp)
            table.add_row(escape(tp.topic), str(tp.partition), "-" if offset is None else str(offset), str(ends[tp]),
                          "-" if offset is None else str(ends[tp] - offset),
                          escape(member.member_id) if member else "-", escape(member.client_host) if member else "-",
                          escape(member.client_id) if member else "-")
        console.print(table)
        if group.members:
            members = _table(f"{group.group_id}: members", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                             "#PARTITIONS", "ASSIGNMENT")
            for m in group.members:
                members.add_row(escape(m.member_id), escape(m.group_instance_id or "-"), escape(m.client_host),
                                escape(m.client_id), str(len(m.assignment)),
                                escape(", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(m.assignment)) or "-"))
            console.print(members)
    return 0


def _group_json(group: GroupDescription, partitions: list[TopicPartition],
                committed: dict[TopicPartition, OffsetAndMetadata], owners: dict[TopicPartition, GroupMember],
                ends: dict[TopicPartition, int]) -> dict[str, object]:
    def offsets(tp: TopicPartition) -> dict[str, object]:
        offset = committed[tp].offset if tp in committed else None
        member = owners.get(tp)
        return {"topic": tp.topic, "partition": tp.partition, "current_offset": offset, "log_end_offset": ends[tp],
                "lag": None if offset is None else ends[tp] - offset,
                "consumer_id": member.member_id if member else None}
    return {"group": group.group_id, "state": group.state, "generation": group.generation_id,
            "protocol": group.protocol, "protocol_type": group.protocol_type, "coordinator": group.coordinator_id,
            "partitions": [offsets(tp) for tp in partitions],
            "members": [{"consumer_id": m.member_id, "group_instance_id": m.group_instance_id, "host": m.client_host,
                         "client_id": m.client_id,
                         "assignment": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(m.assignment)]}
                        for m in group.members]}


def _partitions(admin: Admin, specs: list[str]) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for spec in specs:
        topic, _, numbers = spec.partition(":")
        count = admin.list_topics().get(topic)
        if count is None:
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {topic!r} does not exist")
        if not numbers:
            out.extend(TopicPartition(topic, p) for p in range(count))
            continue
        for text in numbers.split(","):
            if not text.strip().isdigit() or int(text) >= count:
                raise UnknownTopicOrPartitionError(
                    f"[UNKNOWN_TOPIC_OR_PARTITION] {topic!r} has partitions 0..{count - 1}, not {text!r}")
            out.append(TopicPartition(topic, int(text)))
    return out


def _timestamp_ms(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise IllegalArgumentError(f"[INVALID_REQUEST] --to-datetime {text!r} is not ISO 8601 "
                                   "(e.g. 2026-11-24T08:00:00)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def _targets(admin: Admin, args: argparse.Namespace, tps: list[TopicPartition],
             committed: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, int]:
    earliest, latest = admin.beginning_offsets(tps), admin.end_offsets(tps)
    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_datetime is not None:
        stamp = _timestamp_ms(args.to_datetime)
        found = admin.offsets_for_times({tp: stamp for tp in tps})
        return {tp: latest[tp] if (offset := found[tp]) is None else offset for tp in tps}
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise IllegalArgumentError(f"[INVALID_REQUEST] --to-offset {args.to_offset} is negative")
        return {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in tps}
    base = {tp: committed[tp].offset if tp in committed else earliest[tp] for tp in tps}
    return {tp: min(max(base[tp] + args.shift_by, earliest[tp]), latest[tp]) for tp in tps}


@exits_cleanly
def reset_offsets(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        (group,) = admin.describe_consumer_groups([args.group])
        _require_inactive(group, "reset its offsets")
        tps = _partitions(admin, args.topic)
        committed = admin.list_consumer_group_offsets(args.group, tps)
        targets = _targets(admin, args, tps, committed)
        if args.json:
            print_json({"group": args.group, "executed": args.execute, "offsets": [
                {"topic": tp.topic, "partition": tp.partition,
                 "current_offset": committed[tp].offset if tp in committed else None, "new_offset": targets[tp]}
                for tp in tps]})
            if args.execute:
                admin.alter_consumer_group_offsets(args.group, targets)
            return 0
        table = _table(f"{args.group}: new offsets" + ("" if args.execute else " (plan: add --execute to commit)"),
                       "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET")
        for tp in tps:
            table.add_row(escape(tp.topic), str(tp.partition),
                          str(committed[tp].offset) if tp in committed else "-", str(targets[tp]))
        console.print(table)
        if args.execute:
            admin.alter_consumer_group_offsets(args.group, targets)
            console.print(f"committed the new offsets of group {escape(args.group)}")
    return 0


@exits_cleanly
def delete_group(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        admin.delete_consumer_groups([args.group])
        console.print(f"deleted group {escape(args.group)}")
    return 0


def _require_inactive(group: GroupDescription, action: str) -> None:
    if group.state not in INACTIVE_STATES:
        raise IllegalArgumentError(
            f"[NON_EMPTY_GROUP] cannot {action}: group {group.group_id!r} is {group.state} with "
            f"{len(group.members)} member(s); stop its consumers first (Kafka requires an inactive group)")
